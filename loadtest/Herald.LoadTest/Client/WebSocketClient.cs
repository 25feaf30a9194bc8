using System.Buffers.Binary;
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
    /// read at a time under it (the upgrade's response head must fit). No keep-alive pings of its own: Herald's
    /// PING/PONG (spec §4.7) is the liveness check, as on TCP.
    /// </summary>
    /// <exception cref="IOException">The server refused the upgrade (its status line says why), or answered something else.</exception>
    public static async Task<WebSocketFrameStream> ConnectAsync(Stream transport, string host, int port, int readAhead, CancellationToken cancellationToken)
    {
        var under = new WebSocketFrameStream(transport, readAhead);
        string key = Convert.ToBase64String(RandomNumberGenerator.GetBytes(16));
        string request = $"GET {Path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {SubProtocol}\r\n\r\n";
        await transport.WriteAsync(Encoding.ASCII.GetBytes(request), cancellationToken);

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

        return under; // what came after the head, if anything, stays buffered: the WebSocket's first frames
    }

    /// <summary>The response up to its blank line, taken from the stream's buffer in place.</summary>
    private static async Task<string> ReadHeadAsync(WebSocketFrameStream under, CancellationToken cancellationToken)
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
/// A WebSocket carrying Herald frames, as the byte stream <see cref="HeraldConnection"/> reads and writes, with
/// RFC 6455's framing done here on the bytes of the stream under it, as the broker does on its pipe: no
/// WebSocket object, no stream or task per message. A read takes one read of the stream under it (as large as
/// the buffer) and hands on the payload of every data frame that arrived, headers skipped, so a batch of the
/// broker's messages costs what the same bytes cost over TCP (a frame may span messages: the reader's buffer
/// joins them). A write is one binary message, FIN set, masked with a fresh key (RFC 6455 §5.3; from
/// <see cref="Random.Shared"/>: a load tool's key needs no unpredictability) into a buffer kept for the next.
/// The broker's Close ends the stream (a read returns 0); a Ping is answered with its Pong; a text message or a
/// masked or unknown frame is an <see cref="IOException"/>, as a socket's failure is. Disposing disposes the
/// stream under it (no close handshake: a TCP client's close sends none either). Threading: one reader and one
/// writer at a time; writes (and the Pongs a read sends) are serialised here; no allocation per read or write.
/// </summary>
internal sealed class WebSocketFrameStream(Stream inner, int size) : DuplexStream
{
    private const int MaxControlPayload = 125;

    private readonly byte[] _received = GC.AllocateUninitializedArray<byte>(size); // server frames as they came, parsed in place
    private readonly SemaphoreSlim _sendGate = new(1, 1); // a read's Pong against the connection's writes
    private byte[] _sending = new byte[1024];
    private int _start;          // next byte of _received not yet parsed or handed on
    private int _end;
    private long _payloadLeft;   // of the current data frame, not yet handed on
    private bool _closed;        // the broker's Close was read
    private readonly byte[] _pong = new byte[MaxControlPayload]; // the latest Ping's payload, until its Pong is sent
    private int _pongLength = -1; // -1: no Pong due

    /// <summary>Received and not yet read (the upgrade's response head, before any frame is read).</summary>
    public ReadOnlySpan<byte> Buffered => _received.AsSpan(_start, _end - _start);

    /// <summary>The buffer is full: <see cref="FillAsync"/> has no room left.</summary>
    public bool Full => _start == 0 && _end == _received.Length;

    /// <summary>Marks <paramref name="count"/> buffered bytes as read.</summary>
    public void Consume(int count) => _start += count;

