using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Diagnostics.Metrics;
using Herald.Broker.Delivery;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Compression;

/// <summary>Why a publication on a delta topic went out as a delta, or not.</summary>
internal enum DeltaDecision
{
    Delta,
    Probe,
    NoBase,
    NotPaying,
    CpuBusy,
    TooLarge,
    OverBudget,
    NotSmaller,
}

/// <summary>
/// Deltas against a topic's previous publication (spec §11.2), computed once per publication and shared by every
/// delta subscriber of the topic, as the Zstd form is. Keeps, per topic with a delta subscription on this node, the
/// previous payload, bounded per payload and in total (<see cref="DeltaOptions"/>): past either bound the topic gets
/// full messages. Adaptive as the <see cref="CompressionAdvisor"/> is: a topic whose deltas are not smaller enough
/// (random bytes) stops computing them but for a probe every N publications, and nothing is computed while the CPU
/// is past <see cref="CompressionOptions.CpuDisableLimit"/>.
/// </summary>
/// <remarks>
/// Whether a subscriber gets the delta or the full frame is decided as its frame is written, not here: the delta frame
/// carries the full one (<see cref="MessageBuffer.DeltaFull"/>) and the sequences that let the subscriber's backlog
/// check that the sid holds the base (<see cref="DeltaCursors"/>). Thread-safe: enrolment under one lock, each
/// topic's publication under the topic's own.
/// </remarks>
internal sealed class DeltaEncoder
{
    private const double RecentWeight = 0.3;

    private readonly DeltaOptions _options;
    private readonly CompressionOptions _compression;
    private readonly ICpuLoad _cpu;
    private readonly ConcurrentDictionary<string, TopicDelta> _topics = new(StringComparer.Ordinal);
    private readonly Lock _enrolment = new();
    private readonly Counter<long>? _decisions;
    private readonly Counter<long>? _saved;
    private readonly long[] _decided = new long[(int)DeltaDecision.NotSmaller + 1];
    private long _sequence;
    private long _keptBytes;
    private long _deltas;
    private long _skipped;
    private long _savedBytes;

    public DeltaEncoder(DeltaOptions options, CompressionOptions compression, ICpuLoad cpu, IMeterFactory? meters = null)
    {
        _options = options;
        _compression = compression;
        _cpu = cpu;
        if (meters is not null)
        {
            Meter meter = meters.Create(BrokerMetrics.MeterName);
            _decisions = meter.CreateCounter<long>("herald.compression.deltas", "{message}", "Publications on topics with a delta subscriber, by decision (delta, probe, no_base, not_paying, cpu_busy, too_large, over_budget, not_smaller).");
            _saved = meter.CreateCounter<long>("herald.compression.delta_saved", "By", "Payload bytes a delta frame saves against the full payload, once per delta computed (each delta subscriber that gets it saves as much).");
            meter.CreateObservableGauge("herald.compression.delta_kept", () => Interlocked.Read(ref _keptBytes), "By", "Bytes of previous payloads kept as delta bases.");
        }
    }

    public bool Enabled => _options.Enabled;

    /// <summary>Bytes kept as bases, all topics together (never above <see cref="DeltaOptions.MaxKeptBytes"/>).</summary>
    public long KeptBytes => Interlocked.Read(ref _keptBytes);

    /// <summary>The bound on <see cref="KeptBytes"/>.</summary>
    public long MaxKeptBytes => _options.MaxKeptBytes;

    /// <summary>Publications on delta topics decided so far as <paramref name="decision"/>.</summary>
    public long Count(DeltaDecision decision) => Interlocked.Read(ref _decided[(int)decision]);

    /// <summary>Topics with a delta subscription on this node.</summary>
    public int Topics => _topics.Count;

    /// <summary>Deltas computed and sent so far (one per publication, whatever the subscriber count).</summary>
    public long Deltas => Interlocked.Read(ref _deltas);

    /// <summary>Publications on delta topics that went out full (no base, not paying, CPU, bounds).</summary>
    public long Skipped => Interlocked.Read(ref _skipped);

    /// <summary>Payload bytes the deltas saved, once per delta computed.</summary>
    public long SavedBytes => Interlocked.Read(ref _savedBytes);

    /// <summary>Starts a delta subscription on <paramref name="topic"/> (a topic without wildcards); ended by <see cref="TopicDelta.Leave"/>.</summary>
    public TopicDelta Enroll(string topic)
    {
        lock (_enrolment)
        {
            TopicDelta state = _topics.GetOrAdd(topic, static (t, owner) => new TopicDelta(owner, t), this);
            state.Subscribers++;
            return state;
        }
    }

    internal void Leave(TopicDelta topic)
    {
        lock (_enrolment)
        {
            if (--topic.Subscribers > 0)
            {
                return;
            }

            _topics.TryRemove(topic.Topic, out _);
        }

        lock (topic)
        {
            Forget(topic);
        }
    }

