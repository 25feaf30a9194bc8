using System.Buffers;
using System.Buffers.Text;
using System.Diagnostics;
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>rpc</c>: request/reply round trips through the broker (spec §7). One responder subscribes to the
/// request topic and answers each request by publishing the same payload to its <c>reply_to</c>; each
/// caller subscribes to its own <c>_INBOX.&lt;unique&gt;.&gt;</c>, then in a loop publishes a request
/// with <c>reply_to = _INBOX.&lt;unique&gt;.&lt;n&gt;</c> and waits for that reply. One call in flight
/// per caller, so the figures are round-trip latency (two publications, four socket hops) and, with
/// several callers, how many such calls the broker sustains.
/// </summary>
internal sealed class RpcScenario : IScenario
{
    private const uint Sid = 1;
    private const double MinimumWindowSeconds = 0.05; // shorter (an abort right after warm-up): no rate worth printing

    public string Name => "rpc";

    public string Summary => "request/reply round trips through the broker: calls/s and latency percentiles.";

    public string Usage => $"""
        rpc: callers each keep one request in flight; one responder echoes every request to its reply_to.

          --callers N            caller connections, one call in flight each     (default 1)
          --payload BYTES        request and reply payload size                  (default 16)
          --seconds S            measured window                                 (default 10)
          --warmup S             warm-up before the window                       (default 2)
          --topic NAME           request topic                                   (default bench.rpc)
          --grace S              after the window: time allowed for calls in flight (default 3)
          --out FILE             also write the result as JSON
        {BrokerOptions.Usage}
        The responder connects to --port; callers are spread over --ports.
        Exit codes: 0 ok, 1 a check failed (disconnection, fatal ERROR, wrong or missing reply), 2 usage, 3 broker unreachable, 130 Ctrl+C.
        """;

