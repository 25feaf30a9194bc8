using System.Buffers;
using System.Diagnostics.Metrics;
using System.Text;
using BenchmarkDotNet.Attributes;
using Herald.Benchmarks.Codec;
using Herald.Broker.Delivery;
using Herald.Broker.Routing;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using MessagePack;

namespace Herald.Benchmarks.Routing;

/// <summary>
/// The broker's path for one publication, in memory (no sockets): a buffer of <see cref="Publications"/>
/// PUBLISH frames (topic <c>bench.stream</c>, 91-byte payload, no headers) read as the read loop reads it,
/// step by step: <see cref="Parse"/> (framing and decoding), <see cref="ParseMatch"/> (plus the router's
/// cached match), <see cref="ParseMatchEnqueue"/> (plus <c>TopicRouter.Publish</c> into
/// <see cref="Subscribers"/> real <see cref="SubscriberBacklog"/>s, emptied by take and release), and
/// <see cref="PublishAndWrite"/> (plus each backlog's drain as <see cref="PipeDrain"/> writes it: the frame
/// copied, its sid stamped, its buffer released). Figures are per publication, all subscribers included.
/// The setup checks that one run delivers every publication to every subscriber, stamped with its sid.
/// <para>
/// What must hold: Parse and ParseMatch allocate nothing; a publication allocates one
/// <see cref="MessageBuffer"/> object (40 B) whatever its subscribers, its bytes coming from the pool;
/// enqueue, take and write allocate nothing per subscriber.
/// </para>
/// <para>
/// Measured (short job on a shared 2-core machine, wide error bars), with the common-PUBLISH fast path
/// (<c>FrameDecoder.TryReadCommonPublish</c>; through the general reader alone Parse was about 230 ns and the
/// whole 1-subscriber path about 540 ns): Parse about 95 ns and 0 B; ParseMatch about 130 ns and 0 B; with 1
/// subscriber, enqueue about 240 ns and the whole path about 400 ns, 40 B; with 100, enqueue about 5 us (some
/// 45 ns per subscriber: its lock and ring) and the whole path about 7.6 us (some 25-35 ns more per
/// subscriber for the copy), still 40 B. The backlogs are emptied every
/// <see cref="DrainEvery"/> publications, so the figure does not depend on the machine: with more frames
/// outstanding than <c>ArrayPool&lt;byte&gt;.Shared</c> keeps (about 65 arrays on 2 cores), the rest rent new
/// arrays. Drained only every 1,000 publications, a publication allocated 182 B (its 128-byte array too);
/// a 1:1 stream, drained inline after each 32 KiB read of some 275 such frames, is in that case.
/// </para>
/// </summary>
[MemoryDiagnoser]
public class PublicationPathBenchmarks : IDisposable
{
    private const int Publications = 1000;
    private const int PayloadSize = 91;

    // Publications between two drains of every backlog: at most this many frames are outstanding, within
    // what ArrayPool<byte>.Shared keeps on any machine (a partition of 32 arrays per core).
    private const int DrainEvery = 32;
    private const string Transport = "tcp";

    private static readonly byte[] Topic = Encoding.ASCII.GetBytes("bench.stream");

    private readonly ServiceMeterFactory _meters = new();
    private readonly List<IMessageSink> _toFlush = [];
    private readonly ArrayBufferWriter<byte> _output = new(PipeDrain.WriteChunkBytes + 4096);
    private BrokerMetrics _metrics = null!;
    private TopicRouter _router = null!;
    private SubscriberBacklog[] _backlogs = [];
    private QueuedFrame[] _batch = [];
    private ReadOnlySequence<byte> _buffer;
    private long _writtenBytes;