    /// <summary>Reads more after what is buffered (moved to the front first); false when the stream under it ended or the buffer is full.</summary>
    public async ValueTask<bool> FillAsync(CancellationToken cancellationToken)
    {
        if (_start > 0)
        {
            Buffer.BlockCopy(_received, _start, _received, 0, _end - _start);
            _end -= _start;
            _start = 0;
        }

        if (_end == _received.Length)
        {
            return false;
        }

        int read = await inner.ReadAsync(_received.AsMemory(_end), cancellationToken);
        _end += read;
        return read > 0;
    }

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder<>))]
    public override async ValueTask<int> ReadAsync(Memory<byte> buffer, CancellationToken cancellationToken = default)
    {
        while (true)
        {
            int taken = Take(buffer.Span);
            if (_pongLength >= 0)
            {
                await SendFrameAsync(0x8A, _pong.AsMemory(0, _pongLength), cancellationToken);
                _pongLength = -1;
            }

            if (taken > 0 || buffer.IsEmpty || _closed)
            {
                return taken;
            }

            if (!await FillAsync(cancellationToken))
            {
                return 0;
            }
        }
    }

    public override ValueTask WriteAsync(ReadOnlyMemory<byte> buffer, CancellationToken cancellationToken = default) =>
        SendFrameAsync(0x82, buffer, cancellationToken);

    /// <summary>Sends a Close (normal closure) and waits for nothing back: the peer's answering close is read, if ever, by <see cref="ReadAsync(Memory{byte}, CancellationToken)"/>.</summary>
    public Task SendCloseAsync(CancellationToken cancellationToken) =>
        SendFrameAsync(0x88, new byte[] { 0x03, 0xE8, (byte)'b', (byte)'y', (byte)'e' }, cancellationToken).AsTask();

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
            inner.Dispose();
            _sendGate.Dispose();
        }

        base.Dispose(disposing);
    }

    /// <summary>Copies the payload of every data frame buffered into <paramref name="destination"/>, as far as it goes; control frames are dealt with on the way.</summary>
    private int Take(Span<byte> destination)
    {
        int taken = 0;
        while (taken < destination.Length)
        {
            if (_payloadLeft > 0)
            {
                int count = (int)Math.Min(Math.Min(_payloadLeft, _end - _start), destination.Length - taken);
                if (count == 0)
                {
                    break;
                }

                _received.AsSpan(_start, count).CopyTo(destination[taken..]);
                _start += count;
                _payloadLeft -= count;
                taken += count;
            }
            else if (_closed || !TryHeader())
            {
                break;
            }
        }

        return taken;
    }

    /// <summary>Reads the next frame's header if it is whole (a control frame: the whole frame), and deals with it; false when more bytes are needed or the Close came.</summary>
    private bool TryHeader()
    {
        ReadOnlySpan<byte> header = Buffered;
        if (header.Length < 2)
        {
            return false;
        }

        if ((header[1] & 0x80) != 0 || (header[0] & 0x70) != 0)
        {
            throw new IOException("the broker sent a masked frame, or one with reserved bits set (RFC 6455 §5.1, §5.2).");
        }

        long length = header[1] & 0x7F;
        int headerLength = length switch { 126 => 4, 127 => 10, _ => 2 };
        if (header.Length < headerLength)
        {
            return false;
        }

        length = headerLength switch
        {
            4 => BinaryPrimitives.ReadUInt16BigEndian(header[2..]),
            10 => (long)BinaryPrimitives.ReadUInt64BigEndian(header[2..]),
            _ => length,
        };
        if (length < 0)
        {
            throw new IOException("the broker sent a 64-bit payload length with its top bit set (RFC 6455 §5.2).");
        }

        int opcode = header[0] & 0x0F;
        switch (opcode)
        {
            case 0x0 or 0x2:
                _start += headerLength;
                _payloadLeft = length;
                return true;
            case 0x1:
                throw new IOException("the broker sent a text message: Herald frames travel in binary ones (spec §1).");
            case 0x8 or 0x9 or 0xA when length <= MaxControlPayload:
                if (header.Length < headerLength + length)
                {
                    return false; // a control frame is dealt with whole
                }

                if (opcode == 0x9)
                {
                    header.Slice(headerLength, (int)length).CopyTo(_pong);
                    _pongLength = (int)length;
                }

                _start += headerLength + (int)length;
                _closed = opcode == 0x8;
                return !_closed;
            default:
                throw new IOException($"the broker sent a frame RFC 6455 does not allow (opcode {opcode}, {length} bytes).");
        }
    }

    /// <summary>One whole frame (FIN set, <paramref name="first"/> its first byte), masked into the send buffer and written in one call.</summary>
    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    private async ValueTask SendFrameAsync(byte first, ReadOnlyMemory<byte> payload, CancellationToken cancellationToken)
    {
        await _sendGate.WaitAsync(cancellationToken);
        try
        {
            int length = Frame(first, payload.Span);
            await inner.WriteAsync(_sending.AsMemory(0, length), cancellationToken);
        }
        finally
        {
            _sendGate.Release();
        }
    }

    /// <summary>Writes the frame into <c>_sending</c> (grown to fit): header, mask key, masked payload; its length.</summary>
    private int Frame(byte first, ReadOnlySpan<byte> payload)
    {
        int headerLength = (payload.Length <= 125 ? 2 : payload.Length <= ushort.MaxValue ? 4 : 10) + 4;
        if (_sending.Length < headerLength + payload.Length)
        {
            _sending = new byte[Math.Max(headerLength + payload.Length, _sending.Length * 2)];
        }

        Span<byte> frame = _sending;
        frame[0] = first;
        switch (headerLength)
        {
            case 6:
                frame[1] = (byte)(0x80 | payload.Length);
                break;
            case 8:
                frame[1] = 0x80 | 126;
                BinaryPrimitives.WriteUInt16BigEndian(frame[2..], (ushort)payload.Length);
                break;
            default:
                frame[1] = 0x80 | 127;
                BinaryPrimitives.WriteUInt64BigEndian(frame[2..], (ulong)payload.Length);
                break;
        }

        uint key = (uint)Random.Shared.Next() | 1u; // never 0: the mask is really applied
        BinaryPrimitives.WriteUInt32LittleEndian(frame[(headerLength - 4)..], key);
        Span<byte> masked = frame.Slice(headerLength, payload.Length);
        ulong wide = key | ((ulong)key << 32); // little-endian: the key's first byte masks the payload's first
        int words = payload.Length / 8;
        for (int i = 0; i < words; i++)
        {
            BinaryPrimitives.WriteUInt64LittleEndian(masked[(i * 8)..], BinaryPrimitives.ReadUInt64LittleEndian(payload[(i * 8)..]) ^ wide);
        }

        for (int i = words * 8; i < payload.Length; i++)
        {
            masked[i] = (byte)(payload[i] ^ (key >> (8 * (i & 3))));
        }

        return headerLength + payload.Length;
    }
}
