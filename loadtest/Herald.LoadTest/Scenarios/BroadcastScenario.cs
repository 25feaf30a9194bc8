using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.Protocol;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>broadcast</c>: the "broadcast scenario" of the Silverlight 3 polling-duplex study. M subscribers
/// on one topic; every P seconds the publisher sends one message (a burst) that the broker fans out to
/// all M; a burst is complete when every subscriber has it, and it must complete before the next one is
/// due. The result is the largest M at which every one of N consecutive bursts completed in time.
/// <para>
/// <c>--subscribers M</c> measures one M. <c>--search</c> finds the largest: it starts at <c>--start</c>,
/// doubles M while every burst of a run is on time, then bisects between the last good and the first bad
/// M until they are within <c>--precision</c> of each other, within <c>--max-seconds</c> in all.
/// </para>
/// </summary>
internal sealed class BroadcastScenario : IScenario
{
    public string Name => "broadcast";

    public string Summary => "M subscribers, one message every P s to all of them: largest M with every burst on time.";

    public string Usage => $"""
        broadcast: M subscribers on one topic; one message (a burst) every P s, fanned out to all M; a burst
        must reach every subscriber before the next one is due. Over TCP or HTTP long-poll.

          --transport tcp|longpoll  how subscribers and publisher reach the broker    (default tcp)
          --subscribers M        one run with M subscribers, or:
          --search               find the largest M with every burst on time:
            --start M            first M tried; doubled while good, then bisected   (default 1000)
            --precision PCT      stop when first bad - last good <= PCT % of last good (default 5)
            --max-subscribers M  never try more                                     (default 1000000, and the file limit)
            --max-seconds S      the whole search ends within S seconds            (default 600)
          --period P             seconds between bursts                            (default 1)
          --bursts N             measured bursts per run                           (default 100, the study's)
          --warmup-bursts K      bursts before them, reported but not judged       (default 1)
          --payload BYTES        message payload, >= 8 (burst number)              (default 128)
          --topic NAME           topic                                             (default bench.broadcast)
          --http-port N          long-poll: the broker's HTTP port                 (default 8080)
          --sources N            bind to 127.0.0.1..127.0.0.N (loopback broker only) (default: enough for
                                 {SourceAddresses.ConnectionsPerPair:N0} connections per (source, broker port) pair)
          --connect-rate R       open at most R subscribers per second             (default 10000)
          --connect-concurrency C  with at most C being set up at once            (default 100)
          --settle S             pause between setup and the first burst           (default 1)
          --grace S              after the last deadline: wait for stragglers      (default 2)
          --pause S              after closing a run, before the next              (default 2)
          --stop-on-miss [true|false]  end a run at its first missed burst        (default: with --search)
          --out FILE             also write every run as JSON
        {BrokerOptions.Usage}
        TCP: subscribers are spread over --ports (default 4502-4534), the publisher uses --port. Long-poll
        uses --http-port only. --setup-timeout defaults to 30 + 3 x M / connect-rate seconds.
        Each subscriber is one socket: raise the file limit first (ulimit -n 1048576), for the broker too.
        Exit codes: 0 good (search: some M was good), 1 a burst missed (search: even the smallest M),
        2 usage or file limit, 3 broker unreachable, 130 Ctrl+C.
        """;

