using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
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
/// M until they are within <c>--precision</c> of each other. With <c>--periods 0.5,1,2</c> it does this for
/// each P in turn (and <c>--repeat</c> times), all within <c>--max-seconds</c>, and can chart M against P.
/// </para>
/// <para>
/// Herald is reached through two transports tuned to hold 100,000s of subscribers in little memory
/// (<see cref="BroadcastConnectionTransport"/> over TCP, TLS or WebSocket, <see cref="BroadcastLongPollTransport"/>); every other target
/// through its <see cref="IPubSubClient"/> (<see cref="BroadcastClientTransport"/>). The method and the
/// checks are the same for all.
/// </para>
/// </summary>
internal sealed class BroadcastScenario : IScenario
{
    public string Name => "broadcast";

    internal static readonly Option<int?> Subscribers = OptionKinds.OptionalInteger("subscribers", 1, 10_000_000, "M: one run per period with M subscribers (or --search)");

    internal static readonly Option<bool> Search = OptionKinds.Flag("search", "find the largest M with every burst on time, per period (or --subscribers)");

    internal static readonly Option<int> Start = OptionKinds.Integer("start", 1000, 1, 10_000_000, "--search: first M tried; doubled while good, then bisected");

    internal static readonly Option<string?> Precision = OptionKinds.OptionalText("precision", "PCT", "--search: stop when first bad - last good <= PCT % of last good (default 5)");

    internal static readonly Option<int> MaxSubscribers = OptionKinds.Integer("max-subscribers", 1_000_000, 1, 10_000_000, "--search: never try more (and the file limit)");

    internal static readonly Option<double> MaxSeconds = OptionKinds.Seconds("max-seconds", 600, 10, 24 * 3600,
        "--search: the whole run (every period, every repetition) ends within S seconds; each search gets an equal share of what is left");

    internal static readonly Option<double> Period = OptionKinds.Seconds("period", 1, 0.01, 3600, "seconds between bursts");

    internal static readonly Option<string?> Periods = OptionKinds.OptionalText("periods", "P1,P2,...", "several periods, searched (or run) in turn, e.g. 0.5,1,2");

    internal static readonly Option<int> Bursts = OptionKinds.Integer("bursts", 100, 1, 1_000_000, "measured bursts per run (100, the study's)");

    internal static readonly Option<int> WarmupBursts = OptionKinds.Integer("warmup-bursts", 1, 0, 1000, "bursts before them, reported but not judged");

    internal static readonly Option<int> Payload = OptionKinds.Integer("payload", 128, BroadcastMessage.BurstBytes, 900 * 1024, "message payload in bytes, >= 8 (burst number)");

    internal static readonly Option<string> Topic = ScenarioOptions.Topic("bench.broadcast");

    internal static readonly Option<int?> Sources = OptionKinds.OptionalInteger("sources", 1, 250,
        $"herald: bind to 127.0.0.1..127.0.0.N (loopback only) (default: enough for {SourceAddresses.ConnectionsPerPair:N0} connections per (source, server port) pair)");

    internal static readonly Option<double> ConnectRate = OptionKinds.Seconds("connect-rate", 10_000, 1, 10_000_000, "open at most R subscribers per second");

    internal static readonly Option<int> ConnectConcurrency = OptionKinds.Integer("connect-concurrency", 100, 1, 100_000, "with at most C being set up at once");

    internal static readonly Option<double> Settle = OptionKinds.Seconds("settle", 1, 0, 24 * 3600, "pause between setup and the first burst");

    internal static readonly Option<double> Grace = OptionKinds.Seconds("grace", 2, 0, 24 * 3600, "after the last deadline: wait for stragglers");

    internal static readonly Option<double> Pause = OptionKinds.Seconds("pause", 2, 0, 24 * 3600, "after closing a run, before the next");

    internal static readonly Option<bool> StopOnMiss = OptionKinds.Flag("stop-on-miss", "end a run at its first missed burst (default: with --search)");

