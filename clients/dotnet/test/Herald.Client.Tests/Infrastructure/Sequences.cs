using System.Buffers;

namespace Herald.Client.Tests.Infrastructure;

/// <summary>Byte sequences cut the ways a socket or an HTTP body may hand them out.</summary>
public static class Sequences
{
    public static ReadOnlySequence<byte> Whole(byte[] bytes) => new(bytes);

    /// <summary>Two segments, split before byte <paramref name="at"/> (either may be empty).</summary>
    public static ReadOnlySequence<byte> SplitAt(byte[] bytes, int at) => Build([bytes.AsMemory(0, at), bytes.AsMemory(at)]);

    public static ReadOnlySequence<byte> OneBytePerSegment(byte[] bytes) =>
        bytes.Length == 0 ? ReadOnlySequence<byte>.Empty : Build([.. Enumerable.Range(0, bytes.Length).Select(i => bytes.AsMemory(i, 1))]);

    private static ReadOnlySequence<byte> Build(ReadOnlyMemory<byte>[] parts)
    {
        var first = new Segment(parts[0], 0);
        Segment last = first;
        foreach (ReadOnlyMemory<byte> part in parts.Skip(1))
        {
            last = last.Append(part);
        }

        return new ReadOnlySequence<byte>(first, 0, last, last.Memory.Length);
    }

    private sealed class Segment : ReadOnlySequenceSegment<byte>
    {
        public Segment(ReadOnlyMemory<byte> memory, long runningIndex)
        {
            Memory = memory;
            RunningIndex = runningIndex;
        }

        public Segment Append(ReadOnlyMemory<byte> memory)
        {
            var next = new Segment(memory, RunningIndex + Memory.Length);
            Next = next;
            return next;
        }
    }
}