    public async Task<int> RunAsync(CommandLine commandLine, CancellationToken cancellationToken)
    {
        BroadcastOptions options = BroadcastOptions.Read(commandLine);
        commandLine.RejectUnused();
        CultureInfo c = CultureInfo.InvariantCulture;

        Process? broker = options.Broker.FindBrokerProcess();
        int maxSubscribers = CapByFileLimits(options, broker, out string? capNote);
        if (!options.Search && options.Subscribers > maxSubscribers)
        {
            Console.Error.WriteLine($"error: {capNote}");
            return ExitCodes.Usage;
        }

        Console.WriteLine(string.Create(c,
            $"broadcast: {options.Transport.ToString().ToLowerInvariant()}, one message every {options.Period} s to '{options.Topic}', {options.Bursts} bursts judged (+{options.WarmupBursts} warm-up), payload {options.Payload} B"));
        Console.WriteLine(options.Search
            ? string.Create(c, $"search: start at {options.Start:N0}, double while every burst is on time, bisect to {options.Precision * 100:0.#} %; at most {options.MaxSeconds} s and M <= {maxSubscribers:N0}")
            : string.Create(c, $"one run: M = {options.Subscribers:N0}"));
        Console.WriteLine(string.Create(c, $"pacing: at most {options.ConnectRate:N0} subscribers/s, {options.ConnectConcurrency} at once; settle {options.Settle} s, grace {options.Grace} s"));
        Console.WriteLine($"machine: {MachineInfo.Describe()}");
        if (capNote is not null)
        {
            Console.WriteLine($"note: {capNote}");
        }

        if (options.Transport == BroadcastTransportKind.LongPoll && !GcTuned)
        {
            Console.WriteLine($"note: {GcAdvice}");
        }

        var log = new RunLog();
        var runs = new List<BroadcastRunResult>();
        long searchStart = Stopwatch.GetTimestamp();
        string? searchEnd = null;
        using var deadline = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        if (options.Search)
        {
            deadline.CancelAfter(TimeSpan.FromSeconds(options.MaxSeconds));
        }

        int? good = null, bad = null;
        int m = options.Search ? Math.Min(options.Start, maxSubscribers) : options.Subscribers;
        while (true)
        {
            if (options.Search)
            {
                double remaining = options.MaxSeconds - Stopwatch.GetElapsedTime(searchStart).TotalSeconds;
                double estimate = EstimateSeconds(options, m, runs);
                if (estimate > remaining)
                {
                    searchEnd = string.Create(c, $"time cap: a run at M={m:N0} would take about {estimate:F0} s, {remaining:F0} s of --max-seconds {options.MaxSeconds} left");
                    break;
                }
            }

            Console.WriteLine();
            Console.WriteLine(string.Create(c, $"run {runs.Count + 1}: M={m:N0} ({Stopwatch.GetElapsedTime(searchStart).TotalSeconds:F0} s elapsed)"));
            BroadcastRunResult run = await BroadcastRun.ExecuteAsync(options, m, broker, log, deadline.Token);
            runs.Add(run);
            Console.WriteLine($"  => {run.OneLine()}");
            if (!options.Search)
            {
                break;
            }

            if (run.Inconclusive)
            {
                searchEnd = cancellationToken.IsCancellationRequested ? "interrupted"
                    : run.BrokerUnreachable ? "broker unreachable"
                    : !run.BrokerAlive ? "the broker process exited"
                    : "time cap reached during a run";
                break;
            }

            if (run.Good)
            {
                good = m;
            }
            else
            {
                bad = m;
            }

            if (bad is null)
            {
                if (m >= maxSubscribers)
                {
                    searchEnd = string.Create(c, $"M={m:N0} was good and is the most this search may try");
                    break;
                }

                m = (int)Math.Min(2L * m, maxSubscribers);
                continue;
            }

            int low = good ?? 0;
            if (bad.Value - low <= 1 || (low > 0 && bad.Value - low <= options.Precision * low))
            {
                searchEnd = string.Create(c, $"bracketed: {low:N0} good, {bad.Value:N0} bad");
                break;
            }

            m = Midpoint(low, bad.Value);
        }

        return Report(options, runs, good, bad, searchEnd, log, cancellationToken.IsCancellationRequested);
    }

    /// <summary>
    /// Whether the GC was given a large gen0 budget (or server GC) through the environment. A long-poll
    /// run keeps one request per session in flight, so every GC of the default ~10 MB gen0 budget copies
    /// all of their live objects: at 12,000 sessions that is a ~150 ms pause per GC, several per burst,
    /// right on the delivery path. The knob is read only from the environment, before Main runs.
    /// </summary>
    private static bool GcTuned =>
        Environment.GetEnvironmentVariable("DOTNET_GCgen0size") is { Length: > 0 }
        || Environment.GetEnvironmentVariable("DOTNET_gcServer") is "1";

