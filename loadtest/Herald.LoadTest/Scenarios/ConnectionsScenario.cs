using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Security.Cryptography;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>connections</c>: how many idle connections (TCP) or sessions (long-poll) the server holds, and what
/// each costs it in memory. Clients are opened in steps through <see cref="ITarget.ConnectAsync"/>, each
/// subscribing to its own topic (an idle subscriber: nothing is published). After each step the run waits
/// <c>--settle</c> seconds and reads the server's RSS; the figure is (RSS - RSS before the first connection)
/// / connections. Then every client is closed and the RSS read once more (what the server gives back).
/// <para>
/// The count is bounded by the open-file limits of this tool and of the server (one socket each per TCP
/// connection): the steps are capped below the smaller of the two, and the report says so.
/// </para>
/// </summary>
internal sealed class ConnectionsScenario : IScenario
{
    public string Name => "connections";

    internal static readonly Option<string?> Steps = OptionKinds.OptionalText("steps", "LIST", "connection counts to stop at, e.g. 1000,5000,10000");

    internal static readonly Option<string?> Max = OptionKinds.OptionalText("max", "N|limit",
        "instead of --steps: double from --start up to N; `limit`: up to what the open-file limits of the tool and server allow (default 10000)");

    internal static readonly Option<int> Start = OptionKinds.Integer("start", 1000, 1, int.MaxValue, "first step with --max");

    internal static readonly Option<double> Settle = OptionKinds.Seconds("settle", 2, 0, 600, "wait after each step before reading RSS");

    internal static readonly Option<int> Concurrency = OptionKinds.Integer("concurrency", 64, 1, 10_000, "connects in flight at once");

    internal static readonly Option<int> Warmup = OptionKinds.Integer("warmup", 100, 0, 100_000, "connections opened and closed before the baseline");

    internal static readonly Option<int> ReceiveBuffer = OptionKinds.Integer("receive-buffer", 4096, 64, 16 * 1024 * 1024,
        "the tool's initial receive buffer in bytes per Herald TCP client (grows when a frame needs it); small, so the tool's memory does not bound the count");

