using System.CommandLine;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>collab</c>: the HTTP polling duplex seed's collaboration scenario. T rooms (topics) of N clients each;
/// in every room one client publishes every D seconds and the other N-1 receive; the rooms' publications
/// are spread evenly over D. Latency is measured from the <b>intended</b> publication time (the schedule)
/// to each receipt, so a publisher that falls behind shows up in the figures instead of hiding them.
/// The seed's table (mean, median, stdev per T x N x D) is reproduced row by row with <c>--preset</c>.
/// </summary>
internal sealed class CollabScenario : IScenario
{
    /// <summary>The seed's rows, with the figures it measured (HTTP polling duplex, Silverlight 3, 2009).</summary>
    internal static readonly CollabRow[] Presets =
    [
        new("100x5-d1", 100, 5, 1, new SeedFigures(91, 63, 122)),
        new("500x2-d15", 500, 2, 15, new SeedFigures(4, 0, 12)),
        new("500x3-d15", 500, 3, 15, new SeedFigures(108, 94, 73)),
        new("800x3-d15", 800, 3, 15, new SeedFigures(2743, 1328, 3195)),
        new("1000x2-d5", 1000, 2, 5, new SeedFigures(496, 498, 288)),
        new("1000x2-d15", 1000, 2, 15, new SeedFigures(6, 0, 17)),
        new("2000x2-d15", 2000, 2, 15, new SeedFigures(25, 0, 99)),
    ];

    public string Name => "collab";

    internal static readonly Option<string?> Preset = OptionKinds.OptionalChoice("preset", ["all", .. Presets.Select(p => p.Name)],
        "one of the seed's rows, or all of them in turn; sets --rooms, --clients and --delay");

    internal static readonly Option<int> Rooms = OptionKinds.Integer("rooms", 100, 1, 100_000, "rooms (topics)");

    internal static readonly Option<int> Clients = OptionKinds.Integer("clients", 5, 2, 10_000, "clients per room, the publisher included");

    internal static readonly Option<double> Delay = OptionKinds.Seconds("delay", 1, 0.01, 3600, "seconds between a room's publications");

    internal static readonly Option<int> Rounds = OptionKinds.Integer("rounds", 100, 1, 1_000_000, "measured publications per room (100, as the seed)");

    internal static readonly Option<int> WarmupRounds = OptionKinds.Integer("warmup-rounds", 2, 0, 1_000_000, "publications per room before measuring");

    internal static readonly Option<int> Strings = OptionKinds.Integer("strings", 20, 0, 1000, "strings in a message body (20, as the seed)");

    internal static readonly Option<int> StringLength = OptionKinds.Integer("string-length", 8, 0, 10_000, "characters per string");

    internal static readonly Option<double> LateMs = OptionKinds.Seconds("late-ms", 10, 0, 3_600_000, "a publication this many milliseconds behind schedule is late");

    internal static readonly Option<double> Grace = OptionKinds.Seconds("grace", 5, 0, 3600, "after the last publication: wait for deliveries");

    internal static readonly Option<double> MaxSeconds = OptionKinds.Seconds("max-seconds", 3600, 0.1, 24 * 3600, "cap on one row's run after setup");