    private const string GcAdvice =
        "the load tool allocates per poll while every session holds one in flight; run it with DOTNET_GCgen0size=0x10000000 (a 256 MiB gen0 budget) so its GC pauses do not delay deliveries (see loadtest/README.md)";

    /// <summary>A round midpoint (3 significant digits) strictly between <paramref name="low"/> and <paramref name="high"/>.</summary>
    internal static int Midpoint(int low, int high)
    {
        int mid = low + ((high - low) / 2);
        double scale = Math.Pow(10, Math.Max(0, Math.Floor(Math.Log10(Math.Max(mid, 1))) - 2));
        int rounded = (int)(Math.Round(mid / scale) * scale);
        return rounded > low && rounded < high ? rounded : mid;
    }

    /// <summary>
    /// A generous guess of how long a run at M takes: setup at the rate the last run reached (or the
    /// configured rate), the bursts, one more period, the grace, closing and the pause.
    /// </summary>
    private static double EstimateSeconds(BroadcastOptions options, int m, List<BroadcastRunResult> runs)
    {
        BroadcastRunResult? last = runs.LastOrDefault(r => r.SetupFailure is null && r.SetupSeconds > 0);
        double setupRate = last is null ? options.ConnectRate : Math.Min(options.ConnectRate, last.Subscribers / last.SetupSeconds);
        double closeRate = last is null || last.CloseSeconds <= 0 ? 5_000 : Math.Max(1_000, last.Subscribers / last.CloseSeconds);
        double bursts = (options.WarmupBursts + options.Bursts + 1) * options.Period;
        return (1.25 * ((m / setupRate) + (m / closeRate))) + options.Settle + bursts + options.Grace + options.Pause + 2;
    }

    /// <summary>The most subscribers the open-file limits of the tool and (with --broker-pid) the broker allow.</summary>
    private static int CapByFileLimits(BroadcastOptions options, Process? broker, out string? note)
    {
        note = null;
        int cap = options.MaxSubscribers;
        // Besides one socket per subscriber: the publisher, and for long-poll the connections that
        // session creation and deletion open while the polls hold theirs.
        int spare = 32 + (options.Transport == BroadcastTransportKind.LongPoll ? 2 * options.ConnectConcurrency : 0);
        int self = Environment.ProcessId;
        var limits = new List<(string Who, long? Limit, int? Open)> { ("the load tool", ProcessLimits.OpenFileLimit(), ProcessLimits.OpenFiles(self)) };
        if (broker is not null)
        {
            limits.Add(("the broker", ProcessLimits.OpenFileLimit(broker.Id), ProcessLimits.OpenFiles(broker.Id)));
        }

        foreach ((string who, long? limit, int? open) in limits)
        {
            if (limit is { } l && l - (open ?? 0) - spare < cap)
            {
                cap = (int)Math.Max(1, l - (open ?? 0) - spare);
                note = string.Create(CultureInfo.InvariantCulture,
                    $"{who} may open {l:N0} files and has {open ?? 0:N0} open, so M <= {cap:N0}; raise the limit (ulimit -n 1048576 in the shell that starts it; raising the hard limit needs CAP_SYS_RESOURCE)");
            }
        }

        return cap;
    }

    private static int Report(BroadcastOptions options, List<BroadcastRunResult> runs, int? good, int? bad, string? searchEnd, RunLog log, bool interrupted)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        BroadcastRunResult? best = good is { } g ? runs.LastOrDefault(r => r.Subscribers == g && r.Good) : null;
        Console.WriteLine();
        Console.WriteLine($"broadcast result ({options.Transport.ToString().ToLowerInvariant()}, P = {options.Period.ToString(c)} s, {options.Bursts} bursts judged per run{(options.Search ? ", search" : "")})");
        Console.WriteLine($"  machine             : {MachineInfo.Describe()}");
        foreach (BroadcastRunResult run in runs)
        {
            Console.WriteLine($"  run                 : {run.OneLine()}");
        }

