using System.Buffers;
using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using MessagePack;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>rpc</c>: request/reply through the broker, the service of the WCF vs gRPC seed (<see cref="RpcCall"/>).
/// <para>
/// <c>--mode twoway</c> (default): each caller subscribes to its own inbox topic, then in a loop serializes a
/// request, publishes it with <c>reply_to</c> = its inbox, and waits for the reply (the next request goes out
/// from the reply's handler, so there is no thread hop per call). The responder deserializes the request,
/// computes and serializes the reply, and publishes it to the <c>reply_to</c>. One call in flight per caller,
/// so with one caller the figure is round-trip latency, with many how many such calls the target sustains.
/// </para>
/// <para>
/// <c>--mode oneway</c>: callers only publish requests (batched, flow-controlled by <c>--max-lead</c> like
/// fanout); the responder deserializes and counts them and checks each caller's call numbers for gaps and
/// reordering. The figure is calls/s.
/// </para>
/// <para>
/// Several responders: a topic delivers to every subscriber on every target, so responders sharing a topic
/// would each answer every call. Responder r therefore has its own topic <c>--topic.r</c>, and caller i calls
/// responder i mod R: each call is answered exactly once, and the load is spread evenly.
/// </para>
/// </summary>
internal sealed class RpcScenario : IScenario
{
    private const double MinimumWindowSeconds = 0.05; // shorter (an abort right after warm-up): no rate worth printing

    public string Name => "rpc";

    private static readonly Option<string> Mode = OptionKinds.Choice("mode", "twoway", ["twoway", "oneway"],
        "twoway: request/reply, one call in flight per caller; oneway: publish only, the responder counts");

    private static readonly Option<string> Payload = OptionKinds.Choice("payload", "small", RpcCall.Names,
        "small: GetData(int) -> string; composite: CompositeType -> CompositeType; list42: GetDataStream(0, 42) -> 42 CompositeTypes");

    private static readonly Option<int> Callers = OptionKinds.Integer("callers", 1, 1, 100_000, "caller connections");

    private static readonly Option<string?> Queue = OptionKinds.OptionalText("queue", "NAME",
        "responders share the one topic <topic> in the queue group NAME (herald, cluster and nats: each request reaches one responder), instead of a topic each");

    private static readonly Option<int> Responders = OptionKinds.Integer("responders", 1, 1, 10_000,
        "responder connections, each on its own topic <topic>.<r>; caller i calls responder i mod N");

    private static readonly Option<string?> ResponderToken = OptionKinds.OptionalText("responder-token", "T",
        "herald: responders present T instead of --token (another identity), so a restricted one answers through the reply permission a request grants");

    private static readonly Option<string> Topic = ScenarioOptions.Topic("bench.rpc");

