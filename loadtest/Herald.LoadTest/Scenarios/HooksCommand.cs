using System.Buffers;
using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using Herald.Protocol;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>hooks</c>: what an event hook to the application's backend (protocol-spec/hooks.md) costs a connect and a
/// subscribe. The tool starts a backend that allows everything at once (an in-process Kestrel app on a free loopback
/// port, answers never cached) and, alternated for <c>--rounds</c> rounds, a broker without hooks and one with the hook
/// (<c>--broker-dll</c>, fresh each time): <c>--connections</c> HELLO/WELCOME handshakes, <c>--concurrency</c> at
/// once, then as many SUBSCRIBEs (each to its own topic, confirmed by a PING/PONG) from <c>--concurrency</c>
/// connections. Prints per configuration the rate (operations/s over the whole burst) and p50/p99 of one operation, and
/// the hook's figures as ratios to the run without it measured beside it; with <c>--out</c>, a result file whose
/// headlines are each operation's rate, p50 and p99 without and with its hook (the median over the rounds).
/// </summary>
internal sealed class HooksCommand : IScenario
{
    private static readonly Option<int> Connections = OptionKinds.Integer("connections", 2000, 1, 1_000_000, "handshakes (and subscriptions) per configuration and round");

    private static readonly Option<int> Concurrency = OptionKinds.Integer("concurrency", 32, 1, 10_000, "handshakes or subscribes in flight at once");

    private static readonly Option<int> Rounds = OptionKinds.Integer("rounds", 2, 1, 100, "rounds, each running every configuration once, alternated");

    private static readonly CultureInfo C = CultureInfo.InvariantCulture;

    /// <summary>The permissions the backend grants every identity (hooks.md §2).</summary>
    private static readonly object Everything = new { publish = new[] { ">" }, subscribe = new[] { ">" } };

    public string Name => "hooks";

    public string Description =>
        "What an event hook costs a connect and a subscribe: handshakes and subscribes per second and p50/p99, without hooks and with the connect "
        + "or subscribe hook to a backend the tool starts (allow, never cached), alternated; loopback only, bounded by --connections.";

    public IReadOnlyList<Option> Options { get; } =
    [
        Connections, Concurrency, Rounds, TargetCommandOptions.BrokerDll, TargetCommandOptions.Host, TargetCommandOptions.Ports, TargetCommandOptions.HttpPort,
        TargetCommandOptions.MonitoringPort, TargetCommandOptions.SetupTimeout, ScenarioOptions.Out,
    ];

    public CommandSettings Read(ParseResult parsed)
    {
        (int first, int last) = TargetCommandOptions.PortRange(parsed);
        var target = new TargetOptions(
            "herald", "tcp", StartServer: true, parsed.GetRequiredValue(TargetCommandOptions.Host), Port: null, first, last,
            parsed.GetValue(TargetCommandOptions.HttpPort), ServerCpus: null, ClientCpus: null, ServerPid: null,
            parsed.GetRequiredValue(TargetCommandOptions.BrokerDll), parsed.GetValue(TargetCommandOptions.SetupTimeout),
            parsed.GetValue(TargetCommandOptions.MonitoringPort));
        return new(new HooksOptions(parsed.GetValue(Connections), parsed.GetValue(Concurrency), parsed.GetValue(Rounds), parsed.GetValue(ScenarioOptions.Out)), target);
    }

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (HooksOptions options, TargetOptions target) = Read(parsed).Of<HooksOptions>();
        Console.WriteLine(string.Create(C, $"hooks: {options.Connections} handshakes and subscribes per run, {options.Concurrency} at once, {options.Rounds} rounds, against {target.BrokerDll}; {AttacksCommand.MachineLine()}"));
        await using WebApplication backend = await StartBackendAsync(cancellationToken);
        string url = backend.Urls.First();
        var results = new Dictionary<string, List<(double Rate, Latencies Latencies)>>();
        // The hook's timeout is raised from its 2 s default to its 5 s most: the figure is the hook's cost, and a call that a loaded
        // machine delays past 2 s would be refused (the failure policy) rather than timed.
        (string Name, string Operation, string[] Arguments)[] configurations =
        [
            ("connect, no hook", "connect", []),
            ("connect, connect hook", "connect", ["--Herald:Hooks:Connect:Url=" + url + "/connect", "--Herald:Hooks:Connect:CacheMaxEntries=0", "--Herald:Hooks:Connect:Timeout=00:00:05"]),
            ("subscribe, no hook", "subscribe", []),
            ("subscribe, subscribe hook", "subscribe", ["--Herald:Hooks:Subscribe:Url=" + url + "/subscribe", "--Herald:Hooks:Subscribe:CacheMaxEntries=0", "--Herald:Hooks:Subscribe:Timeout=00:00:05"]),
        ];
        for (int round = 1; round <= options.Rounds; round++)
        {
            foreach ((string name, string operation, string[] arguments) in configurations)
            {
                await using var herald = (HeraldTarget)await HeraldTarget.StartAsync(target with { ServerArguments = arguments }, cancellationToken);
                (double rate, Latencies latencies) = operation == "connect"
                    ? await ConnectsAsync(herald, options, cancellationToken)
                    : await SubscribesAsync(herald, options, cancellationToken);
                Console.WriteLine(string.Create(C, $"round {round}, {name}: {rate:N0} /s, p50 {latencies.Percentile(50):N0} us, p99 {latencies.Percentile(99):N0} us; load average {AttacksCommand.LoadAverage()}"));
                if (!results.TryGetValue(name, out List<(double, Latencies)>? list))
                {
                    results[name] = list = [];
                }

                list.Add((rate, latencies));
            }
        }