        if (options.Search)
        {
            Console.WriteLine(string.Create(c, $"  search ended        : {searchEnd ?? "-"}"));
            Console.WriteLine(good is { } largest
                ? string.Create(c, $"  LARGEST GOOD M      : {largest:N0} subscribers with every one of {options.Bursts} bursts on time (P = {options.Period} s){(bad is { } b ? $"; {b:N0} was not" : "; no bad M found")}")
                : "  LARGEST GOOD M      : none: no M tried had every burst on time");
        }

        if ((best ?? runs.LastOrDefault()) is { SetupFailure: null } shown)
        {
            Console.WriteLine(string.Create(c, $"  at M={shown.Subscribers:N0}:"));
            Console.WriteLine(string.Create(c, $"    setup             : {shown.Describe}; {shown.SetupSeconds:F1} s to set up, {shown.CloseSeconds:F1} s to close"));
            Console.WriteLine(string.Create(c, $"    bursts            : {shown.BurstsOnTime} of {shown.BurstsPlanned} on time, {shown.BurstsSent} sent, {shown.BurstsLate} late, {shown.BurstsIncomplete} incomplete; warm-up: {string.Join(", ", shown.Bursts.Where(b => b.Warmup).Select(b => BroadcastRunResult.Ms(b.CompletionSeconds ?? double.PositiveInfinity)))}"));
            Console.WriteLine(string.Create(c, $"    completion        : worst {BroadcastRunResult.Ms(shown.WorstSeconds)}, p99 {BroadcastRunResult.Ms(shown.P99Seconds)}, p50 {BroadcastRunResult.Ms(shown.P50Seconds)} (publish to last subscriber)"));
            Console.WriteLine(string.Create(c, $"    deliveries        : {shown.MissedDeliveries:N0} missed, {shown.LateDeliveries:N0} later than P"));
            shown.Resources?.Print(Console.Out);
            if (shown.MachineCores is { } machine)
            {
                Console.WriteLine(string.Create(c, $"    whole machine     : {machine:F2} cores busy, {shown.OtherCores:F2} of them neither the tool's nor the broker's{(shown.OtherCores > 0.25 ? " -- other processes competed for the CPU: this figure is disturbed" : "")}"));
            }

            if (shown.BrokerRssLoadedMB is { } rss)
            {
                Console.WriteLine(string.Create(c, $"    broker memory     : RSS {shown.BrokerRssBeforeMB:F0} MB before setup, {rss:F0} MB loaded ({shown.BrokerOpenFiles?.ToString("N0", c) ?? "?"} open files), {shown.BrokerRssAfterMB:F0} MB {options.Pause} s after closing"));
            }

            Console.WriteLine(string.Create(c, $"    load tool memory  : RSS {shown.ToolRssMB:F0} MB loaded"));
            BurstOutcome[] judgedBursts = [.. shown.Bursts.Where(b => !b.Warmup)];
            if (judgedBursts.Length > 0)
            {
                double paused = judgedBursts.Sum(b => b.ToolGcPauseMs);
                Console.WriteLine(string.Create(c, $"    load tool GC      : {paused:F0} ms paused over the judged bursts, at most {judgedBursts.Max(b => b.ToolGcPauseMs):F0} ms within one; {shown.InducedGcs} GCs run between bursts"));
                if (paused > 0.05 * 1000 * options.Period * judgedBursts.Length && !GcTuned)
                {
                    Console.WriteLine($"    note              : the load tool was paused by its own GC for over 5 % of the time, which delays deliveries; {GcAdvice}");
                }
            }
            string counters = string.Join(", ", shown.Checks.Values.Select(v => $"{v.Key}={v.Value:N0}"));
            Console.WriteLine($"    counters          : {(counters.Length == 0 ? "-" : counters)}");
        }

        string[] disturbed = [.. runs.Where(r => r.OtherCores > 0.25).Select(r => string.Create(c, $"M={r.Subscribers:N0} ({r.OtherCores:F2} cores)"))];
        if (disturbed.Length > 0)
        {
            Console.WriteLine($"  disturbed runs      : other processes used CPU during {string.Join(", ", disturbed)}; repeat them on a quiet machine");
        }

