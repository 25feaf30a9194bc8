using System.Buffers;
using System.Buffers.Binary;
using System.IO.Pipelines;
using System.Net.WebSockets;
using System.Numerics;
using System.Runtime.InteropServices;

namespace Herald.Broker.Transports.WebSockets;

/// <summary>
/// The session's input over an upgraded HTTP connection: RFC 6455 frames parsed in the connection's own pipe
/// (Kestrel's socket reader), each data frame's payload unmasked in place, so the session reads slices of the
/// very buffers the socket filled, as it does over TCP. What it is handed is the messages' payload bytes only:
/// binary messages, possibly fragmented, are one byte stream of Herald frames (a frame may span messages).
/// A WebSocket message is never held, whole or in part, so its size is not bounded: what a client can make the
/// broker hold is what it can over TCP, the Herald frame it is sending (bounded by <c>max_frame</c> and the session's
/// read allowance), plus a 14-byte header and a control frame's 125 bytes here.
/// </summary>
/// <remarks>
/// <para>
/// The buffer the connection's pipe holds reads, from its start: bytes already dealt with (headers, control
/// frames: <c>_dead</c>), then unmasked payload the session has not consumed (<c>_ready</c>), then headers and
/// control frames dealt with after those ready bytes (<c>_gap</c>), then what is not parsed yet. A header is skipped
/// by moving past it when nothing is ready before it; when the session has examined everything ready and waits for
/// the rest of a frame that goes on in the next WebSocket frame (rare: clients send whole frames), the header joins
/// the gap and each later payload byte is moved back over the gap, once, to meet the ready bytes. So a frame sent in
/// many small fragments costs a copy of each byte, never a copy of all the bytes before it per fragment.
/// </para>
/// <para>
/// Control frames are answered here: a Ping gets its Pong (<see cref="WebSocketOutput.AnswerPing"/>, not waited for), a
/// Pong is dropped, a Close ends the input. A frame that breaks the protocol (unmasked, reserved bits without an
/// extension, a control frame fragmented or over 125 bytes, an unknown opcode, a continuation out of place, a
/// 64-bit length with its top bit set) or a text message ends the input with the close status that says why
/// (<see cref="Failure"/>); the connection sends it and drops the socket.
/// </para>
/// </remarks>
internal sealed class WebSocketInput(PipeReader raw, WebSocketOutput output) : PipeReader
{
    private const int MaxControlPayload = 125;

    private readonly byte[] _control = new byte[MaxControlPayload];

    private ReadResult _held;      // the connection pipe's read, between ReadAsync and AdvanceTo
    private bool _holding;
    private long _dead;            // bytes at the held buffer's start already dealt with
    private long _ready;           // unmasked payload after them, not consumed by the session
    private long _gap;             // bytes dealt with after the ready ones: later payload is moved back over them
    private long _seen;            // of those, what the session has examined (it waits for more than that)
    private long _payloadLeft;     // payload bytes of the current data frame not yet unmasked
    private uint _mask;            // its masking key, rotated to the next byte's place
    private bool _inMessage;       // a fragmented message goes on (its FIN not yet seen)
    private bool _ended;           // a Close came, or the client broke the protocol: no more input
    private bool _discarding;      // the session has ended: data is skipped until the client's Close

    /// <summary>The status the connection closes with when the client broke a rule, with the reason sent.</summary>
    public (WebSocketCloseStatus Status, string Reason)? Failure { get; private set; }

    /// <summary>Whether the client's Close has been read.</summary>
    public bool CloseReceived { get; private set; }

    public override bool TryRead(out ReadResult result)
    {
        result = default;
        return false; // the session only awaits its reads
    }

