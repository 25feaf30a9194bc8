using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using static Herald.LoadTest.Scenarios.FanoutScenario;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>stalled</c>: do subscribers that stop reading hurt the ones that read (issue 13, points 1 and 2)?
/// N stalled subscribers connect with a small socket receive buffer, subscribe, and never read again; F
/// fast subscribers read everything at once; one publisher sends P-byte messages at R per second for T
/// seconds, against a broker the tool starts with a given queue limit (<c>MaxPendingBytes</c>) and
/// slow-consumer policy. Each repetition runs on a freshly started broker, so its memory is this run's.
/// <para>
/// What it reports, and fails on:
/// <list type="bullet">
/// <item>The fast subscribers: their delivery ratio (received / published, checked in order by sequence
/// number, gaps and reorders counted), their worst silence (the longest time between two consecutive
/// deliveries while the publisher was sending, or from the last one to the end of sending), how many were
/// cut off or lost messages, and the error replies (drop notices) they got. A fast subscriber that is cut off, loses,
/// reorders or is told of drops is a failure: it reads at the publish rate, so it must get everything.</item>
/// <item>The stalled subscribers' fate, as the broker counts it on <c>/varz</c>: slow-consumer actions,
/// messages dropped, connections closed.</item>
/// <item>The broker's RSS at the end of the publish window against <c>base + N x (MaxPendingBytes +
/// overhead)</c> (<c>--rss-base-mb</c>, default the RSS measured before the stalled subscribers connected;
/// <c>--rss-overhead-kb</c>, default README's per-connection terms besides the queue), and the measured RSS per stalled connection, (RSS - baseline) / N. Above the
/// bound is a failure.</item>
/// </list>
/// </para>
/// Herald over TCP only: the stalled subscribers are raw <see cref="HeraldConnection"/>s, which let the tool
/// set the socket buffer and never read, and the tool configures the broker's limits when it starts it.
/// </summary>
internal sealed class StalledScenario : IScenario
{
    private const int SequenceBytes = sizeof(long);

    /// <summary>
    /// README's "Memory per TCP connection" beside the queue, at the broker's defaults, in KiB: replies
    /// (MaxPendingReplies 1,000 x (MaxTopicLength 256 + 256) B), the writer (128 KiB + MaxFrameBytes 1 MiB)
    /// and the reader (2 x PartialFrameAllowance 64 KiB).
    /// </summary>
    private const double ReadmeOverheadKb = ((1000 * (256 + 256)) + (128 * 1024) + (1024 * 1024) + (2 * 64 * 1024)) / 1024.0;

    public string Name => "stalled";

    private static readonly Option<int> Stalled = OptionKinds.Integer("stalled", 1000, 0, 1_000_000, "subscribers that never read after subscribing");

    private static readonly Option<int> Fast = OptionKinds.Integer("fast", 5, 1, 10_000, "subscribers that read everything promptly");

    private static readonly Option<int> Payload = OptionKinds.Integer("payload", 1024, SequenceBytes, 1024 * 1024 - 1024, "message payload in bytes, >= 8 (it carries a sequence number)");

    private static readonly Option<int> Rate = OptionKinds.Integer("rate", 2000, 1, 10_000_000, "messages published per second");

    private static readonly Option<int> MaxPendingBytes = OptionKinds.Integer("max-pending-bytes", 2 * 1024 * 1024, 1024, int.MaxValue, "the broker's Herald:Limits:MaxPendingBytes");

    private static readonly Option<string> Policy = OptionKinds.Choice("policy", "disconnect", ["disconnect", "drop-oldest"], "the broker's slow-consumer policy");

    private static readonly Option<int> StalledReceiveBuffer = OptionKinds.Integer("stalled-rcvbuf", 4096, 256, 64 * 1024 * 1024, "each stalled socket's receive buffer in bytes (SO_RCVBUF)");

    private static readonly Option<double?> RssBaseMb = OptionKinds.OptionalSeconds("rss-base-mb", 0, 1e9, "the formula's base in MB (default: RSS measured before the stalled subscribers connect)");

    private static readonly Option<double> RssOverheadKb = OptionKinds.Seconds("rss-overhead-kb", ReadmeOverheadKb, 0, 1e9,
        "the formula's per-connection overhead in KB besides its queue: README's MaxPendingReplies x (MaxTopicLength + 256) + 128 KiB + MaxFrameBytes + 2 x PartialFrameAllowance at the broker's defaults");