        string[] problems = [.. runs.Where(r => r.Checks.DescribeProblems() is not null).Select(r => string.Create(c, $"M={r.Subscribers:N0}: {r.Checks.DescribeProblems()}"))];
        foreach (string problem in problems)
        {
            Console.WriteLine($"  broker/protocol     : {problem}");
        }

        if (log.Count > 0)
        {
            Console.WriteLine(string.Create(c, $"  events              : {log.Count:N0} (the first {Math.Min(log.Count, RunLog.MaxLines)} on stderr and in --out)"));
        }

        if (options.Out is { } path)
        {
            ResultFile.Write(path, "broadcast", json =>
            {
                WriteParameters(json, options);
                json.WriteStartObject("search");
                json.WriteBoolean("enabled", options.Search);
                if (good is { } gv)
                {
                    json.WriteNumber("largestGood", gv);
                }
                else
                {
                    json.WriteNull("largestGood");
                }

                if (bad is { } bv)
                {
                    json.WriteNumber("smallestBad", bv);
                }
                else
                {
                    json.WriteNull("smallestBad");
                }

                json.WriteString("ended", searchEnd);
                json.WriteEndObject();
                json.WriteStartArray("runs");
                foreach (BroadcastRunResult run in runs)
                {
                    run.Write(json);
                }

                json.WriteEndArray();
                Outcome.Write(json, problems, interrupted, log);
            });
            Console.WriteLine($"  result written to   : {path}");
        }

        if (interrupted)
        {
            return ExitCodes.Interrupted;
        }

        if (runs.Count > 0 && runs[0].BrokerUnreachable)
        {
            return ExitCodes.BrokerUnreachable;
        }

        return options.Search
            ? good is null ? ExitCodes.RunFailed : ExitCodes.Ok
            : runs.Count == 1 && runs[0].Good ? ExitCodes.Ok : ExitCodes.RunFailed;
    }

    private static void WriteParameters(Utf8JsonWriter json, BroadcastOptions options)
    {
        json.WriteStartObject("parameters");
        json.WriteString("transport", options.Transport.ToString().ToLowerInvariant());
        json.WriteString("host", options.Broker.Host);
        if (options.Transport == BroadcastTransportKind.Tcp)
        {
            json.WriteString("subscriberPorts", $"{options.Broker.FirstPort}-{options.Broker.LastPort}");
            json.WriteNumber("publisherPort", options.Broker.Port);
        }
        else
        {
            json.WriteNumber("httpPort", options.HttpPort);
        }

        json.WriteBoolean("search", options.Search);
        if (options.Search)
        {
            json.WriteNumber("start", options.Start);
            json.WriteNumber("precision", options.Precision);
            json.WriteNumber("maxSubscribers", options.MaxSubscribers);
            json.WriteNumber("maxSeconds", options.MaxSeconds);
        }
        else
        {
            json.WriteNumber("subscribers", options.Subscribers);
        }

        json.WriteNumber("periodSeconds", options.Period);
        json.WriteNumber("bursts", options.Bursts);
        json.WriteNumber("warmupBursts", options.WarmupBursts);
        json.WriteNumber("payloadBytes", options.Payload);
        json.WriteString("topic", options.Topic);
        json.WriteNumber("connectRate", options.ConnectRate);
        json.WriteNumber("connectConcurrency", options.ConnectConcurrency);
        json.WriteNumber("settleSeconds", options.Settle);
        json.WriteNumber("graceSeconds", options.Grace);
        json.WriteBoolean("stopOnMiss", options.StopOnMiss);
        json.WriteString("toolGcGen0Size", Environment.GetEnvironmentVariable("DOTNET_GCgen0size"));
        json.WriteString("toolGcServer", Environment.GetEnvironmentVariable("DOTNET_gcServer"));
        json.WriteEndObject();
    }
}

internal enum BroadcastTransportKind
{
    Tcp,
    LongPoll,
}

