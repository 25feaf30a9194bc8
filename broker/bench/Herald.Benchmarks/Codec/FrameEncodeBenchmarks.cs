using System.Buffers;
using BenchmarkDotNet.Attributes;
using Herald.Protocol;

namespace Herald.Benchmarks.Codec;

/// <summary>
/// Encoding into a reused <see cref="ArrayBufferWriter{T}"/> sized for all the frames of one invocation
/// (so no growth is measured): a client's PUBLISH, a whole MESSAGE, and the broker's actual fan-out step,
/// copying a MESSAGE encoded once and stamping the subscriber's sid into the copy (spec §4.6).
/// Figures are per frame.
/// </summary>
[MemoryDiagnoser]
public class FrameEncodeBenchmarks
{
    private const int Frames = 1000;

    private readonly ArrayBufferWriter<byte> _output = new();
    private byte[] _payload = [];
    private byte[] _message = [];

    [Params(128, 1024)]
    public int PayloadSize { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _payload = PublishFrames.Payload(PayloadSize);
        var one = new ArrayBufferWriter<byte>();
        FrameWriter.WriteMessage(one, 1, PublishFrames.Topic, default, PayloadFlags.None, _payload);
        _message = one.WrittenSpan.ToArray();
        _output.GetSpan(Frames * (PayloadSize + 128)); // grow once, here
        _output.ResetWrittenCount();
    }

    [Benchmark(OperationsPerInvoke = Frames, Baseline = true)]
    public int WritePublish()
    {
        _output.ResetWrittenCount();
        for (int i = 0; i < Frames; i++)
        {
            FrameWriter.WritePublish(_output, PublishFrames.Topic, default, PayloadFlags.None, _payload);
        }

        return _output.WrittenCount;
    }

    /// <summary>A request: PUBLISH with a reply_to inbox (spec §7).</summary>
    [Benchmark(OperationsPerInvoke = Frames)]
    public int WritePublishWithReplyTo()
    {
        _output.ResetWrittenCount();
        for (int i = 0; i < Frames; i++)
        {
            FrameWriter.WritePublish(_output, PublishFrames.Topic, PublishFrames.ReplyTo, PayloadFlags.None, _payload);
        }

        return _output.WrittenCount;
    }

    [Benchmark(OperationsPerInvoke = Frames)]
    public int WriteMessage()
    {
        _output.ResetWrittenCount();
        for (int i = 0; i < Frames; i++)
        {
            FrameWriter.WriteMessage(_output, (uint)i + 1, PublishFrames.Topic, default, PayloadFlags.None, _payload);
        }

        return _output.WrittenCount;
    }

    /// <summary>The broker's per-subscriber cost once a MESSAGE is encoded: copy it, stamp the sid.</summary>
    [Benchmark(OperationsPerInvoke = Frames)]
    public int CopyEncodedMessageAndStampSid()
    {
        _output.ResetWrittenCount();
        for (int i = 0; i < Frames; i++)
        {
            Span<byte> destination = _output.GetSpan(_message.Length);
            _message.CopyTo(destination);
            FrameWriter.StampSid(destination, (uint)i + 1);
            _output.Advance(_message.Length);
        }

        return _output.WrittenCount;
    }
}