    private static readonly Option<string> Topic = ScenarioOptions.Topic("bench.stalled");

    private static readonly Option<double> Grace = OptionKinds.Seconds("grace", 5, 0, 24 * 3600, "after the window: time for the fast subscribers to catch up");

    public string Description => """
        N subscribers that never read beside F that read everything: fast delivery ratio, worst silence, server RSS per stalled connection.
        N stalled subscribers (they subscribe, then never read) beside F fast ones, one publisher at a fixed rate for --seconds,
        against a Herald the tool starts with the given queue limit and slow-consumer policy (herald/tcp only); every
        repetition on a freshly started broker. With --server external the broker must already run with the limit and policy given here.
        Exit codes: 0 ok, 1 a check failed (a fast subscriber cut off, short or out of order; RSS above the formula),
        2 usage, 3 target unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } =
    [
        Stalled, Fast, Payload, Rate, WindowOptions.SecondsOption, MaxPendingBytes, Policy, StalledReceiveBuffer, RssBaseMb, RssOverheadKb, Topic, Grace,
        ScenarioOptions.Repeat, ScenarioOptions.Out, .. TargetCommandOptions.All,
    ];

    public CommandSettings Read(ParseResult parsed)
    {
        TargetOptions targetOptions = TargetOptions.Read(parsed);
        StalledOptions options = StalledOptions.Read(parsed);
        if (targetOptions is not { Target: "herald", Transport: "tcp" })
        {
            throw new UsageException($"stalled runs against herald/tcp only (its stalled subscribers are raw Herald connections and the tool configures the broker's limits), got {targetOptions.Target}/{targetOptions.Transport}.");
        }

        return new(options, targetOptions);
    }

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (StalledOptions options, TargetOptions targetOptions) = Read(parsed).Of<StalledOptions>();

        targetOptions = targetOptions with { ServerArguments = [.. targetOptions.ServerArguments ?? [], .. options.BrokerArguments()] };
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"stalled: {options.Stalled} stalled + {options.Fast} fast subscribers on '{options.Topic}', {options.Rate:N0} messages/s of {options.Payload} B for {options.Seconds} s, MaxPendingBytes {options.MaxPendingBytes:N0}, policy {options.Policy}, {options.Repeat} repetition(s); {targetOptions.Describe()}"));
        var log = new RunLog();
        return await ScenarioSkeleton.RunOnFreshTargetsAsync<StalledRun>(
            targetOptions,
            options.Repeat,
            (target, _) => RunOnceAsync(target, targetOptions, options, log, cancellationToken),
            run => run.Print(options),
            (target, runs) => Report(target, options, runs, log),
            cancellationToken);
    }

    /// <summary>One repetition: fast subscribers and the publisher, baseline, the stalled ones, publish, drain, close. Null when setup failed.</summary>
    private static async Task<StalledRun?> RunOnceAsync(ITarget target, TargetOptions targetOptions, StalledOptions options, RunLog log, CancellationToken cancellationToken)
    {
        var herald = (HeraldTarget)target;
        var expected = new ExpectedPayload(options.Payload);
        IPubSubClient[] clients = [];
        HeraldConnection[] stalled = [];
        try
        {
            // ---- Setup, bounded by --setup-timeout: fast subscribers are clients 0..F-1, the publisher client F;
            // the broker's memory is read before and after the stalled subscribers connect.
            var fast = new FastSubscriber[options.Fast];
            long? baselineRss = null, connectedRss = null;
            Counters before = default;
            long setupStart = Stopwatch.GetTimestamp();
            bool ready = await ScenarioSkeleton.SetUpClientsAsync(target, targetOptions.SetupTimeoutSeconds, async token =>
            {
                clients = await ScenarioClients.ConnectAsync(target, 0, options.Fast + 1, token);
                for (int i = 0; i < fast.Length; i++)
                {
                    fast[i] = new FastSubscriber(new FanoutSubscriber(clients[i], $"fast subscriber {i}", expected, log));
                }

                await ScenarioClients.SubscribeAllAsync(fast.Length, (i, t) => clients[i].SubscribeAsync(options.Topic, fast[i].OnMessage, t), token);
                baselineRss = TargetReport.ServerRss(target);
                stalled = await HeraldConnection.ConnectManyAsync(
                    herald.Endpoints,
                    options.Stalled,
                    i => $"stalled-{i.ToString(CultureInfo.InvariantCulture)}",
                    (connection, _, t) => connection.SubscribeAsync(1, options.Topic, t),
                    token,
                    receiveBufferSize: options.StalledReceiveBuffer,
                    receiveWindow: options.StalledReceiveBuffer);
                connectedRss = TargetReport.ServerRss(target);
                before = await Counters.ReadAsync(target, token);
            }, cancellationToken);
            if (!ready)
            {
                return null;
            }

            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"connected and subscribed {options.Fast} fast + {options.Stalled} stalled subscribers + 1 publisher in {Stopwatch.GetElapsedTime(setupStart).TotalSeconds:F2} s; server RSS {Mb(baselineRss)} MB before the stalled ones, {Mb(connectedRss)} MB after"));

            // ---- Publish for --seconds at --rate; the fast subscribers' silences count from the first publication.
            var publisher = new PacedPublisher(clients[^1], options.Topic, expected, options.Rate, log);
            foreach (FastSubscriber subscriber in fast)
            {
                subscriber.StartSilence(Stopwatch.GetTimestamp());
            }

            using var stopPublishing = new CancellationTokenSource();
            Task publishing = publisher.PublishAsync(stopPublishing.Token);
            Process? server = target.ServerProcess;
            WindowResult<StalledSnapshot> window = await MeasuredWindow.RunAsync(
                0,
                options.Seconds,
                () => StalledSnapshot.Take(fast, publisher, server),
                (now, previous, current, _) =>
                {
                    double seconds = current.Seconds(previous);
                    Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"  {now,5:F1}s  published/s {(current.Published - previous.Published) / seconds,8:N0}  fast received/s {(current.Delivered - previous.Delivered) / seconds / fast.Length,8:N0} each  fast behind {current.Published - current.Slowest,7:N0}  server RSS {Mb(TargetReport.ServerRss(target)),7} MB"));
                },
                () => publisher.Failure is { } f ? $"publisher failed: {f}"
                    : target.ServerProcess is { HasExited: true } ? "the broker exited"
                    : null,
                windowStarted: null,
                cancellationToken);

            // ---- The end of the publish window: memory and the broker's counters first, then stop and drain.
            long? endRss = TargetReport.ServerRss(target);
            long sendingEnded = Stopwatch.GetTimestamp();
            await stopPublishing.CancelAsync();
            foreach (FastSubscriber subscriber in fast)
            {
                subscriber.EndSilence(sendingEnded);
            }

            Counters after = await Counters.ReadAsync(target, CancellationToken.None);
            double drainSeconds = await ScenarioSkeleton.StopAndDrainAsync(
                stopPublishing, publishing, options.Grace, window.Interrupted, () => fast.Any(s => !s.Counts.Closed && s.Counts.Received < publisher.Published), pollMilliseconds: 10);
            Counters drained = await Counters.SettledAsync(target, before, options.Policy == "disconnect");
            var memory = new Memory(baselineRss, connectedRss, endRss, TargetReport.ServerRss(target));
            return StalledRun.From(options, window, fast, publisher, memory, before, after, drained, drainSeconds);
        }
        finally
        {
            RunState.CloseAll(stalled);
            await ScenarioClients.DisposeAllAsync(clients);
        }
    }

    private static int Report(ITarget target, StalledOptions options, List<StalledRun> runs, RunLog log)
    {
        List<StalledRun> measured = [.. runs.Where(r => r.Measured)];
        Headline[] headlines =
        [
            Headline.Of("fast delivery %", "%", higherIsBetter: true, [.. measured.Select(r => 100 * r.WorstDeliveryRatio)]),
            Headline.Of("worst silence ms", "ms", higherIsBetter: false, [.. measured.Select(r => r.WorstSilenceMs)]),
            Headline.Of("RSS KB/stalled", "KB", higherIsBetter: false, [.. measured.Where(r => r.RssPerStalled is not null).Select(r => r.RssPerStalled!.Value / 1024.0)]),
        ];
        return ScenarioSkeleton.Report(target, "stalled", "stalled", runs, headlines, options.Out, options.Write, log);
    }

    private static string Mb(long? bytes) => bytes is { } b ? (b / 1e6).ToString("F1", CultureInfo.InvariantCulture) : "?";

    internal sealed record StalledOptions(
        int Stalled,
        int Fast,
        int Payload,
        int Rate,
        double Seconds,
        long MaxPendingBytes,
        string Policy,
        int StalledReceiveBuffer,
        double? RssBaseMb,
        double RssOverheadKb,
        string Topic,
        double Grace,
        int Repeat,
        string? Out)
    {
        public static StalledOptions Read(ParseResult options) => new(
            options.GetValue(StalledScenario.Stalled),
            options.GetValue(StalledScenario.Fast),
            options.GetValue(StalledScenario.Payload),
            options.GetValue(StalledScenario.Rate),
            options.GetValue(WindowOptions.SecondsOption),
            options.GetValue(StalledScenario.MaxPendingBytes),
            options.GetRequiredValue(StalledScenario.Policy),
            options.GetValue(StalledScenario.StalledReceiveBuffer),
            options.GetValue(StalledScenario.RssBaseMb),
            options.GetValue(StalledScenario.RssOverheadKb),
            options.GetRequiredValue(StalledScenario.Topic),
            options.GetValue(StalledScenario.Grace),
            options.GetValue(ScenarioOptions.Repeat),
            options.GetValue(ScenarioOptions.Out));

        /// <summary>The broker's policy name: <c>Disconnect</c> or <c>DropOldest</c>.</summary>
        public string BrokerPolicy => Policy == "disconnect" ? "Disconnect" : "DropOldest";

        /// <summary>What the tool starts Herald with besides its listeners: the queue limit and the policy.</summary>
        public List<string> BrokerArguments() =>
        [
            string.Create(CultureInfo.InvariantCulture, $"--Herald:Limits:MaxPendingBytes={MaxPendingBytes}"),
            $"--Herald:Limits:SlowConsumerPolicy={BrokerPolicy}",
        ];

        /// <summary>
        /// The formula's bound for <paramref name="baselineRss"/>: base + N x (MaxPendingBytes + overhead); none
        /// without stalled subscribers (a control run: the fast ones alone), where it would only measure the GC.
        /// </summary>
        public long? RssBound(long? baselineRss) =>
            Stalled > 0 && (RssBaseMb is { } mb ? (long)(mb * 1e6) : baselineRss) is { } b ? b + (Stalled * (MaxPendingBytes + (long)(RssOverheadKb * 1024))) : null;

        public void Write(Utf8JsonWriter json)
        {
            json.WriteNumber("stalled", Stalled);
            json.WriteNumber("fast", Fast);
            json.WriteNumber("payloadBytes", Payload);
            json.WriteNumber("rate", Rate);
            json.WriteNumber("seconds", Seconds);
            json.WriteNumber("maxPendingBytes", MaxPendingBytes);
            json.WriteString("policy", BrokerPolicy);
            json.WriteNumber("stalledReceiveBuffer", StalledReceiveBuffer);
            if (RssBaseMb is { } mb)
            {
                json.WriteNumber("rssBaseMb", mb);
            }

            json.WriteNumber("rssOverheadKb", RssOverheadKb);
            json.WriteString("topic", Topic);
            json.WriteNumber("graceSeconds", Grace);
            json.WriteNumber("repeat", Repeat);
        }
    }

    /// <summary>
    /// The broker's RSS: before the stalled subscribers connected, after, at the end of the publish window,
    /// and after the drain (a broker that fell behind while the publisher sent queues the rest later).
    /// </summary>
    internal readonly record struct Memory(long? Baseline, long? Connected, long? End, long? Drained);

    /// <summary>What the broker counts on <c>/varz</c> that the stalled subscribers cannot tell: null fields when monitoring does not answer.</summary>
    internal readonly record struct Counters(long? SlowConsumers, long? Dropped, long? Connections, long? ClosedConnections)
    {
        public static async Task<Counters> ReadAsync(ITarget target, CancellationToken cancellationToken)
        {
            using JsonDocument? varz = await HeraldMonitoring.VarzAsync(target, cancellationToken);
            return new Counters(
                HeraldMonitoring.Number(varz, "slow_consumers"),
                HeraldMonitoring.Number(varz, "messages", "dropped"),
                HeraldMonitoring.Number(varz, "connections"),
                HeraldMonitoring.Number(varz, "closed_connections"));
        }

        /// <summary>
        /// The counters after the drain. Under Disconnect, a close the policy decided is counted once the connection is
        /// gone, after the broker has tried to tell the stalled client (its ErrorFlushTimeout, 2 s by default), which
        /// a loaded machine can put past the drain: read again until every action's close is counted, at most 15 s.
        /// </summary>
        public static async Task<Counters> SettledAsync(ITarget target, Counters before, bool closes)
        {
            long deadline = Stopwatch.GetTimestamp() + (15 * Stopwatch.Frequency);
            while (true)
            {
                Counters now = await ReadAsync(target, CancellationToken.None);
                if (!closes || Between(before.ClosedConnections, now.ClosedConnections) is not { } closed
                    || closed >= Between(before.SlowConsumers, now.SlowConsumers) || Stopwatch.GetTimestamp() > deadline)
                {
                    return now;
                }

                await Task.Delay(100, CancellationToken.None);
            }
        }

        public static long? Between(long? before, long? after) => before is { } b && after is { } a ? a - b : null;
    }

    internal readonly record struct StalledSnapshot(ResourceSnapshot Resources, long Delivered, long Slowest, long Published)
    {
        public static StalledSnapshot Take(FastSubscriber[] fast, PacedPublisher publisher, Process? server)
        {
            long delivered = 0, slowest = long.MaxValue;
            foreach (FastSubscriber s in fast)
            {
                long received = s.Counts.Received;
                delivered += received;
                slowest = Math.Min(slowest, received);
            }

            return new StalledSnapshot(ResourceSnapshot.Take(server), delivered, slowest, publisher.Published);
        }

        public double Seconds(StalledSnapshot earlier) => Stopwatch.GetElapsedTime(earlier.Resources.Timestamp, Resources.Timestamp).TotalSeconds;
    }

    /// <summary>
    /// A fast subscriber: <see cref="FanoutSubscriber"/>'s counts and checks, and its silences.
    /// Threading: <see cref="OnMessage"/> runs on the client's receive loop and is the only writer of
    /// <c>_last</c> and <c>_worst</c>; <see cref="StartSilence"/> runs before the first publication,
    /// <see cref="EndSilence"/> once when sending ends, <see cref="WorstSilenceTicks"/> after the drain.
    /// </summary>
    internal sealed class FastSubscriber(FanoutSubscriber counts)
    {
        private long _last;             // when the previous delivery arrived (or sending started)
        private long _worst;            // the longest silence so far, Stopwatch ticks
        private long _sendingEnded = long.MaxValue;

        public FanoutSubscriber Counts => counts;

        public void StartSilence(long now) => Volatile.Write(ref _last, now);

        public void EndSilence(long now) => Volatile.Write(ref _sendingEnded, now);

        public void OnMessage(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
        {
            long now = Stopwatch.GetTimestamp();
            long end = Volatile.Read(ref _sendingEnded);
            if (_last < end)
            {
                _worst = Math.Max(_worst, Math.Min(now, end) - _last);
            }

            Volatile.Write(ref _last, now);
            counts.OnMessage(payload, replyTo, headers);
        }

        /// <summary>The longest silence while sending, the one from the last delivery to the end of sending included. After the drain.</summary>
        public long WorstSilenceTicks
        {
            get
            {
                long end = Volatile.Read(ref _sendingEnded), last = Volatile.Read(ref _last);
                return Math.Max(_worst, last < end && end != long.MaxValue ? end - last : 0);
            }
        }
    }

    /// <summary>
    /// The publisher: R messages a second, each stamped with its sequence number, sent in the batches that
    /// are due every millisecond or so; a broker that holds its input back makes it fall behind (reported).
    /// Threading: <see cref="PublishAsync"/> is the only writer; others read <see cref="Published"/> while it runs.
    /// </summary>
    internal sealed class PacedPublisher(IPubSubClient client, string topic, ExpectedPayload expected, int rate, RunLog log)
    {
        private readonly SequencedPublisher _publisher = new(client, topic, expected, log);
        private long _started;

        public long Published => _publisher.Published;

        public string? Failure => _publisher.Failure;

        /// <summary>Messages that were due by <paramref name="now"/> at the rate, from the first one.</summary>
        public long Scheduled(long now) => Volatile.Read(ref _started) is var start and not 0 ? (long)(Stopwatch.GetElapsedTime(start, now).TotalSeconds * rate) : 0;

        public Task PublishAsync(CancellationToken stop)
        {
            long start = Stopwatch.GetTimestamp();
            Volatile.Write(ref _started, start);
            return _publisher.RunAsync(async () =>
            {
                while (!stop.IsCancellationRequested && client.Failure is null)
                {
                    long due = (long)(Stopwatch.GetElapsedTime(start).TotalSeconds * rate) + 1;
                    while (_publisher.Published < due && !stop.IsCancellationRequested)
                    {
                        await _publisher.PublishNextAsync(stop);
                    }

                    await client.FlushAsync(stop);
                    await Task.Delay(1, stop);
                }
            }, stop);
        }
    }

    /// <summary>What one repetition measured and found. Built once, after the drain.</summary>
    internal sealed class StalledRun : IScenarioRun
    {
        private StalledRun() { }

        public bool Measured { get; private init; }

        public bool Interrupted { get; private init; }

        public List<string> Failures { get; } = [];

        IReadOnlyList<string> IScenarioRun.Failures => Failures;

        public double Seconds { get; private init; }

        public long Published { get; private init; }

        public long PublishedInWindow { get; private init; }

        public long Scheduled { get; private init; }

        public required FastFigures[] Fast { get; init; }

        public double WorstDeliveryRatio => Fast.Length == 0 ? 0 : Fast.Min(f => f.DeliveryRatio);

        public double WorstSilenceMs => Fast.Length == 0 ? 0 : Fast.Max(f => f.WorstSilenceMs);

        public int FastCutOff => Fast.Count(f => f.CutOff is not null);

        public int FastShort => Fast.Count(f => f.Lost > 0 || f.Gaps > 0);

        public Memory Rss { get; private init; }

        public long? RssBound { get; private init; }

        public long? RssPerStalled { get; private init; }

        public long? RssPerStalledIdle { get; private init; }

        public long? SlowConsumers { get; private init; }

        public long? Dropped { get; private init; }

        public long? ConnectionsClosed { get; private init; }

        public long? ConnectionsLeft { get; private init; }

        /// <summary>The broker's connections once the fast subscribers caught up (or --grace passed).</summary>
        public long? ConnectionsAfterDrain { get; private init; }

        public double DrainSeconds { get; private init; }

        public ResourceUsage? Resources { get; private init; }

        public static StalledRun From(StalledOptions options, WindowResult<StalledSnapshot> window, FastSubscriber[] fast, PacedPublisher publisher, Memory rss, Counters before, Counters after, Counters drained, double drainSeconds)
        {
            long published = publisher.Published;
            long? perStalled = rss.Baseline is { } b0 && rss.End is { } b1 && options.Stalled > 0 ? (b1 - b0) / options.Stalled : null;
            long? perIdle = rss.Baseline is { } c0 && rss.Connected is { } c1 && options.Stalled > 0 ? (c1 - c0) / options.Stalled : null;
            var run = new StalledRun
            {
                Measured = window.Start is not null,
                Interrupted = window.Interrupted,
                Seconds = window.Start is { } start ? window.End.Seconds(start) : 0,
                Published = published,
                PublishedInWindow = window.Start is { } first ? window.End.Published - first.Published : 0,
                Scheduled = window.Start is not null ? publisher.Scheduled(window.End.Resources.Timestamp) : 0,
                Fast = [.. fast.Select(f => FastFigures.Of(f, published))],
                Rss = rss,
                RssBound = options.RssBound(rss.Baseline),
                RssPerStalled = perStalled,
                RssPerStalledIdle = perIdle,
                SlowConsumers = Counters.Between(before.SlowConsumers, after.SlowConsumers),
                Dropped = Counters.Between(before.Dropped, after.Dropped),
                // a close decided in the window is counted when the connection is gone, after the window (SettledAsync)
                ConnectionsClosed = Counters.Between(before.ClosedConnections, drained.ClosedConnections),
                ConnectionsLeft = after.Connections,
                ConnectionsAfterDrain = drained.Connections,
                DrainSeconds = drainSeconds,
                Resources = window.Start is { } s ? ResourceUsage.Between(s.Resources, window.End.Resources) : null,
            };
            run.Check(options, window.Aborted, publisher.Failure);
            return run;
        }

        private void Check(StalledOptions options, string? aborted, string? publisherFailure)
        {
            Failures.AddRange(ScenarioSkeleton.WindowFailures(aborted, [.. Fast.Select(f => f.CutOff)], "fast subscribers"));
            if (publisherFailure is not null && aborted is null)
            {
                Failures.Add($"publisher failed: {publisherFailure}");
            }

            if (Interrupted)
            {
                return;
            }

            if (FastShort > 0)
            {
                Failures.Add(string.Create(CultureInfo.InvariantCulture,
                    $"{FastShort} of {Fast.Length} fast subscribers lost messages: {Fast.Sum(f => f.Lost):N0} of {Published:N0} x {Fast.Length} not received {DrainSeconds:F1} s after publishing stopped (--grace {options.Grace})"));
            }

            if (Fast.Sum(f => f.Reordered) is var reordered and > 0)
            {
                Failures.Add($"{reordered:N0} messages reached fast subscribers out of order or twice");
            }

            if (Fast.Sum(f => f.Unexpected) is var unexpected and > 0)
            {
                Failures.Add($"{unexpected:N0} messages reached fast subscribers different from what was published");
            }

            if (Fast.Sum(f => f.ErrorReplies) is var notices and > 0)
            {
                Failures.Add($"fast subscribers got {notices:N0} error replies (e.g. MessagesDropped)");
            }

            if (Rss.End is { } end && RssBound is { } bound && end > bound)
            {
                Failures.Add(string.Create(CultureInfo.InvariantCulture,
                    $"server RSS {end / 1e6:F1} MB at the end of the publish window is above the formula's {bound / 1e6:F1} MB (base + {options.Stalled} x ({options.MaxPendingBytes:N0} B + {options.RssOverheadKb} KB))"));
            }
        }

        public void Print(StalledOptions options)
        {
            CultureInfo c = CultureInfo.InvariantCulture;
            if (!ScenarioSkeleton.PrintRepetitionStatus("stalled", this, Measured))
            {
                return;
            }

            Console.WriteLine(string.Create(c, $"  published           : {PublishedInWindow:N0} in the {Seconds:F2} s window ({(Seconds > 0 ? PublishedInWindow / Seconds : 0):N0}/s; {Scheduled:N0} were due at {options.Rate:N0}/s), {Published:N0} in all"));
            Console.WriteLine(string.Create(c, $"  fast delivery       : {100 * WorstDeliveryRatio:F2} % for the worst of {Fast.Length} ({string.Join(", ", Fast.Select(f => f.Received.ToString("N0", c)))} received)"));
            Console.WriteLine(string.Create(c, $"  fast worst silence  : {WorstSilenceMs:F1} ms ({string.Join(", ", Fast.Select(f => f.WorstSilenceMs.ToString("F1", c)))} ms)"));
            Console.WriteLine(string.Create(c, $"  fast checks         : {FastCutOff} cut off, {FastShort} lost messages ({Fast.Sum(f => f.Lost):N0}; {Fast.Sum(f => f.Gaps):N0} in gaps), {Fast.Sum(f => f.Reordered):N0} reordered, {Fast.Sum(f => f.ErrorReplies):N0} error replies (drop notices); drained in {DrainSeconds:F2} s"));
            Console.WriteLine(string.Create(c, $"  stalled (broker)    : {Count(SlowConsumers)} slow-consumer actions, {Count(Dropped)} messages dropped, {Count(ConnectionsClosed)} connections closed, {Count(ConnectionsLeft)} connections left at the end of the window, {Count(ConnectionsAfterDrain)} after the drain{(SlowConsumers is null ? " (? : /varz did not answer within 5 s)" : "")}"));
            Console.WriteLine(string.Create(c, $"  server RSS          : {Mb(Rss.Baseline)} MB before the stalled ones, {Mb(Rss.Connected)} MB connected, {Mb(Rss.End)} MB at the end of the window, {Mb(Rss.Drained)} MB after the drain; bound {Mb(RssBound)} MB"));
            Console.WriteLine(string.Create(c, $"  RSS per stalled     : {Kb(RssPerStalled)} KB at the end ({Kb(RssPerStalledIdle)} KB connected and idle); formula {(options.MaxPendingBytes / 1024.0) + options.RssOverheadKb:N0} KB"));
            Resources?.Print(Console.Out);
            Outcome.PrintFailures(Failures);
        }

        private static string Count(long? value) => value is { } v ? v.ToString("N0", CultureInfo.InvariantCulture) : "?";

        private static string Kb(long? bytes) => bytes is { } b ? (b / 1024.0).ToString("N0", CultureInfo.InvariantCulture) : "?";

        public void Write(Utf8JsonWriter json) => ScenarioSkeleton.WriteRepetition(json, this, Measured, Seconds, Resources, figures =>
        {
            figures.WriteNumber("published", Published);
            figures.WriteNumber("publishedInWindow", PublishedInWindow);
            figures.WriteNumber("scheduled", Scheduled);
            figures.WriteNumber("fastDeliveryRatio", WorstDeliveryRatio);
            figures.WriteNumber("fastWorstSilenceMs", WorstSilenceMs);
            figures.WriteNumber("fastCutOff", FastCutOff);
            figures.WriteNumber("fastLosing", FastShort);
            figures.WriteStartArray("fastSubscribers");
            foreach (FastFigures f in Fast)
            {
                f.Write(figures);
            }

            figures.WriteEndArray();
            figures.WriteStartObject("stalledSubscribers");
            WriteOptional(figures, "slowConsumerActions", SlowConsumers);
            WriteOptional(figures, "messagesDropped", Dropped);
            WriteOptional(figures, "connectionsClosed", ConnectionsClosed);
            WriteOptional(figures, "connectionsLeft", ConnectionsLeft);
            WriteOptional(figures, "connectionsAfterDrain", ConnectionsAfterDrain);
            figures.WriteEndObject();
            figures.WriteStartObject("serverRss");
            WriteOptional(figures, "baselineBytes", Rss.Baseline);
            WriteOptional(figures, "connectedBytes", Rss.Connected);
            WriteOptional(figures, "endBytes", Rss.End);
            WriteOptional(figures, "drainedBytes", Rss.Drained);
            WriteOptional(figures, "boundBytes", RssBound);
            WriteOptional(figures, "perStalledBytes", RssPerStalled);
            WriteOptional(figures, "perStalledIdleBytes", RssPerStalledIdle);
            figures.WriteEndObject();
            figures.WriteNumber("drainSeconds", DrainSeconds);
        });

        private static void WriteOptional(Utf8JsonWriter json, string name, long? value)
        {
            if (value is { } v)
            {
                json.WriteNumber(name, v);
            }
            else
            {
                json.WriteNull(name);
            }
        }
    }

    /// <summary>One fast subscriber's figures after the drain.</summary>
    internal sealed record FastFigures(long Received, long Lost, long Gaps, long Reordered, long Unexpected, long ErrorReplies, double WorstSilenceMs, string? CutOff, double DeliveryRatio)
    {
        public static FastFigures Of(FastSubscriber subscriber, long published)
        {
            FanoutSubscriber s = subscriber.Counts;
            return new FastFigures(
                s.Received,
                Math.Max(0, published - s.Received),
                s.Missing,
                s.Reordered,
                s.Unexpected,
                s.Client.Errors,
                Stopwatch.GetElapsedTime(0, subscriber.WorstSilenceTicks).TotalMilliseconds,
                s.Client.Failure,
                published > 0 ? (double)s.Received / published : 1);
        }

        public void Write(Utf8JsonWriter json)
        {
            json.WriteStartObject();
            json.WriteNumber("received", Received);
            json.WriteNumber("lost", Lost);
            json.WriteNumber("gaps", Gaps);
            json.WriteNumber("reordered", Reordered);
            json.WriteNumber("unexpected", Unexpected);
            json.WriteNumber("errorReplies", ErrorReplies);
            json.WriteNumber("worstSilenceMs", WorstSilenceMs);
            json.WriteNumber("deliveryRatio", DeliveryRatio);
            json.WriteString("cutOff", CutOff);
            json.WriteEndObject();
        }
    }
}
