using System.CommandLine;
using System.CommandLine.Parsing;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>compare &lt;scenario&gt;</c>: runs one scenario against each target in turn, in this process (through
/// <see cref="Program.RunAsync"/>, each with its own <c>--out</c>), reads every result's
/// <c>"headlines"</c> and prints them side by side with the ratio against Herald, oriented so that &gt; 1
/// always means Herald did better. A target whose server is unavailable (exit code 3) is listed as skipped
/// with the reason, not counted as a failure.
/// </summary>
internal sealed class CompareCommand : IScenario
{
    /// <summary>One per target: what <c>compare</c> runs when <c>--targets</c> is not given.</summary>
    public static readonly string[] DefaultTargets = ["herald/tcp", "nats/tcp", "redis/tcp", "signalr/websockets"];

    /// <summary>Every target and transport (<c>--targets all</c>).</summary>
    public static readonly string[] AllTargets = ["herald/tcp", "herald/websocket", "herald/longpoll", "nats/tcp", "redis/tcp", "signalr/websockets", "signalr/longpolling"];

    /// <summary>The label suffix of a <c>--baseline</c> row.</summary>
    public const string BaselineSuffix = " (baseline)";

    private static readonly Option<string> Targets = OptionKinds.Text("targets", string.Join(",", DefaultTargets), "LIST",
        $"target/transport pairs, comma-separated, e.g. herald/tcp,nats/tcp; `all`: {string.Join(",", AllTargets)}");

    private static readonly Option<string?> Out = OptionKinds.OptionalText("out", "FILE", "a combined JSON: the table and each target's result file embedded");

    private static readonly Option<string?> Markdown = OptionKinds.OptionalText("markdown", "FILE", "the table as markdown (for the README)");

    private static readonly Option<string?> Baseline = OptionKinds.OptionalText("baseline", "DLL",
        "an A/B in one run: each Herald target runs first with this broker (--broker-dll DLL, labelled `herald/tcp (baseline)`), "
        + "then with the one given (or the default build); the ratios are then new vs baseline");

    /// <summary>compare's own options; every other option of <c>compare &lt;scenario&gt;</c> goes to the scenario.</summary>
    private static readonly Option[] Own = [Targets, Out, Markdown, Baseline];

    /// <summary>The scenario's options that compare sets for each run itself (from <c>--targets</c>, and a result file of its own).</summary>
    private static readonly Option[] SetPerTarget = [TargetCommandOptions.Target, TargetCommandOptions.Transport, ScenarioOptions.Out];

    public string Name => "compare";

    public string Description => """
        runs a scenario against each target in turn: headlines side by side, ratios against Herald.
        compare <scenario> [--targets LIST] [--out FILE] [--markdown FILE] [--baseline DLL] [scenario options...]
        Every other option goes to the scenario, the same for every target (see `compare <scenario> --help`);
        compare adds --target, --transport and --out itself. Ratio = Herald / peer for higher-is-better
        figures and peer / Herald for lower-is-better ones: > 1 means Herald did better.
        Exit codes: 0 ok (unavailable targets are skipped), 1 a run failed a check, 2 usage,
        3 no target could be run, 130 Ctrl+C.
        """;

    /// <summary>compare itself takes none: each of its commands, one per scenario that runs against a target, takes <see cref="Own"/> and the scenario's.</summary>
    public IReadOnlyList<Option> Options => [];

    public Command CreateCommand()
    {
        var command = new Command(Name, Description);
        foreach (IScenario scenario in Program.Scenarios.Where(s => s.Options.Contains(TargetCommandOptions.Target)))
        {
            var run = new Command(scenario.Name, $"{scenario.Name} against each of --targets in turn. {scenario.Description}");
            foreach (Option option in Own.Concat(scenario.Options.Except(SetPerTarget)))
            {
                run.Add(option);
            }

            run.SetAction(RunAsync);
            command.Add(run);
        }

        return command;
    }

    /// <summary>What <c>compare</c> runs: the scenario, the targets in order (a baseline row before each Herald one), its own
    /// files, and the options passed on to every run, as given.</summary>
    /// <exception cref="UsageException">An unknown target or a missing baseline.</exception>
    public CommandSettings Read(ParseResult parsed)
    {
        ArgumentNullException.ThrowIfNull(parsed);
        string targetsText = parsed.GetRequiredValue(Targets);
        TargetSpec[] targets = [.. (targetsText == "all" ? AllTargets : targetsText.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)).Select(TargetSpec.Parse)];
        if (targets.Length == 0)
        {
            throw new UsageException("--targets names no target.");
        }

        if (parsed.GetValue(Baseline) is { } baseline)
        {
            if (!File.Exists(baseline))
            {
                throw new UsageException($"--baseline: no broker at '{baseline}'.");
            }

            // Each Herald target's baseline row runs just before it, so the two share the machine's state.
            targets = [.. targets.SelectMany(t => t.Target is "herald" or "cluster" ? new[] { t with { BrokerDll = Path.GetFullPath(baseline), Label = t.Label + BaselineSuffix }, t } : [t])];
        }

        List<string> passed = [];
        foreach (OptionResult given in parsed.CommandResult.Children.OfType<OptionResult>().Where(r => !r.Implicit && !Own.Contains(r.Option)))
        {
            passed.Add(given.Option.Name);
            passed.AddRange(given.Tokens.Select(t => t.Value));
        }

        return new(new CompareSettings(parsed.CommandResult.Command.Name, targets, parsed.GetValue(Out), parsed.GetValue(Markdown), passed), null);
    }

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (string scenario, IReadOnlyList<TargetSpec> targets, string? outFile, string? markdownFile, IReadOnlyList<string> passed) = (CompareSettings)Read(parsed).Scenario;

        var rows = new List<CompareRow>();
        foreach (TargetSpec target in targets)
        {
            Console.WriteLine();
            Console.WriteLine($"=== compare: {scenario} on {target.Label} ===");
            string resultFile = Path.Combine(Path.GetTempPath(), $"herald-compare-{Guid.NewGuid():N}.json");
            string[] args = [scenario, .. target.BrokerDll is null ? passed : WithoutOption(passed, "--broker-dll"), "--target", target.Target, "--transport", target.Transport, "--out", resultFile, .. target.BrokerDll is { } dll ? new[] { "--broker-dll", dll } : []];
            var errors = new LineCapture(Console.Error);
            TextWriter stderr = Console.Error;
            Console.SetError(errors);
            int code;
            try
            {
                code = await Program.RunAsync(args, cancellationToken);
            }
            finally
            {
                Console.SetError(stderr);
            }

            string? result = File.Exists(resultFile) ? await File.ReadAllTextAsync(resultFile, cancellationToken) : null;
            if (result is not null)
            {
                File.Delete(resultFile);
            }

            if (code == ExitCodes.Usage)
            {
                Console.Error.WriteLine($"compare: {scenario} rejected the options for {target.Label}; nothing more is run.");
                return ExitCodes.Usage;
            }

            if (code == ExitCodes.Interrupted || cancellationToken.IsCancellationRequested)
            {
                return ExitCodes.Interrupted;
            }

            rows.Add(CompareRow.Of(target, code, result, errors.LastError));
        }

        var table = new CompareTable(scenario, rows);
        Console.WriteLine();
        table.Print(Console.Out);
        if (markdownFile is not null)
        {
            await File.WriteAllTextAsync(markdownFile, table.Markdown(), cancellationToken);
            Console.WriteLine($"wrote {markdownFile}");
        }

        if (outFile is not null)
        {
            ResultFile.Write(outFile, "compare", table.Write);
            Console.WriteLine($"wrote {outFile}");
        }

        return rows.All(r => r.Status == CompareStatus.Skipped) ? ExitCodes.BrokerUnreachable
            : rows.Any(r => r.Status == CompareStatus.Failed) ? ExitCodes.RunFailed
            : ExitCodes.Ok;
    }

    private static IReadOnlyList<string> WithoutOption(IReadOnlyList<string> tokens, string option)
    {
        List<string> list = [.. tokens];
        int at = list.IndexOf(option);
        return at < 0 ? tokens : [.. list.Take(at), .. list.Skip(at + 2)];
    }
}

