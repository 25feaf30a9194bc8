using System.Net.WebSockets;
using System.Security.Cryptography;
using System.Text;

namespace Herald.LoadTest.Client;

/// <summary>
/// WebSocket for the tool's own Herald clients (<c>--transport websocket</c>, spec §1): the client's opening
/// handshake (RFC 6455 §4.1) for <c>/ws</c> with the subprotocol <c>herald.v1</c>, over a connection the
/// caller already opened, so the socket stays the tool's own (bound to its source address, TCP_NODELAY, TLS
/// under it when asked) as on TCP. The WebSocket is then a byte stream of Herald frames
/// (<see cref="WebSocketStream"/>): each write one binary message, reads across message boundaries.
/// </summary>
internal static class WebSocketClient
{
    /// <summary>Where the broker takes WebSockets on its HTTP port.</summary>
    public const string Path = "/ws";

    public const string SubProtocol = "herald.v1";

    /// <summary>RFC 6455 §1.3: appended to the key before hashing into <c>Sec-WebSocket-Accept</c>.</summary>
    private const string AcceptGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

    private const int MaxResponseHeadBytes = 8 * 1024;

    /// <summary>
    /// Asks <paramref name="transport"/>'s server to upgrade <c>GET /ws</c> to a WebSocket speaking
    /// <c>herald.v1</c>; returns the WebSocket over <paramref name="transport"/>. No keep-alive pings of its own:
    /// Herald's PING/PONG (spec §4.7) is the liveness check, as on TCP.
    /// </summary>
    /// <exception cref="IOException">The server refused the upgrade (its status line says why), or answered something else.</exception>
    public static async Task<WebSocket> ConnectAsync(Stream transport, string host, int port, CancellationToken cancellationToken)
    {
        string key = Convert.ToBase64String(RandomNumberGenerator.GetBytes(16));
        string request = $"GET {Path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {SubProtocol}\r\n\r\n";
        await transport.WriteAsync(Encoding.ASCII.GetBytes(request), cancellationToken);

        string[] lines = (await ReadHeadAsync(transport, cancellationToken)).Split("\r\n");
        if (lines[0].Split(' ', 3) is not [_, "101", ..])
        {
            throw new IOException($"the broker refused the WebSocket upgrade at {host}:{port}{Path}: {lines[0]}");
        }

        var headers = new Dictionary<string, string>(StringComparer.OrdinalIgnoreCase);
        foreach (string line in lines.Skip(1))
        {
            int colon = line.IndexOf(':', StringComparison.Ordinal);
            if (colon > 0)
            {
                headers[line[..colon].Trim()] = line[(colon + 1)..].Trim();
            }
        }

#pragma warning disable CA5350 // RFC 6455 §4.2.2 names SHA-1 for the accept value: a handshake check, not security
        string accept = Convert.ToBase64String(SHA1.HashData(Encoding.ASCII.GetBytes(key + AcceptGuid)));
#pragma warning restore CA5350
        if (!headers.TryGetValue("Sec-WebSocket-Accept", out string? answered) || answered != accept)
        {
            throw new IOException($"{host}:{port}{Path}: the upgrade's Sec-WebSocket-Accept does not answer our key.");
        }

        if (!headers.TryGetValue("Sec-WebSocket-Protocol", out string? protocol) || protocol != SubProtocol)
        {
            throw new IOException($"{host}:{port}{Path}: the upgrade did not agree to the subprotocol {SubProtocol} (got '{protocol}').");
        }

        return WebSocket.CreateFromStream(transport, new WebSocketCreationOptions { IsServer = false, SubProtocol = SubProtocol, KeepAliveInterval = TimeSpan.Zero });
    }

    /// <summary>
    /// Reads the response up to its blank line. The broker says nothing over the WebSocket before it has
    /// our HELLO, so a byte after that line is not ours to leave unread: it is an error, not a loss.
    /// </summary>
    private static async Task<string> ReadHeadAsync(Stream transport, CancellationToken cancellationToken)
    {
        byte[] buffer = new byte[MaxResponseHeadBytes];
        int length = 0;
        while (true)
        {
            int read = await transport.ReadAsync(buffer.AsMemory(length), cancellationToken);
            if (read == 0)
            {
                throw new IOException("the server closed the connection during the WebSocket upgrade.");
            }

            length += read;
            int end = buffer.AsSpan(0, length).IndexOf("\r\n\r\n"u8);
            if (end >= 0)
            {
                return end + 4 == length
                    ? Encoding.ASCII.GetString(buffer, 0, end)
                    : throw new IOException("the server sent WebSocket data before the client's first message.");
            }

            if (length == buffer.Length)
            {
                throw new IOException($"the WebSocket upgrade's response head is over {MaxResponseHeadBytes} bytes.");
            }
        }
    }
}
