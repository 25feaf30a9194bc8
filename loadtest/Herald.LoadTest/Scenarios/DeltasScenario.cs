using System.CommandLine;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>deltas</c>: what sending small messages as deltas saves, against sending them as published and Zstd-compressed
/// one by one, on realistic streams (a JSON document with a few changing fields, a ticker, random bytes as the control)
/// to <c>--subscribers</c> subscribers of one topic. One broker the tool starts, configured to compress every
/// publication for Zstd subscribers (small ones included: its default skips them, Zstd gaining little there); every
/// stream in every mode in turn (<see cref="DeltasRun"/>), the whole matrix <c>--repeat</c> times alternated, so the
/// three modes are compared in one run on one broker: bytes read per delivered message and the payload's share of
/// what it was, the broker's CPU time per publication, deliveries per second.
/// </summary>
internal sealed class DeltasScenario : IScenario
{
    public string Name => "deltas";

    internal static readonly Option<int> Subscribers = OptionKinds.Integer("subscribers", 20, 1, 10_000, "subscribers of each cell's topic");

    internal static readonly Option<int> Messages = OptionKinds.Integer("messages", 10_000, 10, 10_000_000, "measured publications per cell");

    internal static readonly Option<int> Warmup = OptionKinds.Integer("warmup", 1000, 0, 10_000_000, "publications per cell before the measured ones");

    internal static readonly Option<string> Streams = OptionKinds.Text("streams", "all", "LIST", "json | ticker | random | all (comma list allowed)");

    internal static readonly Option<string> Modes = OptionKinds.Text("modes", "all", "LIST", "none | zstd | deltas | all (comma list allowed)");

    internal static readonly Option<double> MaxSeconds = OptionKinds.Seconds("max-seconds", 120, 1, 3600, "give up a cell's publishing or delivery after S s");

    internal static readonly Option<int> Seed = OptionKinds.Integer("seed", 1, 0, int.MaxValue, "seed of the streams' contents");