    public string Description => """
        chat rooms: T rooms x N clients, one publication per room every D s: latency (polling duplex seed).
        In every room one client publishes every D seconds and the other N-1 receive; rooms publish at times
        spread evenly over D. Latency = receipt - scheduled publication time. A run lasts (warm-up rounds +
        rounds) x D seconds plus setup and grace. Client i of the run (room i / N) is opened with the target's ConnectAsync(i).
        Exit codes: 0 ok, 1 a check failed (missing, duplicated or foreign deliveries, a disconnection),
        2 usage, 3 server unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } =
    [
        Preset, Rooms, Clients, Delay, Rounds, WarmupRounds, Strings, StringLength, LateMs, Grace, MaxSeconds,
        ScenarioOptions.Repeat, ScenarioOptions.Out, .. TargetCommandOptions.All,
    ];

    public CommandSettings Read(ParseResult parsed) => new(CollabOptions.Read(parsed), TargetOptions.Read(parsed));

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (CollabOptions options, TargetOptions targetOptions) = Read(parsed).Of<CollabOptions>();
        var payload = new StampedPayload(counters: 2, options.Strings, options.StringLength);

        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"collab: {string.Join(", ", options.Rows.Select(r => r.Name))}; {options.Rounds} rounds (+{options.WarmupRounds} warm-up), payload {payload.Length} B ({options.Strings} strings), {options.Repeat} run(s) per row, on {targetOptions.Describe()}"));
        await using ITarget target = await ScenarioSkeleton.StartAsync(targetOptions, cancellationToken);

        var results = new List<(CollabRow Row, List<CollabRun> Runs)>();
        bool interrupted = false;
        foreach (CollabRow row in options.Rows)
        {
            (List<CollabRun> runs, int? exit) = await ScenarioSkeleton.RepeatAsync(
                options.Repeat,
                repetition => string.Create(CultureInfo.InvariantCulture, $"{row.Name}: {row.Rooms} rooms x {row.Clients} clients, D = {row.Delay} s, run {repetition}/{options.Repeat}"),
                () => CollabRun.ExecuteAsync(target, row, options, targetOptions.SetupTimeoutSeconds, payload, cancellationToken),
                print: null,
                cancellationToken);
            if (exit is { } code)
            {
                return code;
            }

            results.Add((row, runs));
            interrupted = runs.Any(r => r.Interrupted);
            if (interrupted)
            {
                break;
            }
        }

        List<Headline> headlines = [];
        foreach ((CollabRow row, List<CollabRun> runs) in results)
        {
            List<CollabRun> measured = [.. runs.Where(r => r.Latencies.Count > 0)];
            headlines.Add(Headline.Of($"{row.Name} mean latency ms", "ms", higherIsBetter: false, [.. measured.Select(r => r.Latencies.Mean / 1000)]));
            headlines.Add(Headline.Of($"{row.Name} p99 latency ms", "ms", higherIsBetter: false, [.. measured.Select(r => r.Latencies.Percentile(99) / 1000)]));
        }

        List<string> failures = [.. results.SelectMany(x => ScenarioSkeleton.Failures(x.Runs, i => string.Create(CultureInfo.InvariantCulture, $"{x.Row.Name} run {i}")))];
        PrintTable(results, headlines, failures);
        if (options.Out is { } path)
        {
            ScenarioSkeleton.WriteResult(path, Name, target, headlines, json =>
            {
                json.WriteNumber("rounds", options.Rounds);
                json.WriteNumber("warmupRounds", options.WarmupRounds);
                payload.Write(json);
                json.WriteNumber("lateMs", options.LateMs);
                json.WriteNumber("graceSeconds", options.Grace);
                json.WriteNumber("maxSeconds", options.MaxSeconds);
                json.WriteNumber("repeat", options.Repeat);
            }, serverRss: null, json =>
            {
                json.WriteStartArray("rows");
                foreach ((CollabRow row, List<CollabRun> runs) in results)
                {
                    json.WriteStartObject();
                    row.Write(json);
                    ScenarioSkeleton.WriteRows(json, "runs", runs);
                    json.WriteEndObject();
                }

                json.WriteEndArray();
            }, failures, interrupted, log: null);
            Console.WriteLine($"result written to {path}");
        }

        return ScenarioSkeleton.ExitCode(interrupted, failures);
    }

    private static void PrintTable(List<(CollabRow Row, List<CollabRun> Runs)> results, List<Headline> headlines, List<string> failures)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        static string Ms(double us) => double.IsNaN(us) ? "-" : (us / 1000).ToString(us < 10_000 ? "F2" : "F1", CultureInfo.InvariantCulture);
        Console.WriteLine();
        Console.WriteLine("  latency = receipt - scheduled publication time, in ms; seed = the HTTP polling duplex post's mean/median/stdev");
        Console.WriteLine(string.Create(c,
            $"  {"row",-11} {"T",5} {"N",3} {"T*N",6} {"D s",5}  {"mean",8} {"median",8} {"stdev",8} {"p99",8} {"p99.9",8} {"max",8}  {"expected",9} {"received",9} {"missing",7} {"late",5}  {"tool/server cores",17}  {"seed mean/median/stdev",22}"));
        foreach ((CollabRow row, List<CollabRun> runs) in results)
        {
            foreach (CollabRun r in runs)
            {
                Latencies l = r.Latencies;
                string cores = string.Create(c, $"{r.Usage.ToolCores:F2}/{(r.Usage.BrokerCores is { } b ? b.ToString("F2", c) : "?")}");
                Console.WriteLine(string.Create(c,
                    $"  {row.Name,-11} {row.Rooms,5} {row.Clients,3} {row.Rooms * row.Clients,6} {row.Delay,5:0.###}  {Ms(l.Mean),8} {Ms(l.Percentile(50)),8} {Ms(l.StdDev),8} {Ms(l.Percentile(99)),8} {Ms(l.Percentile(99.9)),8} {Ms(l.Max),8}  {r.Expected,9:N0} {r.Received,9:N0} {r.Missing,7:N0} {r.Late,5:N0}  {cores,17}  {row.Seed?.Describe() ?? "-",22}"));
            }
        }

        foreach ((CollabRow _, List<CollabRun> runs) in results)
        {
            foreach (CollabRun r in runs.Where(r => r.ServerRss is not null).TakeLast(1))
            {
                Console.WriteLine(string.Create(c, $"  server RSS after {r.Row.Name}: {r.ServerRss / 1e6:F1} MB; publications behind schedule by more than the late threshold: {r.Late:N0} (max lag {r.MaxLagMs:F1} ms)"));
            }
        }

        foreach (Headline h in headlines)
        {
            Console.WriteLine(string.Create(c, $"  {h.Name,-32}: {h.Value:F2} {h.Unit} (median of {h.Repetitions}; min {h.Min:F2}, max {h.Max:F2})"));
        }

        if (results.SelectMany(x => x.Runs).LastOrDefault() is { } last)
        {
            last.Usage.Print(Console.Out);
        }

        Outcome.PrintFailures(failures);
        Console.WriteLine(failures.Count == 0 ? "  result: ok" : "  result: FAILED");
    }
}

/// <summary>What the seed measured for a row, in ms.</summary>
internal sealed record SeedFigures(double MeanMs, double MedianMs, double StdevMs)
{
    public string Describe() => string.Create(CultureInfo.InvariantCulture, $"{MeanMs}/{MedianMs}/{StdevMs}");
}

/// <summary>One row of the table: T rooms of N clients, a publication per room every D seconds.</summary>
internal sealed record CollabRow(string Name, int Rooms, int Clients, double Delay, SeedFigures? Seed)
{
    public void Write(Utf8JsonWriter json)
    {
        json.WriteString("row", Name);
        json.WriteNumber("rooms", Rooms);
        json.WriteNumber("clientsPerRoom", Clients);
        json.WriteNumber("clients", Rooms * Clients);
        json.WriteNumber("delaySeconds", Delay);
        if (Seed is { } seed)
        {
            json.WriteStartObject("seed");
            json.WriteNumber("meanMs", seed.MeanMs);
            json.WriteNumber("medianMs", seed.MedianMs);
            json.WriteNumber("stdevMs", seed.StdevMs);
            json.WriteEndObject();
        }
    }
}

/// <summary>The collab options after the target's.</summary>
internal sealed record CollabOptions(
    IReadOnlyList<CollabRow> Rows,
    int Rounds,
    int WarmupRounds,
    int Strings,
    int StringLength,
    double LateMs,
    double Grace,
    double MaxSeconds,
    int Repeat,
    string? Out)
{
    /// <exception cref="UsageException">A preset with its own rooms, clients or delay, or too many clients in all.</exception>
    public static CollabOptions Read(ParseResult options)
    {
        List<CollabRow> rows;
        if (options.GetValue(CollabScenario.Preset) is { } preset)
        {
            if (options.Given(CollabScenario.Rooms) || options.Given(CollabScenario.Clients) || options.Given(CollabScenario.Delay))
            {
                throw new UsageException("--preset sets --rooms, --clients and --delay; give either the preset or those.");
            }

            rows = preset == "all" ? [.. CollabScenario.Presets] : [CollabScenario.Presets.First(p => p.Name == preset)];
        }
        else
        {
            int rooms = options.GetValue(CollabScenario.Rooms);
            int clients = options.GetValue(CollabScenario.Clients);
            double delay = options.GetValue(CollabScenario.Delay);
            if ((long)rooms * clients > 1_000_000)
            {
                throw new UsageException("--rooms x --clients must be at most 1,000,000.");
            }

            CollabRow? same = CollabScenario.Presets.FirstOrDefault(p => p.Rooms == rooms && p.Clients == clients && p.Delay == delay);
            rows = [same ?? new CollabRow(string.Create(CultureInfo.InvariantCulture, $"{rooms}x{clients}-d{delay:0.###}"), rooms, clients, delay, null)];
        }

        return new CollabOptions(
            rows,
            options.GetValue(CollabScenario.Rounds),
            options.GetValue(CollabScenario.WarmupRounds),
            options.GetValue(CollabScenario.Strings),
            options.GetValue(CollabScenario.StringLength),
            options.GetValue(CollabScenario.LateMs),
            options.GetValue(CollabScenario.Grace),
            options.GetValue(CollabScenario.MaxSeconds),
            options.GetValue(ScenarioOptions.Repeat),
            options.GetValue(ScenarioOptions.Out));
    }

}
