using System.Buffers.Binary;
using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>fanout</c>: N subscribers on one topic and one publisher that publishes as fast as the target
/// absorbs; the figure is deliveries per second (messages received by all subscribers). Written once
/// against <see cref="ITarget"/>, so it runs on every target.
/// <para>
/// Method, because on a small machine the load tool competes with the server for the same cores:
/// <list type="bullet">
/// <item>Every subscription is live (<see cref="IPubSubClient.SubscribeAsync"/> returned) before the
/// publisher starts, so each subscriber must see every publication, starting at sequence 0.</item>
/// <item>The publisher reuses one payload and only stamps an 8-byte sequence number into it per message;
/// it publishes with <c>sendNow: false</c>, so the client sends 64 KiB batches, and flushes when it waits.</item>
/// <item>Flow control: the publisher is never more than <c>--max-lead</c> messages ahead of the slowest
/// live subscriber. Without it the publisher would only measure how fast the server fills its queues,
/// then trip its slow-consumer limits.</item>
/// <item>The first message a subscriber gets is compared in full with what was published; after that each
/// one costs a length check and an 8-byte sequence check (a gap is a lost message, a step back a
/// duplicate or a reordering).</item>
/// </list>
/// </para>
/// </summary>
internal sealed class FanoutScenario : IScenario
{
    private const int SequenceBytes = sizeof(long);
    private const int LeadCheckEvery = 1024; // publications between two looks at the slowest subscriber
    private const double MinimumWindowSeconds = 0.05; // shorter (an abort right after warm-up): no rate worth printing

    public string Name => "fanout";

    private static readonly Option<int> Subscribers = OptionKinds.Integer("subscribers", 100, 1, 1_000_000, "subscriber connections");

    private static readonly Option<int> Payload = OptionKinds.Integer("payload", 128, 0, 64 * 1024 * 1024, "payload size in bytes; >= 8 carries a sequence number");

    private static readonly Option<string> Topic = ScenarioOptions.Topic("bench.fanout");