    /// <summary>Subscriptions on the publication's topic, each its own backlog (a connection).</summary>
    [Params(1, 100)]
    public int Subscribers { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        byte[] payload = PublishFrames.Payload(PayloadSize);
        var frames = new ArrayBufferWriter<byte>();
        for (int i = 0; i < Publications; i++)
        {
            FrameWriter.WritePublish(frames, Topic, default, PayloadFlags.None, payload);
        }

        _buffer = new ReadOnlySequence<byte>(frames.WrittenSpan.ToArray());

        _metrics = new BrokerMetrics(_meters);
        _router = new TopicRouter(_metrics);
        string topic = Encoding.ASCII.GetString(Topic);
        var limits = new BacklogLimits(int.MaxValue, int.MaxValue, SlowConsumerPolicy.DropOldest);
        _backlogs = new SubscriberBacklog[Subscribers];
        for (int i = 0; i < Subscribers; i++)
        {
            var backlog = new SubscriberBacklog(limits, _metrics, () => throw new InvalidOperationException("A backlog without limits met a slow consumer."))
            {
                Reader = new IdleReader(),
            };
            _backlogs[i] = backlog;
            _router.Add(new Subscription(backlog, (uint)(i + 1), topic, noEcho: false));
        }

        Check();
    }

    // One invocation of each benchmark must do what it claims: else it would measure nothing.
    private void Check()
    {
        long expected = (long)Publications * Subscribers;
        int messageLength = ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(Topic.Length, 0, PayloadFlags.None, PayloadSize);
        if (Parse() != (long)Publications * (Topic.Length + PayloadSize))
        {
            throw new InvalidOperationException("The buffer does not decode to the PUBLISH frames it was built from.");
        }

        if (ParseMatch() != expected)
        {
            throw new InvalidOperationException("The topic does not match every subscription.");
        }

        long encoded = _router.EncodedFrames;
        if (ParseMatchEnqueue() != expected || _router.EncodedFrames - encoded != Publications || !Drained())
        {
            throw new InvalidOperationException("Publish did not encode each publication once and queue it to every subscriber, or the backlogs were not emptied.");
        }

        encoded = _router.EncodedFrames;
        if (PublishAndWrite() != expected || _writtenBytes != expected * messageLength || _router.EncodedFrames - encoded != Publications || !Drained())
        {
            throw new InvalidOperationException($"PublishAndWrite wrote {_writtenBytes} bytes, not {expected} MESSAGE frames of {messageLength} bytes, or the backlogs were not emptied.");
        }

        // The last chunk written is the last subscriber's: every frame in it is a MESSAGE stamped with its sid.
        var written = new ReadOnlySequence<byte>(_output.WrittenMemory);
        int messages = 0;
        while (FrameReader.TryReadFrame(ref written, PublishFrames.MaxFrame, out ReadOnlySequence<byte> body))
        {
            var reader = new MessagePackReader(body);
            FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
            PublishFrame message = type == FrameType.Message ? FrameDecoder.ReadMessage(ref reader, elements) : default;
            if (type != FrameType.Message || message.Sid != (uint)Subscribers || !message.Topic.FirstSpan.SequenceEqual(Topic) || message.Payload.Length != PayloadSize)
            {
                throw new InvalidOperationException($"The drain wrote a frame that is not the publication's MESSAGE stamped with sid {Subscribers}.");
            }

            messages++;
        }

        if (messages == 0 || written.Length != 0)
        {
            throw new InvalidOperationException("The drain's output does not hold whole MESSAGE frames.");
        }
    }

    private bool Drained() => _toFlush.Count == 0 && _backlogs.All(b => b.Pending == (0, 0) && b.Dropped == 0);

    [GlobalCleanup]
    public void Dispose()
    {
        foreach (SubscriberBacklog backlog in _backlogs)
        {
            backlog.Abandon();
        }

        _router.Dispose();
        _meters.Dispose();
        GC.SuppressFinalize(this);
    }

    /// <summary>Framing and decoding of each PUBLISH, as the read loop does.</summary>
    [Benchmark(OperationsPerInvoke = Publications, Baseline = true)]
    public long Parse()
    {
        ReadOnlySequence<byte> buffer = _buffer;
        long bytes = 0;
        while (FrameReader.TryReadFrame(ref buffer, PublishFrames.MaxFrame, out ReadOnlySequence<byte> body))
        {
            PublishFrame publish = PublishFrames.DecodeAsBroker(body);
            bytes += publish.Topic.Length + publish.Payload.Length;
        }

        return bytes;
    }

    /// <summary>Parse, then the router's lookup of the topic's subscriptions (a match-cache hit).</summary>
    [Benchmark(OperationsPerInvoke = Publications)]
    public long ParseMatch()
    {
        ReadOnlySequence<byte> buffer = _buffer;
        long matched = 0;
        while (FrameReader.TryReadFrame(ref buffer, PublishFrames.MaxFrame, out ReadOnlySequence<byte> body))
        {
            PublishFrame publish = PublishFrames.DecodeAsBroker(body);
            matched += _router.Match(publish.Topic).Length;
        }

        return matched;
    }