    [System.Runtime.CompilerServices.AsyncMethodBuilder(typeof(System.Runtime.CompilerServices.PoolingAsyncValueTaskMethodBuilder<>))]
    public override async ValueTask<ReadResult> ReadAsync(CancellationToken cancellationToken = default)
    {
        while (true)
        {
            if (!_holding)
            {
                _held = await raw.ReadAsync(cancellationToken).ConfigureAwait(false);
                _holding = true;
            }

            ReadOnlySequence<byte> buffer = _held.Buffer;
            if (_held.IsCanceled)
            {
                return new ReadResult(buffer.Slice(_dead, _ready), isCanceled: true, isCompleted: false);
            }

            if (!_ended)
            {
                Parse(buffer);
            }

            if (_ended || (_held.IsCompleted && _payloadLeft == 0 && buffer.Length == _dead + _ready + _gap))
            {
                return new ReadResult(buffer.Slice(_dead, _ready), isCanceled: false, isCompleted: true);
            }

            if (_ready > _seen)
            {
                return new ReadResult(buffer.Slice(_dead, _ready), isCanceled: false, isCompleted: false);
            }

            if (_held.IsCompleted)
            {
                return new ReadResult(buffer.Slice(_dead, _ready), isCanceled: false, isCompleted: true); // the socket ended inside a WebSocket frame
            }

            // Nothing new for the session: wait for more bytes, keeping what is ready.
            raw.AdvanceTo(buffer.GetPosition(_dead), buffer.End);
            _dead = 0;
            _holding = false;
        }
    }

    public override void AdvanceTo(SequencePosition consumed) => AdvanceTo(consumed, consumed);

    public override void AdvanceTo(SequencePosition consumed, SequencePosition examined)
    {
        ReadOnlySequence<byte> buffer = _held.Buffer;
        long readyEnd = _dead + _ready;
        long consumedAt = buffer.Slice(0, consumed).Length;
        long examinedAt = buffer.Slice(0, examined).Length;
        _ready = readyEnd - consumedAt;
        _seen = examinedAt >= readyEnd ? _ready : 0;
        _dead = 0;
        if (_ready == 0)
        {
            _dead = _gap; // all taken: the gap leads the next read, skipped
            _gap = 0;
        }

        _holding = false;
        // Examined all that was ready: the connection's pipe waits for new bytes only if nothing unparsed is left.
        raw.AdvanceTo(consumed, examinedAt >= readyEnd ? buffer.GetPosition(readyEnd) : examined);
    }

    public override void CancelPendingRead() => raw.CancelPendingRead();

    /// <summary>The session no longer reads (the connection's pipe is Kestrel's, which completes it with the request).</summary>
    public override void Complete(Exception? exception = null)
    {
    }

    /// <summary>
    /// After the session has ended: reads on, dropping data, until the client's Close (or a broken rule, or the
    /// socket's end). Returns at once if the input has already ended.
    /// </summary>
    public async Task WaitForCloseAsync(CancellationToken cancellationToken)
    {
        _discarding = true;
        if (_holding)
        {
            // The session left its last read held (a cancelled one): what it did not take is dropped.
            raw.AdvanceTo(_held.Buffer.GetPosition(_dead + _ready + _gap));
            _holding = false;
            _dead = 0;
        }
        else
        {
            _dead = _ready + _gap; // the ready bytes (and the gap after them) lead the next read: skipped
        }

        _gap = 0;

        _ready = _seen = 0;
        while (!_ended)
        {
            ReadResult result = await ReadAsync(cancellationToken).ConfigureAwait(false);
            if (result.IsCompleted || result.IsCanceled)
            {
                return;
            }

            AdvanceTo(result.Buffer.End);
        }
    }