/// <summary>What <c>compare</c> runs: see <see cref="CompareCommand.Read"/>.</summary>
internal sealed record CompareSettings(string Scenario, IReadOnlyList<TargetSpec> Targets, string? Out, string? Markdown, IReadOnlyList<string> Passed);

/// <summary>One entry of <c>--targets</c>: <c>herald/tcp</c>, <c>signalr/websockets</c>, or a bare <c>nats</c> (tcp).</summary>
internal sealed record TargetSpec(string Target, string Transport, string Label)
{
    /// <summary>The broker this row runs instead of the default (<c>--baseline</c>).</summary>
    public string? BrokerDll { get; init; }

    /// <exception cref="UsageException">Not a known target or transport.</exception>
    public static TargetSpec Parse(string text)
    {
        string[] parts = text.Split('/', 2);
        string target = parts[0];
        if (Array.IndexOf(TargetOptions.Targets, target) < 0)
        {
            throw new UsageException($"--targets: unknown target '{target}' in '{text}'; one of {string.Join(", ", TargetOptions.Targets)}.");
        }

        // The tool's --transport is tcp|longpoll for every target; SignalR's are named websockets|longpolling.
        string named = parts.Length > 1 ? parts[1] : target == "signalr" ? "websockets" : "tcp";
        string? transport = (target, named) switch
        {
            ("signalr", "websockets" or "websocket" or "tcp") => "tcp",
            ("signalr", "longpolling" or "longpoll") => "longpoll",
            ("signalr", _) => null,
            ("herald" or "nats", "tls") => named,
            ("herald" or "cluster", "websocket" or "websockets") => "websocket",
            (_, "tcp" or "longpoll") => named,
            _ => null,
        };
        if (transport is null)
        {
            throw new UsageException($"--targets: '{text}': {target} has no transport '{named}'.");
        }

        string label = target == "signalr" ? $"signalr/{(transport == "tcp" ? "websockets" : "longpolling")}" : $"{target}/{transport}";
        return new TargetSpec(target, transport, label);
    }
}