    /// <summary>
    /// Parse, match, and <c>TopicRouter.Publish</c> into every subscriber's backlog (the MESSAGE encoded
    /// once, queued by reference); every <see cref="DrainEvery"/> publications the backlogs are emptied by
    /// taking their frames and releasing them unwritten (no copy), so this includes the take and the release.
    /// </summary>
    [Benchmark(OperationsPerInvoke = Publications)]
    public long ParseMatchEnqueue()
    {
        ReadOnlySequence<byte> buffer = _buffer;
        long deliveries = 0;
        int sinceDrain = 0;
        while (FrameReader.TryReadFrame(ref buffer, PublishFrames.MaxFrame, out ReadOnlySequence<byte> body))
        {
            PublishFrame publish = PublishFrames.DecodeAsBroker(body);
            deliveries += _router.Publish(new PublishContext(in publish, _toFlush));
            _toFlush.Clear();
            if (++sinceDrain == DrainEvery)
            {
                TakeAndRelease();
                sinceDrain = 0;
            }
        }

        TakeAndRelease();
        return deliveries;
    }

    /// <summary>
    /// The whole per-publication path: parse, match, enqueue to every backlog, then (every
    /// <see cref="DrainEvery"/> publications) each backlog's drain as <see cref="PipeDrain"/> runs it: take
    /// a chunk, copy each frame into the output stamping the subscriber's sid (<see cref="FrameCopy.Write"/>),
    /// release it. Returns the frames written.
    /// </summary>
    [Benchmark(OperationsPerInvoke = Publications)]
    public long PublishAndWrite()
    {
        ReadOnlySequence<byte> buffer = _buffer;
        _writtenBytes = 0;
        long written = 0;
        int sinceDrain = 0;
        while (FrameReader.TryReadFrame(ref buffer, PublishFrames.MaxFrame, out ReadOnlySequence<byte> body))
        {
            PublishFrame publish = PublishFrames.DecodeAsBroker(body);
            _router.Publish(new PublishContext(in publish, _toFlush));
            _toFlush.Clear();
            if (++sinceDrain == DrainEvery)
            {
                written += Write();
                sinceDrain = 0;
            }
        }

        written += Write();
        return written;
    }

    // Empties every backlog without writing: take, release.
    private void TakeAndRelease()
    {
        foreach (SubscriberBacklog backlog in _backlogs)
        {
            while (true)
            {
                StreamTake take = backlog.Take(ref _batch, PipeDrain.WriteChunkBytes);
                if (take.Idle)
                {
                    break;
                }

                QueuedFrame[] batch = _batch;
                for (int i = 0; i < take.Count; i++)
                {
                    ref QueuedFrame entry = ref batch[i];
                    entry.Frame.Release();
                    entry = default;
                }
            }
        }
    }

    // Every backlog's drain as PipeDrain runs it, into one output that each turn's "flush" empties.
    private long Write()
    {
        long written = 0;
        foreach (SubscriberBacklog backlog in _backlogs)
        {
            while (true)
            {
                StreamTake take = backlog.Take(ref _batch, PipeDrain.WriteChunkBytes);
                if (take.Idle)
                {
                    break;
                }

                _output.ResetWrittenCount();
                QueuedFrame[] batch = _batch;
                long bytes = 0;
                for (int i = 0; i < take.Count; i++)
                {
                    ref QueuedFrame entry = ref batch[i];
                    MessageBuffer frame = entry.Frame;
                    FrameCopy.Write(_output, frame.Span, entry.Sid);
                    bytes += frame.Length;
                    frame.Release();
                    entry = default;
                }

                _metrics.Sent(Transport, take.Count, bytes);
                _writtenBytes += bytes;
                written += take.Count;
            }
        }

        return written;
    }

    /// <summary>The backlogs' reader: never woken here (the benchmark takes the frames itself and never flushes).</summary>
    private sealed class IdleReader : IBacklogReader
    {
        public void Wake(bool inline)
        {
        }
    }
}