        Console.WriteLine("| operation | per second | p50 | p99 | hook / no hook (rate, p50, p99) |");
        Console.WriteLine("|---|---|---|---|---|");
        foreach ((string name, _, _) in configurations)
        {
            (double rate, double p50, double p99) = Median(results[name]);
            string ratio = name.EndsWith("no hook", StringComparison.Ordinal) ? "" : Ratio(Median(results[name.Split(',')[0] + ", no hook"]), (rate, p50, p99));
            Console.WriteLine(string.Create(C, $"| {name} | {rate:N0} | {p50 / 1000:F2} ms | {p99 / 1000:F2} ms | {ratio} |"));
        }

        if (options.Out is { } path)
        {
            WriteResult(path, options, [.. configurations.Select(c => c.Name)], results);
            Console.WriteLine($"result written to {path}");
        }

        return ExitCodes.Ok;
    }

    /// <summary>
    /// The result file: for each configuration ("connect, no hook") the headlines "connect/s, no hook", "connect p50 us,
    /// no hook" and "connect p99 us, no hook" (a hook's: "..., hook"), each the median over the rounds with their spread,
    /// and every round's figures.
    /// </summary>
    private void WriteResult(string path, HooksOptions options, string[] names, Dictionary<string, List<(double Rate, Latencies Latencies)>> results)
    {
        var headlines = new List<Headline>();
        foreach (string name in names)
        {
            string operation = name.Split(',')[0];
            string variant = name.EndsWith("no hook", StringComparison.Ordinal) ? "no hook" : "hook";
            List<(double Rate, Latencies Latencies)> runs = results[name];
            headlines.Add(Headline.Of($"{operation}/s, {variant}", "/s", higherIsBetter: true, [.. runs.Select(r => r.Rate)]));
            headlines.Add(Headline.Of($"{operation} p50 us, {variant}", "us", higherIsBetter: false, [.. runs.Select(r => r.Latencies.Percentile(50))]));
            headlines.Add(Headline.Of($"{operation} p99 us, {variant}", "us", higherIsBetter: false, [.. runs.Select(r => r.Latencies.Percentile(99))]));
        }

        ScenarioSkeleton.WriteResult(path, Name, target: null, headlines, json =>
        {
            json.WriteNumber("connections", options.Connections);
            json.WriteNumber("concurrency", options.Concurrency);
            json.WriteNumber("rounds", options.Rounds);
        }, serverRss: null, json =>
        {
            json.WriteStartArray("runs");
            foreach (string name in names)
            {
                foreach ((double rate, Latencies latencies) in results[name])
                {
                    json.WriteStartObject();
                    json.WriteString("configuration", name);
                    json.WriteNumber("perSecond", rate);
                    json.WriteNumber("p50us", latencies.Percentile(50));
                    json.WriteNumber("p99us", latencies.Percentile(99));
                    json.WriteEndObject();
                }
            }

            json.WriteEndArray();
        }, failures: [], interrupted: false, log: null);
    }

    private static (double Rate, double P50, double P99) Median(List<(double Rate, Latencies Latencies)> runs) =>
        (MedianOf(runs.Select(r => r.Rate)), MedianOf(runs.Select(r => r.Latencies.Percentile(50))), MedianOf(runs.Select(r => r.Latencies.Percentile(99))));

    private static double MedianOf(IEnumerable<double> values)
    {
        double[] sorted = [.. values.Order()];
        return sorted.Length % 2 == 1 ? sorted[sorted.Length / 2] : (sorted[(sorted.Length / 2) - 1] + sorted[sorted.Length / 2]) / 2;
    }

    private static string Ratio((double Rate, double P50, double P99) without, (double Rate, double P50, double P99) with) =>
        string.Create(C, $"{with.Rate / without.Rate:F2}x, {with.P50 / without.P50:F2}x, {with.P99 / without.P99:F2}x");

    /// <summary><see cref="HooksOptions.Connections"/> handshakes (TCP connect, HELLO, WELCOME), each a fresh credential, <see cref="HooksOptions.Concurrency"/> at once.</summary>
    private static async Task<(double Rate, Latencies Latencies)> ConnectsAsync(HeraldTarget herald, HooksOptions options, CancellationToken cancellationToken)
    {
        var latencies = new Latencies[options.Concurrency];
        long started = Stopwatch.GetTimestamp();
        int next = -1;
        await Task.WhenAll(Enumerable.Range(0, options.Concurrency).Select(async worker =>
        {
            latencies[worker] = new Latencies();
            for (int i = Interlocked.Increment(ref next); i < options.Connections; i = Interlocked.Increment(ref next))
            {
                long begun = Stopwatch.GetTimestamp();
                await using HeraldConnection connection = await HeraldConnection.ConnectAsync(herald.Endpoints.For(i), "hooks", cancellationToken, 4096, auth: "user-" + i.ToString(C));
                latencies[worker].RecordTicks(begun, Stopwatch.GetTimestamp());
            }
        }));
        return (options.Connections / Stopwatch.GetElapsedTime(started).TotalSeconds, Sum(latencies));
    }

    /// <summary><see cref="HooksOptions.Connections"/> SUBSCRIBEs, each to its own topic and confirmed by PING/PONG, from <see cref="HooksOptions.Concurrency"/> connections.</summary>
    private static async Task<(double Rate, Latencies Latencies)> SubscribesAsync(HeraldTarget herald, HooksOptions options, CancellationToken cancellationToken)
    {
        HeraldConnection[] connections = await HeraldConnection.ConnectManyAsync(herald.Endpoints, options.Concurrency, i => "hooks-" + i.ToString(C), null, cancellationToken);
        try
        {
            var latencies = new Latencies[options.Concurrency];
            long started = Stopwatch.GetTimestamp();
            int next = -1;
            await Task.WhenAll(connections.Select(async (connection, worker) =>
            {
                latencies[worker] = new Latencies();
                var frames = new ArrayBufferWriter<byte>(64);
                for (int i = Interlocked.Increment(ref next); i < options.Connections; i = Interlocked.Increment(ref next))
                {
                    frames.ResetWrittenCount();
                    FrameWriter.WriteSubscribe(frames, (uint)(i + 1), Topic.EncodeName("hooks.topic" + i.ToString(C)));
                    long begun = Stopwatch.GetTimestamp();
                    if (await connection.UntilPongAsync(frames.WrittenMemory, cancellationToken, "subscribing") > 0)
                    {
                        throw new InvalidOperationException($"A SUBSCRIBE to hooks.topic{i} was refused.");
                    }

                    latencies[worker].RecordTicks(begun, Stopwatch.GetTimestamp());
                }
            }));
            return (options.Connections / Stopwatch.GetElapsedTime(started).TotalSeconds, Sum(latencies));
        }
        finally
        {
            foreach (HeraldConnection connection in connections)
            {
                await connection.DisposeAsync();
            }
        }
    }

    private static Latencies Sum(Latencies[] parts)
    {
        var all = new Latencies();
        foreach (Latencies part in parts)
        {
            all.Add(part);
        }

        return all;
    }

    /// <summary>The application's backend: allows every question at once (a connect names the credential as the identity, granted everything), never cached.</summary>
    private static async Task<WebApplication> StartBackendAsync(CancellationToken cancellationToken)
    {
        WebApplicationBuilder builder = WebApplication.CreateSlimBuilder();
        builder.Logging.ClearProviders();
        builder.WebHost.UseKestrel(k => k.Listen(IPAddress.Loopback, ClusterTarget.FreePort(IPAddress.Loopback)));
        WebApplication app = builder.Build();
        app.MapPost("/connect", async (HttpContext context) =>
        {
            using JsonDocument question = await JsonDocument.ParseAsync(context.Request.Body, cancellationToken: context.RequestAborted);
            string name = question.RootElement.TryGetProperty("credential", out JsonElement credential) ? credential.GetString() ?? "anonymous" : "anonymous"; // the readiness probe sends none
            await context.Response.WriteAsJsonAsync(new { result = "allow", identity = name, permissions = Everything }, context.RequestAborted);
        });
        app.MapPost("/subscribe", async (HttpContext context) =>
        {
            using JsonDocument question = await JsonDocument.ParseAsync(context.Request.Body, cancellationToken: context.RequestAborted);
            await context.Response.WriteAsJsonAsync(new { result = "allow" }, context.RequestAborted);
        });
        await app.StartAsync(cancellationToken);
        return app;
    }

    private sealed record HooksOptions(int Connections, int Concurrency, int Rounds, string? Out);
}
