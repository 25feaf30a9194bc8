using System.Buffers;
using System.Buffers.Binary;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Peers;
using Herald.LoadTest.Peers.Nats;
using Herald.LoadTest.Reporting;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>fanout</c>: N subscribers on one topic and one publisher that publishes as fast as the broker
/// absorbs; the figure is deliveries per second (MESSAGE frames received by all subscribers).
/// <para>
/// Design, because on a small machine the load tool competes with the broker for the same cores:
/// <list type="bullet">
/// <item>Every subscriber subscribes behind a PING barrier (<see cref="HeraldConnection.SubscribeAsync"/>)
/// before the publisher connects, so each one must see every publication, starting at sequence 0.</item>
/// <item>The publisher encodes one PUBLISH once and copies it into a 64 KiB batch once; per batch it only
/// stamps an 8-byte sequence number into each payload, then writes the batch in one send.</item>
/// <item>Flow control: the publisher is never more than <c>--max-lead</c> messages ahead of the slowest
/// live subscriber. Without it the publisher would only measure how fast the broker can fill its queues,
/// then trip the slow-consumer limits (spec §6.3).</item>
/// <item>Subscribers count MESSAGE frames from two type bytes and the body length; the first MESSAGE is
/// decoded fully and compared with what was published, after which each one costs one 8-byte read to
/// check the sequence (a gap is a lost message, a step back a duplicate or reordering).</item>
/// </list>
/// </para>
/// </summary>
internal sealed class FanoutScenario : IScenario
{
    private const uint Sid = 1;
    private const int SequenceBytes = sizeof(long);
    private const double MinimumWindowSeconds = 0.05; // shorter (an abort right after warm-up): no rate worth printing

    public string Name => "fanout";

    public string Summary => "N subscribers on one topic, one publisher as fast as the broker absorbs: deliveries/s.";

    public string Usage => $"""
        fanout: N subscribers on one topic, one pipelining publisher, flow-controlled by the slowest subscriber.

          --subscribers N        subscriber connections                          (default 100)
          --payload BYTES        payload size; >= 8 carries a sequence number    (default 128)
          --seconds S            measured window                                 (default 10)
          --warmup S             warm-up before the window                       (default 2)
          --max-lead N           most messages the publisher may be ahead of the slowest subscriber (default 10000)
          --topic NAME           topic                                           (default bench.fanout)
          --batch-bytes N        PUBLISH bytes per socket write                  (default 65536)
          --grace S              after the window: time allowed to deliver what is in flight (default 3)
          --target herald|nats   broker to drive: Herald, or a NATS server as a peer for comparison (default herald)
          --out FILE             also write the result as JSON
        {BrokerOptions.Usage}
        Exit codes: 0 ok, 1 a check failed (disconnection, fatal ERROR, lost/reordered messages), 2 usage, 3 broker unreachable, 130 Ctrl+C.
        """;