    internal static readonly Option<string?> Chart = OptionKinds.OptionalText("chart", "PATH", "also draw M against P to PATH.svg and PATH.png (see the chart command)");

    public string Description => """
        M subscribers, one message every P s to all of them: largest M with every burst on time, per P.
        One message (a burst) every P s, fanned out to all M; a burst must reach every subscriber before the
        next one is due. --out writes every run (headlines: largest M on time per P). Herald uses its tuned
        transports: TCP subscribers spread over --ports, the publisher on the first port; long-poll on --http-port.
        Other targets: one client per subscriber through the target's client. --setup-timeout defaults to
        30 + 3 x M / connect-rate seconds here. Each subscriber is one socket: raise the file limit first
        (ulimit -n 1048576), for the server too.
        Exit codes: 0 good (search: some M was good at every period), 1 a burst missed (search: even the
        smallest M, at some period), 2 usage or file limit, 3 server unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } =
    [
        Subscribers, Search, Start, Precision, MaxSubscribers, MaxSeconds, Period, Periods, ScenarioOptions.Repeat, Bursts, WarmupBursts, Payload, Topic,
        Sources, ConnectRate, ConnectConcurrency, Settle, Grace, Pause, StopOnMiss, ScenarioOptions.Out, Chart, .. TargetCommandOptions.All,
    ];

    public CommandSettings Read(ParseResult parsed) => new(BroadcastOptions.Read(parsed), null);

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        var options = (BroadcastOptions)Read(parsed).Scenario;
        CultureInfo c = CultureInfo.InvariantCulture;

        await using ITarget target = await ScenarioSkeleton.StartAsync(options.Target, cancellationToken);
        int maxSubscribers = CapByFileLimits(options, target.ServerProcess, out string? capNote);
        if (!options.Search && options.Subscribers > maxSubscribers)
        {
            Console.Error.WriteLine($"error: {capNote}");
            return ExitCodes.Usage;
        }

        string periods = string.Join(", ", options.Periods.Select(p => p.ToString(c) + " s"));
        Console.WriteLine(string.Create(c,
            $"broadcast: {target.Label}, one message every P = {periods} to '{options.Topic}', {options.Bursts} bursts judged (+{options.WarmupBursts} warm-up), payload {options.Payload} B{(options.Repeat > 1 ? $", {options.Repeat} repetitions" : "")}"));
        Console.WriteLine(options.Search
            ? string.Create(c, $"search per period: start at {options.Start:N0}, double while every burst is on time, bisect to {options.Precision * 100:0.#} %; at most {options.MaxSeconds} s in all and M <= {maxSubscribers:N0}")
            : string.Create(c, $"one run per period: M = {options.Subscribers:N0}"));
        Console.WriteLine(string.Create(c, $"pacing: at most {options.ConnectRate:N0} subscribers/s, {options.ConnectConcurrency} at once; settle {options.Settle} s, grace {options.Grace} s"));
        if (capNote is not null)
        {
            Console.WriteLine($"note: {capNote}");
        }

        if (options.Transport == BroadcastTransportKind.LongPoll && !GcTuned)
        {
            Console.WriteLine($"note: {GcAdvice}");
        }

        var log = new RunLog();
        long started = Stopwatch.GetTimestamp();
        using var overall = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        if (options.Search)
        {
            overall.CancelAfter(TimeSpan.FromSeconds(options.MaxSeconds));
        }

        // Every period in turn, --repeat times: each search is one repetition of the skeleton, and the last
        // one to end interrupted or with the server gone ends them all.
        (double Period, int Repetition)[] searches = [.. Enumerable.Range(1, options.Repeat).SelectMany(r => options.Periods.Select(p => (p, r)))];
        int done = 0;
        (List<BroadcastPeriodResult> results, _) = await ScenarioSkeleton.RepeatAsync(searches.Length, _ => null, async () =>
        {
            (double period, int repetition) = searches[done];

            // Each search gets an equal share of the time left, so a slow first period cannot starve the others.
            double budget = (options.MaxSeconds - Stopwatch.GetElapsedTime(started).TotalSeconds) / (searches.Length - done++);
            Console.WriteLine();
            Console.WriteLine(string.Create(c, $"== P = {period} s{(options.Repeat > 1 ? $", repetition {repetition} of {options.Repeat}" : "")}{(options.Search ? $": search within {budget:F0} s" : "")}"));
            return await SearchAsync(options with { Period = period }, target, repetition, maxSubscribers, budget, log, overall.Token, cancellationToken);
        }, print: null, cancellationToken);

        return Report(options, target, searches.Length, results, log, cancellationToken.IsCancellationRequested);
    }

    /// <summary>
    /// One period: a single run at <c>--subscribers</c>, or the search (double, then bisect) within
    /// <paramref name="budgetSeconds"/> and the overall deadline (<paramref name="overall"/>).
    /// </summary>
    private static async Task<BroadcastPeriodResult> SearchAsync(BroadcastOptions options, ITarget target, int repetition, int maxSubscribers, double budgetSeconds, RunLog log, CancellationToken overall, CancellationToken interrupted)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        var result = new BroadcastPeriodResult(options.Period, repetition, options.Search);
        List<BroadcastRunResult> runs = result.Runs;
        long searchStart = Stopwatch.GetTimestamp();
        using var deadline = CancellationTokenSource.CreateLinkedTokenSource(overall);
        if (options.Search)
        {
            deadline.CancelAfter(TimeSpan.FromSeconds(Math.Max(0, budgetSeconds)));
        }

        int m = options.Search ? Math.Min(options.Start, maxSubscribers) : options.Subscribers;
        while (true)
        {
            if (options.Search)
            {
                double remaining = budgetSeconds - Stopwatch.GetElapsedTime(searchStart).TotalSeconds;
                double estimate = EstimateSeconds(options, m, runs);
                if (estimate > remaining)
                {
                    result.SearchEnd = string.Create(c, $"time cap: a run at M={m:N0} would take about {estimate:F0} s, {Math.Max(0, remaining):F0} s of this period's share of --max-seconds {options.MaxSeconds} left");
                    break;
                }
            }

            Console.WriteLine();
            Console.WriteLine(string.Create(c, $"run {runs.Count + 1} at P = {options.Period} s: M={m:N0} ({Stopwatch.GetElapsedTime(searchStart).TotalSeconds:F0} s elapsed)"));
            BroadcastRunResult run = await BroadcastRun.ExecuteAsync(options, target, m, log, deadline.Token);
            runs.Add(run);
            Console.WriteLine($"  => {run.OneLine()}");
            if (!options.Search)
            {
                result.Good = run.Good ? m : null;
                result.Bad = run.Good || run.Inconclusive ? null : m;
                break;
            }

            if (run.Inconclusive)
            {
                result.SearchEnd = interrupted.IsCancellationRequested ? "interrupted"
                    : run.BrokerUnreachable ? "server unreachable"
                    : !run.BrokerAlive ? "the server process exited"
                    : "time cap reached during a run";
                break;
            }

            if (run.Good)
            {
                result.Good = m;
            }
            else
            {
                result.Bad = m;
            }

            if (result.Bad is not { } bad)
            {
                if (m >= maxSubscribers)
                {
                    result.SearchEnd = string.Create(c, $"M={m:N0} was good and is the most this search may try");
                    break;
                }

                m = (int)Math.Min(2L * m, maxSubscribers);
                continue;
            }

            int low = result.Good ?? 0;
            if (bad - low <= 1 || (low > 0 && bad - low <= options.Precision * low))
            {
                result.SearchEnd = string.Create(c, $"bracketed: {low:N0} good, {bad:N0} bad");
                break;
            }

            m = Midpoint(low, bad);
        }

        result.Interrupted = interrupted.IsCancellationRequested;
        return result;
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
        "the load tool allocates per poll while every session holds one in flight; run it with DOTNET_GCgen0size=0x10000000 (a 256 MiB gen0 budget) so its GC pauses do not delay deliveries (see loadtest/docs/broadcast.md)";

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

    /// <summary>The most subscribers the open-file limits of the tool and the server (started by the tool, or --server-pid) allow.</summary>
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

    /// <summary>The headline of one period: the largest M on time (0 when none was), median over the repetitions.</summary>
    private static Headline HeadlineFor(double period, IEnumerable<BroadcastPeriodResult> results) =>
        Headline.Of(string.Create(CultureInfo.InvariantCulture, $"largest M on time at P={period} s"), "subscribers", true, [.. results.Where(r => r.Period == period).Select(r => (double)(r.Good ?? 0))]);

    private static int Report(BroadcastOptions options, ITarget target, int searchesPlanned, List<BroadcastPeriodResult> results, RunLog log, bool interrupted)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        foreach (BroadcastPeriodResult result in results)
        {
            PrintPeriod(options, target, result);
        }

        double[] measured = [.. options.Periods.Where(p => results.Any(r => r.Period == p))];
        Headline[] headlines = [.. measured.Select(p => HeadlineFor(p, results))];
        Console.WriteLine();
        Console.WriteLine($"broadcast summary ({target.Label}, {options.Bursts} bursts judged per run{(options.Search ? ", search" : "")})");
        Console.WriteLine($"  {"P (s)",8}  {"largest M on time",18}  {"smallest bad M",15}  {(options.Search ? "search ended" : "")}");
        foreach (BroadcastPeriodResult r in results)
        {
            Console.WriteLine(string.Create(c, $"  {r.Period,8}  {(r.Good is { } g ? g.ToString("N0", c) : "none"),18}  {(r.Bad is { } b ? b.ToString("N0", c) : "-"),15}  {(options.Search ? r.SearchEnd ?? "-" : "")}"));
        }

        foreach (Headline h in headlines)
        {
            Console.WriteLine(string.Create(c, $"  HEADLINE            : {h.Name}: {h.Value:N0} {h.Unit}{(h.Repetitions > 1 ? $" (median of {h.Repetitions}, {h.Min:N0}..{h.Max:N0})" : "")}"));
        }

        string[] disturbed = [.. results.SelectMany(r => r.Runs.Where(run => run.OtherCores > 0.25).Select(run => string.Create(c, $"P={r.Period} s M={run.Subscribers:N0} ({run.OtherCores:F2} cores)")))];
        if (disturbed.Length > 0)
        {
            Console.WriteLine($"  disturbed runs      : other processes used CPU during {string.Join(", ", disturbed)}; repeat them on a quiet machine");
        }

        // The result's failures (and its "ok") are what the server or the protocol got wrong; a missed burst
        // is a measurement, not a failure of the server, and decides only the exit code with them.
        List<string> problems = ScenarioSkeleton.Failures(results, _ => null);
        foreach (string problem in problems)
        {
            Console.WriteLine($"  server/protocol     : {problem}");
        }

        if (log.Count > 0)
        {
            Console.WriteLine(string.Create(c, $"  events              : {log.Count:N0} (the first {Math.Min(log.Count, RunLog.MaxLines)} on stderr and in --out)"));
        }

        if (options.Out is { } path)
        {
            ScenarioSkeleton.WriteResult(path, "broadcast", target, headlines, json => WriteParameters(json, options), serverRss: null, json =>
            {
                json.WriteStartArray("periods");
                foreach (double period in measured)
                {
                    json.WriteStartObject();
                    json.WriteNumber("periodSeconds", period);
                    json.WriteNumber("largestGoodMedian", HeadlineFor(period, results).Value);
                    ScenarioSkeleton.WriteRows(json, "repetitions", results.Where(r => r.Period == period));
                    json.WriteEndObject();
                }

                json.WriteEndArray();
            }, problems, interrupted, log);
            Console.WriteLine($"  result written to   : {path}");
        }

        if (options.Chart is { } chart && measured.Length > 0)
        {
            var series = new BroadcastSeries(target.Label, [.. headlines.Zip(measured, (h, p) => new BroadcastPoint(p, h.Value))]);
            (string svg, string png) = BroadcastChart.Write(chart, [series]);
            Console.WriteLine($"  chart written to    : {svg}, {png}");
        }

        string[] misses =
        [
            .. results.Where(r => r.Good is null).Select(r => string.Create(c, $"P={r.Period} s, repetition {r.Repetition}: no M had every burst on time")),
            .. results.Count < searchesPlanned ? [string.Create(c, $"{searchesPlanned - results.Count} of {searchesPlanned} searches did not run")] : Array.Empty<string>(),
        ];
        bool unreachable = results.SelectMany(r => r.Runs).FirstOrDefault() is { BrokerUnreachable: true };
        return ScenarioSkeleton.ExitCode(interrupted, [.. problems, .. misses], unreachable);
    }

    /// <summary>The per-period block of the human report: every run, the search's end, and the details at the largest good M.</summary>
    private static void PrintPeriod(BroadcastOptions options, ITarget target, BroadcastPeriodResult result)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        List<BroadcastRunResult> runs = result.Runs;
        BroadcastRunResult? best = result.Good is { } g ? runs.LastOrDefault(r => r.Subscribers == g && r.Good) : null;
        Console.WriteLine();
        Console.WriteLine($"broadcast result ({target.Label}, P = {result.Period.ToString(c)} s, {options.Bursts} bursts judged per run{(options.Search ? ", search" : "")}{(options.Repeat > 1 ? $", repetition {result.Repetition}" : "")})");
        foreach (BroadcastRunResult run in runs)
        {
            Console.WriteLine($"  run                 : {run.OneLine()}");
        }

        if (options.Search)
        {
            Console.WriteLine(string.Create(c, $"  search ended        : {result.SearchEnd ?? "-"}"));
            Console.WriteLine(result.Good is { } largest
                ? string.Create(c, $"  LARGEST GOOD M      : {largest:N0} subscribers with every one of {options.Bursts} bursts on time (P = {result.Period} s){(result.Bad is { } b ? $"; {b:N0} was not" : "; no bad M found")}")
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
                Console.WriteLine(string.Create(c, $"    server memory     : RSS {shown.BrokerRssBeforeMB:F0} MB before setup, {rss:F0} MB loaded ({shown.BrokerOpenFiles?.ToString("N0", c) ?? "?"} open files), {shown.BrokerRssAfterMB:F0} MB {options.Pause} s after closing"));
            }

            Console.WriteLine(string.Create(c, $"    load tool memory  : RSS {shown.ToolRssMB:F0} MB loaded"));
            BurstOutcome[] judgedBursts = [.. shown.Bursts.Where(b => !b.Warmup)];
            if (judgedBursts.Length > 0)
            {
                double paused = judgedBursts.Sum(b => b.ToolGcPauseMs);
                Console.WriteLine(string.Create(c, $"    load tool GC      : {paused:F0} ms paused over the judged bursts, at most {judgedBursts.Max(b => b.ToolGcPauseMs):F0} ms within one; {shown.InducedGcs} GCs run between bursts"));
                if (paused > 0.05 * 1000 * result.Period * judgedBursts.Length && !GcTuned)
                {
                    Console.WriteLine($"    note              : the load tool was paused by its own GC for over 5 % of the time, which delays deliveries; {GcAdvice}");
                }
            }
            string counters = string.Join(", ", shown.Checks.Values.Select(v => $"{v.Key}={v.Value:N0}"));
            Console.WriteLine($"    counters          : {(counters.Length == 0 ? "-" : counters)}");
        }

    }

    private static void WriteParameters(Utf8JsonWriter json, BroadcastOptions options)
    {
        json.WriteString("targetOptions", options.Target.Describe());
        json.WriteString("transport", options.Target.Transport);
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

        ResultFile.WriteNumbers(json, "periodsSeconds", options.Periods);
        json.WriteNumber("repeat", options.Repeat);
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
    }
}

/// <summary>One period's search (or single run) in one repetition: its runs and the bracket it found.</summary>
internal sealed class BroadcastPeriodResult(double period, int repetition, bool search) : IScenarioRun
{
    public double Period { get; } = period;

    public int Repetition { get; } = repetition;

    public List<BroadcastRunResult> Runs { get; } = [];

    /// <summary>The largest M with every burst on time; null when none was.</summary>
    public int? Good { get; set; }

    /// <summary>The smallest M with a burst missed; null when none was.</summary>
    public int? Bad { get; set; }

    public string? SearchEnd { get; set; }

    /// <summary>Ctrl+C ended the search (not the time cap, which only ends it early).</summary>
    public bool Interrupted { get; set; }

    /// <summary>After Ctrl+C, or with the server gone, no other period can say anything.</summary>
    public bool EndsRepetitions => Interrupted || Runs.Any(r => r.BrokerUnreachable || !r.BrokerAlive);

    /// <summary>What the server or the protocol got wrong, per run; a missed burst is not a failure but the measurement.</summary>
    public IReadOnlyList<string> Failures =>
        [.. Runs.Where(run => run.Checks.DescribeProblems() is not null).Select(run => string.Create(CultureInfo.InvariantCulture, $"P={Period} s M={run.Subscribers:N0}: {run.Checks.DescribeProblems()}"))];

    public void Write(Utf8JsonWriter json)
    {
        ArgumentNullException.ThrowIfNull(json);
        json.WriteStartObject();
        json.WriteNumber("repetition", Repetition);
        json.WriteStartObject("search");
        json.WriteBoolean("enabled", search);
        ResultFile.WriteNumberOrNull(json, "largestGood", Good);
        ResultFile.WriteNumberOrNull(json, "smallestBad", Bad);
        json.WriteString("ended", SearchEnd);
        json.WriteEndObject();
        json.WriteStartArray("runs");
        foreach (BroadcastRunResult run in Runs)
        {
            run.Write(json);
        }

        json.WriteEndArray();
        json.WriteEndObject();
    }
}

internal enum BroadcastTransportKind
{
    /// <summary>A Herald connection per subscriber: TCP, TLS or WebSocket (<see cref="BroadcastConnectionTransport"/>).</summary>
    Connection,

    /// <summary>A long-poll session per subscriber (<see cref="BroadcastLongPollTransport"/>).</summary>
    LongPoll,
}

/// <summary>The options of one <c>broadcast</c> command; <see cref="Period"/> is the period of the search under way.</summary>
internal sealed record BroadcastOptions(
    TargetOptions Target,
    BroadcastTransportKind Transport,
    int Subscribers,
    bool Search,
    int Start,
    double Precision,
    int MaxSubscribers,
    double MaxSeconds,
    double Period,
    IReadOnlyList<double> Periods,
    int Repeat,
    int Bursts,
    int WarmupBursts,
    int Payload,
    string Topic,
    int? Sources,
    double ConnectRate,
    int ConnectConcurrency,
    double Settle,
    double Grace,
    double Pause,
    double? SetupTimeout,
    bool StopOnMiss,
    string? Out,
    string? Chart)
{
    public double SetupTimeoutFor(int subscribers) => SetupTimeout ?? (30 + (3.0 * subscribers / ConnectRate));

    public double CloseTimeoutFor(int subscribers) => 10 + (subscribers / 5_000.0);

    public static BroadcastOptions Read(ParseResult options)
    {
        ArgumentNullException.ThrowIfNull(options);
        bool setupTimeoutGiven = options.Given(TargetCommandOptions.SetupTimeout);
        TargetOptions target = TargetOptions.Read(options);
        BroadcastTransportKind transport = target.Transport == "longpoll" ? BroadcastTransportKind.LongPoll : BroadcastTransportKind.Connection;

        bool search = options.GetValue(BroadcastScenario.Search);
        bool fixedRun = options.Given(BroadcastScenario.Subscribers);
        if (search == fixedRun)
        {
            throw new UsageException("Give either --subscribers M (one run per period) or --search (find the largest M per period).");
        }

        if (!search && (options.Given(BroadcastScenario.Start) || options.Given(BroadcastScenario.Precision) || options.Given(BroadcastScenario.MaxSubscribers) || options.Given(BroadcastScenario.MaxSeconds)))
        {
            throw new UsageException("--start, --precision, --max-subscribers and --max-seconds go with --search.");
        }

        string topic = options.GetRequiredValue(BroadcastScenario.Topic);
        try
        {
            Herald.Protocol.Topic.EncodeName(topic);
        }
        catch (ProtocolException e)
        {
            throw new UsageException($"--topic: {e.Message}");
        }

        double precision = 0.05;
        if (options.GetValue(BroadcastScenario.Precision) is { } text)
        {
            if (!double.TryParse(text.TrimEnd('%'), NumberStyles.Float, CultureInfo.InvariantCulture, out double percent) || percent is <= 0 or > 100)
            {
                throw new UsageException($"--precision must be a percentage above 0 and at most 100, got '{text}'.");
            }

            precision = percent / 100;
        }

        List<double> periods = ReadPeriods(options);
        return new BroadcastOptions(
            target,
            transport,
            options.GetValue(BroadcastScenario.Subscribers) ?? 0,
            search,
            options.GetValue(BroadcastScenario.Start),
            precision,
            options.GetValue(BroadcastScenario.MaxSubscribers),
            options.GetValue(BroadcastScenario.MaxSeconds),
            periods[0],
            periods,
            options.GetValue(ScenarioOptions.Repeat),
            options.GetValue(BroadcastScenario.Bursts),
            options.GetValue(BroadcastScenario.WarmupBursts),
            options.GetValue(BroadcastScenario.Payload),
            topic,
            options.GetValue(BroadcastScenario.Sources),
            options.GetValue(BroadcastScenario.ConnectRate),
            options.GetValue(BroadcastScenario.ConnectConcurrency),
            options.GetValue(BroadcastScenario.Settle),
            options.GetValue(BroadcastScenario.Grace),
            options.GetValue(BroadcastScenario.Pause),
            setupTimeoutGiven ? target.SetupTimeoutSeconds : null,
            options.Given(BroadcastScenario.StopOnMiss) ? options.GetValue(BroadcastScenario.StopOnMiss) : search,
            options.GetValue(ScenarioOptions.Out),
            options.GetValue(BroadcastScenario.Chart));
    }

    /// <summary><c>--periods 0.5,1,2</c> or <c>--period P</c> (not both); each from 0.01 to 3600 s, each once.</summary>
    private static List<double> ReadPeriods(ParseResult options)
    {
        if (options.GetValue(BroadcastScenario.Periods) is not { } list)
        {
            return [options.GetValue(BroadcastScenario.Period)];
        }

        if (options.Given(BroadcastScenario.Period))
        {
            throw new UsageException("Give --period P or --periods P1,P2,..., not both.");
        }

        var periods = new List<double>();
        foreach (string item in list.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))
        {
            if (!double.TryParse(item, NumberStyles.Float, CultureInfo.InvariantCulture, out double p) || p is < 0.01 or > 3600)
            {
                throw new UsageException($"--periods: each period is a number of seconds from 0.01 to 3600, got '{item}'.");
            }

            if (periods.Contains(p))
            {
                throw new UsageException($"--periods: {item} is given twice.");
            }

            periods.Add(p);
        }

        return periods.Count > 0 ? periods : throw new UsageException("--periods names no period.");
    }
}
