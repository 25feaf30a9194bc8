using System.Net.WebSockets;
using System.Runtime.CompilerServices;
using System.Security.Cryptography;
using System.Text;

namespace Herald.LoadTest.Client;

/// <summary>
/// WebSocket for the tool's own Herald clients (<c>--transport websocket</c>, spec §1): the client's opening
/// handshake (RFC 6455 §4.1) for <c>/ws</c> with the subprotocol <c>herald.v1</c>, over a connection the
/// caller already opened, so the socket stays the tool's own (bound to its source address, TCP_NODELAY, TLS
/// under it when asked) as on TCP. The WebSocket is then a byte stream of Herald frames
/// (<see cref="WebSocketFrameStream"/>): each write one binary message, reads across message boundaries.
/// Under the WebSocket a <see cref="ReadAheadStream"/>, so reading a message's header and then its payload
/// does not cost two system calls per message.
/// </summary>
internal static class WebSocketClient
{
    /// <summary>Where the broker takes WebSockets on its HTTP port.</summary>
    public const string Path = "/ws";

    public const string SubProtocol = "herald.v1";

    /// <summary>RFC 6455 §1.3: appended to the key before hashing into <c>Sec-WebSocket-Accept</c>.</summary>
    private const string AcceptGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

    /// <summary>
    /// Asks <paramref name="transport"/>'s server to upgrade <c>GET /ws</c> to a WebSocket speaking
    /// <c>herald.v1</c>, and returns the WebSocket as a stream of frames. <paramref name="readAhead"/> bytes are
    /// read ahead under it (the upgrade's response head must fit). No keep-alive pings of its own: Herald's
    /// PING/PONG (spec §4.7) is the liveness check, as on TCP.
    /// </summary>
    /// <exception cref="IOException">The server refused the upgrade (its status line says why), or answered something else.</exception>
    public static async Task<WebSocketFrameStream> ConnectAsync(Stream transport, string host, int port, int readAhead, CancellationToken cancellationToken)
    {
        var under = new ReadAheadStream(transport, readAhead);
        string key = Convert.ToBase64String(RandomNumberGenerator.GetBytes(16));
        string request = $"GET {Path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {SubProtocol}\r\n\r\n";
        await under.WriteAsync(Encoding.ASCII.GetBytes(request), cancellationToken);

        string[] lines = (await ReadHeadAsync(under, cancellationToken)).Split("\r\n");
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

        // What follows the head, if anything came with it, stays in the read-ahead for the WebSocket.
        return new WebSocketFrameStream(WebSocket.CreateFromStream(under, new WebSocketCreationOptions { IsServer = false, SubProtocol = SubProtocol, KeepAliveInterval = TimeSpan.Zero }));
    }

    /// <summary>The response up to its blank line, taken from the read-ahead in place.</summary>
    private static async Task<string> ReadHeadAsync(ReadAheadStream under, CancellationToken cancellationToken)
    {
        while (true)
        {
            int end = under.Buffered.IndexOf("\r\n\r\n"u8);
            if (end >= 0)
            {
                string head = Encoding.ASCII.GetString(under.Buffered[..end]);
                under.Consume(end + 4);
                return head;
            }

            if (!await under.FillAsync(cancellationToken))
            {
                throw new IOException(under.Full
                    ? $"the WebSocket upgrade's response head is over {under.Buffered.Length} bytes."
                    : "the server closed the connection during the WebSocket upgrade.");
            }
        }
    }
}

/// <summary>
/// A WebSocket carrying Herald frames, as the byte stream <see cref="HeraldConnection"/> reads and writes:
/// each write is one binary message (a batch of whole frames); each read takes what the next message
/// carries (a frame may span messages: the reader's buffer joins them). The broker's close ends the stream
/// (a read returns 0); a WebSocket failure, or a text message, is an <see cref="IOException"/>, as a
/// socket's failure is. Disposing aborts the WebSocket (no close handshake: a TCP client's close sends
/// none either). Threading: one reader and one writer at a time (the WebSocket's rule); no allocation per
/// read or write of its own.
/// </summary>
internal sealed class WebSocketFrameStream(WebSocket webSocket) : DuplexStream
{
    private bool _closed;

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder<>))]
    public override async ValueTask<int> ReadAsync(Memory<byte> buffer, CancellationToken cancellationToken = default)
    {
        try
        {
            while (!_closed)
            {
                ValueWebSocketReceiveResult received = await webSocket.ReceiveAsync(buffer, cancellationToken);
                switch (received.MessageType)
                {
                    case WebSocketMessageType.Close:
                        _closed = true;
                        break;
                    case WebSocketMessageType.Text:
                        throw new IOException("the broker sent a text message: Herald frames travel in binary ones (spec §1).");
                    default:
                        if (received.Count > 0 || buffer.IsEmpty)
                        {
                            return received.Count;
                        }

                        break; // an empty message: nothing to hand on
                }
            }

            return 0;
        }
        catch (WebSocketException e)
        {
            throw new IOException($"the WebSocket failed: {e.Message}", e);
        }
    }

    public override ValueTask WriteAsync(ReadOnlyMemory<byte> buffer, CancellationToken cancellationToken = default)
    {
        ValueTask sent;
        try
        {
            sent = webSocket.SendAsync(buffer, WebSocketMessageType.Binary, endOfMessage: true, cancellationToken);
        }
        catch (WebSocketException e)
        {
            return ValueTask.FromException(new IOException($"the WebSocket failed: {e.Message}", e));
        }

        return sent.IsCompletedSuccessfully ? default : AwaitSendAsync(sent);
    }

    /// <summary>Sends a Close (normal closure) and waits for nothing back: the peer's answering close is read, if ever, by <see cref="ReadAsync(Memory{byte}, CancellationToken)"/>.</summary>
    public Task SendCloseAsync(CancellationToken cancellationToken) =>
        webSocket.CloseOutputAsync(WebSocketCloseStatus.NormalClosure, "bye", cancellationToken);

    public override Task<int> ReadAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken) =>
        ReadAsync(buffer.AsMemory(offset, count), cancellationToken).AsTask();

    public override Task WriteAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken) =>
        WriteAsync(buffer.AsMemory(offset, count), cancellationToken).AsTask();

    public override int Read(byte[] buffer, int offset, int count) => throw new NotSupportedException("Herald's WebSocket stream is read asynchronously.");

    public override void Write(byte[] buffer, int offset, int count) => throw new NotSupportedException("Herald's WebSocket stream is written asynchronously.");

    public override void Flush()
    {
        // every write is sent as it is made
    }

    protected override void Dispose(bool disposing)
    {
        if (disposing)
        {
            webSocket.Dispose(); // aborts it and disposes the streams under it
        }

        base.Dispose(disposing);
    }

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    private static async ValueTask AwaitSendAsync(ValueTask sent)
    {
        try
        {
            await sent;
        }
        catch (WebSocketException e)
        {
            throw new IOException($"the WebSocket failed: {e.Message}", e);
        }
    }
}
