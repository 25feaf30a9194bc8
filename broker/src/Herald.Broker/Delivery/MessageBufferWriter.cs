using System.Buffers;

namespace Herald.Broker.Delivery;

/// <summary>Lets an encoder (MessagePack's writer) write straight into a rented <see cref="MessageBuffer"/>, with no staging copy.</summary>
internal sealed class MessageBufferWriter : IBufferWriter<byte>
{
    private readonly Memory<byte> _memory;
    private int _written;

    public MessageBufferWriter(MessageBuffer buffer) => _memory = buffer.Memory;

    public int Written => _written;

    public void Advance(int count) => _written += count;

    public Memory<byte> GetMemory(int sizeHint = 0) => Remaining(sizeHint);

    public Span<byte> GetSpan(int sizeHint = 0) => Remaining(sizeHint).Span;

    private Memory<byte> Remaining(int sizeHint)
    {
        Memory<byte> free = _memory[_written..];
        if (free.Length < Math.Max(sizeHint, 1))
        {
            throw new InvalidOperationException("The frame's size was computed too small."); // a bug, never input
        }

        return free;
    }
}
