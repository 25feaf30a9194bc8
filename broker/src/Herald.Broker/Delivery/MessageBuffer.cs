using System.Buffers;
using System.Diagnostics;

namespace Herald.Broker.Delivery;

/// <summary>
/// One encoded frame, shared by reference by every queue it is delivered to (serialize once, fan out by
/// reference). The bytes come from <see cref="ArrayPool{T}.Shared"/> and go back when the last holder
/// releases them; or, <see cref="Wrap"/>, they are an array nobody writes to, which is left to the collector.
/// </summary>
/// <remarks>
/// Thread-safety: <see cref="Retain"/> and <see cref="Release"/> are atomic and may be called from any
/// thread; the bytes are written only by the thread that rented the buffer, before it shares it.
/// </remarks>
internal sealed class MessageBuffer
{
    private byte[]? _array;
    private int _refCount;
    private readonly bool _pooled;

    private MessageBuffer(byte[] array, int length, bool pooled = true)
    {
        _array = array;
        Length = length;
        _refCount = 1;
        _pooled = pooled;
    }

    public int Length { get; }

    /// <summary>Bytes the buffer holds (the pooled array, at least <see cref="Length"/>): what a queue that keeps it counts.</summary>
    public int Capacity => _array?.Length ?? 0;

    /// <summary><see cref="System.Diagnostics.Stopwatch"/> timestamp of the PUBLISH this frame carries (0: not measured), for the fan-out latency.</summary>
    public long ReceivedAt { get; set; }

    /// <summary>
    /// The publication's place in its topic's delta stream (spec §11.2), node-wide and increasing; 0: a frame outside
    /// any (a control frame, a resume's). Set on every frame a delta subscription is given, so its backlog knows which
    /// payload the subscriber holds once the frame is written (<see cref="DeltaCursors"/>).
    /// </summary>
    public long DeltaSequence { get; set; }

    /// <summary>For a delta frame: the sequence of the payload it applies to (the topic's previous publication).</summary>
    public long DeltaBase { get; set; }

    /// <summary>For a delta frame: the full frame of the same publication, written instead when the subscriber does not hold the base; held by this frame.</summary>
    public MessageBuffer? DeltaFull { get; set; }

    /// <summary>The frame. Valid until the caller's reference is released.</summary>
    public Span<byte> Span => new(_array, 0, Length);

    /// <summary>The frame as memory, for encoders that write through <see cref="MessageBufferWriter"/>.</summary>
    public Memory<byte> Memory => new(_array, 0, Length);

    /// <summary>Rents a buffer of exactly <paramref name="length"/> bytes, held once by the caller.</summary>
    public static MessageBuffer Rent(int length)
    {
        return new MessageBuffer(ArrayPool<byte>.Shared.Rent(length), length);
    }

    /// <summary>
    /// A buffer over <paramref name="frame"/> itself, not copied and not pooled: the array must never be written to again
    /// (frames read back from a cluster's backplane, or kept from its appends, shared by the sessions that read them).
    /// Retain and release do nothing to it: it holds its array for as long as anything holds it.
    /// </summary>
    public static MessageBuffer Wrap(byte[] frame) => new(frame, frame.Length, pooled: false);

    /// <summary>Rents a buffer and copies <paramref name="frame"/> into it (control frames).</summary>
    public static MessageBuffer Copy(ReadOnlySpan<byte> frame)
    {
        MessageBuffer buffer = Rent(frame.Length);
        frame.CopyTo(buffer.Span);
        return buffer;
    }

    /// <summary>Adds <paramref name="count"/> holders at once (one atomic operation per publish, not per subscriber).</summary>
    public void Retain(int count) => Interlocked.Add(ref _refCount, count);

    /// <summary>Drops <paramref name="count"/> holders; the last one returns the bytes to the pool and gets <c>true</c>. A <see cref="Wrap"/> is never released: its array is left to the collector.</summary>
    public bool Release(int count = 1)
    {
        if (!_pooled)
        {
            return false; // shared as it is by every take that hands it out, however many
        }

        int left = Interlocked.Add(ref _refCount, -count);
        if (left == 0)
        {
            byte[]? array = _array;
            _array = null;
            if (_pooled)
            {
                ArrayPool<byte>.Shared.Return(array!);
            }

            DeltaFull?.Release();
            return true;
        }

        Debug.Assert(left > 0, "MessageBuffer released more often than retained.");
        return false;
    }
}
