using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>compression</c>: the adaptive-encoding seed's figures 3 and 4. For each message class (simple,
/// medium, complex), broker mode (no compression, always, adaptive) and link rate (e.g. 100 and 1.5
/// Mbit/s): one publisher and one subscriber over TCP, the subscriber reading through a token bucket at
/// the link rate; the figures are messages/s and payload MB/s delivered, wire MB/s, the compression ratio
/// seen on the wire, and the CPU of the broker and of the load tool.
/// <para>
/// Modes are broker configuration, so by default the tool starts a fresh broker (<c>--broker-dll</c>) as a
/// child process for every run, measures its CPU time over the window, and kills it afterwards
/// (<see cref="CompressionRun.BrokerArguments"/>). <c>--external</c> measures a broker started by hand.
/// </para>
/// </summary>
internal sealed class CompressionScenario : IScenario
{
    public string Name => "compression";

    internal static readonly Option<string> Class = OptionKinds.Text("class", "all", "C", "simple | medium | complex | all (comma list allowed)");

    internal static readonly Option<string> Mode = OptionKinds.Text("mode", "all", "M", "none | always | adaptive | all (comma list allowed)");

    internal static readonly Option<string> LinkMbps = OptionKinds.Text("link-mbps", "100", "R", "subscriber link in Mbit/s; comma list, e.g. 100,1.5");

    internal static readonly Option<double> Seconds = OptionKinds.Seconds("seconds", 10, 0.5, 24 * 3600, "measured window on links >= 10 Mbit/s");

    internal static readonly Option<double> Warmup = OptionKinds.Seconds("warmup", 3, 0, 24 * 3600, "warm-up before it");

    internal static readonly Option<double> SlowSeconds = OptionKinds.Seconds("slow-seconds", 30, 0.5, 24 * 3600, "measured window on slower links");

    internal static readonly Option<double> SlowWarmup = OptionKinds.Seconds("slow-warmup", 10, 0, 24 * 3600, "warm-up before it");

    internal static readonly Option<int> InFlight = OptionKinds.Integer("in-flight", 4, 1, 1000, "publications sent but not yet received by the subscriber");

    internal static readonly Option<int> Pool = OptionKinds.Integer("pool", 100, 1, 10_000, "distinct payloads per class; sizes from the seed's distribution");

    internal static readonly Option<int> Seed = OptionKinds.Integer("seed", 1, 0, int.MaxValue, "seed of sizes and contents");

    internal static readonly Option<double?> Grace = OptionKinds.OptionalSeconds("grace", 0, 600, "after the window, time for what is in flight (default 2 + in-flight x 250 KB at the link rate)");

    internal static readonly Option<int> ReceiveWindow = OptionKinds.Integer("receive-window", 64 * 1024, 0, 64 * 1024 * 1024, "subscriber socket receive buffer in bytes, SO_RCVBUF");

    internal static readonly Option<double> MaxSeconds = OptionKinds.Seconds("max-seconds", 1200, 1, 24 * 3600, "time cap of the whole matrix: runs that would end later are skipped");

    internal static readonly Option<int> Port = OptionKinds.Integer("port", 4702, 1, 65535, "the port the broker listens on (must be free)");

    internal static readonly Option<double> SetupTimeout = OptionKinds.Seconds("setup-timeout", 30, 1, 24 * 3600, "broker start, connect and subscribe");

    internal static readonly Option<bool> External = OptionKinds.Flag("external",
        "start no broker: measure the one at --host:--port (one --mode; start it with the arguments printed for that mode); --broker-pid PID for its CPU time");

    internal static readonly Option<int?> BrokerPid = OptionKinds.OptionalInteger("broker-pid", 1, int.MaxValue, "with --external: the broker's process, for its CPU time");

