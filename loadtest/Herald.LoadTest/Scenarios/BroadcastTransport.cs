using System.Buffers;
using System.Buffers.Binary;
using System.Diagnostics;
using Herald.LoadTest.Reporting;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// How the <c>broadcast</c> scenario reaches the broker: M subscribers on one topic and one publisher,
/// over Herald TCP, TLS or WebSocket (<see cref="BroadcastConnectionTransport"/>) or HTTP long-poll (<see cref="BroadcastLongPollTransport"/>),
/// both tuned to hold many subscribers in little memory, or over any target's <c>IPubSubClient</c>
/// (<see cref="BroadcastClientTransport"/>: NATS, Redis, SignalR).
/// One instance serves one run: set up, publish bursts, close.
/// </summary>
internal interface IBroadcastTransport : IAsyncDisposable
{
    /// <summary>Where the subscribers and the publisher go, for the report.</summary>
    string Describe { get; }

    /// <summary>Subscribers whose subscription is live so far (setup progress).</summary>
    int Established { get; }

    /// <summary>Subscribers the broker dropped (disconnected, session ended) before the run closed them.</summary>
    int Lost { get; }

    /// <summary>Why the publisher cannot go on, or <c>null</c>.</summary>
    string? PublisherFailure { get; }

    /// <summary>
    /// Opens <paramref name="subscribers"/> subscribers at the paced rate and subscribes each one; when
    /// this returns every subscription is live and the publisher is ready. All or nothing: on failure
    /// (thrown) the caller still calls <see cref="CloseAsync"/>.
    /// </summary>
    Task SetupAsync(int subscribers, BurstTracker tracker, Pacer pacer, CancellationToken cancellationToken);

    /// <summary>Sends burst <paramref name="burst"/>: one message to the topic.</summary>
    Task PublishAsync(int burst, CancellationToken cancellationToken);

    /// <summary>Named counters for the report (protocol checks, broker errors); see <see cref="BroadcastChecks"/>.</summary>
    BroadcastChecks Checks();

    /// <summary>Closes every subscriber (long-poll: deletes every session) within <paramref name="timeout"/>.</summary>
    Task CloseAsync(TimeSpan timeout);
}

/// <summary>
/// Counters of one run, by name, in the order they were first counted. A counter in <see cref="Problems"/>
/// that is not zero is something the broker (or the tool) did wrong and is printed as such.
/// Thread-safe.
/// </summary>
internal sealed class BroadcastChecks
{
    private readonly Lock _gate = new();
    private readonly List<KeyValuePair<string, long>> _values = [];

    /// <summary>Counters that should stay at zero in a healthy run.</summary>
    public static readonly HashSet<string> Problems = new(StringComparer.Ordinal)
    {
        "disconnected", "sessionsLost", "errorFrames", "sequenceGaps", "duplicates", "unexpectedFrames",
        "outOfRangeBursts", "http5xx", "http4xx", "pollReplaced", "transportErrors", "headerMismatches",
        "countMismatches", "droppedAnnounced", "malformedBodies", "deleteFailures",
    };

    public IReadOnlyList<KeyValuePair<string, long>> Values
    {
        get
        {
            lock (_gate)
            {
                return [.. _values];
            }
        }
    }

    public void Add(string name, long value)
    {
        lock (_gate)
        {
            int i = _values.FindIndex(v => v.Key == name);
            if (i < 0)
            {
                _values.Add(new(name, value));
            }
            else
            {
                _values[i] = new(name, _values[i].Value + value);
            }
        }
    }

    public long Get(string name)
    {
        lock (_gate)
        {
            return _values.Find(v => v.Key == name).Value;
        }
    }

    /// <summary>"errorFrames=3, disconnected=1" for the non-zero problem counters, or <c>null</c>.</summary>
    public string? DescribeProblems()
    {
        string[] nonZero = [.. Values.Where(v => v.Value != 0 && Problems.Contains(v.Key)).Select(v => $"{v.Key}={v.Value:N0}")];
        return nonZero.Length == 0 ? null : string.Join(", ", nonZero);
    }
}

/// <summary>
/// Starts work items at a bounded rate and with bounded concurrency: item <c>i</c> starts no earlier than
/// <c>i / rate</c> seconds after the first, and at most <c>concurrency</c> run at once. Used to open
/// connections and sessions without overrunning the broker's accept backlog (or our own CPU).
/// </summary>
internal sealed class Pacer(double ratePerSecond, int concurrency)
{
    public double RatePerSecond { get; } = ratePerSecond;

    public int Concurrency { get; } = concurrency;