internal enum CompareStatus
{
    /// <summary>The scenario ran and passed its checks.</summary>
    Ok,

    /// <summary>The scenario ran but failed a check (exit 1), or ended without a result.</summary>
    Failed,

    /// <summary>The server was unavailable (exit 3).</summary>
    Skipped,
}

/// <summary>One target's outcome: its headlines and the result file it wrote.</summary>
internal sealed record CompareRow(TargetSpec Target, CompareStatus Status, int ExitCode, string? Reason, List<Headline> Headlines, string? ResultJson)
{
    public static CompareRow Of(TargetSpec target, int exitCode, string? resultJson, string? lastError)
    {
        List<Headline> headlines = [];
        if (resultJson is not null)
        {
            try
            {
                using JsonDocument document = JsonDocument.Parse(resultJson);
                headlines = Headline.ReadAll(document.RootElement);
            }
            catch (Exception e) when (e is JsonException or KeyNotFoundException or InvalidOperationException)
            {
                return new CompareRow(target, CompareStatus.Failed, exitCode, $"unreadable result: {e.Message}", [], null);
            }
        }

        return exitCode switch
        {
            ExitCodes.BrokerUnreachable => new CompareRow(target, CompareStatus.Skipped, exitCode, lastError ?? "server unavailable", [], resultJson),
            ExitCodes.Ok when resultJson is not null => new CompareRow(target, CompareStatus.Ok, exitCode, null, headlines, resultJson),
            ExitCodes.Ok => new CompareRow(target, CompareStatus.Failed, exitCode, "the scenario wrote no result", [], null),
            _ => new CompareRow(target, CompareStatus.Failed, exitCode, lastError ?? $"exit code {exitCode}", headlines, resultJson),
        };
    }
}

/// <summary>
/// The side-by-side table: one row per target, per headline its value (and spread over repetitions) and
/// the ratio against the Herald row (herald/tcp when it ran, else the first Herald row that did).
/// </summary>
internal sealed class CompareTable
{
    private static readonly string[] NoFigures = ["-", "-"];

