using System.Buffers;
using System.Buffers.Binary;
using System.IO.Pipelines;

namespace Herald.Broker.Transports.WebSockets;

/// <summary>
/// The session's output over an upgraded HTTP connection: what its drain writes between two flushes is one binary
/// WebSocket message, written straight into the connection's own pipe (Kestrel's socket writer) with no buffer of
/// its own. Each contiguous piece of the pipe's memory the drain fills is one frame of the message: room for its
/// header is kept before the piece, the header written there once the piece's length is known (a piece of at most
/// 125 bytes, whose header is shorter, moves back by two bytes). A batch that fits one piece is one unfragmented
/// frame; a larger one is several fragments of one message, which clients reassemble.
/// </summary>
/// <remarks>
/// One writer at a time: the drain holds the turn from its first write of a batch to the end of its flush; a
/// Pong (<see cref="AnswerPing"/>) and the connection's Close take the turn too (<see cref="SendControlAsync"/>), waiting
/// for a flush in progress. A drain that finds the turn taken (a Pong being sent) writes its batch into a rented buffer and
/// copies it in once the turn is its own, at its flush: rare, and nothing waits synchronously.
/// </remarks>
internal sealed class WebSocketOutput(PipeWriter raw) : PipeWriter, IDisposable
{
    public const byte Binary = 0x2;
    public const byte Close = 0x8;
    public const byte Pong = 0xA;

    private const int ShortHeader = 2;        // payload up to 125 bytes
    private const int MediumHeader = 4;       // up to 65,535
    private const int LongHeader = 10;        // beyond
    private const int MediumPayload = ushort.MaxValue;

    private const int MaxControlPayload = 125;

    private readonly SemaphoreSlim _turn = new(1, 1);

    private readonly byte[] _pong = new byte[MaxControlPayload]; // the latest Ping's payload, while its Pong waits (the lock)
    private int _pongLength;
    private bool _pongWaiting;
    private bool _ponging;    // a task sends the waiting Pong

    private bool _inBatch;    // the drain has written since its last flush
    private bool _aside;      // ... into _side, the turn being taken when it began
    private bool _continues;  // the batch's next frame is a continuation (a fragment went before it)
    private Memory<byte> _piece;  // the pipe's memory the current frame fills, its header's room first
    private int _room;        // header bytes kept at the piece's start
    private int _filled;      // payload bytes the drain advanced into the piece
    private long _unflushed;  // payload of the batch so far
    private byte[] _side = [];
    private bool _ended;

    public override bool CanGetUnflushedBytes => true;

    public override long UnflushedBytes => _unflushed;

    public override Memory<byte> GetMemory(int sizeHint = 0)
    {
        int needed = Math.Max(sizeHint, 1);
        Begin();
        if (_aside)
        {
            Reserve(needed);
            return _side.AsMemory((int)_unflushed);
        }

        if (_piece.Length - _room - _filled < needed)
        {
            OpenPiece(needed);
        }

        return _piece[(_room + _filled)..];
    }

    public override Span<byte> GetSpan(int sizeHint = 0) => GetMemory(sizeHint).Span;

    public override void Advance(int bytes)
    {
        _unflushed += bytes;
        if (!_aside)
        {
            _filled += bytes;
        }
    }

    [System.Runtime.CompilerServices.AsyncMethodBuilder(typeof(System.Runtime.CompilerServices.PoolingAsyncValueTaskMethodBuilder<>))]
    public override async ValueTask<FlushResult> FlushAsync(CancellationToken cancellationToken = default)
    {
        if (_ended)
        {
            EndBatch();
            return new FlushResult(isCanceled: false, isCompleted: true);
        }

        if (!_inBatch)
        {
            return default;
        }

        try
        {
            if (_aside)
            {
                await _turn.WaitAsync(cancellationToken).ConfigureAwait(false);
                _aside = false; // the turn is the batch's now: EndBatch gives it back
                WriteFrame(raw, Binary, _side.AsSpan(0, (int)_unflushed));
            }
            else
            {
                ClosePiece(final: true);
            }

            FlushResult flushed = await raw.FlushAsync(cancellationToken).ConfigureAwait(false);
            if (flushed.IsCompleted)
            {
                _ended = true;
            }

            return flushed;
        }
        catch (Exception e) when (e is OperationCanceledException or IOException or InvalidOperationException)
        {
            _ended = true; // the connection is gone (aborted): nothing more can reach it
            return new FlushResult(isCanceled: false, isCompleted: true);
        }
        finally
        {
            EndBatch();
        }
    }

    public override void CancelPendingFlush() => raw.CancelPendingFlush();

    /// <summary>The session's output ends (its last flush done, or the connection aborted): later flushes send nothing; the connection's pipe stays open for the Close.</summary>
    public override void Complete(Exception? exception = null)
    {
        _ended = true;
    }

    /// <summary>
    /// Answers a Ping without waiting: its Pong goes out once no batch is being written or flushed. The input's
    /// read never waits for it (a client that pings and stops reading cannot hold the read loop, which the session's
    /// close cancels); a Ping that comes while a Pong waits replaces its payload (RFC 6455 §5.5.3: the most recent
    /// one is answered), so at most one Pong waits.
    /// </summary>
    public void AnswerPing(ReadOnlySpan<byte> payload)
    {
        lock (_pong)
        {
            payload.CopyTo(_pong);
            _pongLength = payload.Length;
            _pongWaiting = true;
            if (_ponging)
            {
                return;
            }

            _ponging = true;
        }

        _ = SendPongsAsync();
    }