    /// <summary>Parses what the held buffer has past the ready bytes: payload unmasked, headers skipped, control frames dealt with.</summary>
    private void Parse(ReadOnlySequence<byte> buffer)
    {
        Span<byte> header = stackalloc byte[14];
        while (true)
        {
            long at = _dead + _ready + _gap;
            long unparsed = buffer.Length - at;
            if (unparsed == 0)
            {
                return;
            }

            if (_payloadLeft > 0)
            {
                long take = Math.Min(_payloadLeft, unparsed);
                if (_discarding)
                {
                    _dead += take;
                }
                else
                {
                    Unmask(buffer.Slice(at, take));
                    if (_gap > 0)
                    {
                        CloseGap(buffer, at, take);
                    }

                    _ready += take;
                }

                _payloadLeft -= take;
                continue;
            }

            if (_ready > _seen)
            {
                return; // the session takes what is ready first: if it takes it all, the header is skipped without a move
            }

            int have = (int)Math.Min(unparsed, header.Length);
            buffer.Slice(at, have).CopyTo(header);
            if (!TryHeader(header[..have], out int headerLength, out long length))
            {
                return; // incomplete, or refused (_ended then)
            }

            int opcode = header[0] & 0x0F;
            bool fin = (header[0] & 0x80) != 0;
            uint mask = BinaryPrimitives.ReadUInt32LittleEndian(header.Slice(headerLength - 4, 4));
            if (opcode >= 0x8)
            {
                if (unparsed < headerLength + length)
                {
                    return; // a control frame is dealt with whole (at most 125 bytes)
                }

                Span<byte> payload = _control.AsSpan(0, (int)length);
                buffer.Slice(at + headerLength, length).CopyTo(payload);
                UnmaskSpan(payload, mask);
                Remove(headerLength + length);
                switch (opcode)
                {
                    case 0x9 when !_discarding:
                        output.AnswerPing(payload);
                        continue;
                    case 0x8:
                        Closed(payload);
                        return;
                    default:
                        continue; // a Pong: nothing to do
                }
            }

            // No bound on the frame's or its message's length: its payload streams through to the session, which
            // bounds the Herald frames in it as over TCP.
            _inMessage = !fin;
            _payloadLeft = length;
            _mask = mask;
            Remove(headerLength);
        }
    }

    /// <summary>Reads and checks a client frame's header; false when it is incomplete, or refused (<see cref="_ended"/> then).</summary>
    private bool TryHeader(ReadOnlySpan<byte> header, out int headerLength, out long length)
    {
        headerLength = 0;
        length = 0;
        if (header.Length < 2)
        {
            return false;
        }

        byte first = header[0];
        byte second = header[1];
        int opcode = first & 0x0F;
        bool fin = (first & 0x80) != 0;
        if ((first & 0x70) != 0)
        {
            return Refuse(WebSocketCloseStatus.ProtocolError, "Reserved bits set: no extension was negotiated.");
        }

        if ((second & 0x80) == 0)
        {
            return Refuse(WebSocketCloseStatus.ProtocolError, "A client frame must be masked.");
        }

        switch (opcode)
        {
            case 0x0 when !_inMessage:
                return Refuse(WebSocketCloseStatus.ProtocolError, "A continuation frame with no message begun.");
            case 0x1:
                return Refuse(WebSocketCloseStatus.InvalidMessageType, "Herald frames travel in binary messages (spec §1).");
            case 0x2 when _inMessage:
                return Refuse(WebSocketCloseStatus.ProtocolError, "A new message began before the last one's final fragment.");
            case 0x0 or 0x2:
                break;
            case 0x8 or 0x9 or 0xA:
                if (!fin || (second & 0x7F) > MaxControlPayload)
                {
                    return Refuse(WebSocketCloseStatus.ProtocolError, "A control frame is at most 125 bytes and never fragmented.");
                }

                break;
            default:
                return Refuse(WebSocketCloseStatus.ProtocolError, $"Unknown opcode {opcode}.");
        }

        length = second & 0x7F;
        int extended = length switch { 126 => 2, 127 => 8, _ => 0 };
        headerLength = 2 + extended + 4;
        if (header.Length < headerLength)
        {
            return false;
        }

        if (extended == 2)
        {
            length = BinaryPrimitives.ReadUInt16BigEndian(header[2..]);
        }
        else if (extended == 8)
        {
            ulong wide = BinaryPrimitives.ReadUInt64BigEndian(header[2..]);
            if (wide > long.MaxValue)
            {
                return Refuse(WebSocketCloseStatus.ProtocolError, "A 64-bit payload length has its most significant bit set.");
            }

            length = (long)wide;
        }

        return true;
    }

    /// <summary>The client's Close: its status checked (RFC 6455 §7.4); the input ends.</summary>
    private void Closed(ReadOnlySpan<byte> payload)
    {
        CloseReceived = true;
        _ended = true;
        if (payload.Length == 1)
        {
            Fail(WebSocketCloseStatus.ProtocolError, "A Close payload of one byte.");
        }
        else if (payload.Length >= 2 && BinaryPrimitives.ReadUInt16BigEndian(payload) is var code && !IsValidCloseCode(code))
        {
            Fail(WebSocketCloseStatus.ProtocolError, $"Close status {code} may not be sent.");
        }
        else if (payload.Length > 2 && !System.Text.Unicode.Utf8.IsValid(payload[2..]))
        {
            Fail(WebSocketCloseStatus.InvalidPayloadData, "A Close reason that is not UTF-8.");
        }
    }