    public async Task<int> RunAsync(CommandLine commandLine, CancellationToken cancellationToken)
    {
        FanoutOptions options = FanoutOptions.Read(commandLine);
        commandLine.RejectUnused();
        var expected = new ExpectedMessage(options.Topic, options.Payload);

        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"fanout: {options.Subscribers} subscribers on '{options.Topic}', payload {options.Payload} B, warm-up {options.Warmup} s, measured {options.Seconds} s"));
        Console.WriteLine($"machine: {MachineInfo.Describe()}");

        var log = new RunLog();
        var state = new RunState();
        HeraldConnection[] subscriberConnections = [];
        HeraldConnection? publisherConnection = null;
        NatsConnection[] natsConnections = [];
        void CloseAll()
        {
            RunState.CloseAll(subscriberConnections, publisherConnection);
            foreach (NatsConnection connection in natsConnections)
            {
                connection.Close();
            }
        }

        try
        {
            // ---- Setup: bounded by --setup-timeout; any failure here means the broker is not usable.
            BrokerEndpoints endpoints;
            long setupStart = Stopwatch.GetTimestamp();
            using (var setup = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken))
            {
                setup.CancelAfter(TimeSpan.FromSeconds(options.Broker.SetupTimeoutSeconds));
                try
                {
                    endpoints = await BrokerEndpoints.ResolveAsync(options.Broker.Host, options.Broker.FirstPort, options.Broker.LastPort, setup.Token);
                    endpoints.Tls = options.Broker.Tls;
                    endpoints.TlsThumbprint = options.Broker.TlsThumbprint;
                    Console.WriteLine($"broker: subscribers on {endpoints.Display}, publisher on {endpoints.Host}:{options.Broker.Port}");
                    if (options.Nats)
                    {
                        natsConnections = await NatsConnection.ConnectManyAsync(
                            endpoints.For,
                            options.Subscribers,
                            i => $"loadtest-fanout-sub-{i}",
                            (connection, token) => connection.SubscribeAsync(options.Topic, NatsFanout.Sid, token),
                            setup.Token);
                        natsConnections = [.. natsConnections, await NatsConnection.ConnectAsync(endpoints.At(options.Broker.Port), "loadtest-fanout-pub", setup.Token)];
                    }
                    else
                    {
                    subscriberConnections = await HeraldConnection.ConnectManyAsync(
                        endpoints,
                        options.Subscribers,
                        i => $"loadtest-fanout-sub-{i}",
                        (connection, _, token) => connection.SubscribeAsync(Sid, options.Topic, token),
                        setup.Token);
                    publisherConnection = await HeraldConnection.ConnectAsync(endpoints.At(options.Broker.Port), "loadtest-fanout-pub", setup.Token, tlsFrom: endpoints);
                    }
                }
                catch (Exception e) when (RunState.IsSetupFailure(e) && !cancellationToken.IsCancellationRequested)
                {
                    string why = e is OperationCanceledException ? $"setup did not finish within {options.Broker.SetupTimeoutSeconds} s" : e.Message;
                    Console.Error.WriteLine($"error: broker unreachable or unusable (subscribers {options.Broker.PortsDisplay}, publisher {options.Broker.Host}:{options.Broker.Port}): {why}");
                    return ExitCodes.BrokerUnreachable;
                }
                catch (OperationCanceledException)
                {
                    return ExitCodes.Interrupted;
                }
            }

            WelcomeFrame welcome = options.Nats ? NatsWelcome(natsConnections[^1]) : publisherConnection!.Welcome;
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"connected {options.Subscribers} subscribers + 1 publisher in {Stopwatch.GetElapsedTime(setupStart).TotalSeconds:F2} s; server '{welcome.ServerName}' protocol v{welcome.Version}, limits {Outcome.FormatLimits(welcome.Limits)}"));

            long maxLead = ClampLead(options.MaxLead, expected.MessageFrameLength, subscriberConnections);

            // ---- Run.
            IFanoutSubscriber[] subscribers;
            IFanoutPublisher publisher;
            if (options.Nats)
            {
                byte[] payload = NatsFanout.Payload(options.Payload);
                subscribers = [.. natsConnections[..^1].Select(c => new NatsFanout.Subscriber(c, options.Topic, payload, log))];
                publisher = new NatsFanout.Publisher(natsConnections[^1], subscribers, options.Topic, payload, maxLead, options.BatchBytes, log);
            }
            else
            {
                subscribers = [.. subscriberConnections.Select(c => new FanoutSubscriber(c, expected, log))];
                publisher = new FanoutPublisher(publisherConnection!, subscribers, expected, maxLead, options.BatchBytes, log);
            }

            Process? brokerProcess = options.Broker.FindBrokerProcess();
            Task[] readers = [.. subscribers.Select(s => s.RunAsync(state)), publisher.ReadAsync(state)];
            using var stopPublishing = new CancellationTokenSource();
            Task publishing = publisher.PublishAsync(state, stopPublishing.Token);

            WindowResult<FanoutSnapshot> timeline = await RunTimelineAsync(options, subscribers, publisher, brokerProcess, cancellationToken);

            // ---- Stop: let what is in flight arrive (the last send, then the deliveries, all within
            // --grace), then close everything.
            long drainStart = Stopwatch.GetTimestamp();
            await stopPublishing.CancelAsync();
            await RunState.WaitQuietlyAsync(publishing, TimeSpan.FromSeconds(options.Grace));
            long sent = publisher.Sent;
            while (!timeline.Interrupted && Stopwatch.GetElapsedTime(drainStart).TotalSeconds < options.Grace && subscribers.Any(s => !s.Closed && s.Received < sent))
            {
                await Task.Delay(10, CancellationToken.None);
            }

            double drainSeconds = Stopwatch.GetElapsedTime(drainStart).TotalSeconds;
            long undelivered = subscribers.Where(s => !s.Closed).Sum(s => Math.Max(0, sent - s.Received));
            state.BeginStopping();
            CloseAll();
            await RunState.WaitQuietlyAsync(Task.WhenAll([.. readers, publishing]), TimeSpan.FromSeconds(2));

            return Report(options, expected, timeline, subscribers, publisher, welcome, maxLead, undelivered, drainSeconds, log);
        }
        finally
        {
            state.BeginStopping();
            CloseAll();
        }
    }

    private static Task<WindowResult<FanoutSnapshot>> RunTimelineAsync(FanoutOptions options, IFanoutSubscriber[] subscribers, IFanoutPublisher publisher, Process? brokerProcess, CancellationToken cancellationToken) =>
        MeasuredWindow.RunAsync(
            options.Warmup,
            options.Seconds,
            () => FanoutSnapshot.Take(subscribers, publisher, brokerProcess),
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

    private static void WriteParameters(Utf8JsonWriter json, FanoutOptions options, long maxLead)
    {
        json.WriteStartObject("parameters");
        json.WriteString("host", options.Broker.Host);
        json.WriteString("subscriberPorts", $"{options.Broker.FirstPort}-{options.Broker.LastPort}");
        json.WriteNumber("publisherPort", options.Broker.Port);
        json.WriteNumber("subscribers", options.Subscribers);
        json.WriteNumber("payloadBytes", options.Payload);
        json.WriteNumber("seconds", options.Seconds);
        json.WriteNumber("warmupSeconds", options.Warmup);
        json.WriteNumber("maxLead", maxLead);
        json.WriteNumber("batchBytes", options.BatchBytes);
        json.WriteString("topic", options.Topic);
        json.WriteString("target", options.Nats ? "nats" : "herald");
        json.WriteEndObject();
    }

    private static int Report(
        FanoutOptions options,
        ExpectedMessage expected,
        WindowResult<FanoutSnapshot> timeline,
        IFanoutSubscriber[] subscribers,
        IFanoutPublisher publisher,
        WelcomeFrame welcome,
        long maxLead,
        long undelivered,
        double drainSeconds,
        RunLog log)
    {
        var failures = new List<string>();
        if (timeline.Aborted is { } aborted)
        {
            failures.Add($"run aborted: {aborted}");
        }

        int disconnected = subscribers.Count(s => s.LostReason is not null);
        if (disconnected > 0)
        {
            failures.Add($"{disconnected} of {subscribers.Length} subscribers were disconnected (first: {subscribers.First(s => s.LostReason is not null).LostReason})");
        }

        if (publisher.Failure is { } publisherFailure && timeline.Aborted is null)
        {
            failures.Add($"publisher failed: {publisherFailure}");
        }

        long missed = subscribers.Sum(s => s.Missed);
        long announced = subscribers.Sum(s => s.AnnouncedDropped);
        long reordered = subscribers.Sum(s => s.Reordered);
        long unexpected = subscribers.Sum(s => s.Unexpected) + publisher.Unexpected;
        long errorFrames = subscribers.Sum(s => s.ErrorFrames) + publisher.ErrorFrames;
        if (missed > announced)
        {
            failures.Add($"{missed:N0} messages missing from subscribers' sequences, {announced:N0} of them announced by MessagesDropped");
        }

        if (reordered > 0)
        {
            failures.Add($"{reordered:N0} messages arrived out of order or twice");
        }

        if (unexpected > 0)
        {
            failures.Add($"{unexpected:N0} frames differed from what was published or were not expected (see the events above)");
        }

        if (undelivered > 0 && !timeline.Interrupted)
        {
            failures.Add($"{undelivered:N0} deliveries still missing {options.Grace} s after publishing stopped");
        }

        Console.WriteLine();
        if (timeline.Start is not { } start || timeline.End.Seconds(start) < MinimumWindowSeconds)
        {
            Console.WriteLine(timeline.Interrupted ? "fanout interrupted before the measured window: nothing measured." : "fanout stopped before the measured window: nothing measured.");
            Outcome.PrintFailures(failures);
            if (options.Out is { } unmeasuredPath)
            {
                ResultFile.Write(unmeasuredPath, "fanout", json =>
                {
                    WriteParameters(json, options, maxLead);
                    Outcome.WriteBroker(json, welcome);
                    Outcome.Write(json, failures, timeline.Interrupted, log);
                });
            }

            return timeline.Interrupted ? ExitCodes.Interrupted : ExitCodes.RunFailed;
        }

        FanoutSnapshot end = timeline.End;
        double seconds = end.Seconds(start);
        long deliveries = end.Delivered - start.Delivered;
        long published = end.Published - start.Published;
        double deliveriesPerSecond = deliveries / seconds;
        double publishedPerSecond = published / seconds;
        double payloadMBps = deliveriesPerSecond * options.Payload / 1e6;
        double inMBps = (end.SubscriberBytes - start.SubscriberBytes) / seconds / 1e6;
        double outMBps = (end.PublisherBytes - start.PublisherBytes) / seconds / 1e6;
        var resources = ResourceUsage.Between(start.Resources, end.Resources);
        long slowest = subscribers.Min(s => s.Received);
        long fastest = subscribers.Max(s => s.Received);
        if (deliveries == 0)
        {
            failures.Add("no MESSAGE was delivered during the measured window");
        }

        string ok = timeline.Interrupted ? "INTERRUPTED" : failures.Count == 0 ? "OK" : "FAILED";
        CultureInfo c = CultureInfo.InvariantCulture;
        Console.WriteLine($"fanout result ({ok})");
        Console.WriteLine($"  machine             : {MachineInfo.Describe()}");
        Console.WriteLine($"  broker              : '{welcome.ServerName}' v{welcome.Version}");
        Console.WriteLine(string.Create(c, $"  parameters          : {options.Subscribers} subscribers, payload {options.Payload} B, max lead {maxLead:N0}, batch {options.BatchBytes:N0} B"));
        Console.WriteLine(string.Create(c, $"  measured window     : {seconds:F2} s after {options.Warmup} s warm-up"));
        Console.WriteLine(string.Create(c, $"  deliveries/s        : {deliveriesPerSecond:N0}  ({deliveries:N0} MESSAGE frames received by all subscribers)"));
        Console.WriteLine(string.Create(c, $"  published/s         : {publishedPerSecond:N0}  (x {options.Subscribers} subscribers = {publishedPerSecond * options.Subscribers:N0} expected deliveries/s)"));
        Console.WriteLine(string.Create(c, $"  MB/s (10^6 B)       : {payloadMBps:F1} payload delivered; wire {inMBps:F1} in to subscribers, {outMBps:F1} out of the publisher"));
        Console.WriteLine(string.Create(c, $"  flow control        : publisher waited {publisher.FlowWaits:N0} times for the slowest subscriber; at the end subscribers had {slowest:N0}..{fastest:N0} of {publisher.Sent:N0} sent"));
        Console.WriteLine(string.Create(c, $"  drain               : {(undelivered == 0 ? "all delivered" : $"{undelivered:N0} missing")} {drainSeconds:F2} s after publishing stopped"));
        Console.WriteLine(string.Create(c, $"  checks              : {missed:N0} missing ({announced:N0} announced dropped), {reordered:N0} reordered, {unexpected:N0} unexpected frames, {errorFrames:N0} ERROR frames, {disconnected} disconnected"));
        resources.Print(Console.Out);
        Outcome.PrintFailures(failures);

        if (options.Out is { } path)
        {
            ResultFile.Write(path, "fanout", json =>
            {
                WriteParameters(json, options, maxLead);
                Outcome.WriteBroker(json, welcome);
                json.WriteStartObject("results");
                json.WriteNumber("measuredSeconds", seconds);
                json.WriteNumber("deliveries", deliveries);
                json.WriteNumber("deliveriesPerSecond", deliveriesPerSecond);
                json.WriteNumber("published", published);
                json.WriteNumber("publishedPerSecond", publishedPerSecond);
                json.WriteNumber("payloadMBPerSecond", payloadMBps);
                json.WriteNumber("subscriberWireMBPerSecond", inMBps);
                json.WriteNumber("publisherWireMBPerSecond", outMBps);
                json.WriteNumber("messageFrameBytes", expected.MessageFrameLength);
                json.WriteNumber("flowControlWaits", publisher.FlowWaits);
                json.WriteNumber("missing", missed);
                json.WriteNumber("announcedDropped", announced);
                json.WriteNumber("reordered", reordered);
                json.WriteNumber("unexpectedFrames", unexpected);
                json.WriteNumber("errorFrames", errorFrames);
                json.WriteNumber("disconnectedSubscribers", disconnected);
                json.WriteNumber("undeliveredAfterGrace", undelivered);
                json.WriteEndObject();
                resources.Write(json);
                Outcome.Write(json, failures, timeline.Interrupted, log);
            });
            Console.WriteLine($"  result written to   : {path}");
        }

        return timeline.Interrupted ? ExitCodes.Interrupted : failures.Count == 0 ? ExitCodes.Ok : ExitCodes.RunFailed;
    }

    /// <summary>Keeps the publisher's lead under half of what any subscriber's WELCOME says the broker will queue for it.</summary>
    private static long ClampLead(long requested, int messageFrameLength, HeraldConnection[] subscribers)
    {
        long lead = requested;
        foreach (HeraldConnection s in subscribers)
        {
            IReadOnlyDictionary<string, ulong> limits = s.Welcome.Limits;
            if (limits.TryGetValue("max_pending_msgs", out ulong msgs) && msgs > 0)
            {
                lead = Math.Min(lead, (long)Math.Min(msgs / 2, long.MaxValue));
            }

            if (limits.TryGetValue("max_pending_bytes", out ulong bytes) && bytes > 0)
            {
                lead = Math.Min(lead, (long)Math.Min(bytes / 2 / (ulong)messageFrameLength, long.MaxValue));
            }
        }

        lead = Math.Max(1, lead);
        if (lead < requested)
        {
            Console.WriteLine($"note: --max-lead lowered from {requested:N0} to {lead:N0}: half of the broker's max_pending_msgs / max_pending_bytes for a {messageFrameLength}-byte MESSAGE");
        }

        return lead;
    }

    private static string Lead(IFanoutPublisher publisher, IFanoutSubscriber[] subscribers)
    {
        long slowest = MinReceived(subscribers);
        return slowest == long.MaxValue ? "-" : (publisher.Published - slowest).ToString("N0", CultureInfo.InvariantCulture);
    }

    /// <summary>Messages received by the slowest subscriber still connected; <see cref="long.MaxValue"/> when none is.</summary>
    internal static long MinReceived(IFanoutSubscriber[] subscribers)
    {
        long min = long.MaxValue;
        foreach (IFanoutSubscriber s in subscribers)
        {
            if (!s.Closed)
            {
                min = Math.Min(min, s.Received);
            }
        }

        return min;
    }

    internal sealed record FanoutOptions(
        BrokerOptions Broker,
        int Subscribers,
        int Payload,
        double Seconds,
        double Warmup,
        long MaxLead,
        string Topic,
        int BatchBytes,
        double Grace,
        string? Out,
        bool Nats = false)
    {
        public static FanoutOptions Read(CommandLine options)
        {
            var broker = BrokerOptions.Read(options);
            string topic = options.String("topic", "bench.fanout");
            try
            {
                Herald.Protocol.Topic.EncodeName(topic);
            }
            catch (ProtocolException e)
            {
                throw new UsageException($"--topic: {e.Message}");
            }

            return new FanoutOptions(
                broker,
                options.Int("subscribers", 100, 1, 1_000_000),
                options.Int("payload", 128, 0, 900 * 1024),
                options.Seconds("seconds", 10, 0.1),
                options.Seconds("warmup", 2, 0),
                options.Int("max-lead", 10_000, 1),
                topic,
                options.Int("batch-bytes", 64 * 1024, 1024, 64 * 1024 * 1024),
                options.Seconds("grace", 3, 0),
                options.OptionalString("out"),
                options.String("target", "herald") switch
                {
                    "herald" => false,
                    "nats" => !broker.Tls ? true : throw new UsageException("--tls is not supported with --target nats."),
                    string other => throw new UsageException($"--target must be herald or nats, got '{other}'."),
                });
        }
    }

    /// <summary>NATS has no WELCOME: its INFO, shaped as one, for the report (no limits that bound the lead).</summary>
    private static WelcomeFrame NatsWelcome(NatsConnection connection) =>
        new((uint)connection.ProtocolVersion, connection.ServerName, 0, Capabilities.None, new Dictionary<string, ulong> { ["max_payload"] = (ulong)connection.MaxPayload });

    internal readonly record struct FanoutSnapshot(ResourceSnapshot Resources, long Delivered, long SubscriberBytes, long Published, long PublisherBytes)
    {
        public static FanoutSnapshot Take(IFanoutSubscriber[] subscribers, IFanoutPublisher publisher, Process? broker)
        {
            long delivered = 0, bytes = 0;
            foreach (IFanoutSubscriber s in subscribers)
            {
                delivered += s.Received;
                bytes += s.BytesReceived;
            }

            return new FanoutSnapshot(ResourceSnapshot.Take(broker), delivered, bytes, publisher.Sent, publisher.BytesSent);
        }

        public double Seconds(FanoutSnapshot earlier) => Stopwatch.GetElapsedTime(earlier.Resources.Timestamp, Resources.Timestamp).TotalSeconds;
    }

    /// <summary>
    /// What every subscriber must receive: the publisher's PUBLISH, and the MESSAGE it becomes.
    /// The payload is a fixed pattern; when it has room, its first 8 bytes are the publication's
    /// sequence number (little-endian), stamped by the publisher.
    /// </summary>
    internal sealed class ExpectedMessage
    {
        public ExpectedMessage(string topic, int payloadLength)
        {
            TopicBytes = Topic.EncodeName(topic);
            Payload = new byte[payloadLength];
            for (int i = 0; i < Payload.Length; i++)
            {
                Payload[i] = (byte)('a' + (i % 26));
            }

            var frame = new ArrayBufferWriter<byte>(payloadLength + 64);
            FrameWriter.WritePublish(frame, TopicBytes, default, PayloadFlags.None, Payload);
            PublishFrame = frame.WrittenSpan.ToArray();
            PublishSequenceOffset = HasSequence ? PublishFrame.Length - payloadLength : -1; // the payload ends the frame
            MessageFrameLength = ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(TopicBytes.Length, 0, PayloadFlags.None, payloadLength);
        }

        public byte[] TopicBytes { get; }

        public byte[] Payload { get; }

        public bool HasSequence => Payload.Length >= SequenceBytes;

        public byte[] PublishFrame { get; }

        public int PublishSequenceOffset { get; }

        public int MessageFrameLength { get; }

        /// <summary>Why <paramref name="message"/> is not what was published, or <c>null</c> when it is.</summary>
        public string? Check(in PublishFrame message)
        {
            if (message.Sid != Sid) return $"sid {message.Sid}, subscribed as {Sid}";
            if (!message.Topic.FirstSpan.SequenceEqual(TopicBytes)) return $"topic '{message.TopicString}'";
            if (message.ReplyTo is not null) return $"reply_to '{message.ReplyToString}', published without";
            if (message.Flags != PayloadFlags.None) return $"flags {message.Flags}";
            if (message.Payload.Length != Payload.Length) return $"payload of {message.Payload.Length} bytes, published {Payload.Length}";
            int from = HasSequence ? SequenceBytes : 0;
            if (!message.Payload.FirstSpan[from..].SequenceEqual(Payload.AsSpan(from))) return "payload bytes differ";
            return null;
        }
    }

    /// <summary>
    /// One subscriber connection and its reading task.
    /// Threading: <see cref="RunAsync"/> is the only writer of every field; other tasks read
    /// <see cref="Received"/> and <see cref="Closed"/> while it runs, the rest after it ended.
    /// </summary>
    internal sealed class FanoutSubscriber(HeraldConnection connection, ExpectedMessage expected, RunLog log) : IFanoutSubscriber
    {
        private long _received;
        private long _nextSequence;
        private int _messageBodyLength = -1; // body length of a MESSAGE as published, known after the first one checked out
        private int _sequenceOffset = -1;    // offset of the sequence number in such a body
        private volatile bool _closed;

        public long Received => Volatile.Read(ref _received);

        public long BytesReceived => connection.BytesReceived;

        public bool Closed => _closed;

        /// <summary>Why the broker's side ended this connection before the run did; <c>null</c> when it did not.</summary>
        public string? LostReason { get; private set; }

        public long Missed { get; private set; }

        public long Reordered { get; private set; }

        public long AnnouncedDropped { get; private set; }

        public long ErrorFrames { get; private set; }

        public long Unexpected { get; private set; }

        public async Task RunAsync(RunState state)
        {
            try
            {
                while (true)
                {
                    if (Drain())
                    {
                        await connection.SendPongAsync();
                    }

                    if (!await connection.ReceiveAsync())
                    {
                        Lose(state, "the broker closed the connection");
                        return;
                    }
                }
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e) || e is ProtocolException)
            {
                Lose(state, e.Message);
            }
            finally
            {
                _closed = true;
            }
        }

        private void Lose(RunState state, string why)
        {
            if (!state.Stopping)
            {
                LostReason ??= why;
                log.Report(connection.Name, $"disconnected: {why}");
            }
        }

        /// <summary>Handles every buffered frame; returns whether a PING asked for a PONG.</summary>
        private bool Drain()
        {
            bool pongDue = false;
            long received = _received;
            while (connection.TryReadFrame(out ReadOnlySequence<byte> frame))
            {
                ReadOnlySpan<byte> body = frame.FirstSpan;
                if (body.Length == _messageBodyLength && FramePeek.TypeOf(body) == FrameType.Message)
                {
                    if (_sequenceOffset >= 0)
                    {
                        CheckSequence(BinaryPrimitives.ReadInt64LittleEndian(body[_sequenceOffset..]));
                    }

                    received++;
                }
                else if (HandleOther(frame, ref pongDue))
                {
                    received++;
                }
            }

            Volatile.Write(ref _received, received);
            return pongDue;
        }

        private void CheckSequence(long sequence)
        {
            if (sequence != _nextSequence)
            {
                if (sequence > _nextSequence)
                {
                    Missed += sequence - _nextSequence;
                }
                else
                {
                    Reordered++;
                }
            }

            _nextSequence = sequence + 1;
        }

        /// <summary>Decodes a frame fully (the first MESSAGE, and anything not a MESSAGE); returns whether it was a MESSAGE.</summary>
        private bool HandleOther(ReadOnlySequence<byte> frame, ref bool pongDue)
        {
            var reader = new MessagePackReader(frame);
            FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
            switch (type)
            {
                case FrameType.Message:
                    PublishFrame message = FrameDecoder.ReadMessage(ref reader, elements);
                    if (expected.Check(message) is { } mismatch)
                    {
                        if (Unexpected++ == 0)
                        {
                            log.Report(connection.Name, $"MESSAGE differs from what was published: {mismatch}");
                        }

                        return true;
                    }

                    if (_messageBodyLength < 0)
                    {
                        _messageBodyLength = (int)frame.Length;
                        _sequenceOffset = expected.HasSequence ? (int)(frame.Length - message.Payload.Length) : -1;
                    }

                    if (expected.HasSequence)
                    {
                        CheckSequence(BinaryPrimitives.ReadInt64LittleEndian(message.Payload.FirstSpan));
                    }

                    return true;
                case FrameType.Ping:
                    pongDue = true;
                    return false;
                case FrameType.Pong:
                    return false;
                case FrameType.Error:
                    ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                    ErrorFrames++;
                    if (error.Code == ErrorCode.MessagesDropped)
                    {
                        AnnouncedDropped += (long)Math.Min(error.Count, long.MaxValue);
                    }

                    log.Report(connection.Name, BrokerErrorException.Describe(error));
                    if (error.Fatal)
                    {
                        LostReason ??= BrokerErrorException.Describe(error);
                    }

                    return false;
                default:
                    Unexpected++;
                    log.Report(connection.Name, $"unexpected {type} frame");
                    return false;
            }
        }
    }

    /// <summary>
    /// The publishing connection: <see cref="PublishAsync"/> writes batches, <see cref="ReadAsync"/> answers
    /// PINGs and reports ERRORs on the same connection.
    /// </summary>
    internal sealed class FanoutPublisher(HeraldConnection connection, IFanoutSubscriber[] subscribers, ExpectedMessage expected, long maxLead, int batchBytes, RunLog log) : IFanoutPublisher
    {
        private long _published; // handed to the socket
        private long _sent;      // the socket accepted all of it
        private volatile string? _failure;

        public long Published => Volatile.Read(ref _published);

        public long Sent => Volatile.Read(ref _sent);

        public long BytesSent => connection.BytesSent;

        public long FlowWaits { get; private set; }

        public long ErrorFrames { get; private set; }

        public long Unexpected { get; private set; }

        public string? Failure => _failure;

        public async Task PublishAsync(RunState state, CancellationToken stop)
        {
            byte[] template = expected.PublishFrame;
            int frameLength = template.Length;
            int perBatch = (int)Math.Clamp(batchBytes / frameLength, 1, maxLead);
            byte[] batch = new byte[perBatch * frameLength];
            for (int i = 0; i < perBatch; i++)
            {
                template.CopyTo(batch, i * frameLength);
            }

            int sequenceOffset = expected.PublishSequenceOffset;
            long published = 0;
            try
            {
                while (!stop.IsCancellationRequested)
                {
                    long slowest = MinReceived(subscribers); // long.MaxValue when none is left: nothing to publish for
                    if (slowest == long.MaxValue || published + perBatch - slowest > maxLead)
                    {
                        FlowWaits++;
                        await Task.Delay(1, stop); // ~1 ms: far less than a lead of 10,000 takes to drain
                        continue;
                    }

                    if (sequenceOffset >= 0)
                    {
                        for (int i = 0; i < perBatch; i++)
                        {
                            BinaryPrimitives.WriteInt64LittleEndian(batch.AsSpan((i * frameLength) + sequenceOffset), published + i);
                        }
                    }

                    published += perBatch;
                    Volatile.Write(ref _published, published);
                    await connection.SendAsync(batch, CancellationToken.None); // not cancelled midway: a half-sent frame would break the stream
                    Volatile.Write(ref _sent, published);
                }
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                // the window is over
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e))
            {
                if (!state.Stopping)
                {
                    _failure ??= e.Message;
                    log.Report(connection.Name, $"send failed: {e.Message}");
                }
            }
        }

        public async Task ReadAsync(RunState state)
        {
            try
            {
                while (true)
                {
                    bool pongDue = false;
                    while (connection.TryReadFrame(out ReadOnlySequence<byte> frame))
                    {
                        var reader = new MessagePackReader(frame);
                        FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
                        if (type == FrameType.Ping)
                        {
                            pongDue = true;
                        }
                        else if (type == FrameType.Error)
                        {
                            ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                            ErrorFrames++;
                            log.Report(connection.Name, BrokerErrorException.Describe(error));
                            if (error.Fatal)
                            {
                                _failure ??= BrokerErrorException.Describe(error);
                            }
                        }
                        else if (type != FrameType.Pong)
                        {
                            Unexpected++;
                            log.Report(connection.Name, $"unexpected {type} frame");
                        }
                    }

                    if (pongDue)
                    {
                        await connection.SendPongAsync();
                    }

                    if (!await connection.ReceiveAsync())
                    {
                        if (!state.Stopping)
                        {
                            _failure ??= "the broker closed the connection";
                            log.Report(connection.Name, "disconnected: the broker closed the connection");
                        }

                        return;
                    }
                }
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e) || e is ProtocolException)
            {
                if (!state.Stopping)
                {
                    _failure ??= e.Message;
                    log.Report(connection.Name, $"disconnected: {e.Message}");
                }
            }
        }
    }
}