    /// <summary>
    /// The publication's place in its topic's delta stream: a new node-wide sequence (written into every frame a delta
    /// subscriber gets, <see cref="MessageBuffer.DeltaSequence"/>) and, when a delta pays, the delta MESSAGE frame (held
    /// once for the caller) that links <paramref name="full"/>, the frame a subscriber without the base gets instead.
    /// <paramref name="full"/> null: this publication cannot go as a delta (it travelled compressed) but still becomes
    /// the next one's base.
    /// </summary>
    public MessageBuffer? Next(TopicDelta topic, in PublishFrame publish, ReadOnlySpan<byte> payload, MessageBuffer? full, out long sequence)
    {
        sequence = Interlocked.Increment(ref _sequence);
        lock (topic)
        {
            long baseSequence = topic.Sequence;
            topic.Sequence = sequence;
            MessageBuffer? delta = null;
            DeltaDecision decision = full is null || topic.Previous is null ? DeltaDecision.NoBase : Decide(topic);
            if (decision is DeltaDecision.Delta or DeltaDecision.Probe)
            {
                delta = Create(topic, publish, payload, full!, baseSequence, sequence, ref decision);
            }

            Keep(topic, payload, ref decision);
            Record(decision);
            return delta;
        }
    }

    private DeltaDecision Decide(TopicDelta topic)
    {
        double cpu = _cpu.Current;
        if (cpu >= _compression.CpuDisableLimit && _compression.CpuDisableLimit < 1)
        {
            return DeltaDecision.CpuBusy;
        }

        if (topic.Samples < _options.WarmupSamples || topic.Ratio <= _options.RatioDisableLimit)
        {
            return DeltaDecision.Delta;
        }

        if (++topic.SinceProbe < _options.ProbeEveryMessages)
        {
            return DeltaDecision.NotPaying;
        }

        topic.SinceProbe = 0;
        return DeltaDecision.Probe;
    }

    private MessageBuffer? Create(TopicDelta topic, in PublishFrame publish, ReadOnlySpan<byte> payload, MessageBuffer full, long baseSequence, long sequence, ref DeltaDecision decision)
    {
        // A delta that is not smaller than the payload does not pay: the destination is one byte shorter.
        byte[] scratch = ArrayPool<byte>.Shared.Rent(Math.Max(1, payload.Length));
        try
        {
            bool fits = FossilDelta.TryCreate(topic.Previous.AsSpan(0, topic.Length), payload, scratch.AsSpan(0, Math.Max(0, payload.Length - 1)), out int written);
            double ratio = fits && payload.Length > 0 ? (double)written / payload.Length : 1.0;
            topic.Ratio = topic.Samples == 0 ? ratio : (RecentWeight * ratio) + ((1 - RecentWeight) * topic.Ratio);
            topic.Samples++;
            if (!fits)
            {
                decision = DeltaDecision.NotSmaller;
                return null;
            }

            MessageBuffer delta = MessageEncoder.Encode(publish, PayloadFlags.Delta, scratch.AsSpan(0, written)); // the header block as is (spec §11.2)
            delta.DeltaSequence = sequence;
            delta.DeltaBase = baseSequence;
            full.Retain(1); // the delta's, released with it
            delta.DeltaFull = full;
            Interlocked.Increment(ref _deltas);
            Interlocked.Add(ref _savedBytes, payload.Length - written);
            _saved?.Add(payload.Length - written);
            return delta;
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(scratch);
        }
    }

    /// <summary>Keeps the payload as the topic's next base, within the bounds; past them the topic keeps none.</summary>
    private void Keep(TopicDelta topic, ReadOnlySpan<byte> payload, ref DeltaDecision decision)
    {
        if (topic.Subscribers <= 0)
        {
            Forget(topic); // its last subscription left while this publication was routed: nothing stays charged
            return;
        }

        if (payload.Length > _options.MaxPayloadBytes)
        {
            Forget(topic);
            decision = decision == DeltaDecision.NoBase ? DeltaDecision.TooLarge : decision;
            return;
        }

        if (topic.Previous is null || topic.Previous.Length < payload.Length)
        {
            int capacity = Math.Max(64, payload.Length);
            long grow = capacity - (topic.Previous?.Length ?? 0);
            if (Interlocked.Add(ref _keptBytes, grow) > _options.MaxKeptBytes)
            {
                Interlocked.Add(ref _keptBytes, -grow);
                Forget(topic);
                decision = decision == DeltaDecision.NoBase ? DeltaDecision.OverBudget : decision;
                return;
            }

            topic.Previous = new byte[capacity];
        }

        payload.CopyTo(topic.Previous);
        topic.Length = payload.Length;
    }

    private void Forget(TopicDelta topic)
    {
        if (topic.Previous is { } previous)
        {
            Interlocked.Add(ref _keptBytes, -previous.Length);
            topic.Previous = null;
            topic.Length = 0;
        }
    }

    private void Record(DeltaDecision decision)
    {
        Interlocked.Increment(ref _decided[(int)decision]);
        if (decision is not (DeltaDecision.Delta or DeltaDecision.Probe))
        {
            Interlocked.Increment(ref _skipped);
        }

        _decisions?.Add(1, new KeyValuePair<string, object?>("decision", Name(decision)));
    }

    private static string Name(DeltaDecision decision) => decision switch
    {
        DeltaDecision.Delta => "delta",
        DeltaDecision.Probe => "probe",
        DeltaDecision.NoBase => "no_base",
        DeltaDecision.NotPaying => "not_paying",
        DeltaDecision.CpuBusy => "cpu_busy",
        DeltaDecision.TooLarge => "too_large",
        DeltaDecision.OverBudget => "over_budget",
        _ => "not_smaller",
    };
}