    private static bool IsValidCloseCode(int code) => code is (>= 1000 and <= 1003) or (>= 1007 and <= 1014) or (>= 3000 and <= 4999);

    private bool Refuse(WebSocketCloseStatus status, string reason)
    {
        Fail(status, reason);
        return false;
    }

    private void Fail(WebSocketCloseStatus status, string reason)
    {
        Failure ??= (status, reason);
        _ended = true;
    }

    /// <summary>
    /// Takes <paramref name="count"/> bytes just past the ready ones (and the gap) out of the session's view: skipped
    /// when nothing is ready, else added to the gap, which later payload is moved back over (<see cref="CloseGap"/>).
    /// </summary>
    private void Remove(long count)
    {
        if (_ready > 0)
        {
            _gap += count;
        }
        else
        {
            _dead += count;
        }
    }

    /// <summary>
    /// Moves <paramref name="count"/> unmasked payload bytes at <paramref name="at"/> back over the gap, to follow the
    /// ready bytes; the gap then lies after them. Each payload byte is moved at most once, whatever the fragments.
    /// </summary>
    private void CloseGap(ReadOnlySequence<byte> buffer, long at, long count)
    {
        byte[] moved = ArrayPool<byte>.Shared.Rent((int)Math.Min(count, 16 * 1024));
        long done = 0;
        while (done < count)
        {
            int chunk = (int)Math.Min(count - done, moved.Length);
            Span<byte> from = moved.AsSpan(0, chunk);
            buffer.Slice(at + done, chunk).CopyTo(from);
            foreach (ReadOnlyMemory<byte> segment in buffer.Slice(_dead + _ready + done, chunk))
            {
                from[..segment.Length].CopyTo(MemoryMarshal.AsMemory(segment).Span);
                from = from[segment.Length..];
            }

            done += chunk;
        }

        ArrayPool<byte>.Shared.Return(moved);
        MovedBytes += count;
    }

    /// <summary>Payload bytes moved back over headers so far (a frame spanning fragments); what tests bound it by.</summary>
    internal long MovedBytes { get; private set; }

    /// <summary>Unmasks payload in place (the pipe's buffers are the socket's, writable), continuing the key's rotation across calls.</summary>
    private void Unmask(ReadOnlySequence<byte> payload)
    {
        foreach (ReadOnlyMemory<byte> segment in payload)
        {
            Span<byte> span = MemoryMarshal.AsMemory(segment).Span;
            UnmaskSpan(span, _mask);
            _mask = BitOperations.RotateRight(_mask, 8 * (span.Length & 3));
        }
    }

    /// <summary>XORs <paramref name="span"/> with the 4-byte key <paramref name="mask"/> (little-endian: its low byte masks the first byte), 8 bytes at a time.</summary>
    private static void UnmaskSpan(Span<byte> span, uint mask)
    {
        if (!BitConverter.IsLittleEndian)
        {
            for (int i = 0; i < span.Length; i++)
            {
                span[i] ^= (byte)(mask >> (8 * (i & 3)));
            }

            return;
        }

        if (Vector.IsHardwareAccelerated && span.Length >= Vector<byte>.Count)
        {
            Vector<byte> key = Vector.AsVectorByte(new Vector<uint>(mask));
            Span<Vector<byte>> vectors = MemoryMarshal.Cast<byte, Vector<byte>>(span);
            for (int i = 0; i < vectors.Length; i++)
            {
                vectors[i] ^= key;
            }

            span = span[(vectors.Length * Vector<byte>.Count)..]; // a whole number of keys: the rotation is unchanged
        }

        ulong wide = mask | ((ulong)mask << 32);
        Span<ulong> words = MemoryMarshal.Cast<byte, ulong>(span);
        for (int i = 0; i < words.Length; i++)
        {
            words[i] ^= wide;
        }

        for (int i = words.Length * 8; i < span.Length; i++)
        {
            span[i] ^= (byte)(mask >> (8 * (i & 3)));
        }
    }
}