    public string Description => """
        bytes on the wire, broker CPU per publication and deliveries/s for small messages sent as published, Zstd per
        message, and as deltas against the previous message, on a JSON state stream, a ticker and random bytes.
        Herald only (--target herald, --server start, tcp or websocket): the tool configures the broker to compress
        every publication for Zstd subscribers (Herald:Compression:NoCompressionLimit=0, no ratio or CPU limit).
        Exit codes: 0 ok, 1 a cell failed a check (a payload not rebuilt, loss, disconnection, ERROR), 2 usage,
        3 server unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } =
        [Subscribers, Messages, Warmup, Streams, Modes, WindowOptions.MaxLeadOption, MaxSeconds, Seed, ScenarioOptions.Repeat, ScenarioOptions.Out, .. TargetCommandOptions.All];

    public CommandSettings Read(ParseResult parsed)
    {
        TargetOptions target = TargetOptions.Read(parsed);
        if (target.Target != "herald" || !target.StartServer || target.Transport is not ("tcp" or "websocket"))
        {
            throw new UsageException("deltas: --target herald with --server start, over --transport tcp or websocket (the tool configures the broker's compression).");
        }

        var options = new DeltasOptions(
            parsed.GetValue(Subscribers),
            parsed.GetValue(Messages),
            parsed.GetValue(Warmup),
            ParseList<DeltaStream>(parsed.GetRequiredValue(Streams), "streams"),
            ParseList<DeltaMode>(parsed.GetRequiredValue(Modes), "modes"),
            parsed.GetValue(WindowOptions.MaxLeadOption),
            parsed.GetValue(MaxSeconds),
            parsed.GetValue(Seed),
            parsed.GetValue(ScenarioOptions.Repeat),
            target.SetupTimeoutSeconds,
            parsed.GetValue(ScenarioOptions.Out));
        return new(options, target with { ServerArguments = [.. target.ServerArguments ?? [], .. CompressionRun.CompressEveryPublication] });
    }

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (DeltasOptions options, TargetOptions targetOptions) = Read(parsed).Of<DeltasOptions>();
        CultureInfo c = CultureInfo.InvariantCulture;
        Dictionary<DeltaStream, byte[][]> streams = options.Streams.ToDictionary(s => s, s => DeltaStreams.Generate(s, Math.Min(options.Warmup + options.Messages, 100_000), options.Seed));
        Console.WriteLine(string.Create(c,
            $"deltas: streams {string.Join(",", options.Streams.Select(DeltaStreams.Name))} x modes {string.Join(",", options.Modes.Select(DeltasRun.Name))}, {options.Subscribers} subscribers, {options.Warmup:N0} + {options.Messages:N0} publications per cell, {options.Repeat} round(s)"));
        foreach ((DeltaStream stream, byte[][] payloads) in streams)
        {
            Console.WriteLine(string.Create(c, $"  {DeltaStreams.Name(stream),-7}: {payloads.Average(p => p.Length):F0} B on average, e.g. {Sample(payloads[1])}"));
        }

        await using ITarget target = await ScenarioSkeleton.StartAsync(targetOptions, cancellationToken);
        var herald = (HeraldTarget)target;
        var log = new RunLog();
        var cells = new List<DeltasCellResult>();
        for (int round = 1; round <= options.Repeat && !cancellationToken.IsCancellationRequested; round++)
        {
            foreach (DeltaStream stream in options.Streams)
            {
                foreach (DeltaMode mode in options.Modes)
                {
                    if (cancellationToken.IsCancellationRequested)
                    {
                        break;
                    }

                    DeltasCellResult cell = await DeltasRun.ExecuteAsync(herald, options, stream, streams[stream], mode, log, cancellationToken);
                    cell.SetPublishedBytes(streams[stream], options.Warmup);
                    cells.Add(cell);
                    Console.WriteLine(string.Create(c,
                        $"  round {round} {DeltaStreams.Name(stream),-7} {DeltasRun.Name(mode),-6}: {cell.WireBytesPerMessage,7:F1} B/message, payload {cell.PayloadPercent,5:F1}% of published, broker {cell.BrokerMicrosecondsPerPublication?.ToString("F1", c) ?? "-",7} us/publication, {cell.DeliveriesPerSecond,10:N0} deliveries/s ({Share(cell.ZstdMessages, cell.Deliveries)} zstd, {Share(cell.DeltaMessages, cell.Deliveries)} deltas){(cell.Failures.Count > 0 ? "  FAILED: " + string.Join("; ", cell.Failures) : "")}"));
                }
            }
        }

        return Report(target, options, cells, log, cancellationToken.IsCancellationRequested);
    }

    private int Report(ITarget target, DeltasOptions options, List<DeltasCellResult> cells, RunLog log, bool interrupted)
    {
        List<Headline> headlines = [];
        Console.WriteLine();
        Console.WriteLine($"deltas on {target.Label}, {options.Subscribers} subscribers, medians over the rounds ({MachineInfo.Describe()})");
        Console.WriteLine("| stream  | mode   | bytes/message | payload % | broker us/publication | deliveries/s |");
        Console.WriteLine("|---------|--------|--------------:|----------:|----------------------:|-------------:|");
        foreach (DeltaStream stream in options.Streams)
        {
            foreach (DeltaMode mode in options.Modes)
            {
                List<DeltasCellResult> runs = [.. cells.Where(r => r.Stream == stream && r.Mode == mode && r.Measured)];
                string name = $"{DeltaStreams.Name(stream)} {DeltasRun.Name(mode)}";
                Headline bytes = Headline.Of($"{name} wire bytes/message", "B", higherIsBetter: false, [.. runs.Select(r => r.WireBytesPerMessage)]);
                Headline payload = Headline.Of($"{name} payload %", "%", higherIsBetter: false, [.. runs.Select(r => r.PayloadPercent)]);
                Headline cpu = Headline.Of($"{name} broker us/publication", "us", higherIsBetter: false, [.. runs.Select(r => r.BrokerMicrosecondsPerPublication).OfType<double>()]);
                Headline rate = Headline.Of($"{name} deliveries/s", "msg/s", higherIsBetter: true, [.. runs.Select(r => r.DeliveriesPerSecond)]);
                headlines.AddRange([bytes, payload, cpu, rate]);
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"| {DeltaStreams.Name(stream),-7} | {DeltasRun.Name(mode),-6} | {bytes.Value,13:F1} | {payload.Value,9:F1} | {cpu.Value,21:F1} | {rate.Value,12:N0} |"));
            }
        }

        List<string> failures = ScenarioSkeleton.Failures(cells, _ => null);
        Outcome.PrintFailures(failures);
        Console.WriteLine(failures.Count == 0 && !interrupted ? "  result: ok" : "  result: FAILED");
        if (options.Out is { } path)
        {
            ScenarioSkeleton.WriteResult(path, Name, target, headlines, json =>
            {
                json.WriteNumber("subscribers", options.Subscribers);
                json.WriteNumber("messages", options.Messages);
                json.WriteNumber("warmup", options.Warmup);
                ResultFile.WriteStrings(json, "streams", options.Streams.Select(DeltaStreams.Name));
                ResultFile.WriteStrings(json, "modes", options.Modes.Select(DeltasRun.Name));
                json.WriteNumber("maxLead", options.MaxLead);
                json.WriteNumber("seed", options.Seed);
                json.WriteNumber("repeat", options.Repeat);
            }, TargetReport.ServerRss(target), json => ScenarioSkeleton.WriteRows(json, "cells", cells), failures, interrupted, log);
            Console.WriteLine($"  result written to {path}");
        }

        return ScenarioSkeleton.ExitCode(interrupted, failures);
    }

    private static string Share(long part, long whole) =>
        whole == 0 ? "-" : string.Create(CultureInfo.InvariantCulture, $"{100.0 * part / whole:F0}%");

    private static string Sample(byte[] payload) =>
        payload.All(b => b is >= 0x20 and < 0x7f) ? System.Text.Encoding.ASCII.GetString(payload) : Convert.ToHexStringLower(payload.AsSpan(0, Math.Min(16, payload.Length))) + "...";

    /// <summary>A comma list of the enum's values by name (case-insensitive), or <c>all</c>.</summary>
    private static T[] ParseList<T>(string text, string option)
        where T : struct, Enum =>
        CompressionScenarioOptions.ParseList(text, option, Enum.GetValues<T>(), item => Enum.TryParse(item, ignoreCase: true, out T v) && Enum.IsDefined(v) && !int.TryParse(item, out _) ? v : null);
}

/// <summary>The deltas scenario's options after the target's.</summary>
internal sealed record DeltasOptions(
    int Subscribers,
    int Messages,
    int Warmup,
    DeltaStream[] Streams,
    DeltaMode[] Modes,
    int MaxLead,
    double MaxSeconds,
    int Seed,
    int Repeat,
    double SetupTimeout,
    string? Out);
