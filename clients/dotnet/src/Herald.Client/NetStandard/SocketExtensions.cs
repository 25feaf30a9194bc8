using System.Net.Sockets;

// Compiled for netstandard2.0 only (see Herald.Client.csproj): .NET 5's Socket.ConnectAsync with a cancellation token.
namespace Herald.Client.Transports.Tcp;

[Microsoft.CodeAnalysis.Embedded]
internal static class SocketExtensions
{
    /// <summary>
    /// Connects, or throws <see cref="OperationCanceledException"/> when <paramref name="cancellationToken"/> fires first
    /// (the caller then disposes the socket, which ends the connect).
    /// </summary>
    public static Task ConnectAsync(this Socket socket, string host, int port, CancellationToken cancellationToken) =>
        socket.ConnectAsync(host, port).WaitAsync(cancellationToken);
}