    public string Description => """
        request/reply through the broker: calls/s and latency percentiles (WCF vs gRPC seed).
        Callers call a service through the broker; the responder deserializes each request and serializes its reply.
        --max-lead applies to oneway: most requests all callers together may be ahead of the responders.
        Exit codes: 0 ok, 1 a check failed (disconnection, wrong, lost or missing reply), 2 usage, 3 target unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } = [Mode, Payload, Callers, Queue, Responders, ResponderToken, .. WindowOptions.Options(Topic), ScenarioOptions.Out, .. TargetCommandOptions.All];

    public CommandSettings Read(ParseResult parsed)
    {
        TargetOptions targetOptions = TargetOptions.Read(parsed);
        RpcOptions options = RpcOptions.Read(parsed);
        if (options.ResponderToken is not null && targetOptions.Target != "herald")
        {
            throw new UsageException("--responder-token is for --target herald.");
        }

        if (options.Queue is not null && targetOptions.Target is not ("herald" or "cluster" or "nats"))
        {
            throw new UsageException($"--queue needs queue groups: herald, cluster or nats, not {targetOptions.Target}.");
        }

        return new(options, targetOptions);
    }

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (RpcOptions options, TargetOptions targetOptions) = Read(parsed).Of<RpcOptions>();
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"rpc {options.Mode}: {options.Callers} callers -> '{(options.Queue is null ? options.Window.Topic + ".*" : $"{options.Window.Topic}' (queue group {options.Queue})")}' -> {options.Responders} responder(s), {options.Call.Name} ({options.Call.Description}), warm-up {options.Window.Warmup} s, measured {options.Window.Seconds} s, {options.Window.Repeat} repetition(s); {targetOptions.Describe()}"));
        return await ScenarioSkeleton.RunRepetitionsAsync<RpcRun>(
            targetOptions,
            options.Window.Repeat,
            (target, log) => RunOnceAsync(target, targetOptions, options, log, cancellationToken),
            run => run.Print(options),
            (target, runs, log) => Report(target, options, runs, log),
            cancellationToken);
    }

    /// <summary>One repetition: connect, subscribe, warm up, measure, drain, close. Null when setup failed.</summary>
    private static async Task<RpcRun?> RunOnceAsync(ITarget target, TargetOptions targetOptions, RpcOptions options, RunLog log, CancellationToken cancellationToken)
    {
        string run = Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(4)); // inboxes unique across concurrent runs
        var phase = new RpcPhase();
        var oneway = options.Mode == "oneway" ? new OnewayLedger(options.Callers, options.Queue is null ? 1 : options.Responders) : null;
        IPubSubClient[] clients = [];
        try
        {
            // ---- Setup, bounded by --setup-timeout: responders are clients 0..R-1, callers R..R+C-1.
            var responders = new RpcResponder[options.Responders];
            var callers = new RpcCaller[options.Callers];
            long setupStart = Stopwatch.GetTimestamp();
            bool ready = await ScenarioSkeleton.SetUpClientsAsync(target, targetOptions.SetupTimeoutSeconds, async token =>
            {
                clients = options.ResponderToken is { } responderToken
                    ? await ScenarioClients.ConnectAsync(target, 0, options.Responders + options.Callers, token,
                        (i, t) => i < options.Responders ? ((HeraldTarget)target).ConnectAsync(i, responderToken, t) : target.ConnectAsync(i, t))
                    : await ScenarioClients.ConnectAsync(target, 0, options.Responders + options.Callers, token);
                for (int r = 0; r < responders.Length; r++)
                {
                    responders[r] = new RpcResponder(clients[r], $"responder {r}", options.Call, oneway, log, r);
                }

                for (int i = 0; i < callers.Length; i++)
                {
                    string inbox = string.Create(CultureInfo.InvariantCulture, $"{clients[options.Responders + i].InboxPrefix}.lt{run}.c{i}"); // spec §7: under the identity's prefix
                    callers[i] = new RpcCaller(i, clients[options.Responders + i], RequestTopic(options, i % options.Responders), inbox, options.Call, phase, oneway, log);
                }

                await ScenarioClients.SubscribeAllAsync(responders.Length, (r, t) => options.Queue is { } queue
                    ? clients[r].SubscribeAsync(RequestTopic(options, r), queue, responders[r].OnRequest, t)
                    : clients[r].SubscribeAsync(RequestTopic(options, r), responders[r].OnRequest, t), token);
                if (oneway is null)
                {
                    await ScenarioClients.SubscribeAllAsync(callers.Length, (i, t) => callers[i].Client.SubscribeAsync(callers[i].Inbox, callers[i].OnReply, t), token);
                }
            }, cancellationToken);
            if (!ready)
            {
                return null;
            }

            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"connected and subscribed {options.Responders} responder(s) + {options.Callers} callers in {Stopwatch.GetElapsedTime(setupStart).TotalSeconds:F2} s"));

            // ---- Run.
            using var stopSending = new CancellationTokenSource();
            Task sending = Task.CompletedTask;
            if (oneway is null)
            {
                foreach (RpcCaller caller in callers)
                {
                    caller.Start();
                }
            }
            else
            {
                long leadPerCaller = Math.Max(1, ScenarioClients.LeadWithin(options.Window.MaxLead, clients.Take(options.Responders)) / options.Callers);
                sending = Task.WhenAll(callers.Select(c => Task.Run(() => c.SendOnewayAsync(leadPerCaller, stopSending.Token))));
            }

            IReadOnlyList<Process> server = target.ServerProcesses;
            WindowResult<RpcSnapshot> window = await MeasuredWindow.RunAsync(
                options.Window.Warmup,
                options.Window.Seconds,
                () => RpcSnapshot.Take(callers, oneway, server),
                (now, previous, current, measuring) => Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"  {now,5:F1}s  calls/s {(current.Calls - previous.Calls) / current.Seconds(previous),11:N0}{(measuring ? "" : "  (warm-up)")}")),
                () => responders.FirstOrDefault(r => r.Client.Failure is not null) is { } failed ? $"{failed.Name} failed: {failed.Client.Failure}"
                    : callers.All(c => c.Client.Failure is not null) ? "every caller was disconnected"
                    : null,
                phase.StartMeasuring,
                cancellationToken);
            phase.Finish();

            // ---- Stop: calls in flight (twoway) or requests sent (oneway) get --grace seconds to be answered.
            await ScenarioSkeleton.StopAndDrainAsync(
                stopSending, sending, options.Window.Grace, window.Interrupted, () => callers.Any(c => c.Client.Failure is null && c.Outstanding > 0), pollMilliseconds: 5);

            long unanswered = callers.Where(c => c.Client.Failure is null).Sum(c => c.Outstanding);
            string?[] lost = [.. clients.Select(c => c.Failure)]; // before closing: a client may call its own close a failure
            long errors = clients.Sum(c => c.Errors);
            return RpcRun.From(options, window, callers, responders, oneway, lost, errors, unanswered, log);
        }
        finally
        {
            phase.Finish();
            await ScenarioClients.DisposeAllAsync(clients);
        }
    }

    /// <summary>Responder r's topic: <c>&lt;topic&gt;.&lt;r&gt;</c>; with <c>--queue</c>, the one topic every responder shares in the group.</summary>
    private static string RequestTopic(RpcOptions options, int responder) =>
        options.Queue is null ? string.Create(CultureInfo.InvariantCulture, $"{options.Window.Topic}.{responder}") : options.Window.Topic;

    private static int Report(ITarget target, RpcOptions options, List<RpcRun> runs, RunLog log)
    {
        List<RpcRun> measured = [.. runs.Where(r => r.Measured)];
        List<Headline> headlines = [Headline.Of("calls/s", "calls/s", higherIsBetter: true, [.. measured.Select(r => r.CallsPerSecond)])];
        if (options.Mode == "twoway")
        {
            headlines.Add(Headline.Of("p50 latency us", "us", higherIsBetter: false, [.. measured.Where(r => r.Latency.Count > 0).Select(r => r.Latency.Percentile(50))]));
            headlines.Add(Headline.Of("p99 latency us", "us", higherIsBetter: false, [.. measured.Where(r => r.Latency.Count > 0).Select(r => r.Latency.Percentile(99))]));
        }

        return ScenarioSkeleton.Report(target, "rpc", $"rpc {options.Mode} {options.Call.Name}", runs, headlines, options.Out, json =>
        {
            json.WriteString("mode", options.Mode);
            json.WriteString("payload", options.Call.Name);
            json.WriteString("call", options.Call.Description);
            json.WriteNumber("callers", options.Callers);
            json.WriteNumber("responders", options.Responders);
            if (options.Queue is { } queue)
            {
                json.WriteString("queue", queue);
            }
            options.Window.Write(json);
        }, log);
    }

    internal sealed record RpcOptions(string Mode, RpcCall Call, int Callers, int Responders, WindowOptions Window, string? Out, string? ResponderToken = null, string? Queue = null)
    {
        public static RpcOptions Read(ParseResult options) => new(
            options.GetRequiredValue(RpcScenario.Mode),
            RpcCall.Of(options.GetRequiredValue(RpcScenario.Payload)),
            options.GetValue(RpcScenario.Callers),
            options.GetValue(RpcScenario.Responders),
            WindowOptions.Read(options, RpcScenario.Topic),
            options.GetValue(ScenarioOptions.Out),
            options.GetValue(RpcScenario.ResponderToken),
            options.GetValue(RpcScenario.Queue));
    }

    internal readonly record struct RpcSnapshot(ResourceSnapshot Resources, long Calls)
    {
        /// <summary>Twoway: calls completed (reply checked); oneway: requests the responders deserialized.</summary>
        public static RpcSnapshot Take(RpcCaller[] callers, OnewayLedger? oneway, IReadOnlyList<Process> server)
        {
            long calls = 0;
            if (oneway is not null)
            {
                calls = oneway.TotalReceived;
            }
            else
            {
                foreach (RpcCaller caller in callers)
                {
                    calls += caller.Completed;
                }
            }

            return new RpcSnapshot(ResourceSnapshot.Take(server), calls);
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
    /// Oneway bookkeeping per caller: requests received by the responders and the next call number expected.
    /// Threading: entry i is written only by the responder that serves caller i (i mod R), read by anyone.
    /// </summary>
    /// <remarks>
    /// With <c>--queue</c> a caller's requests are spread over the group's responders, each of which sees its
    /// share in order but with gaps: each (caller, responder) pair then only has to rise, and a loss shows as a
    /// request never received (unanswered at the end). A request given to two members is caught by twoway mode
    /// (the second reply is unexpected), not here.
    /// </remarks>
    internal sealed class OnewayLedger(int callers, int sharedBy = 1)
    {
        private readonly long[] _received = new long[callers];
        private readonly long[] _next = Enumerable.Repeat(1L, callers).ToArray();
        private readonly long[] _last = new long[callers * sharedBy]; // queue group: the last call each responder saw of each caller

        private long _missing;   // several responders may add: interlocked
        private long _reordered;

        public long Missing => Interlocked.Read(ref _missing);

        public long Reordered => Interlocked.Read(ref _reordered);

        public long Received(int caller) => Volatile.Read(ref _received[caller]);

        public long TotalReceived
        {
            get
            {
                long sum = 0;
                for (int i = 0; i < _received.Length; i++)
                {
                    sum += Volatile.Read(ref _received[i]);
                }

                return sum;
            }
        }

        /// <summary>Records call <paramref name="call"/> of <paramref name="caller"/> as responder <paramref name="responder"/> got it; false when the caller is unknown.</summary>
        public bool Record(int caller, long call, int responder = 0)
        {
            if ((uint)caller >= (uint)_received.Length)
            {
                return false;
            }

            if (sharedBy > 1)
            {
                ref long last = ref _last[(caller * sharedBy) + responder]; // only this responder's receive loop writes it
                if (call <= last)
                {
                    Interlocked.Increment(ref _reordered);
                }

                last = Math.Max(last, call);
                Interlocked.Increment(ref _received[caller]);
                return true;
            }

            if (call != _next[caller])
            {
                if (call > _next[caller])
                {
                    Interlocked.Add(ref _missing, call - _next[caller]);
                }
                else
                {
                    Interlocked.Increment(ref _reordered);
                }
            }

            _next[caller] = call + 1;
            Volatile.Write(ref _received[caller], _received[caller] + 1);
            return true;
        }
    }

    /// <summary>
    /// One responder: deserializes every request, and in twoway mode serializes and publishes the reply to its
    /// reply_to (the client sends all the replies to one received batch in one write).
    /// Threading: <see cref="OnRequest"/> runs on the client's receive loop and writes every field; the
    /// counters are read after the run.
    /// </summary>
    internal sealed class RpcResponder(IPubSubClient client, string name, RpcCall call, OnewayLedger? oneway, RunLog log, int index = 0)
    {
        private readonly ArrayBufferWriter<byte> _reply = new(4096);
        private readonly HashSet<string> _replyTopics = new(StringComparer.Ordinal); // reply_to strings seen, so a reply costs no string allocation
        private byte[] _request = new byte[4096];

        public IPubSubClient Client => client;

        public string Name => name;

        public long Requests { get; private set; }

        public long Unexpected { get; private set; }

        public void OnRequest(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
        {
            if (payload.Length > _request.Length)
            {
                _request = new byte[payload.Length * 2];
            }

            payload.CopyTo(_request); // MessagePack reads from memory, the span lives only during this call
            ReadOnlyMemory<byte> request = _request.AsMemory(0, payload.Length);
            try
            {
                if (oneway is not null)
                {
                    (int caller, long number) = call.Answer(request, null);
                    if (!oneway.Record(caller, number, index))
                    {
                        Wrong($"request from unknown caller {caller}");
                    }
                }
                else if (replyTo.IsEmpty)
                {
                    Wrong("request without reply_to");
                    return;
                }
                else
                {
                    _reply.ResetWrittenCount();
                    call.Answer(request, _reply);
                    client.Publish(ReplyTopic(replyTo), _reply.WrittenSpan);
                }

                Requests++;
            }
            catch (MessagePackSerializationException e)
            {
                Wrong($"request does not deserialize: {e.Message}");
            }
        }

        private string ReplyTopic(ReadOnlySpan<byte> replyTo)
        {
            Span<char> chars = stackalloc char[256];
            if (replyTo.Length <= chars.Length && Encoding.UTF8.TryGetChars(replyTo, chars, out int length)
                && _replyTopics.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(chars[..length], out string? known))
            {
                return known;
            }

            string topic = Encoding.UTF8.GetString(replyTo);
            _replyTopics.Add(topic);
            return topic;
        }

        private void Wrong(string why)
        {
            if (Unexpected++ == 0)
            {
                log.Report(name, why);
            }
        }
    }

    /// <summary>
    /// One caller. Twoway: <see cref="Start"/> sends the first request, and <see cref="OnReply"/> (on the
    /// client's receive loop) checks each reply, records its latency and sends the next request, so exactly one
    /// call is in flight. Oneway: <see cref="SendOnewayAsync"/> publishes requests in a loop.
    /// Threading: one of those writes the fields at a time; others read <see cref="Completed"/> and
    /// <see cref="Outstanding"/> while it runs, the rest after the run.
    /// </summary>
    internal sealed class RpcCaller(int id, IPubSubClient client, string requestTopic, string inbox, RpcCall call, RpcPhase phase, OnewayLedger? oneway, RunLog log)
    {
        private readonly byte[] _inbox = Encoding.UTF8.GetBytes(inbox);
        private readonly ArrayBufferWriter<byte> _request = new(4096);
        private byte[] _replyCopy = new byte[4096];
        private long _call;
        private long _started; // Stopwatch timestamp of the call in flight, taken before its request is serialized
        private long _completed;
        private long _sent;
        private volatile bool _awaiting;

        public IPubSubClient Client => client;

        public string Inbox => inbox;

        public Latencies Latency { get; } = new();

        public long Completed => Volatile.Read(ref _completed);

        /// <summary>Twoway: 1 while a call waits for its reply; oneway: requests sent and not yet received by a responder.</summary>
        public long Outstanding => oneway is null ? (_awaiting ? 1 : 0) : Math.Max(0, Volatile.Read(ref _sent) - oneway.Received(id));

        public long Unexpected { get; private set; }

        public string? SendFailure { get; private set; }

        public void Start() => Send();

        public void OnReply(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
        {
            if (!_awaiting)
            {
                Wrong("a reply when no call was in flight");
                return;
            }

            if (payload.Length > _replyCopy.Length)
            {
                _replyCopy = new byte[payload.Length * 2];
            }

            payload.CopyTo(_replyCopy);
            string? mismatch;
            try
            {
                mismatch = call.CheckReply(_replyCopy.AsMemory(0, payload.Length), id, _call);
            }
            catch (MessagePackSerializationException e)
            {
                mismatch = $"reply does not deserialize: {e.Message}";
            }

            if (mismatch is not null)
            {
                Wrong(mismatch); // and keep waiting: the end of the run reports the call unanswered
                return;
            }

            long now = Stopwatch.GetTimestamp();
            if (phase.Measuring)
            {
                Latency.RecordTicks(_started, now);
            }

            _awaiting = false;
            Volatile.Write(ref _completed, _completed + 1);
            if (!phase.Finished)
            {
                Send();
            }
        }

        public async Task SendOnewayAsync(long maxLead, CancellationToken stop)
        {
            Debug.Assert(oneway is not null);
            try
            {
                while (!stop.IsCancellationRequested && client.Failure is null)
                {
                    if (_sent - oneway.Received(id) >= maxLead)
                    {
                        await client.FlushAsync(stop); // what is buffered must go out, or the responder never catches up
                        await Task.Delay(1, stop);
                        continue;
                    }

                    _request.ResetWrittenCount();
                    call.WriteRequest(_request, id, _sent + 1);
                    ValueTask appended = client.PublishAsync(requestTopic, _request.WrittenMemory, sendNow: false, cancellationToken: stop);
                    Volatile.Write(ref _sent, _sent + 1); // copied into the send buffer already; the wait is for room
                    await appended;
                }
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                // the window is over
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e))
            {
                SendFailure ??= e.Message;
            }

            try
            {
                await client.FlushAsync(CancellationToken.None); // the caller bounds the wait with --grace
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e))
            {
                SendFailure ??= e.Message;
            }
        }

        private void Send()
        {
            _started = Stopwatch.GetTimestamp();
            _call++;
            _request.ResetWrittenCount();
            call.WriteRequest(_request, id, _call);
            _awaiting = true;
            client.Publish(requestTopic, _request.WrittenSpan, _inbox);
        }

        private void Wrong(string why)
        {
            if (Unexpected++ == 0)
            {
                log.Report(string.Create(CultureInfo.InvariantCulture, $"caller {id}"), why);
            }
        }
    }

    /// <summary>What one repetition measured and found.</summary>
    internal sealed record RpcRun(
        bool Measured,
        bool Interrupted,
        List<string> Failures,
        double Seconds,
        long Calls,
        Latencies Latency,
        long Answered,
        long Unexpected,
        long Missing,
        long Reordered,
        long Errors,
        int Disconnected,
        long Unanswered,
        ResourceUsage? Resources) : IScenarioRun
    {
        IReadOnlyList<string> IScenarioRun.Failures => Failures;

        public double CallsPerSecond => Seconds > 0 ? Calls / Seconds : 0;

        public static RpcRun From(RpcOptions options, WindowResult<RpcSnapshot> window, RpcCaller[] callers, RpcResponder[] responders, OnewayLedger? oneway, string?[] lost, long errors, long unanswered, RunLog log)
        {
            List<string> failures = ScenarioSkeleton.WindowFailures(window.Aborted, lost, "connections");
            int disconnected = lost.Count(l => l is not null);

            if (callers.FirstOrDefault(c => c.SendFailure is not null) is { } failedCaller)
            {
                failures.Add($"a caller could not send: {failedCaller.SendFailure}");
            }

            long unexpected = callers.Sum(c => c.Unexpected) + responders.Sum(r => r.Unexpected);
            if (unexpected > 0)
            {
                failures.Add($"{unexpected:N0} requests or replies were wrong or not expected (see the events above)");
            }

            long missing = oneway?.Missing ?? 0, reordered = oneway?.Reordered ?? 0;
            if (missing > 0)
            {
                failures.Add($"{missing:N0} requests missing from callers' sequences");
            }

            if (reordered > 0)
            {
                failures.Add($"{reordered:N0} requests arrived out of order or twice");
            }

            if (unanswered > 0 && !window.Interrupted)
            {
                failures.Add(options.Mode == "oneway" ? $"{unanswered:N0} requests not received {options.Window.Grace} s after sending stopped" : $"{unanswered} calls got no reply within {options.Window.Grace} s");
            }

            if (errors > 0)
            {
                log.Report("rpc", $"the server sent {errors:N0} error replies");
            }

            var latency = new Latencies();
            foreach (RpcCaller caller in callers)
            {
                latency.Add(caller.Latency);
            }

            long answered = responders.Sum(r => r.Requests);
            if (window.Start is not { } start || window.End.Seconds(start) < MinimumWindowSeconds)
            {
                return new RpcRun(false, window.Interrupted, failures, 0, 0, latency, answered, unexpected, missing, reordered, errors, disconnected, unanswered, null);
            }

            long calls = window.End.Calls - start.Calls;
            if (calls == 0)
            {
                failures.Add("no call completed during the measured window");
            }

            return new RpcRun(true, window.Interrupted, failures, window.End.Seconds(start), calls, latency, answered, unexpected, missing, reordered, errors, disconnected, unanswered, ResourceUsage.Between(start.Resources, window.End.Resources));
        }

        public void Print(RpcOptions options)
        {
            CultureInfo c = CultureInfo.InvariantCulture;
            if (ScenarioSkeleton.PrintRepetitionStatus("rpc", this, Measured))
            {
                Console.WriteLine(string.Create(c, $"  parameters          : {options.Mode}, {options.Call.Description}, {options.Callers} callers, {options.Responders} responder(s)"));
                Console.WriteLine(string.Create(c, $"  measured window     : {Seconds:F2} s after {options.Window.Warmup} s warm-up"));
                Console.WriteLine(string.Create(c, $"  calls/s             : {CallsPerSecond:N0}  ({Calls:N0} calls; responders handled {Answered:N0} requests in all)"));
                if (options.Mode == "twoway")
                {
                    Console.WriteLine($"  latency             : {Latency.Describe()}");
                }

                Resources?.Print(Console.Out);
            }

            Console.WriteLine(string.Create(c, $"  checks              : {Unexpected:N0} wrong, {Missing:N0} missing, {Reordered:N0} reordered, {Errors:N0} error replies, {Disconnected} disconnected, {Unanswered:N0} unanswered at the end"));
            Outcome.PrintFailures(Failures);
        }

        public void Write(Utf8JsonWriter json) => ScenarioSkeleton.WriteRepetition(json, this, Measured, Seconds, Resources, figures =>
        {
            figures.WriteNumber("calls", Calls);
            figures.WriteNumber("callsPerSecond", CallsPerSecond);
            Latency.Write(figures, "latency");
            figures.WriteNumber("requestsHandled", Answered);
            figures.WriteNumber("unexpected", Unexpected);
            figures.WriteNumber("missing", Missing);
            figures.WriteNumber("reordered", Reordered);
            figures.WriteNumber("errorReplies", Errors);
            figures.WriteNumber("disconnected", Disconnected);
            figures.WriteNumber("unanswered", Unanswered);
        });
    }
}
