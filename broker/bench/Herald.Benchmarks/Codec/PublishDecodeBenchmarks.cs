using System.Buffers;
using BenchmarkDotNet.Attributes;
using Herald.Protocol;
using MessagePack;

namespace Herald.Benchmarks.Codec;

/// <summary>
/// The broker's read path for a publisher: split a buffer holding many PUBLISH frames
/// (<see cref="FrameReader.TryReadFrame"/>) and decode each (<see cref="FrameDecoder.ReadPublish"/>).
/// Figures are per frame. Must allocate nothing: the decoded frame is slices of the input.
/// <see cref="WithHeaders"/>: every frame also carries a header block of about 100 bytes
/// (<see cref="PublishFrames.Headers"/>), checked once as the broker checks it (spec §4.9); without one the
/// decode must cost what it did before headers existed.
/// <para>
/// <see cref="Layout"/>: one array (a socket read that fits one buffer), or 4 KiB segments as a
/// <c>PipeReader</c> hands them over, so that some frames straddle two segments.
/// </para>
/// </summary>
[MemoryDiagnoser]
public class PublishDecodeBenchmarks
{
    private const int Frames = 1000;

    private ReadOnlySequence<byte> _buffer;

    public enum BufferLayout
    {
        SingleSegment,
        MultiSegment,
    }

    [Params(128, 1024)]
    public int PayloadSize { get; set; }

    [Params(BufferLayout.SingleSegment, BufferLayout.MultiSegment)]
    public BufferLayout Layout { get; set; }

    [Params(false, true)]
    public bool WithHeaders { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        byte[] data = PublishFrames.Encode(Frames, PayloadSize, WithHeaders);
        _buffer = Layout == BufferLayout.SingleSegment
            ? new ReadOnlySequence<byte>(data)
            : PublishFrames.Segmented(data, PublishFrames.PipeSegmentSize);

        long expected = (long)Frames * (PublishFrames.Topic.Length + PayloadSize + (WithHeaders ? 3 : 0));
        if (ReadAndDecodePublish() != expected / Frames * Frames || ReadCommonPublishFirst() != expected / Frames * Frames || ReadFrames() != Frames)
        {
            throw new InvalidOperationException("The benchmark's buffer does not decode to the frames it was built from.");
        }
    }

    /// <summary>Framing alone: find each frame's body from its length prefix.</summary>
    [Benchmark(OperationsPerInvoke = Frames)]
    public int ReadFrames()
    {
        ReadOnlySequence<byte> buffer = _buffer;
        int frames = 0;
        while (FrameReader.TryReadFrame(ref buffer, PublishFrames.MaxFrame, out _))
        {
            frames++;
        }

        return frames;
    }

    /// <summary>Framing and decoding, as the broker does for every PUBLISH it reads.</summary>
    [Benchmark(OperationsPerInvoke = Frames, Baseline = true)]
    public long ReadAndDecodePublish()
    {
        ReadOnlySequence<byte> buffer = _buffer;
        long bytes = 0;
        while (FrameReader.TryReadFrame(ref buffer, PublishFrames.MaxFrame, out ReadOnlySequence<byte> body))
        {
            var reader = new MessagePackReader(body);
            FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
            if (type != FrameType.Publish)
            {
                throw new InvalidOperationException($"Expected PUBLISH, got {type}.");
            }

            PublishFrame publish = FrameDecoder.ReadPublish(ref reader, elements);
            bytes += publish.Topic.Length + publish.Payload.Length + publish.HeaderValues;
        }

        return bytes;
    }

    /// <summary>
    /// As the broker reads: <see cref="FrameDecoder.TryReadCommonPublish"/> first (one segment, no header
    /// block), the general reader for what it declines (headers, frames straddling two segments).
    /// </summary>
    [Benchmark(OperationsPerInvoke = Frames)]
    public long ReadCommonPublishFirst()
    {
        ReadOnlySequence<byte> buffer = _buffer;
        long bytes = 0;
        while (FrameReader.TryReadFrame(ref buffer, PublishFrames.MaxFrame, out ReadOnlySequence<byte> body))
        {
            PublishFrame publish = PublishFrames.DecodeAsBroker(body);
            bytes += publish.Topic.Length + publish.Payload.Length + publish.HeaderValues;
        }

        return bytes;
    }
}