    public string Description => """
        Seed figures 3/4: no / always / adaptive Zstd x 3 message classes x link rates.
        One publisher, one subscriber reading through a token bucket at the link rate (TCP backpressure then
        throttles the broker as a slow link would). For each class x mode x link it starts a broker configured
        for the mode, measures, and kills it. --host goes with --external; --out writes every run.
        Each run's broker: dotnet BROKER_DLL --Herald:Http:Port=-1 --Herald:Monitoring:Port=-1 --Herald:Policy:Port=-1 --Herald:Tcp:Host=127.0.0.1
          --Herald:Tcp:PortRangeStart=PORT --Herald:Tcp:PortRangeEnd=PORT, and for mode
          none      nothing more (compression stays on, but the subscriber does not ask for zstd: all plain)
          always    --Herald:Compression:NoCompressionLimit=0 --Herald:Compression:CompressionRatioDisableLimit=1
                    --Herald:Compression:CpuDisableLimit=1 --Herald:Compression:CpuBackoffStart=1
          adaptive  nothing more (the broker's defaults)
        Exit codes: 0 ok, 1 a run failed a check (payload mismatch, loss, disconnection, ERROR), 2 usage,
        3 no broker could be started or reached, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } =
    [
        Class, Mode, LinkMbps, Seconds, Warmup, SlowSeconds, SlowWarmup, InFlight, Pool, Seed, Grace, ReceiveWindow, MaxSeconds,
        TargetCommandOptions.BrokerDll, Port, SetupTimeout, External, BrokerPid, TargetCommandOptions.Host, ScenarioOptions.Out,
    ];

    public CommandSettings Read(ParseResult parsed) => new(CompressionScenarioOptions.Read(parsed), null);

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        var options = (CompressionScenarioOptions)Read(parsed).Scenario;
        CultureInfo c = CultureInfo.InvariantCulture;
        if (!options.External && !File.Exists(options.BrokerDll))
        {
            Console.Error.WriteLine($"error: no broker at '{Path.GetFullPath(options.BrokerDll)}': build it (dotnet build -c Release broker/src/Herald.Broker) or pass --broker-dll.");
            return ExitCodes.Usage;
        }

        Console.WriteLine(string.Create(c,
            $"compression: classes {string.Join(",", options.Classes.Select(PayloadClasses.Name))}; modes {string.Join(",", options.Modes.Select(m => m.ToString().ToLowerInvariant()))}; links {string.Join(",", options.Links.Select(l => l.ToString(c)))} Mbit/s"));
        Console.WriteLine(string.Create(c,
            $"windows: {options.Warmup} s warm-up + {options.Seconds} s on links >= {CompressionScenarioOptions.SlowLinkMbps} Mbit/s, {options.SlowWarmup} s + {options.SlowSeconds} s below; {options.InFlight} publications in flight; time cap {options.MaxSeconds} s"));
        Console.WriteLine(options.External
            ? $"broker: external at {options.Host}:{options.Port} (it must be configured for mode {options.Modes[0].ToString().ToLowerInvariant()}: {string.Join(' ', CompressionRun.BrokerArguments(options.Modes[0], options.Port))})"
            : $"broker: a fresh child per run, dotnet {options.BrokerDll} on port {options.Port}");
        Console.WriteLine($"machine: {MachineInfo.Describe()}");

        var payloadSets = new Dictionary<PayloadClass, PayloadSet>();
        foreach (PayloadClass payloadClass in options.Classes)
        {
            var set = new PayloadSet(payloadClass, options.Pool, options.Seed);
            payloadSets[payloadClass] = set;
            Console.WriteLine(string.Create(c,
                $"payloads {PayloadClasses.Name(payloadClass),-8}: {options.Pool} on '{set.Topic}', {set.MinSize:N0}..{set.MaxSize:N0} B, mean {set.MeanSize / 1000:F1} KB, {set.InBand} in {PayloadClasses.BandLow / 1000}-{PayloadClasses.BandHigh / 1000} KB; Zstd ratio at the broker's default levels {set.ReferenceRatio:F3} ({set.TotalBytes / 1e6 / Math.Max(set.ReferenceCompressSeconds, 1e-6):F0} MB/s on one core here)"));
        }

        // The matrix, one cell per repetition of the skeleton; a cell that would end after --max-seconds is
        // skipped (a repetition without a run), and Ctrl+C skips the rest.
        (PayloadClass Class, CompressionMode Mode, double Link)[] cells =
            [.. options.Links.SelectMany(link => options.Classes.SelectMany(payloadClass => options.Modes.Select(mode => (payloadClass, mode, link))))];
        var log = new RunLog();
        long matrixStart = Stopwatch.GetTimestamp();
        double startupEstimate = 3;
        int next = 0, started = 0;
        (List<CompressionRunResult> cellResults, _) = await ScenarioSkeleton.RepeatAsync(cells.Length, _ => null, async () =>
        {
            (PayloadClass payloadClass, CompressionMode mode, double link) = cells[next++];
            bool slow = link < CompressionScenarioOptions.SlowLinkMbps;
            double grace = options.Grace ?? CompressionScenarioOptions.AutoGrace(options.InFlight, link * 1e6 / 8);
            double estimate = startupEstimate + (slow ? options.SlowWarmup + options.SlowSeconds : options.Warmup + options.Seconds) + grace + 2;
            string label = Label(payloadClass, mode, link);
            double elapsed = Stopwatch.GetElapsedTime(matrixStart).TotalSeconds;
            if (cancellationToken.IsCancellationRequested)
            {
                return CompressionRunResult.Skip(payloadClass, mode, link, $"{label}: interrupted", interrupted: true);
            }

            if (elapsed + estimate > options.MaxSeconds)
            {
                return CompressionRunResult.Skip(payloadClass, mode, link, string.Create(c, $"{label}: would end after about {elapsed + estimate:F0} s, over --max-seconds {options.MaxSeconds}"), interrupted: false);
            }

            Console.WriteLine();
            Console.WriteLine(string.Create(c, $"run {++started}: {label} ({elapsed:F0} s elapsed)"));
            long runStart = Stopwatch.GetTimestamp();
            CompressionRunResult result = await CompressionRun.ExecuteAsync(options, payloadSets[payloadClass], mode, link, log, cancellationToken);
            double actual = Stopwatch.GetElapsedTime(runStart).TotalSeconds;
            startupEstimate = Math.Max(startupEstimate, actual - (estimate - startupEstimate)); // learn how long brokers take to start and stop
            return result;
        }, print: r =>
        {
            if (r.Skipped is null)
            {
                PrintRun(r);
            }
        }, cancellationToken);

        List<CompressionRunResult> results = [.. cellResults.Where(r => r.Skipped is null)];
        List<string> skipped =
        [
            .. cellResults.Select(r => r.Skipped).OfType<string>(),
            .. cells.Skip(cellResults.Count).Select(cell => $"{Label(cell.Class, cell.Mode, cell.Link)}: interrupted"),
        ];
        double totalSeconds = Stopwatch.GetElapsedTime(matrixStart).TotalSeconds;
        Console.WriteLine();
        PrintTables(options, results);
        foreach (string skip in skipped)
        {
            Console.WriteLine($"  skipped: {skip}");
        }

        PrintBrokerNotes(results);
        Console.WriteLine(string.Create(c, $"matrix: {results.Count} runs in {totalSeconds:F0} s; {results.Count(r => r.Ok)} ok"));

        bool interrupted = cancellationToken.IsCancellationRequested;
        List<string> failures = ScenarioSkeleton.Failures(results, _ => null);
        if (options.Out is { } path)
        {
            ScenarioSkeleton.WriteResult(path, Name, target: null, headlines: [], json => WriteParameters(json, options), serverRss: null, json =>
            {
                json.WriteStartArray("payloadSets");
                foreach (PayloadSet set in payloadSets.Values)
                {
                    json.WriteStartObject();
                    json.WriteString("class", PayloadClasses.Name(set.Class));
                    json.WriteString("topic", set.Topic);
                    json.WriteNumber("count", set.Payloads.Length);
                    json.WriteNumber("minBytes", set.MinSize);
                    json.WriteNumber("maxBytes", set.MaxSize);
                    json.WriteNumber("meanBytes", set.MeanSize);
                    json.WriteNumber("inBand", set.InBand);
                    json.WriteNumber("referenceZstdRatio", set.ReferenceRatio);
                    json.WriteEndObject();
                }

                json.WriteEndArray();
                ScenarioSkeleton.WriteRows(json, "runs", results);
                ResultFile.WriteStrings(json, "skipped", skipped);
                json.WriteNumber("totalSeconds", totalSeconds);
            }, failures, interrupted, log);
            Console.WriteLine($"result written to {path}");
        }

        // A skipped cell fails the matrix as a failed run does.
        bool unreachable = results.Count > 0 && results.All(r => r.SetupFailure is not null);
        return ScenarioSkeleton.ExitCode(interrupted, [.. failures, .. skipped], unreachable);
    }

    private static string Label(PayloadClass payloadClass, CompressionMode mode, double link) =>
        string.Create(CultureInfo.InvariantCulture, $"{PayloadClasses.Name(payloadClass)} / {mode.ToString().ToLowerInvariant()} / {link} Mbit/s");

    private static void PrintRun(CompressionRunResult r)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        if (r.SetupFailure is not null)
        {
            Console.WriteLine($"  => SETUP FAILED: {r.SetupFailure}");
            foreach (string line in r.BrokerTail.TakeLast(10))
            {
                Console.WriteLine($"     broker: {line}");
            }

            return;
        }

        if (r.Measured)
        {
            Console.WriteLine(string.Create(c,
                $"  => {r.Status}: {r.MessagesPerSecond:F2} msg/s, payload {r.PayloadMBps:F2} MB/s, wire {r.WireMBps:F3} MB/s ({100 * r.LinkUse:F0}% of the link), wire ratio {r.WireRatio:F3}, {CompressionRun.Share(r.CompressedMessages, r.Messages).Trim()} compressed, broker {Cores(r.Resources.BrokerCores)} cores, tool {r.Resources.ToolCores:F2}, other {Cores(r.OtherCores)}"));
        }
        else
        {
            Console.WriteLine($"  => {r.Status}: nothing measured");
        }

        foreach (string failure in r.Failures)
        {
            Console.WriteLine($"     FAILED: {failure}");
        }

        if (r.BrokerWarnings + r.BrokerErrors > 0)
        {
            Console.WriteLine($"     broker logged {r.BrokerWarnings} warnings, {r.BrokerErrors} errors; first: {(r.BrokerNotable.Count > 0 ? r.BrokerNotable[0] : "")}");
        }
    }

    private static string Cores(double? cores) => cores is { } v ? v.ToString("F2", CultureInfo.InvariantCulture) : "-";

    private static void PrintTables(CompressionScenarioOptions options, List<CompressionRunResult> results)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        int cores = Environment.ProcessorCount;
        Console.WriteLine($"compression results ({MachineInfo.Describe()})");
        Console.WriteLine("msg/s and payload MB/s: delivered to the subscriber, payload uncompressed; wire: bytes read from the socket;");
        Console.WriteLine($"wire ratio: payload bytes on the wire / uncompressed; CPU in cores (of {cores}), over the measured window; other: the rest of the machine.");
        foreach (double link in options.Links)
        {
            List<CompressionRunResult> rows = [.. results.Where(r => r.LinkMbps.Equals(link))];
            if (rows.Count == 0)
            {
                continue;
            }

            bool slow = link < CompressionScenarioOptions.SlowLinkMbps;
            Console.WriteLine();
            Console.WriteLine(string.Create(c, $"link {link} Mbit/s ({link / 8:F3} MB/s), {(slow ? options.SlowSeconds : options.Seconds)} s window after {(slow ? options.SlowWarmup : options.Warmup)} s warm-up"));
            Console.WriteLine("| class   | mode     |    msg/s | payload MB/s | wire MB/s | link use | wire ratio | compressed | broker CPU | tool CPU | other CPU | result |");
            Console.WriteLine("|---------|----------|---------:|-------------:|----------:|---------:|-----------:|-----------:|-----------:|---------:|----------:|--------|");
            foreach (CompressionRunResult r in rows)
            {
                string name = PayloadClasses.Name(r.Class);
                string mode = r.Mode.ToString().ToLowerInvariant();
                if (!r.Measured)
                {
                    Console.WriteLine($"| {name,-7} | {mode,-8} | {"-",8} | {"-",12} | {"-",9} | {"-",8} | {"-",10} | {"-",10} | {"-",10} | {"-",8} | {"-",9} | {r.Status} |");
                    continue;
                }

                Console.WriteLine(string.Create(c,
                    $"| {name,-7} | {mode,-8} | {r.MessagesPerSecond,8:F2} | {r.PayloadMBps,12:F2} | {r.WireMBps,9:F3} | {100 * r.LinkUse,7:F0}% | {r.WireRatio,10:F3} | {CompressionRun.Share(r.CompressedMessages, r.Messages),10} | {Cores(r.Resources.BrokerCores),10} | {r.Resources.ToolCores,8:F2} | {Cores(r.OtherCores),9} | {r.Status} |"));
            }

            // The seed's figures: one row per class, one column per mode.
            Console.WriteLine();
            Console.WriteLine(string.Create(c, $"figure 3 ({link} Mbit/s): payload MB/s delivered      figure 4 ({link} Mbit/s): broker CPU, cores"));
            Console.WriteLine("| class   |     none |   always | adaptive |     |     none |   always | adaptive |");
            Console.WriteLine("|---------|---------:|---------:|---------:|-----|---------:|---------:|---------:|");
            foreach (PayloadClass payloadClass in options.Classes)
            {
                string Cell(CompressionMode mode, Func<CompressionRunResult, string> value) =>
                    rows.FirstOrDefault(r => r.Class == payloadClass && r.Mode == mode) is { Measured: true } r ? value(r) : "-";
                string Throughput(CompressionMode mode) => Cell(mode, r => r.PayloadMBps.ToString("F2", c));
                string Cpu(CompressionMode mode) => Cell(mode, r => Cores(r.Resources.BrokerCores));
                Console.WriteLine(
                    $"| {PayloadClasses.Name(payloadClass),-7} | {Throughput(CompressionMode.None),8} | {Throughput(CompressionMode.Always),8} | {Throughput(CompressionMode.Adaptive),8} |     | {Cpu(CompressionMode.None),8} | {Cpu(CompressionMode.Always),8} | {Cpu(CompressionMode.Adaptive),8} |");
            }
        }

        Console.WriteLine();
    }

    /// <summary>Each distinct warning or error the brokers logged, once, with the runs it appeared in.</summary>
    private static void PrintBrokerNotes(List<CompressionRunResult> results)
    {
        var seen = new Dictionary<string, List<string>>(StringComparer.Ordinal);
        foreach (CompressionRunResult r in results)
        {
            string run = string.Create(CultureInfo.InvariantCulture, $"{PayloadClasses.Name(r.Class)}/{r.Mode.ToString().ToLowerInvariant()}/{r.LinkMbps}");
            foreach (string line in r.BrokerNotable.Distinct())
            {
                int time = line.StartsWith('[') ? line.IndexOf(' ', StringComparison.Ordinal) : -1; // "[hh:mm:ss.fff WRN] ..." -> "[WRN] ..."
                string key = time > 0 ? "[" + line[(time + 1)..] : line;
                if (!seen.TryGetValue(key, out List<string>? runs))
                {
                    seen[key] = runs = [];
                }

                runs.Add(run);
            }
        }

        foreach ((string line, List<string> runs) in seen)
        {
            Console.WriteLine(runs.Count == results.Count && results.Count > 1
                ? $"broker log, in every run: {line}"
                : $"broker log, in {string.Join(", ", runs)}: {line}");
        }
    }

    private static void WriteParameters(Utf8JsonWriter json, CompressionScenarioOptions options)
    {
        ResultFile.WriteStrings(json, "classes", options.Classes.Select(PayloadClasses.Name));
        ResultFile.WriteStrings(json, "modes", options.Modes.Select(m => m.ToString().ToLowerInvariant()));
        ResultFile.WriteNumbers(json, "linkMbps", options.Links);
        json.WriteNumber("seconds", options.Seconds);
        json.WriteNumber("warmupSeconds", options.Warmup);
        json.WriteNumber("slowSeconds", options.SlowSeconds);
        json.WriteNumber("slowWarmupSeconds", options.SlowWarmup);
        json.WriteNumber("slowLinkBelowMbps", CompressionScenarioOptions.SlowLinkMbps);
        json.WriteNumber("inFlight", options.InFlight);
        json.WriteNumber("pool", options.Pool);
        json.WriteNumber("seed", options.Seed);
        json.WriteNumber("receiveWindow", options.ReceiveWindow);
        json.WriteNumber("maxSeconds", options.MaxSeconds);
        json.WriteBoolean("external", options.External);
        json.WriteString("brokerDll", options.BrokerDll);
        json.WriteString("host", options.Host);
        json.WriteNumber("port", options.Port);
        json.WriteStartObject("brokerArguments");
        foreach (CompressionMode mode in Enum.GetValues<CompressionMode>())
        {
            json.WriteString(mode.ToString().ToLowerInvariant(), string.Join(' ', CompressionRun.BrokerArguments(mode, options.Port)));
        }

        json.WriteEndObject();
    }
}

/// <summary>The <c>compression</c> scenario's command line.</summary>
internal sealed record CompressionScenarioOptions(
    PayloadClass[] Classes,
    CompressionMode[] Modes,
    double[] Links,
    double Seconds,
    double Warmup,
    double SlowSeconds,
    double SlowWarmup,
    int InFlight,
    int Pool,
    int Seed,
    double? Grace,
    int ReceiveWindow,
    double MaxSeconds,
    string BrokerDll,
    int Port,
    double SetupTimeout,
    bool External,
    string Host,
    int? BrokerPid,
    string? Out)
{
    /// <summary>Links below this rate get the slow windows (<c>--slow-seconds</c>, <c>--slow-warmup</c>).</summary>
    public const double SlowLinkMbps = 10;

    /// <summary>2 s plus the time the link takes to carry <paramref name="inFlight"/> of the largest payloads uncompressed.</summary>
    public static double AutoGrace(int inFlight, double linkBytesPerSecond) => 2 + (inFlight * (PayloadClasses.MaxSize + 64.0) / linkBytesPerSecond);

    public static CompressionScenarioOptions Read(ParseResult options)
    {
        PayloadClass[] classes = ParseList(options.GetRequiredValue(CompressionScenario.Class), "class", Enum.GetValues<PayloadClass>(), text => PayloadClasses.TryParse(text, out PayloadClass p) ? p : null);
        CompressionMode[] modes = ParseList(options.GetRequiredValue(CompressionScenario.Mode), "mode", Enum.GetValues<CompressionMode>(), text => Enum.TryParse(text, ignoreCase: true, out CompressionMode m) && Enum.IsDefined(m) && !int.TryParse(text, out _) ? m : null);
        double[] links = [.. options.GetRequiredValue(CompressionScenario.LinkMbps).Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries).Select(text =>
            double.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out double v) && v is >= 0.01 and <= 100_000
                ? v
                : throw new UsageException($"--link-mbps takes rates in Mbit/s from 0.01 to 100000, comma separated; got '{text}'."))];
        if (links.Length == 0)
        {
            throw new UsageException("--link-mbps needs at least one rate.");
        }

        bool external = options.GetValue(CompressionScenario.External);
        if (external && modes.Length != 1)
        {
            throw new UsageException("--external measures the broker you started, in one configuration: give one --mode.");
        }

        int? pid = options.GetValue(CompressionScenario.BrokerPid);
        if (pid is not null && !external)
        {
            throw new UsageException("--broker-pid is for --external; without it the tool measures the brokers it starts.");
        }

        if (options.Given(TargetCommandOptions.Host) && !external)
        {
            throw new UsageException("--host is for --external; the brokers the tool starts listen on 127.0.0.1.");
        }

        return new CompressionScenarioOptions(
            classes,
            modes,
            links,
            options.GetValue(CompressionScenario.Seconds),
            options.GetValue(CompressionScenario.Warmup),
            options.GetValue(CompressionScenario.SlowSeconds),
            options.GetValue(CompressionScenario.SlowWarmup),
            options.GetValue(CompressionScenario.InFlight),
            options.GetValue(CompressionScenario.Pool),
            options.GetValue(CompressionScenario.Seed),
            options.GetValue(CompressionScenario.Grace),
            options.GetValue(CompressionScenario.ReceiveWindow),
            options.GetValue(CompressionScenario.MaxSeconds),
            options.GetRequiredValue(TargetCommandOptions.BrokerDll),
            options.GetValue(CompressionScenario.Port),
            options.GetValue(CompressionScenario.SetupTimeout),
            external,
            options.GetRequiredValue(TargetCommandOptions.Host),
            pid,
            options.GetValue(ScenarioOptions.Out));
    }

    /// <summary>A comma list of <paramref name="all"/>'s values (each read by <paramref name="parse"/>, null: not one), or <c>all</c>; the <c>deltas</c> scenario's lists too.</summary>
    internal static T[] ParseList<T>(string text, string option, T[] all, Func<string, T?> parse)
        where T : struct
    {
        if (text.Equals("all", StringComparison.OrdinalIgnoreCase))
        {
            return all;
        }

        var values = new List<T>();
        foreach (string item in text.Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries))
        {
            T value = parse(item) ?? throw new UsageException($"--{option}: '{item}' is not one of {string.Join(", ", all.Select(a => a.ToString()!.ToLowerInvariant()))} or all.");
            if (!values.Contains(value))
            {
                values.Add(value);
            }
        }

        return values.Count > 0 ? [.. values] : throw new UsageException($"--{option} needs a value.");
    }
}
