using System.Buffers;
using System.Text;
using Herald.Protocol;

namespace Herald.Benchmarks.Codec;

/// <summary>Test data shared by the codec benchmarks: what a publisher's socket buffer looks like.</summary>
internal static class PublishFrames
{
    public const int MaxFrame = 1024 * 1024;

    /// <summary>Pipe's default segment size: how a PipeReader hands the broker a busy socket's bytes.</summary>
    public const int PipeSegmentSize = 4096;

    /// <summary>
    /// A PUBLISH body decoded as the broker's read loop decodes it: <see cref="FrameDecoder.TryReadCommonPublish"/>
    /// first, the general reader for what it declines (headers, frames straddling two segments).
    /// </summary>
    public static PublishFrame DecodeAsBroker(in ReadOnlySequence<byte> body)
    {
        if (FrameDecoder.TryReadCommonPublish(body, out PublishFrame common))
        {
            return common;
        }

        var reader = new MessagePack.MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
        return type == FrameType.Publish ? FrameDecoder.ReadPublish(ref reader, elements) : throw new InvalidOperationException($"Expected PUBLISH, got {type}.");
    }

    public static readonly byte[] Topic = Encoding.ASCII.GetBytes("prices.eu.ACME");

    public static readonly byte[] ReplyTo = Encoding.ASCII.GetBytes("_INBOX.9f2c1ab07e4d.1234");

    public static byte[] Payload(int size)
    {
        byte[] payload = new byte[size];
        new Random(42).NextBytes(payload);
        return payload;
    }

    /// <summary>A header block of about 100 bytes (spec §4.9): a W3C traceparent and a content type.</summary>
    public static readonly byte[] Headers = HeaderBlock.Encode(
    [
        new("traceparent", ["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]),
        new("Content-Type", ["application/json"]),
        new("X-Tenant", ["acme"]),
    ]);

    /// <summary><paramref name="count"/> PUBLISH frames back to back, as one array; each with <see cref="Headers"/> when <paramref name="withHeaders"/>.</summary>
    public static byte[] Encode(int count, int payloadSize, bool withHeaders = false)
    {
        byte[] payload = Payload(payloadSize);
        var output = new ArrayBufferWriter<byte>(count * (payloadSize + 64 + Headers.Length));
        for (int i = 0; i < count; i++)
        {
            FrameWriter.WritePublish(output, Topic, default, PayloadFlags.None, payload, withHeaders ? Headers : default);
        }

        return output.WrittenSpan.ToArray();
    }

    /// <summary>The same bytes cut into segments of <paramref name="segmentSize"/>, so frames straddle segment ends.</summary>
    public static ReadOnlySequence<byte> Segmented(byte[] data, int segmentSize)
    {
        var first = new Segment(data.AsMemory(0, Math.Min(segmentSize, data.Length)), 0);
        Segment last = first;
        for (int offset = segmentSize; offset < data.Length; offset += segmentSize)
        {
            last = last.Append(data.AsMemory(offset, Math.Min(segmentSize, data.Length - offset)));
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