    private async Task SendPongsAsync()
    {
        byte[] payload = new byte[MaxControlPayload];
        try
        {
            while (true)
            {
                int length;
                lock (_pong)
                {
                    if (!_pongWaiting || _ended)
                    {
                        _ponging = false;
                        return;
                    }

                    _pong.AsSpan(0, _pongLength).CopyTo(payload);
                    length = _pongLength;
                    _pongWaiting = false;
                }

                await SendControlAsync(Pong, payload.AsMemory(0, length), CancellationToken.None).ConfigureAwait(false);
            }
        }
        catch (Exception e) when (e is OperationCanceledException or IOException or InvalidOperationException or ObjectDisposedException)
        {
            lock (_pong)
            {
                _ponging = false; // the connection is gone: no Pong can reach it
            }
        }
    }

    /// <summary>Once the connection is done with (nothing waits for the turn any more).</summary>
    public void Dispose() => _turn.Dispose();

    /// <summary>
    /// Sends one control frame (a Pong, the Close) on its own, once no batch is being written or flushed:
    /// it waits for the drain's flush in progress (bounded by <paramref name="cancellationToken"/>).
    /// </summary>
    public async ValueTask SendControlAsync(byte opcode, ReadOnlyMemory<byte> payload, CancellationToken cancellationToken)
    {
        await _turn.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            WriteFrame(raw, opcode, payload.Span);
            await raw.FlushAsync(cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _turn.Release();
        }
    }

    /// <summary>A whole unmasked frame (FIN set) into <paramref name="output"/>: its header, then a copy of its payload.</summary>
    private static void WriteFrame(PipeWriter output, byte opcode, ReadOnlySpan<byte> payload)
    {
        int header = HeaderLength(payload.Length);
        Span<byte> span = output.GetSpan(header + payload.Length);
        WriteHeader(span, (byte)(0x80 | opcode), payload.Length, header);
        payload.CopyTo(span[header..]);
        output.Advance(header + payload.Length);
    }

    private void Begin()
    {
        if (_inBatch)
        {
            return;
        }

        _inBatch = true;
        _continues = false;
        _unflushed = 0;
        _aside = !_turn.Wait(0);
    }

    /// <summary>A new piece of the pipe's memory for the next frame, the current one (if any) ending as a fragment.</summary>
    private void OpenPiece(int needed)
    {
        if (_filled > 0)
        {
            ClosePiece(final: false); // a piece the drain wrote nothing into is left unused
        }

        _room = needed > MediumPayload ? LongHeader : MediumHeader;
        _piece = raw.GetMemory(_room + needed);
        if (_room == MediumHeader && _piece.Length > MediumHeader + MediumPayload)
        {
            _piece = _piece[..(MediumHeader + MediumPayload)];
        }

        _filled = 0;
    }

    /// <summary>Writes the current piece's header (moving a payload whose header is shorter than the room kept) and hands the frame to the pipe.</summary>
    private void ClosePiece(bool final)
    {
        if (_piece.Length == 0)
        {
            if (final && _continues)
            {
                WriteFrame(raw, 0x0, default); // the message's last fragment, empty
            }

            return;
        }

        int header = HeaderLength(_filled);
        Span<byte> span = _piece.Span;
        if (header < _room)
        {
            span.Slice(_room, _filled).CopyTo(span[header..]);
        }

        byte opcode = _continues ? (byte)0x0 : Binary;
        WriteHeader(span, (byte)((final ? 0x80 : 0) | opcode), _filled, header);
        raw.Advance(header + _filled);
        _continues = true;
        _piece = default;
        _filled = 0;
    }

    private void EndBatch()
    {
        if (!_inBatch)
        {
            return;
        }

        if (!_aside)
        {
            _turn.Release();
        }

        _inBatch = false;
        _aside = false;
        _piece = default;
        _filled = 0;
        _unflushed = 0;
        if (_side.Length > 0)
        {
            ArrayPool<byte>.Shared.Return(_side);
            _side = [];
        }
    }

    private void Reserve(int needed)
    {
        long total = _unflushed + needed;
        if (total <= _side.Length)
        {
            return;
        }

        byte[] larger = ArrayPool<byte>.Shared.Rent((int)Math.Max(total, Math.Max(4096, _side.Length * 2L)));
        _side.AsSpan(0, (int)_unflushed).CopyTo(larger);
        if (_side.Length > 0)
        {
            ArrayPool<byte>.Shared.Return(_side);
        }

        _side = larger;
    }

    private static int HeaderLength(int payload) => payload switch
    {
        <= 125 => ShortHeader,
        <= MediumPayload => MediumHeader,
        _ => LongHeader,
    };

    /// <summary>A server frame's header (never masked): the first byte, then the length in as few bytes as it takes (RFC 6455 §5.2).</summary>
    private static void WriteHeader(Span<byte> span, byte first, int payload, int header)
    {
        span[0] = first;
        switch (header)
        {
            case ShortHeader:
                span[1] = (byte)payload;
                break;
            case MediumHeader:
                span[1] = 126;
                BinaryPrimitives.WriteUInt16BigEndian(span[2..], (ushort)payload);
                break;
            default:
                span[1] = 127;
                BinaryPrimitives.WriteUInt64BigEndian(span[2..], (ulong)payload);
                break;
        }
    }
}