    public async Task<int> RunAsync(CommandLine commandLine, CancellationToken cancellationToken)
    {
        RpcOptions options = RpcOptions.Read(commandLine);
        commandLine.RejectUnused();
        byte[] topic = Topic.EncodeName(options.Topic);
        byte[] payload = new byte[options.Payload];
        RandomNumberGenerator.Fill(payload);
        string run = Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(4)); // inboxes unique across concurrent runs

        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"rpc: {options.Callers} callers -> '{options.Topic}' -> 1 responder, payload {options.Payload} B, warm-up {options.Warmup} s, measured {options.Seconds} s"));
        Console.WriteLine($"machine: {MachineInfo.Describe()}");

        var log = new RunLog();
        var state = new RunState();
        HeraldConnection[] callerConnections = [];
        HeraldConnection? responderConnection = null;
        try
        {
            long setupStart = Stopwatch.GetTimestamp();
            using (var setup = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken))
            {
                setup.CancelAfter(TimeSpan.FromSeconds(options.Broker.SetupTimeoutSeconds));
                try
                {
                    BrokerEndpoints endpoints = await BrokerEndpoints.ResolveAsync(options.Broker.Host, options.Broker.FirstPort, options.Broker.LastPort, setup.Token);
                    Console.WriteLine($"broker: responder on {endpoints.Host}:{options.Broker.Port}, callers on {endpoints.Display}");
                    responderConnection = await HeraldConnection.ConnectAsync(endpoints.At(options.Broker.Port), "loadtest-rpc-responder", setup.Token);
                    await responderConnection.SubscribeAsync(Sid, options.Topic, setup.Token);
                    callerConnections = await HeraldConnection.ConnectManyAsync(
                        endpoints,
                        options.Callers,
                        i => $"loadtest-rpc-caller-{i}",
                        (connection, i, token) => connection.SubscribeAsync(Sid, $"{InboxOf(run, i)}.>", token),
                        setup.Token);
                }
                catch (Exception e) when (RunState.IsSetupFailure(e) && !cancellationToken.IsCancellationRequested)
                {
                    string why = e is OperationCanceledException ? $"setup did not finish within {options.Broker.SetupTimeoutSeconds} s" : e.Message;
                    Console.Error.WriteLine($"error: broker unreachable or unusable (responder {options.Broker.Host}:{options.Broker.Port}, callers {options.Broker.PortsDisplay}): {why}");
                    return ExitCodes.BrokerUnreachable;
                }
                catch (OperationCanceledException)
                {
                    return ExitCodes.Interrupted;
                }
            }

            WelcomeFrame welcome = responderConnection.Welcome;
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"connected 1 responder + {options.Callers} callers in {Stopwatch.GetElapsedTime(setupStart).TotalSeconds:F2} s; server '{welcome.ServerName}' protocol v{welcome.Version}, limits {Outcome.FormatLimits(welcome.Limits)}"));

            var phase = new RpcPhase();
            var responder = new RpcResponder(responderConnection, log);
            var callers = new RpcCaller[callerConnections.Length];
            for (int i = 0; i < callers.Length; i++)
            {
                callers[i] = new RpcCaller(callerConnections[i], topic, Encoding.ASCII.GetBytes($"{InboxOf(run, i)}."), payload, phase, log);
            }

            Process? brokerProcess = options.Broker.FindBrokerProcess();
            Task responding = responder.RunAsync(state);
            Task[] calling = [.. callers.Select(c => c.RunAsync(state))];

            WindowResult<RpcSnapshot> window = await MeasuredWindow.RunAsync(
                options.Warmup,
                options.Seconds,
                () => RpcSnapshot.Take(callers, brokerProcess),
                (now, previous, current, measuring) => Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"  {now,5:F1}s  calls/s {(current.Calls - previous.Calls) / current.Seconds(previous),11:N0}{(measuring ? "" : "  (warm-up)")}")),
                () => responder.Failure is { } f ? $"responder failed: {f}"
                    : callers.All(c => c.Closed) ? "every caller was disconnected"
                    : null,
                phase.StartMeasuring,
                cancellationToken);
            phase.Finish();

            // Callers stop after the call in flight; give its reply --grace seconds, then close everything.
            await RunState.WaitQuietlyAsync(Task.WhenAll(calling), TimeSpan.FromSeconds(window.Interrupted ? 0 : options.Grace));
            int outstanding = callers.Count(c => c.AwaitingReply);
            state.BeginStopping();
            RunState.CloseAll(callerConnections, responderConnection);
            await RunState.WaitQuietlyAsync(Task.WhenAll([.. calling, responding]), TimeSpan.FromSeconds(2));

            return Report(options, window, callers, responder, welcome, outstanding, log);
        }
        finally
        {
            state.BeginStopping();
            RunState.CloseAll(callerConnections, responderConnection);
        }
    }

    private static string InboxOf(string run, int caller) => string.Create(CultureInfo.InvariantCulture, $"{ProtocolConstants.InboxPrefix}lt{run}c{caller}");

    private static void WriteParameters(Utf8JsonWriter json, RpcOptions options)
    {
        json.WriteStartObject("parameters");
        json.WriteString("host", options.Broker.Host);
        json.WriteNumber("responderPort", options.Broker.Port);
        json.WriteString("callerPorts", $"{options.Broker.FirstPort}-{options.Broker.LastPort}");
        json.WriteNumber("callers", options.Callers);
        json.WriteNumber("payloadBytes", options.Payload);
        json.WriteNumber("seconds", options.Seconds);
        json.WriteNumber("warmupSeconds", options.Warmup);
        json.WriteString("topic", options.Topic);
        json.WriteEndObject();
    }

    private static int Report(RpcOptions options, WindowResult<RpcSnapshot> window, RpcCaller[] callers, RpcResponder responder, WelcomeFrame welcome, int outstanding, RunLog log)
    {
        var failures = new List<string>();
        if (window.Aborted is { } aborted)
        {
            failures.Add($"run aborted: {aborted}");
        }

        int disconnected = callers.Count(c => c.LostReason is not null);
        if (disconnected > 0)
        {
            failures.Add($"{disconnected} of {callers.Length} callers were disconnected (first: {callers.First(c => c.LostReason is not null).LostReason})");
        }

        if (responder.Failure is { } responderFailure && window.Aborted is null)
        {
            failures.Add($"responder failed: {responderFailure}");
        }

        long unexpected = callers.Sum(c => c.Unexpected) + responder.Unexpected;
        long errorFrames = callers.Sum(c => c.ErrorFrames) + responder.ErrorFrames;
        if (unexpected > 0)
        {
            failures.Add($"{unexpected:N0} frames were wrong or not expected (see the events above)");
        }

        if (outstanding > 0 && !window.Interrupted)
        {
            failures.Add($"{outstanding} calls got no reply within {options.Grace} s");
        }

        Console.WriteLine();
        if (window.Start is not { } start || window.End.Seconds(start) < MinimumWindowSeconds)
        {
            Console.WriteLine(window.Interrupted ? "rpc interrupted before the measured window: nothing measured." : "rpc stopped before the measured window: nothing measured.");
            Outcome.PrintFailures(failures);
            if (options.Out is { } unmeasuredPath)
            {
                ResultFile.Write(unmeasuredPath, "rpc", json =>
                {
                    WriteParameters(json, options);
                    Outcome.WriteBroker(json, welcome);
                    Outcome.Write(json, failures, window.Interrupted, log);
                });
            }

            return window.Interrupted ? ExitCodes.Interrupted : ExitCodes.RunFailed;
        }

        RpcSnapshot end = window.End;
        double seconds = end.Seconds(start);
        long calls = end.Calls - start.Calls;
        double callsPerSecond = calls / seconds;
        var latency = new LatencyHistogram();
        foreach (RpcCaller caller in callers)
        {
            latency.Add(caller.Latency);
        }

        var resources = ResourceUsage.Between(start.Resources, end.Resources);
        if (calls == 0)
        {
            failures.Add("no call completed during the measured window");
        }

        CultureInfo c = CultureInfo.InvariantCulture;
        static double Us(long ns) => ns / 1000.0;
        Console.WriteLine($"rpc result ({(window.Interrupted ? "INTERRUPTED" : failures.Count == 0 ? "OK" : "FAILED")})");
        Console.WriteLine($"  machine             : {MachineInfo.Describe()}");
        Console.WriteLine($"  broker              : '{welcome.ServerName}' v{welcome.Version}");
        Console.WriteLine(string.Create(c, $"  parameters          : {options.Callers} callers, 1 responder, payload {options.Payload} B"));
        Console.WriteLine(string.Create(c, $"  measured window     : {seconds:F2} s after {options.Warmup} s warm-up"));
        Console.WriteLine(string.Create(c, $"  calls/s             : {callsPerSecond:N0}  ({calls:N0} calls; responder answered {responder.Requests:N0} requests in all)"));
        Console.WriteLine(string.Create(c, $"  latency (us)        : p50 {Us(latency.ValueAtPercentile(50)):F1}  p90 {Us(latency.ValueAtPercentile(90)):F1}  p99 {Us(latency.ValueAtPercentile(99)):F1}  p99.9 {Us(latency.ValueAtPercentile(99.9)):F1}  max {Us(latency.Max):F1}  mean {latency.Mean / 1000:F1}  (min {Us(latency.Count > 0 ? latency.Min : 0):F1}, {latency.Count:N0} samples)"));
        Console.WriteLine(string.Create(c, $"  checks              : {unexpected:N0} unexpected frames, {errorFrames:N0} ERROR frames, {disconnected} disconnected, {outstanding} calls unanswered at the end"));
        resources.Print(Console.Out);
        Outcome.PrintFailures(failures);

        if (options.Out is { } path)
        {
            ResultFile.Write(path, "rpc", json =>
            {
                WriteParameters(json, options);
                Outcome.WriteBroker(json, welcome);
                json.WriteStartObject("results");
                json.WriteNumber("measuredSeconds", seconds);
                json.WriteNumber("calls", calls);
                json.WriteNumber("callsPerSecond", callsPerSecond);
                json.WriteStartObject("latencyMicroseconds");
                json.WriteNumber("p50", Us(latency.ValueAtPercentile(50)));
                json.WriteNumber("p90", Us(latency.ValueAtPercentile(90)));
                json.WriteNumber("p99", Us(latency.ValueAtPercentile(99)));
                json.WriteNumber("p999", Us(latency.ValueAtPercentile(99.9)));
                json.WriteNumber("max", Us(latency.Max));
                json.WriteNumber("min", Us(latency.Count > 0 ? latency.Min : 0));
                json.WriteNumber("mean", latency.Mean / 1000);
                json.WriteNumber("samples", latency.Count);
                json.WriteEndObject();
                json.WriteNumber("unexpectedFrames", unexpected);
                json.WriteNumber("errorFrames", errorFrames);
                json.WriteNumber("disconnectedCallers", disconnected);
                json.WriteNumber("unansweredCalls", outstanding);
                json.WriteEndObject();
                resources.Write(json);
                Outcome.Write(json, failures, window.Interrupted, log);
            });
            Console.WriteLine($"  result written to   : {path}");
        }

        return window.Interrupted ? ExitCodes.Interrupted : failures.Count == 0 ? ExitCodes.Ok : ExitCodes.RunFailed;
    }

    internal sealed record RpcOptions(BrokerOptions Broker, int Callers, int Payload, double Seconds, double Warmup, string Topic, double Grace, string? Out)
    {
        public static RpcOptions Read(CommandLine options)
        {
            var broker = BrokerOptions.Read(options);
            string topic = options.String("topic", "bench.rpc");
            try
            {
                Herald.Protocol.Topic.EncodeName(topic);
            }
            catch (ProtocolException e)
            {
                throw new UsageException($"--topic: {e.Message}");
            }

            return new RpcOptions(
                broker,
                options.Int("callers", 1, 1, 100_000),
                options.Int("payload", 16, 0, 900 * 1024),
                options.Seconds("seconds", 10, 0.1),
                options.Seconds("warmup", 2, 0),
                topic,
                options.Seconds("grace", 3, 0),
                options.OptionalString("out"));
        }
    }

    internal readonly record struct RpcSnapshot(ResourceSnapshot Resources, long Calls)
    {
        public static RpcSnapshot Take(RpcCaller[] callers, Process? broker)
        {
            long calls = 0;
            foreach (RpcCaller caller in callers)
            {
                calls += caller.Completed;
            }

            return new RpcSnapshot(ResourceSnapshot.Take(broker), calls);
        }

        public double Seconds(RpcSnapshot earlier) => Stopwatch.GetElapsedTime(earlier.Resources.Timestamp, Resources.Timestamp).TotalSeconds;
    }

    /// <summary>Warm-up, measuring, finished: read by every caller after each call. Thread-safe.</summary>
    internal sealed class RpcPhase
    {
        private volatile int _phase;

        public bool Measuring => _phase == 1;

        public bool Finished => _phase == 2;

        public void StartMeasuring() => _phase = 1;

        public void Finish() => _phase = 2;
    }

    /// <summary>
    /// One caller connection: publishes a request, reads until its reply, records the round trip.
    /// Threading: <see cref="RunAsync"/> writes every field; other tasks read <see cref="Completed"/> and
    /// <see cref="Closed"/> while it runs, the rest after it ended.
    /// </summary>
    internal sealed class RpcCaller(HeraldConnection connection, byte[] topic, byte[] inboxPrefix, byte[] payload, RpcPhase phase, RunLog log)
    {
        private static readonly double NanosecondsPerTick = 1e9 / Stopwatch.Frequency;

        private readonly byte[] _replyTopic = new byte[inboxPrefix.Length + 20]; // prefix + up to 20 digits of n
        private long _completed;
        private volatile bool _awaitingReply;
        private volatile bool _closed;

        public long Completed => Volatile.Read(ref _completed);

        public bool AwaitingReply => _awaitingReply;

        public bool Closed => _closed;

        public LatencyHistogram Latency { get; } = new();

        public string? LostReason { get; private set; }

        public long Unexpected { get; private set; }

        public long ErrorFrames { get; private set; }

        public async Task RunAsync(RunState state)
        {
            var request = new ArrayBufferWriter<byte>(payload.Length + 128);
            inboxPrefix.CopyTo(_replyTopic, 0);
            try
            {
                for (ulong n = 1; !phase.Finished; n++)
                {
                    Utf8Formatter.TryFormat(n, _replyTopic.AsSpan(inboxPrefix.Length), out int digits);
                    int replyLength = inboxPrefix.Length + digits;
                    request.ResetWrittenCount();
                    FrameWriter.WritePublish(request, topic, _replyTopic.AsSpan(0, replyLength), PayloadFlags.None, payload);

                    _awaitingReply = true;
                    long sent = Stopwatch.GetTimestamp();
                    await connection.SendAsync(request.WrittenMemory, CancellationToken.None);
                    if (!await ReceiveReplyAsync(replyLength))
                    {
                        Lose(state, "the broker closed the connection");
                        return;
                    }

                    long received = Stopwatch.GetTimestamp();
                    _awaitingReply = false;
                    if (phase.Measuring)
                    {
                        Latency.Record((long)((received - sent) * NanosecondsPerTick));
                    }

                    Volatile.Write(ref _completed, _completed + 1);
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

        [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder<>))]
        private async ValueTask<bool> ReceiveReplyAsync(int replyLength)
        {
            while (true)
            {
                bool pongDue = false;
                bool replied = ReadBuffered(replyLength, ref pongDue);
                if (pongDue)
                {
                    await connection.SendPongAsync();
                }

                if (replied)
                {
                    return true;
                }

                if (!await connection.ReceiveAsync())
                {
                    return false;
                }
            }
        }

        /// <summary>Handles buffered frames up to and including the reply; returns whether it came.</summary>
        private bool ReadBuffered(int replyLength, ref bool pongDue)
        {
            while (connection.TryReadFrame(out ReadOnlySequence<byte> frame))
            {
                var reader = new MessagePackReader(frame);
                FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
                switch (type)
                {
                    case FrameType.Message:
                        PublishFrame reply = FrameDecoder.ReadMessage(ref reader, elements);
                        if (reply.Sid == Sid && reply.Topic.FirstSpan.SequenceEqual(_replyTopic.AsSpan(0, replyLength)) && reply.Payload.FirstSpan.SequenceEqual(payload))
                        {
                            return true;
                        }

                        Unexpected++;
                        log.Report(connection.Name, $"unexpected reply: sid {reply.Sid}, topic '{reply.TopicString}', {reply.Payload.Length}-byte payload; waiting for '{Encoding.ASCII.GetString(_replyTopic, 0, replyLength)}'");
                        break;
                    case FrameType.Ping:
                        pongDue = true;
                        break;
                    case FrameType.Pong:
                        break;
                    case FrameType.Error:
                        ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                        ErrorFrames++;
                        log.Report(connection.Name, BrokerErrorException.Describe(error));
                        if (error.Fatal)
                        {
                            LostReason ??= BrokerErrorException.Describe(error);
                        }

                        break;
                    default:
                        Unexpected++;
                        log.Report(connection.Name, $"unexpected {type} frame");
                        break;
                }
            }

            return false;
        }
    }

    /// <summary>
    /// The responder connection: answers every request MESSAGE with a PUBLISH of the same payload to its
    /// reply_to, all the replies to one read batch in one send.
    /// Threading: <see cref="RunAsync"/> writes every field; others read them after it ended.
    /// </summary>
    internal sealed class RpcResponder(HeraldConnection connection, RunLog log)
    {
        private volatile string? _failure;

        public long Requests { get; private set; }

        public long Unexpected { get; private set; }

        public long ErrorFrames { get; private set; }

        public string? Failure => _failure;

        public async Task RunAsync(RunState state)
        {
            var replies = new ArrayBufferWriter<byte>(64 * 1024);
            try
            {
                while (true)
                {
                    bool pongDue = AnswerBuffered(replies);
                    if (replies.WrittenCount > 0)
                    {
                        await connection.SendAsync(replies.WrittenMemory, CancellationToken.None);
                        replies.ResetWrittenCount();
                    }

                    if (pongDue)
                    {
                        await connection.SendPongAsync();
                    }

                    if (!await connection.ReceiveAsync())
                    {
                        Fail(state, "the broker closed the connection");
                        return;
                    }
                }
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e) || e is ProtocolException)
            {
                Fail(state, e.Message);
            }
        }

        private void Fail(RunState state, string why)
        {
            if (!state.Stopping)
            {
                _failure ??= why;
                log.Report(connection.Name, $"disconnected: {why}");
            }
        }

        /// <summary>Encodes a reply for every buffered request into <paramref name="replies"/>; returns whether a PING asked for a PONG.</summary>
        private bool AnswerBuffered(ArrayBufferWriter<byte> replies)
        {
            bool pongDue = false;
            while (connection.TryReadFrame(out ReadOnlySequence<byte> frame))
            {
                var reader = new MessagePackReader(frame);
                FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
                switch (type)
                {
                    case FrameType.Message:
                        PublishFrame request = FrameDecoder.ReadMessage(ref reader, elements);
                        if (request.ReplyTo is { } replyTo)
                        {
                            FrameWriter.WritePublish(replies, replyTo.FirstSpan, default, request.Flags, request.Payload.FirstSpan);
                            Requests++;
                        }
                        else
                        {
                            Unexpected++;
                            log.Report(connection.Name, $"request on '{request.TopicString}' without reply_to");
                        }

                        break;
                    case FrameType.Ping:
                        pongDue = true;
                        break;
                    case FrameType.Pong:
                        break;
                    case FrameType.Error:
                        ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                        ErrorFrames++;
                        log.Report(connection.Name, BrokerErrorException.Describe(error));
                        if (error.Fatal)
                        {
                            _failure ??= BrokerErrorException.Describe(error);
                        }

                        break;
                    default:
                        Unexpected++;
                        log.Report(connection.Name, $"unexpected {type} frame");
                        break;
                }
            }

            return pongDue;
        }
    }
}