    public Task ForEachAsync(int count, Func<int, CancellationToken, ValueTask> body, CancellationToken cancellationToken)
    {
        long start = Stopwatch.GetTimestamp();
        var options = new ParallelOptions { MaxDegreeOfParallelism = Concurrency, CancellationToken = cancellationToken };
        return Parallel.ForEachAsync(Enumerable.Range(0, count), options, async (i, token) =>
        {
            double due = i / RatePerSecond;
            double wait = due - Stopwatch.GetElapsedTime(start).TotalSeconds;
            if (wait > 0.001)
            {
                await Task.Delay(TimeSpan.FromSeconds(wait), token);
            }

            await body(i, token);
        });
    }
}

/// <summary>
/// What every subscriber does with a MESSAGE, whatever the transport: the first one is decoded fully and
/// compared with what was published; after that each costs a length and header check and an 8-byte read
/// of the burst number. Bursts must arrive in order, each once: a step forward of more than one is a gap
/// (a lost message), a step back a duplicate (not counted twice in the <see cref="BurstTracker"/>).
/// Threading: one task per subscriber calls <see cref="TryHandleMessage"/>; the counters are read after it ended.
/// </summary>
internal abstract class BroadcastSubscriber(string name, BroadcastMessage message, BurstTracker tracker, RunLog log)
{
    private long _next;
    private bool _verified;

    public string Name => name;

    public long Messages { get; private set; }

    public long Gaps { get; private set; }

    public long Duplicates { get; private set; }

    public long Unexpected { get; protected set; }

    /// <summary>Why the broker's side ended this subscriber before the run did; <c>null</c> when it did not.</summary>
    public virtual string? LostReason { get; protected set; }

    protected RunLog Log => log;

    /// <summary>
    /// The checks every transport's subscribers keep, summed: messages received, sequence gaps,
    /// duplicates and unexpected messages. A transport adds its own counters to the result.
    /// </summary>
    public static BroadcastChecks Sum(IEnumerable<BroadcastSubscriber?> subscribers)
    {
        long gaps = 0, duplicates = 0, unexpected = 0, messages = 0;
        foreach (BroadcastSubscriber? s in subscribers)
        {
            if (s is not null)
            {
                gaps += s.Gaps;
                duplicates += s.Duplicates;
                unexpected += s.Unexpected;
                messages += s.Messages;
            }
        }

        var checks = new BroadcastChecks();
        checks.Add("messagesReceived", messages);
        checks.Add("sequenceGaps", gaps);
        checks.Add("duplicates", duplicates);
        checks.Add("unexpectedFrames", unexpected);
        return checks;
    }

    /// <summary>Handles <paramref name="body"/> (one frame body) if it is a MESSAGE; returns <c>false</c> for any other frame type.</summary>
    /// <exception cref="ProtocolException">The body is not a valid frame.</exception>
    protected bool TryHandleMessage(ReadOnlySequence<byte> body, long now)
    {
        if (_verified && message.TryReadBurst(body.FirstSpan, out long burst))
        {
            Accept(burst, now);
            return true;
        }

        var reader = new MessagePackReader(body);
        if (FrameDecoder.ReadHeader(ref reader, out int elements) != FrameType.Message)
        {
            return false;
        }

        PublishFrame frame = FrameDecoder.ReadMessage(ref reader, elements);
        if (message.Check(frame, out burst) is { } mismatch)
        {
            if (Unexpected++ == 0)
            {
                log.Report(name, $"MESSAGE differs from what was published: {mismatch}");
            }

            return true;
        }

        _verified = true;
        Accept(burst, now);
        return true;
    }

    /// <summary>
    /// Handles one delivered payload (targets reached through <c>IPubSubClient</c>): the first is compared
    /// byte for byte with what was published, the later ones only by length and burst number.
    /// </summary>
    protected void HandlePayload(ReadOnlySpan<byte> payload, long now)
    {
        if (_verified && payload.Length == message.PayloadLength)
        {
            Accept(BinaryPrimitives.ReadInt64LittleEndian(payload), now);
            return;
        }

        if (message.CheckPayload(payload, out long burst) is { } mismatch)
        {
            if (Unexpected++ == 0)
            {
                log.Report(name, $"message differs from what was published: {mismatch}");
            }

            return;
        }

        _verified = true;
        Accept(burst, now);
    }

    private void Accept(long burst, long now)
    {
        if (burst < _next)
        {
            if (Duplicates++ == 0)
            {
                log.Report(name, $"burst {burst} arrived again or out of order (expected {_next})");
            }

            return;
        }

        if (burst > _next)
        {
            if (Gaps == 0)
            {
                log.Report(name, $"bursts {_next}..{burst - 1} never arrived (got {burst})");
            }

            Gaps += burst - _next;
        }

        _next = burst + 1;
        Messages++;
        tracker.Record(burst, now);
    }
}