    public string Description => """
        N subscribers on one topic, one publisher as fast as the target absorbs: deliveries/s.
        One batching publisher, flow-controlled by the slowest subscriber.
        Exit codes: 0 ok, 1 a check failed (disconnection, lost/reordered/wrong messages), 2 usage, 3 target unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } = [Subscribers, Payload, PublicationHeaders.Option, .. WindowOptions.Options(Topic), ScenarioOptions.Out, .. TargetCommandOptions.All];

    public CommandSettings Read(ParseResult parsed)
    {
        var options = FanoutOptions.Read(parsed);
        return new(options, TargetOptions.Read(parsed) with { Headers = options.HeaderBytes > 0 });
    }

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (FanoutOptions options, TargetOptions targetOptions) = Read(parsed).Of<FanoutOptions>();

        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"fanout: {options.Subscribers} subscribers on '{options.Window.Topic}', payload {options.Payload} B, header block {options.HeaderBytes} B, max lead {options.Window.MaxLead:N0}, warm-up {options.Window.Warmup} s, measured {options.Window.Seconds} s, {options.Window.Repeat} repetition(s); {targetOptions.Describe()}"));
        return await ScenarioSkeleton.RunRepetitionsAsync<FanoutRun>(
            targetOptions,
            options.Window.Repeat,
            (target, log) => RunOnceAsync(target, targetOptions, options, log, cancellationToken),
            run => run.Print(options),
            (target, runs, log) => Report(target, options, runs, log),
            cancellationToken,
            check: target =>
            {
                if (options.Payload > target.MaxPayload)
                {
                    throw new UsageException($"--payload {options.Payload} is over {target.Label}'s largest payload, {target.MaxPayload} B.");
                }

                _ = PublicationHeaders.Encode(target, options.HeaderBytes); // refuses a target without headers
            });
    }

    /// <summary>One repetition: connect, subscribe, warm up, measure, drain, close. Null when setup failed.</summary>
    private static async Task<FanoutRun?> RunOnceAsync(ITarget target, TargetOptions targetOptions, FanoutOptions options, RunLog log, CancellationToken cancellationToken)
    {
        var expected = new ExpectedPayload(options.Payload, PublicationHeaders.Encode(target, options.HeaderBytes));
        IPubSubClient[] clients = [];
        try
        {
            // ---- Setup, bounded by --setup-timeout: subscribers are clients 0..N-1, the publisher client N.
            var subscribers = new FanoutSubscriber[options.Subscribers];
            long setupStart = Stopwatch.GetTimestamp();
            bool ready = await ScenarioSkeleton.SetUpClientsAsync(target, targetOptions.SetupTimeoutSeconds, async token =>
            {
                clients = await ScenarioClients.ConnectAsync(target, 0, options.Subscribers + 1, token);
                for (int i = 0; i < subscribers.Length; i++)
                {
                    subscribers[i] = new FanoutSubscriber(clients[i], $"subscriber {i}", expected, log);
                }

                await ScenarioClients.SubscribeAllAsync(subscribers.Length, (i, t) => clients[i].SubscribeAsync(options.Window.Topic, subscribers[i].OnMessage, t), token);
            }, cancellationToken);
            if (!ready)
            {
                return null;
            }

            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"connected and subscribed {options.Subscribers} subscribers + 1 publisher in {Stopwatch.GetElapsedTime(setupStart).TotalSeconds:F2} s"));

            // ---- Run.
            long lead = ScenarioClients.LeadWithin(options.Window.MaxLead, clients.Take(options.Subscribers));
            var publisher = new FanoutPublisher(clients[^1], subscribers, options.Window.Topic, expected, lead, log);
            using var stopPublishing = new CancellationTokenSource();
            Task publishing = publisher.PublishAsync(stopPublishing.Token);
            IReadOnlyList<Process> server = target.ServerProcesses;
            WindowResult<FanoutSnapshot> window = await MeasuredWindow.RunAsync(
                options.Window.Warmup,
                options.Window.Seconds,
                () => FanoutSnapshot.Take(subscribers, publisher, server),
                (now, previous, current, measuring) =>
                {
                    double seconds = current.Seconds(previous);
                    Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"  {now,5:F1}s  deliveries/s {(current.Delivered - previous.Delivered) / seconds,13:N0}  published/s {(current.Published - previous.Published) / seconds,11:N0}  lead {Lead(publisher, subscribers),7}{(measuring ? "" : "  (warm-up)")}"));
                },
                () => publisher.Failure is { } f ? $"publisher failed: {f}"
                    : subscribers.All(s => s.Closed) ? "every subscriber was disconnected"
                    : null,
                windowStarted: null,
                cancellationToken);

            // ---- Stop: let what is in flight arrive (the last batch, then the deliveries, all within --grace).
            double drainSeconds = await ScenarioSkeleton.StopAndDrainAsync(
                stopPublishing, publishing, options.Window.Grace, window.Interrupted, () => subscribers.Any(s => !s.Closed && s.Received < publisher.Published), pollMilliseconds: 10);
            long published = publisher.Published;
            long undelivered = subscribers.Where(s => !s.Closed).Sum(s => Math.Max(0, published - s.Received));
            string?[] lost = [.. subscribers.Select(s => s.Client.Failure)]; // before closing: a client may call its own close a failure
            long errors = clients.Sum(c => c.Errors);
            return FanoutRun.From(options, window, subscribers, publisher, lost, errors, undelivered, drainSeconds, log);
        }
        finally
        {
            await ScenarioClients.DisposeAllAsync(clients);
        }
    }

    private static int Report(ITarget target, FanoutOptions options, List<FanoutRun> runs, RunLog log)
    {
        Headline[] headlines =
        [
            Headline.Of("deliveries/s", "deliveries/s", higherIsBetter: true, [.. runs.Where(r => r.Measured).Select(r => r.DeliveriesPerSecond)]),
        ];
        return ScenarioSkeleton.Report(target, "fanout", "fanout", runs, headlines, options.Out, json =>
        {
            json.WriteNumber("subscribers", options.Subscribers);
            json.WriteNumber("payloadBytes", options.Payload);
            json.WriteNumber("headerBytes", options.HeaderBytes);
            options.Window.Write(json);
        }, log);
    }

    private static string Lead(FanoutPublisher publisher, FanoutSubscriber[] subscribers)
    {
        long slowest = MinReceived(subscribers);
        return slowest == long.MaxValue ? "-" : (publisher.Published - slowest).ToString("N0", CultureInfo.InvariantCulture);
    }

    /// <summary>Messages received by the slowest subscriber still connected; <see cref="long.MaxValue"/> when none is.</summary>
    private static long MinReceived(FanoutSubscriber[] subscribers)
    {
        long min = long.MaxValue;
        foreach (FanoutSubscriber s in subscribers)
        {
            if (!s.Closed)
            {
                min = Math.Min(min, s.Received);
            }
        }

        return min;
    }

    internal sealed record FanoutOptions(int Subscribers, int Payload, int HeaderBytes, WindowOptions Window, string? Out)
    {
        public static FanoutOptions Read(ParseResult options) => new(
            options.GetValue(FanoutScenario.Subscribers),
            options.GetValue(FanoutScenario.Payload),
            options.GetValue(PublicationHeaders.Option),
            WindowOptions.Read(options, FanoutScenario.Topic),
            options.GetValue(ScenarioOptions.Out));
    }

    internal readonly record struct FanoutSnapshot(ResourceSnapshot Resources, long Delivered, long Published)
    {
        public static FanoutSnapshot Take(FanoutSubscriber[] subscribers, FanoutPublisher publisher, IReadOnlyList<Process> server)
        {
            long delivered = 0;
            foreach (FanoutSubscriber s in subscribers)
            {
                delivered += s.Received;
            }

            return new FanoutSnapshot(ResourceSnapshot.Take(server), delivered, publisher.Published);
        }

        public double Seconds(FanoutSnapshot earlier) => Stopwatch.GetElapsedTime(earlier.Resources.Timestamp, Resources.Timestamp).TotalSeconds;
    }

    /// <summary>What one repetition measured and found.</summary>
    internal sealed record FanoutRun(
        bool Measured,
        bool Interrupted,
        List<string> Failures,
        double Seconds,
        long Deliveries,
        long Published,
        long FlowWaits,
        long Missing,
        long Reordered,
        long Unexpected,
        long Errors,
        int Disconnected,
        long Undelivered,
        double DrainSeconds,
        long Slowest,
        long Fastest,
        long PublishedInAll,
        ResourceUsage? Resources) : IScenarioRun
    {
        IReadOnlyList<string> IScenarioRun.Failures => Failures;

        public double DeliveriesPerSecond => Seconds > 0 ? Deliveries / Seconds : 0;

        public double PublishedPerSecond => Seconds > 0 ? Published / Seconds : 0;

        public static FanoutRun From(FanoutOptions options, WindowResult<FanoutSnapshot> window, FanoutSubscriber[] subscribers, FanoutPublisher publisher, string?[] lost, long errors, long undelivered, double drainSeconds, RunLog log)
        {
            List<string> failures = ScenarioSkeleton.WindowFailures(window.Aborted, lost, "subscribers");
            int disconnected = lost.Count(l => l is not null);

            if (publisher.Failure is { } publisherFailure && window.Aborted is null)
            {
                failures.Add($"publisher failed: {publisherFailure}");
            }

            long missing = subscribers.Sum(s => s.Missing);
            long reordered = subscribers.Sum(s => s.Reordered);
            long unexpected = subscribers.Sum(s => s.Unexpected);
            if (missing > 0)
            {
                failures.Add($"{missing:N0} messages missing from subscribers' sequences");
            }

            if (reordered > 0)
            {
                failures.Add($"{reordered:N0} messages arrived out of order or twice");
            }

            if (unexpected > 0)
            {
                failures.Add($"{unexpected:N0} messages differed from what was published (see the events above)");
            }

            if (undelivered > 0 && !window.Interrupted)
            {
                failures.Add($"{undelivered:N0} deliveries still missing {options.Window.Grace} s after publishing stopped");
            }

            if (errors > 0)
            {
                log.Report("fanout", $"the server sent {errors:N0} error replies");
            }

            long slowest = subscribers.Min(s => s.Received), fastest = subscribers.Max(s => s.Received);
            if (window.Start is not { } start || window.End.Seconds(start) < MinimumWindowSeconds)
            {
                return new FanoutRun(false, window.Interrupted, failures, 0, 0, 0, publisher.FlowWaits, missing, reordered, unexpected, errors, disconnected, undelivered, drainSeconds, slowest, fastest, publisher.Published, null);
            }

            FanoutSnapshot end = window.End;
            long deliveries = end.Delivered - start.Delivered;
            if (deliveries == 0)
            {
                failures.Add("no message was delivered during the measured window");
            }

            return new FanoutRun(true, window.Interrupted, failures, end.Seconds(start), deliveries, end.Published - start.Published, publisher.FlowWaits, missing, reordered, unexpected, errors, disconnected, undelivered, drainSeconds, slowest, fastest, publisher.Published, ResourceUsage.Between(start.Resources, end.Resources));
        }

        public void Print(FanoutOptions options)
        {
            CultureInfo c = CultureInfo.InvariantCulture;
            if (ScenarioSkeleton.PrintRepetitionStatus("fanout", this, Measured))
            {
                Console.WriteLine(string.Create(c, $"  parameters          : {options.Subscribers} subscribers, payload {options.Payload} B, header block {options.HeaderBytes} B, max lead {options.Window.MaxLead:N0}"));
                Console.WriteLine(string.Create(c, $"  measured window     : {Seconds:F2} s after {options.Window.Warmup} s warm-up"));
                Console.WriteLine(string.Create(c, $"  deliveries/s        : {DeliveriesPerSecond:N0}  ({Deliveries:N0} messages received by all subscribers)"));
                Console.WriteLine(string.Create(c, $"  published/s         : {PublishedPerSecond:N0}  (x {options.Subscribers} subscribers = {PublishedPerSecond * options.Subscribers:N0} expected deliveries/s)"));
                Console.WriteLine(string.Create(c, $"  payload MB/s        : {DeliveriesPerSecond * options.Payload / 1e6:F1} delivered (10^6 B)"));
                Resources?.Print(Console.Out);
            }

            Console.WriteLine(string.Create(c, $"  flow control        : publisher waited {FlowWaits:N0} times for the slowest subscriber; at the end subscribers had {Slowest:N0}..{Fastest:N0} of {PublishedInAll:N0} published"));
            Console.WriteLine(string.Create(c, $"  drain               : {(Undelivered == 0 ? "all delivered" : $"{Undelivered:N0} missing")} {DrainSeconds:F2} s after publishing stopped"));
            Console.WriteLine(string.Create(c, $"  checks              : {Missing:N0} missing, {Reordered:N0} reordered, {Unexpected:N0} wrong, {Errors:N0} error replies, {Disconnected} disconnected"));
            Outcome.PrintFailures(Failures);
        }

        public void Write(Utf8JsonWriter json) => ScenarioSkeleton.WriteRepetition(json, this, Measured, Seconds, Resources, figures =>
        {
            figures.WriteNumber("deliveries", Deliveries);
            figures.WriteNumber("deliveriesPerSecond", DeliveriesPerSecond);
            figures.WriteNumber("published", Published);
            figures.WriteNumber("publishedPerSecond", PublishedPerSecond);
            figures.WriteNumber("flowControlWaits", FlowWaits);
            figures.WriteNumber("missing", Missing);
            figures.WriteNumber("reordered", Reordered);
            figures.WriteNumber("unexpected", Unexpected);
            figures.WriteNumber("errorReplies", Errors);
            figures.WriteNumber("disconnectedSubscribers", Disconnected);
            figures.WriteNumber("undeliveredAfterGrace", Undelivered);
            figures.WriteNumber("drainSeconds", DrainSeconds);
        });
    }

    /// <summary>
    /// What every subscriber must receive: a fixed pattern whose first 8 bytes, when it has room, are the
    /// publication's sequence number (little-endian), stamped by the publisher, and the same header block
    /// with every publication (<see cref="PublicationHeaders"/>; empty for none).
    /// </summary>
    internal sealed class ExpectedPayload
    {
        public ExpectedPayload(int length, byte[]? headers = null)
        {
            Bytes = new byte[length];
            for (int i = 0; i < Bytes.Length; i++)
            {
                Bytes[i] = (byte)('a' + (i % 26));
            }

            Headers = headers ?? [];
        }

        public byte[] Bytes { get; }

        /// <summary>The header block every publication carries, in the target's encoding; empty for none.</summary>
        public byte[] Headers { get; }

        public bool HasSequence => Bytes.Length >= SequenceBytes;

        /// <summary>Why a delivery is not what was published, or <c>null</c> when it is: every byte but the sequence number.</summary>
        public string? Check(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
        {
            if (!replyTo.IsEmpty) return "a reply_to, published without";
            if (!headers.SequenceEqual(Headers)) return $"header block of {headers.Length} bytes differs from the {Headers.Length} published";
            if (payload.Length != Bytes.Length) return $"payload of {payload.Length} bytes, published {Bytes.Length}";
            int from = HasSequence ? SequenceBytes : 0;
            return payload[from..].SequenceEqual(Bytes.AsSpan(from)) ? null : "payload bytes differ";
        }

        /// <summary>The check of every delivery after the first: the lengths of payload and header block.</summary>
        public string? CheckLengths(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> headers) =>
            payload.Length != Bytes.Length ? $"payload of {payload.Length} bytes, published {Bytes.Length}"
            : headers.Length != Headers.Length ? $"header block of {headers.Length} bytes, published {Headers.Length}"
            : null;
    }

    /// <summary>
    /// One subscriber: its handler counts and checks every delivery.
    /// Threading: <see cref="OnMessage"/> runs on the client's receive loop, one message at a time, and is
    /// the only writer of every field; other tasks read <see cref="Received"/> while it runs, the rest after.
    /// </summary>
    internal sealed class FanoutSubscriber(IPubSubClient client, string name, ExpectedPayload expected, RunLog log)
    {
        private long _received;
        private long _nextSequence;
        private bool _checkedFirst;

        public IPubSubClient Client => client;

        public long Received => Volatile.Read(ref _received);

        public bool Closed => client.Failure is not null;

        public long Missing { get; private set; }

        public long Reordered { get; private set; }

        public long Unexpected { get; private set; }

        public void OnMessage(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
        {
            if (!_checkedFirst)
            {
                _checkedFirst = true; // the first in full, the rest by length and sequence
                if (expected.Check(payload, replyTo, headers) is { } mismatch)
                {
                    Wrong(mismatch);
                }
            }
            else if (expected.CheckLengths(payload, headers) is { } mismatch)
            {
                Wrong(mismatch);
            }

            if (expected.HasSequence && payload.Length >= SequenceBytes)
            {
                long sequence = BinaryPrimitives.ReadInt64LittleEndian(payload);
                if (sequence != _nextSequence)
                {
                    if (sequence > _nextSequence)
                    {
                        Missing += sequence - _nextSequence;
                    }
                    else
                    {
                        Reordered++;
                    }
                }

                _nextSequence = sequence + 1;
            }

            Volatile.Write(ref _received, _received + 1);
        }

        private void Wrong(string why)
        {
            if (Unexpected++ == 0)
            {
                log.Report(name, $"message differs from what was published: {why}");
            }
        }
    }

    /// <summary>
    /// The publishing client, flow-controlled by the slowest subscriber. Threading: <see cref="PublishAsync"/>
    /// is the only writer; others read <see cref="Published"/> while it runs, the rest after it ended.
    /// </summary>
    internal sealed class FanoutPublisher(IPubSubClient client, FanoutSubscriber[] subscribers, string topic, ExpectedPayload expected, long maxLead, RunLog log)
    {
        private readonly SequencedPublisher _publisher = new(client, topic, expected, log);

        public long Published => _publisher.Published;

        public long FlowWaits { get; private set; }

        public string? Failure => _publisher.Failure;

        public Task PublishAsync(CancellationToken stop) => _publisher.RunAsync(async () =>
        {
            while (!stop.IsCancellationRequested && client.Failure is null)
            {
                long slowest = MinReceived(subscribers); // long.MaxValue when none is left: nothing to publish for
                long room = slowest == long.MaxValue ? 0 : maxLead - (_publisher.Published - slowest);
                if (room <= 0)
                {
                    FlowWaits++;
                    await client.FlushAsync(stop); // what is buffered must go out, or the subscribers never catch up
                    await Task.Delay(1, stop);     // ~1 ms: far less than a lead of 10,000 takes to drain
                    continue;
                }

                for (long n = Math.Min(room, LeadCheckEvery); n > 0; n--)
                {
                    await _publisher.PublishNextAsync(stop);
                }
            }
        }, stop);
    }
}
