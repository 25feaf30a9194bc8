using System.Buffers;

namespace Herald.LoadTest.Client;

/// <summary>
/// The receive buffer of the tool's raw protocol clients (<see cref="HeraldConnection"/>,
/// <see cref="Peers.Nats.NatsConnection"/>), parsed in place:
/// <code>
/// [ consumed | Buffered: received, not yet consumed | free: PrepareReceive ]
///            ^start                                  ^end
/// </code>
/// Before each receive what is left is moved to the front, and a full buffer doubles (up to a maximum),
/// so a message larger than the buffer still fits. Threading: one reader at a time (the connection's
/// read loop); <see cref="BytesReceived"/> may be read from any thread.
/// </summary>
internal sealed class ReceiveBuffer(int size)
{
    private byte[] _bytes = GC.AllocateUninitializedArray<byte>(size);
    private int _start;
    private int _end;
    private long _bytesReceived;

    public long BytesReceived => Volatile.Read(ref _bytesReceived);

    /// <summary>Bytes received and not yet consumed; valid until the next <see cref="PrepareReceive"/>.</summary>
    public ReadOnlySpan<byte> Buffered => _bytes.AsSpan(_start, _end - _start);

    /// <inheritdoc cref="Buffered"/>
    public ReadOnlySequence<byte> BufferedSequence => new(_bytes, _start, _end - _start);

    public void Consume(int count) => _start += count;

    /// <summary>
    /// Moves the unconsumed bytes to the front, doubles a full buffer up to <paramref name="maxSize"/>, and
    /// returns the free space to receive into.
    /// </summary>
    /// <exception cref="IOException">The buffer is full at <paramref name="maxSize"/>: one message is larger.</exception>
    public Memory<byte> PrepareReceive(int maxSize)
    {
        int pending = _end - _start;
        if (_start > 0)
        {
            if (pending > 0)
            {
                Buffer.BlockCopy(_bytes, _start, _bytes, 0, pending); // at most one partial message
            }

            _start = 0;
            _end = pending;
        }

        if (_end == _bytes.Length)
        {
            if (_bytes.Length >= maxSize)
            {
                throw new IOException($"a message over {maxSize:N0} bytes.");
            }

            byte[] larger = GC.AllocateUninitializedArray<byte>(Math.Min(_bytes.Length * 2, maxSize));
            Buffer.BlockCopy(_bytes, 0, larger, 0, _end);
            _bytes = larger;
        }

        return _bytes.AsMemory(_end);
    }

    /// <summary>Takes in <paramref name="received"/> bytes written to the free space; <c>false</c> for none (the peer closed).</summary>
    public bool Commit(int received)
    {
        if (received == 0)
        {
            return false;
        }

        _end += received;
        Volatile.Write(ref _bytesReceived, _bytesReceived + received);
        return true;
    }
}
