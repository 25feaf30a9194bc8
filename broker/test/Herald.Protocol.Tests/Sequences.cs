using System.Buffers;

namespace Herald.Protocol.Tests;

/// <summary>One segment of a hand-built <see cref="ReadOnlySequence{T}"/>, as a socket or pipe would hand them out.</summary>
internal sealed class BufferSegment : ReadOnlySequenceSegment<byte>
{
    public BufferSegment(ReadOnlyMemory<byte> memory) => Memory = memory;

    public BufferSegment Append(ReadOnlyMemory<byte> memory)
    {
        var next = new BufferSegment(memory) { RunningIndex = RunningIndex + Memory.Length };
        Next = next;
        return next;
    }
}

/// <summary>The ways a runner feeds one input to the reader (spec §12): whole, split in two, one byte per segment.</summary>
internal static class Sequences
{
    public static ReadOnlySequence<byte> Whole(byte[] bytes) => new(bytes);

    /// <summary>Two segments, <c>[0, at)</c> and <c>[at, end)</c>, each a copy; either may be empty.</summary>
    public static ReadOnlySequence<byte> SplitAt(byte[] bytes, int at) => Of(bytes.AsSpan(0, at).ToArray(), bytes.AsSpan(at).ToArray());

    /// <summary>Every byte in its own segment, each backed by its own array.</summary>
    public static ReadOnlySequence<byte> OneBytePerSegment(byte[] bytes) =>
        Of(bytes.Select(b => (ReadOnlyMemory<byte>)new[] { b }).ToArray());

    public static ReadOnlySequence<byte> Of(params ReadOnlyMemory<byte>[] parts)
    {
        if (parts.Length == 0)
        {
            return ReadOnlySequence<byte>.Empty;
        }

        var first = new BufferSegment(parts[0]);
        BufferSegment last = first;
        for (int i = 1; i < parts.Length; i++)
        {
            last = last.Append(parts[i]);
        }

        return new ReadOnlySequence<byte>(first, 0, last, last.Memory.Length);
    }
}