    private readonly string _scenario;
    private readonly List<CompareRow> _rows;
    private readonly List<(string Name, string Unit, bool HigherIsBetter)> _columns = [];
    private readonly CompareRow? _herald;

    public CompareTable(string scenario, List<CompareRow> rows)
    {
        _scenario = scenario;
        _rows = rows;
        foreach (Headline h in rows.SelectMany(r => r.Headlines))
        {
            if (!_columns.Any(c => c.Name == h.Name))
            {
                _columns.Add((h.Name, h.Unit, h.HigherIsBetter));
            }
        }

        // A --baseline row is compared with the reference, never the reference itself.
        CompareRow[] ran = [.. rows.Where(r => r.Target.Target == "herald" && r.Target.BrokerDll is null && r.Headlines.Count > 0)];
        _herald = ran.FirstOrDefault(r => r.Target.Transport == "tcp") ?? ran.FirstOrDefault();
    }

    /// <summary>Herald's figure over the peer's (higher is better) or the peer's over Herald's (lower is better): &gt; 1 means Herald did better; null when either is missing.</summary>
    public double? Ratio(CompareRow row, string headline)
    {
        if (_herald is null || Find(_herald, headline) is not { } herald || Find(row, headline) is not { } peer)
        {
            return null;
        }

        double ratio = herald.HigherIsBetter ? herald.Value / peer.Value : peer.Value / herald.Value;
        return double.IsFinite(ratio) ? ratio : null;
    }

    public void Print(TextWriter output)
    {
        output.WriteLine($"compare {_scenario}: ratio = Herald ({_herald?.Target.Label ?? "did not run"}) vs the row, > 1 means Herald did better");
        string[] header = ["target", .. _columns.SelectMany(c => new[] { $"{c.Name} ({c.Unit}, {(c.HigherIsBetter ? "higher" : "lower")} is better)", "ratio" })];
        List<string[]> lines = [header];
        var notes = new List<string>();
        foreach (CompareRow row in _rows)
        {
            if (row.Status == CompareStatus.Skipped || row.Headlines.Count == 0)
            {
                lines.Add([row.Target.Label, .. _columns.SelectMany(_ => NoFigures)]);
                notes.Add($"{row.Target.Label}: {(row.Status == CompareStatus.Skipped ? "skipped" : "failed")}: {row.Reason}");
                continue;
            }

            lines.Add([row.Target.Label, .. _columns.SelectMany(c => new[] { Cell(row, c.Name), RatioText(row, c.Name) })]);
            if (row.Status == CompareStatus.Failed)
            {
                notes.Add($"{row.Target.Label}: a check failed: {row.Reason}");
            }
        }

        int[] widths = [.. Enumerable.Range(0, header.Length).Select(i => lines.Max(l => l[i].Length))];
        foreach (string[] line in lines)
        {
            output.WriteLine("  " + string.Join("  ", line.Select((cell, i) => i == 0 ? cell.PadRight(widths[i]) : cell.PadLeft(widths[i]))));
        }

        foreach (string note in notes)
        {
            output.WriteLine($"  {note}");
        }
    }

    public string Markdown()
    {
        var md = new StringBuilder();
        md.Append(CultureInfo.InvariantCulture, $"`{_scenario}`; ratio = Herald ({_herald?.Target.Label ?? "did not run"}) vs the row, > 1 means Herald did better.\n\n");
        md.Append("| target |");
        foreach ((string name, string unit, bool higher) in _columns)
        {
            md.Append(CultureInfo.InvariantCulture, $" {name} ({unit}, {(higher ? "higher" : "lower")} is better) | ratio |");
        }

        md.Append("\n|---|");
        md.Append(string.Concat(Enumerable.Repeat("---:|---:|", _columns.Count)));
        md.Append('\n');
        foreach (CompareRow row in _rows)
        {
            md.Append(CultureInfo.InvariantCulture, $"| {row.Target.Label} |");
            if (row.Status == CompareStatus.Skipped || row.Headlines.Count == 0)
            {
                md.Append(CultureInfo.InvariantCulture, $" {(row.Status == CompareStatus.Skipped ? "skipped" : "failed")}: {row.Reason?.Replace("|", "\\|", StringComparison.Ordinal)} |");
                md.Append(string.Concat(Enumerable.Repeat(" |", (2 * _columns.Count) - 1)));
            }
            else
            {
                foreach ((string name, _, _) in _columns)
                {
                    md.Append(CultureInfo.InvariantCulture, $" {Cell(row, name)} | {RatioText(row, name)} |");
                }
            }

            md.Append('\n');
        }

        return md.ToString();
    }

