using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>One repetition's result as the skeleton sees it; the scenario's own figures are in its row.</summary>
internal interface IScenarioRun
{
    /// <summary>Ctrl+C ended it.</summary>
    bool Interrupted { get; }

    /// <summary>No repetition may follow it: Ctrl+C ended it, or it left nothing to measure (the server is gone).</summary>
    bool EndsRepetitions => Interrupted;

    /// <summary>The checks that failed, one line each; empty when the repetition passed.</summary>
    IReadOnlyList<string> Failures { get; }

    /// <summary>Writes the repetition as one JSON object (a result row).</summary>
    void Write(Utf8JsonWriter json);
}

/// <summary>
/// The skeleton every scenario hangs on, so that each one writes only its connections, its load and its
/// figures:
/// <code>
/// start the target, print what it is                       StartAsync
///     (or a fresh one per repetition)                      RunOnFreshTargetsAsync
/// --repeat N: one repetition after another, each           RepeatAsync
///     setup, bounded by --setup-timeout                    SetUpAsync
///     warm-up, then the measured window                    MeasuredWindow.RunAsync
///     stop the load, drain within --grace                  StopAndDrainAsync
/// result rows, headlines, failures: printed and saved      Report / WriteResult
/// exit code: 0 ok, 1 a check failed, 3 unreachable, 130    ExitCode
/// </code>
/// </summary>
internal static class ScenarioSkeleton
{
    /// <summary>
    /// Starts (or finds) the target, lets <paramref name="check"/> refuse options it cannot serve
    /// (<see cref="UsageException"/>; the target is then stopped), and prints the machine, the target and
    /// the server's command line.
    /// </summary>
    public static async Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken, Action<ITarget>? check = null)
    {
        ITarget target = await TargetFactory.StartAsync(options, cancellationToken);
        try
        {
            check?.Invoke(target);
        }
        catch
        {
            await target.DisposeAsync();
            throw;
        }

        TargetReport.Print(target, Console.Out);
        return target;
    }

    /// <summary>
    /// The whole of a scenario over one target (<c>fanout</c>, <c>rpc</c>, <c>stream</c>): start the target,
    /// run <paramref name="repeat"/> repetitions of <paramref name="once"/> with one run log, each after its
    /// <paramref name="header"/> (default <see cref="RepetitionHeader"/>) and printed when
    /// <paramref name="print"/> is given, then <paramref name="report"/> them. Returns the exit code.
    /// </summary>
    public static async Task<int> RunRepetitionsAsync<T>(
        TargetOptions targetOptions,
        int repeat,
        Func<ITarget, RunLog, Task<T?>> once,
        Action<T>? print,
        Func<ITarget, List<T>, RunLog, int> report,
        CancellationToken cancellationToken,
        Action<ITarget>? check = null,
        Func<int, string?>? header = null)
        where T : class, IScenarioRun
    {
        await using ITarget target = await StartAsync(targetOptions, cancellationToken, check);
        var log = new RunLog();
        (List<T> runs, int? exit) = await RepeatAsync(repeat, header ?? RepetitionHeader(repeat), () => once(target, log), print, cancellationToken);
        return exit ?? report(target, runs, log);
    }

    /// <summary>
    /// The whole of a scenario that measures a freshly started server in every repetition
    /// (<c>connections</c>): like <see cref="RunRepetitionsAsync"/>, but each repetition stops the last
    /// target and starts another (printed once, the first time); <paramref name="report"/> sees the last one.
    /// </summary>
    public static async Task<int> RunOnFreshTargetsAsync<T>(
        TargetOptions targetOptions,
        int repeat,
        Func<ITarget, int, Task<T?>> once,
        Action<T> print,
        Func<ITarget, List<T>, int> report,
        CancellationToken cancellationToken)
        where T : class, IScenarioRun
    {
        ITarget? target = null;
        try
        {
            int repetition = 0;
            (List<T> runs, int? exit) = await RepeatAsync(repeat, RepetitionHeader(repeat), async () =>
            {
                if (target is { } last)
                {
                    target = null;
                    await last.DisposeAsync();
                }

                target = ++repetition == 1 ? await StartAsync(targetOptions, cancellationToken) : await TargetFactory.StartAsync(targetOptions, cancellationToken);
                return await once(target, repetition);
            }, print, cancellationToken);
            return exit ?? report(target!, runs);
        }
        finally
        {
            if (target is not null)
            {
                await target.DisposeAsync();
            }
        }
    }

    /// <summary>
    /// Runs <paramref name="once"/> <paramref name="repeat"/> times, each after its <paramref name="header"/>
    /// line (none when it gives null), printing each result, and stops early after one that
    /// <see cref="IScenarioRun.EndsRepetitions"/>.
    /// Returns the runs, or an exit code when a repetition could not be set up (null from
    /// <paramref name="once"/>): <see cref="ExitCodes.Interrupted"/> on Ctrl+C, else <see cref="ExitCodes.BrokerUnreachable"/>.
    /// </summary>
    public static async Task<(List<T> Runs, int? Exit)> RepeatAsync<T>(int repeat, Func<int, string?> header, Func<Task<T?>> once, Action<T>? print, CancellationToken cancellationToken)
        where T : class, IScenarioRun
    {
        var runs = new List<T>();
        for (int repetition = 1; repetition <= repeat; repetition++)
        {
            if (header(repetition) is { } line)
            {
                Console.WriteLine(line);
            }

            T? run = await once();
            if (run is null)
            {
                return (runs, cancellationToken.IsCancellationRequested ? ExitCodes.Interrupted : ExitCodes.BrokerUnreachable);
            }

            runs.Add(run);
            print?.Invoke(run);
            if (run.EndsRepetitions)
            {
                break;
            }
        }

        return (runs, null);
    }

    /// <summary>The header of the throughput scenarios: a line per repetition when there are several.</summary>
    public static Func<int, string?> RepetitionHeader(int repeat) =>
        repetition => repeat > 1 ? string.Create(CultureInfo.InvariantCulture, $"repetition {repetition} of {repeat}") : null;

    /// <summary>
    /// Runs <paramref name="setup"/> (connect, subscribe) within <paramref name="timeoutSeconds"/>. An
    /// exception <paramref name="describe"/> names (null: a bug, rethrown), or the timeout, is a setup
    /// failure; Ctrl+C makes it interrupted.
    /// </summary>
    public static async Task<SetupOutcome> SetUpAsync(double timeoutSeconds, Func<CancellationToken, Task> setup, Func<Exception, string?> describe, CancellationToken cancellationToken)
    {
        using var bounded = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        bounded.CancelAfter(TimeSpan.FromSeconds(timeoutSeconds));
        try
        {
            await setup(bounded.Token);
            return new SetupOutcome(Interrupted: false, Failure: null);
        }
        catch (Exception e) when (!cancellationToken.IsCancellationRequested && (e is OperationCanceledException || describe(e) is not null))
        {
            return new SetupOutcome(false, e is OperationCanceledException ? $"setup did not finish within {timeoutSeconds.ToString(CultureInfo.InvariantCulture)} s" : describe(e));
        }
        catch (OperationCanceledException)
        {
            return new SetupOutcome(Interrupted: true, Failure: null);
        }
    }

    /// <summary>
    /// <see cref="SetUpAsync"/> for the throughput scenarios' clients: a known way for the target to fail
    /// (<see cref="ScenarioClients.IsSetupFailure"/>) or the timeout is printed as the target being
    /// unreachable or unusable. True when the clients are ready; false when the repetition cannot run.
    /// </summary>
    public static async Task<bool> SetUpClientsAsync(ITarget target, double timeoutSeconds, Func<CancellationToken, Task> setup, CancellationToken cancellationToken)
    {
        SetupOutcome outcome = await SetUpAsync(timeoutSeconds, setup, e => ScenarioClients.IsSetupFailure(e) ? e.Message : null, cancellationToken);
        if (outcome.Failure is { } why)
        {
            Console.Error.WriteLine($"error: {target.Label} unreachable or unusable: {why}");
        }

        return outcome.Done;
    }

    /// <summary>
    /// Stops the load (<paramref name="stop"/>, then waits for <paramref name="sending"/>) and lets what
    /// is in flight arrive: polls <paramref name="pending"/> every <paramref name="pollMilliseconds"/> until
    /// it is false or <paramref name="graceSeconds"/> have passed since the stop (no wait after Ctrl+C).
    /// Returns the seconds it took.
    /// </summary>
    public static async Task<double> StopAndDrainAsync(CancellationTokenSource stop, Task sending, double graceSeconds, bool interrupted, Func<bool> pending, int pollMilliseconds)
    {
        long start = Stopwatch.GetTimestamp();
        await stop.CancelAsync();
        await RunState.WaitQuietlyAsync(sending, TimeSpan.FromSeconds(graceSeconds));
        while (!interrupted && Stopwatch.GetElapsedTime(start).TotalSeconds < graceSeconds && pending())
        {
            await Task.Delay(pollMilliseconds, CancellationToken.None);
        }

        return Stopwatch.GetElapsedTime(start).TotalSeconds;
    }

    /// <summary>Every repetition's failures, each behind <paramref name="prefix"/>(repetition number) when that is not null.</summary>
    public static List<string> Failures<T>(IReadOnlyList<T> runs, Func<int, string?> prefix)
        where T : IScenarioRun =>
        [.. runs.SelectMany((r, i) => r.Failures.Select(f => prefix(i + 1) is { } p ? $"{p}: {f}" : f))];

    /// <summary>130 after Ctrl+C, 3 when the server could not be reached (<paramref name="unreachable"/>), 1 with failures, else 0.</summary>
    public static int ExitCode(bool interrupted, IReadOnlyCollection<string> failures, bool unreachable = false) =>
        interrupted ? ExitCodes.Interrupted : unreachable ? ExitCodes.BrokerUnreachable : failures.Count == 0 ? ExitCodes.Ok : ExitCodes.RunFailed;

    /// <summary>
    /// The end of the throughput scenarios (<c>fanout</c>, <c>rpc</c>): the status line, the headlines, the
    /// server's RSS and the failures, printed; with <paramref name="outPath"/> the result file with the
    /// repetitions under <c>"repetitions"</c>. Returns the exit code.
    /// </summary>
    public static int Report<T>(ITarget target, string scenario, string title, IReadOnlyList<T> runs, IReadOnlyList<Headline> headlines, string? outPath, Action<Utf8JsonWriter> writeParameters, RunLog log)
        where T : IScenarioRun
    {
        bool interrupted = runs.Any(r => r.Interrupted);
        List<string> failures = Failures(runs, i => runs.Count > 1 ? string.Create(CultureInfo.InvariantCulture, $"repetition {i}") : null);
        long? rss = TargetReport.ServerRss(target);

        Console.WriteLine();
        Console.WriteLine($"{title} on {target.Label} ({(interrupted ? "INTERRUPTED" : failures.Count == 0 ? "OK" : "FAILED")})");
        ScenarioClients.PrintHeadlines(headlines);
        if (rss is { } bytes)
        {
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  server RSS          : {bytes / 1e6:F1} MB at the end"));
        }

        Outcome.PrintFailures(failures);
        if (outPath is { } path)
        {
            WriteResult(path, scenario, target, headlines, writeParameters, rss, json => WriteRows(json, "repetitions", runs), failures, interrupted, log);
            Console.WriteLine($"  result written to   : {path}");
        }

        return ExitCode(interrupted, failures);
    }

    /// <summary>
    /// The result file every scenario writes: the target (none for <c>compression</c>, which starts its own
    /// brokers), the headlines, the parameters, the server's RSS when known, the result rows, then the
    /// outcome (ok, interrupted, failures, and the run's events when it kept a <paramref name="log"/>).
    /// </summary>
    public static void WriteResult(string path, string scenario, ITarget? target, IEnumerable<Headline> headlines, Action<Utf8JsonWriter> writeParameters, long? serverRss, Action<Utf8JsonWriter> writeRows, IReadOnlyCollection<string> failures, bool interrupted, RunLog? log) =>
        ResultFile.Write(path, scenario, json =>
        {
            if (target is not null)
            {
                TargetReport.Write(json, target);
            }

            Headline.WriteAll(json, headlines);
            json.WriteStartObject("parameters");
            writeParameters(json);
            json.WriteEndObject();
            if (serverRss is { } rss)
            {
                json.WriteNumber("serverRssBytes", rss);
            }

            writeRows(json);
            Outcome.Write(json, failures, interrupted, log);
        });

    /// <summary>
    /// The start of a repetition's printout in the throughput scenarios: <c>"{scenario} repetition (OK)"</c>
    /// and, when the window never opened, why nothing was measured. True when the figures follow.
    /// </summary>
    public static bool PrintRepetitionStatus(string scenario, IScenarioRun run, bool measured)
    {
        Console.WriteLine($"{scenario} repetition ({(run.Interrupted ? "INTERRUPTED" : run.Failures.Count == 0 ? "OK" : "FAILED")})");
        if (!measured)
        {
            Console.WriteLine(run.Interrupted ? "  interrupted before the measured window: nothing measured." : "  stopped before the measured window: nothing measured.");
        }

        return measured;
    }

    /// <summary>
    /// One repetition of a throughput scenario as a result row: measured, ok, the window's length, the
    /// scenario's <paramref name="figures"/>, the CPU and memory used in the window, the failures.
    /// </summary>
    public static void WriteRepetition(Utf8JsonWriter json, IScenarioRun run, bool measured, double seconds, ResourceUsage? resources, Action<Utf8JsonWriter> figures)
    {
        json.WriteStartObject();
        json.WriteBoolean("measured", measured);
        json.WriteBoolean("ok", run.Failures.Count == 0 && !run.Interrupted);
        json.WriteNumber("measuredSeconds", seconds);
        figures(json);
        resources?.Write(json);
        ResultFile.WriteStrings(json, "failures", run.Failures);
        json.WriteEndObject();
    }

    /// <summary>The failures every windowed repetition starts with: the window aborted, connections the server dropped.</summary>
    public static List<string> WindowFailures(string? aborted, string?[] lost, string connections)
    {
        var failures = new List<string>();
        if (aborted is not null)
        {
            failures.Add($"run aborted: {aborted}");
        }

        int disconnected = lost.Count(l => l is not null);
        if (disconnected > 0)
        {
            failures.Add($"{disconnected} of {lost.Length} {connections} were disconnected (first: {lost.First(l => l is not null)})");
        }

        return failures;
    }

    /// <summary>Writes <c>"name": [ row, ... ]</c>.</summary>
    public static void WriteRows<T>(Utf8JsonWriter json, string name, IEnumerable<T> runs)
        where T : IScenarioRun
    {
        json.WriteStartArray(name);
        foreach (T run in runs)
        {
            run.Write(json);
        }

        json.WriteEndArray();
    }
}

/// <summary>How a bounded setup ended: done (neither set), interrupted by Ctrl+C, or failed and why.</summary>
internal readonly record struct SetupOutcome(bool Interrupted, string? Failure)
{
    public bool Done => !Interrupted && Failure is null;
}