internal sealed record BroadcastOptions(
    BrokerOptions Broker,
    BroadcastTransportKind Transport,
    int Subscribers,
    bool Search,
    int Start,
    double Precision,
    int MaxSubscribers,
    double MaxSeconds,
    double Period,
    int Bursts,
    int WarmupBursts,
    int Payload,
    string Topic,
    int HttpPort,
    int? Sources,
    double ConnectRate,
    int ConnectConcurrency,
    double Settle,
    double Grace,
    double Pause,
    double? SetupTimeout,
    bool StopOnMiss,
    string? Out)
{
    public double SetupTimeoutFor(int subscribers) => SetupTimeout ?? (30 + (3.0 * subscribers / ConnectRate));

    public double CloseTimeoutFor(int subscribers) => 10 + (subscribers / 5_000.0);

    public static BroadcastOptions Read(CommandLine options)
    {
        BroadcastTransportKind transport = options.String("transport", "tcp") switch
        {
            "tcp" => BroadcastTransportKind.Tcp,
            "longpoll" or "long-poll" or "http" => BroadcastTransportKind.LongPoll,
            string other => throw new UsageException($"--transport must be tcp or longpoll, got '{other}'."),
        };

        bool portsGiven = options.Has("ports") | options.Has("port");
        bool httpPortGiven = options.Has("http-port");
        if (transport == BroadcastTransportKind.LongPoll && portsGiven)
        {
            throw new UsageException("--port and --ports are for --transport tcp; long-poll uses --http-port.");
        }

        if (transport == BroadcastTransportKind.Tcp && httpPortGiven)
        {
            throw new UsageException("--http-port is for --transport longpoll.");
        }

        bool setupTimeoutGiven = options.Has("setup-timeout");
        var broker = BrokerOptions.Read(options);
        if (!portsGiven)
        {
            broker = broker with { Port = 4502, FirstPort = 4502, LastPort = 4534 };
        }

        bool search = options.Flag("search");
        bool fixedRun = options.Has("subscribers");
        if (search == fixedRun)
        {
            throw new UsageException("Give either --subscribers M (one run) or --search (find the largest M).");
        }

        if (!search && (options.Has("start") || options.Has("precision") || options.Has("max-subscribers") || options.Has("max-seconds")))
        {
            throw new UsageException("--start, --precision, --max-subscribers and --max-seconds go with --search.");
        }

        string topic = options.String("topic", "bench.broadcast");
        try
        {
            Herald.Protocol.Topic.EncodeName(topic);
        }
        catch (ProtocolException e)
        {
            throw new UsageException($"--topic: {e.Message}");
        }

        double precision = 0.05;
        if (options.OptionalString("precision") is { } text)
        {
            if (!double.TryParse(text.TrimEnd('%'), NumberStyles.Float, CultureInfo.InvariantCulture, out double percent) || percent is <= 0 or > 100)
            {
                throw new UsageException($"--precision must be a percentage above 0 and at most 100, got '{text}'.");
            }

            precision = percent / 100;
        }

        int? sources = options.Has("sources") ? options.Int("sources", 1, 1, 250) : null;
        double setupTimeout = broker.SetupTimeoutSeconds;
        return new BroadcastOptions(
            broker,
            transport,
            fixedRun ? options.Int("subscribers", 1000, 1, 10_000_000) : 0,
            search,
            options.Int("start", 1000, 1, 10_000_000),
            precision,
            options.Int("max-subscribers", 1_000_000, 1, 10_000_000),
            options.Seconds("max-seconds", 600, 10, 24 * 3600),
            options.Seconds("period", 1, 0.01, 3600),
            options.Int("bursts", 100, 1, 1_000_000),
            options.Int("warmup-bursts", 1, 0, 1000),
            options.Int("payload", 128, BroadcastMessage.BurstBytes, 900 * 1024),
            topic,
            options.Int("http-port", 8080, 1, 65535),
            sources,
            options.Seconds("connect-rate", 10_000, 1, 10_000_000),
            options.Int("connect-concurrency", 100, 1, 100_000),
            options.Seconds("settle", 1, 0),
            options.Seconds("grace", 2, 0),
            options.Seconds("pause", 2, 0),
            setupTimeoutGiven ? setupTimeout : null,
            options.Has("stop-on-miss") ? options.Flag("stop-on-miss") : search,
            options.OptionalString("out"));
    }
}