    /// <summary>Writes the body of the combined result: the table, then each target's run with its result file embedded.</summary>
    public void Write(Utf8JsonWriter json)
    {
        json.WriteString("comparedScenario", _scenario);
        json.WriteString("reference", _herald?.Target.Label);
        json.WriteStartArray("targets");
        foreach (CompareRow row in _rows)
        {
            json.WriteStartObject();
            json.WriteString("label", row.Target.Label);
            json.WriteString("target", row.Target.Target);
            json.WriteString("transport", row.Target.Transport);
            json.WriteString("status", row.Status.ToString().ToLowerInvariant());
            json.WriteNumber("exitCode", row.ExitCode);
            json.WriteString("reason", row.Reason);
            json.WriteStartArray("ratios");
            foreach (Headline h in row.Headlines)
            {
                json.WriteStartObject();
                json.WriteString("name", h.Name);
                if (Ratio(row, h.Name) is { } ratio)
                {
                    json.WriteNumber("heraldAdvantage", ratio);
                }
                else
                {
                    json.WriteNull("heraldAdvantage");
                }

                json.WriteEndObject();
            }

            json.WriteEndArray();
            if (row.ResultJson is { } result)
            {
                json.WritePropertyName("result");
                json.WriteRawValue(result);
            }
            else
            {
                json.WriteNull("result");
            }

            json.WriteEndObject();
        }

        json.WriteEndArray();
    }

    private static Headline? Find(CompareRow row, string name) => row.Headlines.Find(h => h.Name == name);

    private static string Cell(CompareRow row, string name)
    {
        if (Find(row, name) is not { } h || !double.IsFinite(h.Value))
        {
            return "-";
        }

        string value = Math.Abs(h.Value) >= 100 ? h.Value.ToString("N0", CultureInfo.InvariantCulture) : h.Value.ToString("G3", CultureInfo.InvariantCulture);
        return h.Repetitions > 1 ? string.Create(CultureInfo.InvariantCulture, $"{value} ±{100 * h.Spread / 2:F0}%") : value;
    }

    private string RatioText(CompareRow row, string name) =>
        Ratio(row, name) is { } r ? r.ToString("F2", CultureInfo.InvariantCulture) + "x" : "-";
}

/// <summary>
/// Passes standard error through while remembering the last <c>error:</c> line, so a skipped target's reason
/// (printed by <see cref="Program.RunAsync"/>) goes into the table. Not thread-safe beyond what
/// <see cref="Console.Error"/>'s synchronized wrapper gives it.
/// </summary>
internal sealed class LineCapture(TextWriter inner) : TextWriter
{
    private readonly StringBuilder _line = new();

    public override Encoding Encoding => inner.Encoding;

    public string? LastError { get; private set; }

    public override void Write(char value)
    {
        inner.Write(value);
        Scan(value);
    }

    public override void Write(string? value)
    {
        inner.Write(value);
        foreach (char c in value ?? "")
        {
            Scan(c);
        }
    }

    public override void WriteLine(string? value)
    {
        Write(value);
        Write('\n');
    }

    private void Scan(char value)
    {
        if (value != '\n')
        {
            _line.Append(value);
            return;
        }

        string line = _line.ToString().TrimEnd('\r');
        if (line.StartsWith("error: ", StringComparison.Ordinal))
        {
            LastError = line["error: ".Length..];
        }

        _line.Clear();
    }
}
