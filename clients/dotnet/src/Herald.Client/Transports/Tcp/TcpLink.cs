using System.Net.Security;
using System.Net.Sockets;
using System.Security.Authentication;

namespace Herald.Client.Transports.Tcp;

/// <summary>
/// <c>tcp://</c> and <c>tls://</c> (spec §1): a TCP connection to a port of the address's range, wrapped in TLS
/// for <c>tls://</c>. The frames go over it as they are.
/// </summary>
internal sealed class TcpLink : StreamLink
{
    private TcpLink(Stream stream, int port)
        : base(stream, HeraldTransport.Tcp, port)
    {
    }

    /// <summary>Connects to a port of <paramref name="address"/>'s range, picked at random, and completes the TLS handshake for <c>tls://</c>.</summary>
    /// <exception cref="HeraldConnectionException">The port refused, or the TLS handshake failed.</exception>
    public static async Task<StreamLink> OpenAsync(BrokerAddress address, HeraldClientOptions options, CancellationToken cancellationToken)
    {
        int port = address.PickPort();
        var socket = new Socket(SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        if (options.ReceiveBufferSize is { } receiveBuffer)
        {
            socket.ReceiveBufferSize = receiveBuffer;
        }

        Stream stream;
        try
        {
            await socket.ConnectAsync(address.Host, port, cancellationToken).ConfigureAwait(false);
            stream = new NetworkStream(socket, ownsSocket: true);
        }
        catch (SocketException e)
        {
            socket.Dispose();
            throw new HeraldConnectionException($"Could not connect to {address.Host}:{port}: {e.Message}", e);
        }
        catch
        {
            socket.Dispose(); // cancelled: the connect timeout, or the client closing
            throw;
        }

        if (address.Tls)
        {
#if NETSTANDARD2_0
            // No SslClientAuthenticationOptions: the callback goes to the stream, and the protocols are the operating
            // system's choice (Microsoft's advice on .NET Framework, where naming TLS 1.3 fails on systems without it).
            var tls = new SslStream(stream, leaveInnerStreamOpen: false, options.ServerCertificateValidation);
            try
            {
                await tls.AuthenticateAsClientAsync(address.Host, clientCertificates: null, SslProtocols.None, checkCertificateRevocation: false)
                    .WaitAsync(cancellationToken).ConfigureAwait(false);
            }
#else
            var tls = new SslStream(stream, leaveInnerStreamOpen: false);
            try
            {
                await tls.AuthenticateAsClientAsync(
                    new SslClientAuthenticationOptions
                    {
                        TargetHost = address.Host,
                        RemoteCertificateValidationCallback = options.ServerCertificateValidation,
                        EnabledSslProtocols = SslProtocols.Tls12 | SslProtocols.Tls13,
                    },
                    cancellationToken).ConfigureAwait(false);
            }
#endif
            catch (Exception e) when (e is AuthenticationException or IOException)
            {
                await tls.DisposeAsync().ConfigureAwait(false);
                throw new HeraldConnectionException($"The TLS handshake with {address.Host}:{port} failed: {e.Message}", e);
            }
            catch
            {
                await tls.DisposeAsync().ConfigureAwait(false);
                throw;
            }

            stream = tls;
        }

        return new TcpLink(stream, port);
    }
}