    public string Description => """
        idle connections/sessions the server holds: server RSS per connection.
        Opens idle subscribers (one topic each) in steps; server RSS per connection at each step. Every repetition
        runs against a freshly started server. Steps are capped below the open-file limits (RLIMIT_NOFILE) of the tool and the server.
        Exit codes: 0 ok, 1 a connect failed or a held connection was closed, 2 usage, 3 server unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } = [Steps, Max, Start, Settle, Concurrency, Warmup, ReceiveBuffer, ScenarioOptions.Repeat, ScenarioOptions.Out, .. TargetCommandOptions.All];

    public CommandSettings Read(ParseResult parsed) => new(ConnectionsOptions.Read(parsed), null);

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        var options = (ConnectionsOptions)Read(parsed).Scenario;
        HeraldNode.TcpReceiveBufferSize.Value = options.ReceiveBuffer; // async-local: this run only

        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"connections: {options.Target.Describe()}, steps {options.StepsDisplay}, settle {options.Settle} s, warm-up {options.Warmup} connections, {options.Repeat} repetition(s)"));
        return await ScenarioSkeleton.RunOnFreshTargetsAsync(
            options.Target,
            options.Repeat,
            (target, repetition) => OnceAsync(target, repetition, options, cancellationToken),
            run => run.Print(Console.Out),
            (target, runs) => Report(target, options, runs),
            cancellationToken);
    }

    /// <summary>One ramp; null when the server could not be reached (printed) or Ctrl+C stopped it.</summary>
    private static async Task<ConnectionsRun?> OnceAsync(ITarget target, int repetition, ConnectionsOptions options, CancellationToken cancellationToken)
    {
        if (repetition == 1 && target is HeraldTarget herald && options.Target.Transport != "longpoll")
        {
            Console.WriteLine($"clients: to {herald.Endpoints.Display}, from {herald.Sources.Display}");
        }

        ConnectionsRun run;
        try
        {
            run = await ConnectionsRun.RunAsync(target, options, cancellationToken);
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            return null;
        }

        if ((run.Last?.Connections ?? 0) == 0 && run.Failure is { } unreachable)
        {
            Console.Error.WriteLine($"error: {target.Label} unreachable or unusable: {unreachable}");
            return null;
        }

        return run;
    }

    private static int Report(ITarget target, ConnectionsOptions options, List<ConnectionsRun> repetitions)
    {
        Headline[] headlines =
        [
            Headline.Of("server RSS per connection", "KB", higherIsBetter: false, [.. repetitions.Select(r => r.Last?.RssKbPerConnection).OfType<double>()]),
            Headline.Of("connections held", "connections", higherIsBetter: true, [.. repetitions.Select(r => (double)(r.Last?.Alive ?? 0))]),
        ];
        List<string> failures = ScenarioSkeleton.Failures(repetitions, i => repetitions.Count > 1 ? string.Create(CultureInfo.InvariantCulture, $"repetition {i}") : null);

        Console.WriteLine();
        foreach (Headline h in headlines)
        {
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"{h.Name,-26}: {h.Value,12:N1} {h.Unit}{(h.Repetitions > 1 ? $"  (min {h.Min:N1}, max {h.Max:N1}, {h.Repetitions} repetitions)" : "")}"));
        }

        if (repetitions[^1].Cap is { } cap)
        {
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"note: capped at {cap.Connections:N0} connections by {cap.Why}."));
        }

        if (options.OutFile is { } path)
        {
            ScenarioSkeleton.WriteResult(path, "connections", target, headlines, json =>
            {
                json.WriteString("steps", options.StepsDisplay);
                json.WriteNumber("settleSeconds", options.Settle);
                json.WriteNumber("concurrency", options.Concurrency);
                json.WriteNumber("warmupConnections", options.Warmup);
                json.WriteNumber("receiveBufferBytes", options.ReceiveBuffer);
                json.WriteNumber("repeat", options.Repeat);
                if (repetitions[^1].Cap is { } c)
                {
                    json.WriteNumber("cappedAt", c.Connections);
                    json.WriteString("cappedBy", c.Why);
                }
            }, serverRss: null, json => ScenarioSkeleton.WriteRows(json, "repetitions", repetitions), failures, interrupted: false, log: null);
            Console.WriteLine($"wrote {path}");
        }

        return ScenarioSkeleton.ExitCode(interrupted: false, failures);
    }
}

/// <summary>The options of <c>connections</c>, read and checked once. <see cref="Steps"/> are already capped.</summary>
internal sealed record ConnectionsOptions(
    TargetOptions Target,
    int[] Steps,
    double Settle,
    int Concurrency,
    int Warmup,
    int ReceiveBuffer,
    int Repeat,
    string? OutFile,
    ConnectionCap? Cap)
{
    public string StepsDisplay => string.Join(",", Steps.Select(s => s.ToString(CultureInfo.InvariantCulture)));

    public static ConnectionsOptions Read(ParseResult options)
    {
        TargetOptions target = TargetOptions.Read(options);
        string? stepsText = options.GetValue(ConnectionsScenario.Steps);
        string? maxText = options.GetValue(ConnectionsScenario.Max);
        int start = options.GetValue(ConnectionsScenario.Start);
        if (stepsText is not null && maxText is not null)
        {
            throw new UsageException("Give --steps or --max, not both.");
        }

        // The server's limit is only known once it runs; the tool's own limit bounds it here, and
        // ConnectionsRun checks the server's before the first connection.
        ConnectionCap? cap = ConnectionCap.OfTool(ConnectionCap.SocketsPerClient(target.Transport));
        int[] steps;
        if (stepsText is not null)
        {
            steps = [.. stepsText.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Select(ParseStep)];
            if (steps.Length == 0 || steps.Zip(steps.Skip(1)).Any(p => p.Second <= p.First))
            {
                throw new UsageException($"--steps must be increasing connection counts, e.g. 1000,5000,10000; got '{stepsText}'.");
            }
        }
        else
        {
            int max = maxText is null or "" ? 10_000
                : maxText == "limit" ? cap?.Connections ?? throw new UsageException("--max limit: the open-file limit is unknown on this system; give a number.")
                : ParseStep(maxText);
            var doubling = new List<int>();
            for (long s = Math.Min(start, max); s < max; s *= 2)
            {
                doubling.Add((int)s);
            }

            doubling.Add(max);
            steps = [.. doubling];
        }

        if (cap is { } c && steps[^1] > c.Connections)
        {
            steps = [.. steps.Where(s => s < c.Connections), c.Connections];
        }
        else
        {
            cap = null; // not binding
        }

        return new ConnectionsOptions(
            target,
            steps,
            options.GetValue(ConnectionsScenario.Settle),
            options.GetValue(ConnectionsScenario.Concurrency),
            options.GetValue(ConnectionsScenario.Warmup),
            options.GetValue(ConnectionsScenario.ReceiveBuffer),
            options.GetValue(ScenarioOptions.Repeat),
            options.GetValue(ScenarioOptions.Out),
            cap);
    }

    private static int ParseStep(string text) =>
        int.TryParse(text, NumberStyles.Integer, CultureInfo.InvariantCulture, out int n) && n >= 1 && n <= 10_000_000
            ? n
            : throw new UsageException($"A connection count must be an integer from 1 to 10000000, got '{text}'.");
}

/// <summary>The most connections the open-file limits allow, and whose limit it is.</summary>
internal sealed record ConnectionCap(int Connections, string Why)
{
    /// <summary>
    /// Sockets one client holds on each side: one for a TCP or WebSocket connection; two for a long-poll
    /// session (the held poll, and the kept-alive connection its subscribe and publish requests use).
    /// </summary>
    public static int SocketsPerClient(string transport) => transport is "longpoll" or "longpolling" ? 2 : 1;

    /// <summary>This tool's limit: <paramref name="perClient"/> descriptors per connection, less those already open and a spare.</summary>
    public static ConnectionCap? OfTool(int perClient) => Of(Environment.ProcessId, "the tool's", perClient);

    /// <summary>
    /// The server's limit (one descriptor per TCP connection, two when the server is this process, as a
    /// SignalR hub hosted by the tool), or null when unknown.
    /// </summary>
    public static ConnectionCap? OfServer(Process? server, int perClient)
    {
        if (server is null)
        {
            return null;
        }

        bool self = server.Id == Environment.ProcessId;
        return Of(server.Id, self ? "the tool's (which hosts the server)" : "the server's", self ? 2 * perClient : perClient);
    }

    private static ConnectionCap? Of(int pid, string whose, int perConnection)
    {
        if (ProcessLimits.OpenFileLimit(pid) is not { } limit || limit == long.MaxValue || ProcessLimits.OpenFiles(pid) is not { } open)
        {
            return null;
        }

        long room = (limit - open - SpareDescriptors) / perConnection;
        return new ConnectionCap((int)Math.Clamp(room, 1, int.MaxValue), string.Create(CultureInfo.InvariantCulture, $"{whose} open-file limit (RLIMIT_NOFILE {limit:N0}, {open:N0} already open)"));
    }

    /// <summary>Descriptors kept free in the tool and the server for everything else (runtime, listeners, logs).</summary>
    private const int SpareDescriptors = 256;
}

/// <summary>What one step measured: the figures after its connections were opened and had settled.</summary>
internal sealed record ConnectionStep(
    int Connections,
    int Alive,
    double ConnectSeconds,
    long? ServerRss,
    long? RssGrowth,
    long? GcHeap,
    long? GcHeapGrowth,
    long ToolRss)
{
    public double? RssKbPerConnection => RssGrowth is { } g && Connections > 0 ? g / 1024.0 / Connections : null;

    public double? HeapKbPerConnection => GcHeapGrowth is { } g && Connections > 0 ? g / 1024.0 / Connections : null;
}

/// <summary>
/// One ramp against one started server: warm-up, baseline, the steps, then close all. Not thread-safe:
/// one caller; the connects of a step run concurrently, each writing its own slot of the client array.
/// </summary>
internal sealed class ConnectionsRun : IScenarioRun
{
    private ConnectionsRun() { }

    public List<ConnectionStep> Steps { get; } = [];

    public ConnectionStep? Last => Steps.Count > 0 ? Steps[^1] : null;

    /// <summary>Why the ramp stopped early or a held connection ended; null when every step completed cleanly.</summary>
    public string? Failure { get; private set; }

    /// <summary>Never: Ctrl+C ends a ramp without a result.</summary>
    public bool Interrupted => false;

    public IReadOnlyList<string> Failures => Failure is { } f ? [f] : [];

    public long? BaselineRss { get; private set; }

    public long? BaselineHeap { get; private set; }

    public long? RssAfterClose { get; private set; }

    /// <summary>The open-file limit that capped the steps (the tool's or the server's), or null when none did.</summary>
    public ConnectionCap? Cap { get; private set; }

    public ResourceUsage Resources { get; private set; }

    public static async Task<ConnectionsRun> RunAsync(ITarget target, ConnectionsOptions options, CancellationToken cancellationToken)
    {
        var run = new ConnectionsRun();
        string topicPrefix = $"idle.{Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(4))}.";
        int[] steps = options.Steps;
        run.Cap = options.Cap;
        if (ConnectionCap.OfServer(target.ServerProcess, ConnectionCap.SocketsPerClient(target.Transport)) is { } serverCap && steps[^1] > serverCap.Connections)
        {
            steps = [.. steps.Where(s => s < serverCap.Connections), serverCap.Connections];
            run.Cap = serverCap;
        }

        if (run.Cap is { } cap)
        {
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"note: capped at {cap.Connections:N0} connections by {cap.Why}."));
        }

        var clients = new IPubSubClient?[steps[^1]];
        ResourceSnapshot start = ResourceSnapshot.Take(target.ServerProcesses);
        try
        {
            if (options.Warmup > 0)
            {
                // JIT, pools and per-port state on both sides, so the baseline excludes one-off costs.
                var warm = new IPubSubClient?[options.Warmup];
                string? why = await OpenAsync(target, warm, 0, warm.Length, topicPrefix + "warmup.", options, "warm-up", cancellationToken);
                await CloseAsync(warm, options.Concurrency);
                if (why is not null)
                {
                    run.Failure = why;
                    return run;
                }
            }

            await Task.Delay(TimeSpan.FromSeconds(options.Settle), cancellationToken);
            run.BaselineRss = TargetReport.ServerRss(target);
            run.BaselineHeap = await GcHeapAsync(target, cancellationToken);
            Console.WriteLine($"baseline: server RSS {Mb(run.BaselineRss)} MB{(run.BaselineHeap is { } h ? $", GC heap {Mb(h)} MB" : "")}");

            int open = 0;
            foreach (int step in steps)
            {
                long stepStart = Stopwatch.GetTimestamp();
                string? why = await OpenAsync(target, clients, open, step, topicPrefix, options, $"step {step:N0}", cancellationToken);
                double connectSeconds = Stopwatch.GetElapsedTime(stepStart).TotalSeconds;
                int opened = clients.Take(step).Count(c => c is not null);
                await Task.Delay(TimeSpan.FromSeconds(options.Settle), cancellationToken);
                int alive = clients.Take(step).Count(c => c is { Failure: null });
                long? rss = TargetReport.ServerRss(target);
                long? heap = await GcHeapAsync(target, cancellationToken);
                var measured = new ConnectionStep(
                    opened,
                    alive,
                    connectSeconds,
                    rss,
                    rss - run.BaselineRss,
                    heap,
                    heap - run.BaselineHeap,
                    Environment.WorkingSet);
                run.Steps.Add(measured);
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"  {opened,9:N0} connections ({alive:N0} alive) in {connectSeconds:F1} s: server RSS {Mb(rss)} MB, {measured.RssKbPerConnection:F2} KB/connection{(heap is null ? "" : $", GC heap {Mb(heap)} MB ({measured.HeapKbPerConnection:F2} KB/connection)")}"));
                if (why is not null || alive < opened)
                {
                    run.Failure = why ?? $"{opened - alive:N0} of {opened:N0} held connections were closed: {clients.First(c => c is { Failure: not null })!.Failure}";
                    break;
                }

                open = step;
            }
        }
        finally
        {
            await CloseAsync(clients, options.Concurrency);
        }

        await Task.Delay(TimeSpan.FromSeconds(options.Settle), cancellationToken);
        run.RssAfterClose = TargetReport.ServerRss(target);
        run.Resources = ResourceUsage.Between(start, ResourceSnapshot.Take(target.ServerProcesses));
        return run;
    }

    /// <summary>
    /// Opens clients <paramref name="from"/>..<paramref name="to"/>-1 into their slots, each subscribed to its
    /// own topic; a progress line per second on a terminal. Returns why it stopped early, or null.
    /// </summary>
    private static async Task<string?> OpenAsync(ITarget target, IPubSubClient?[] clients, int from, int to, string topicPrefix, ConnectionsOptions options, string what, CancellationToken cancellationToken)
    {
        using var setup = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        setup.CancelAfter(TimeSpan.FromSeconds(options.Target.SetupTimeoutSeconds));
        int done = from;
        using var progress = new Timer(_ => Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  {what}: {Volatile.Read(ref done):N0} / {to:N0} connected")));
        if (!Console.IsOutputRedirected)
        {
            progress.Change(TimeSpan.FromSeconds(1), TimeSpan.FromSeconds(1));
        }

        try
        {
            await Parallel.ForEachAsync(
                Enumerable.Range(from, to - from),
                new ParallelOptions { MaxDegreeOfParallelism = options.Concurrency, CancellationToken = setup.Token },
                async (i, token) =>
                {
                    IPubSubClient client = await target.ConnectAsync(i, token);
                    clients[i] = client;
                    await client.SubscribeAsync(topicPrefix + i.ToString(CultureInfo.InvariantCulture), Idle, token);
                    Interlocked.Increment(ref done);
                });
            return null;
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            throw;
        }
        catch (OperationCanceledException)
        {
            return $"{what}: connecting did not finish within {options.Target.SetupTimeoutSeconds} s ({Volatile.Read(ref done):N0} of {to:N0} connected)";
        }
        catch (Exception e) when (RunState.IsSetupFailure(e) || e is TargetUnavailableException)
        {
            return $"{what}: connection {Volatile.Read(ref done):N0} failed: {e.GetType().Name}: {e.Message}";
        }
    }

    private static readonly DeliveryHandler Idle = static (_, _, _) => { };

    private static async Task CloseAsync(IPubSubClient?[] clients, int concurrency)
    {
        await Parallel.ForEachAsync(clients.Where(c => c is not null), new ParallelOptions { MaxDegreeOfParallelism = concurrency }, async (c, _) =>
        {
            try
            {
                await c!.DisposeAsync();
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e))
            {
                // already closed
            }
        });
        Array.Clear(clients);
    }

    /// <summary>Herald's managed heap (GC heap size at its last collection; a cluster's: the nodes' sum) from <c>/varz</c>; null for other targets or when monitoring is off.</summary>
    private static Task<long?> GcHeapAsync(ITarget target, CancellationToken cancellationToken) =>
        HeraldMonitoring.SumAsync(target, cancellationToken, "process", "gc_heap_bytes");

    private static string Mb(long? bytes) => bytes is { } b ? (b / 1e6).ToString("F1", CultureInfo.InvariantCulture) : "?";

    public void Print(TextWriter output)
    {
        output.WriteLine();
        output.WriteLine("  connections      alive  connect s  server RSS MB  growth MB  KB/conn  GC heap MB  heap KB/conn  tool RSS MB");
        foreach (ConnectionStep s in Steps)
        {
            output.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"  {s.Connections,11:N0} {s.Alive,10:N0} {s.ConnectSeconds,10:F1} {Mb(s.ServerRss),14} {Mb(s.RssGrowth),10} {s.RssKbPerConnection,8:F2} {Mb(s.GcHeap),11} {s.HeapKbPerConnection,13:F2} {Mb(s.ToolRss),12}"));
        }

        output.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"  after closing all: server RSS {Mb(RssAfterClose)} MB (baseline {Mb(BaselineRss)} MB)"));
        if (Failure is { } f)
        {
            output.WriteLine($"  stopped: {f}");
        }

        Resources.Print(output);
    }

    public void Write(Utf8JsonWriter json)
    {
        json.WriteStartObject();
        ResultFile.WriteNumberOrNull(json, "baselineRssBytes", BaselineRss);
        ResultFile.WriteNumberOrNull(json, "baselineGcHeapBytes", BaselineHeap);
        ResultFile.WriteNumberOrNull(json, "rssAfterCloseBytes", RssAfterClose);
        json.WriteString("failure", Failure);
        json.WriteStartArray("steps");
        foreach (ConnectionStep s in Steps)
        {
            json.WriteStartObject();
            json.WriteNumber("connections", s.Connections);
            json.WriteNumber("alive", s.Alive);
            json.WriteNumber("connectSeconds", s.ConnectSeconds);
            ResultFile.WriteNumberOrNull(json, "serverRssBytes", s.ServerRss);
            ResultFile.WriteNumberOrNull(json, "serverRssGrowthBytes", s.RssGrowth);
            if (s.RssKbPerConnection is { } kb)
            {
                json.WriteNumber("serverRssKbPerConnection", kb);
            }

            ResultFile.WriteNumberOrNull(json, "gcHeapBytes", s.GcHeap);
            if (s.HeapKbPerConnection is { } hkb)
            {
                json.WriteNumber("gcHeapKbPerConnection", hkb);
            }

            json.WriteNumber("toolRssBytes", s.ToolRss);
            json.WriteEndObject();
        }

        json.WriteEndArray();
        Resources.Write(json);
        json.WriteEndObject();
    }
}
