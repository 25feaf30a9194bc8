using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Security.Cryptography;
using System.Text;
using System.Text.RegularExpressions;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using StackExchange.Redis;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>attacks</c>: the attacks of the threat model's cluster, history, SSE and WebSocket rows, each run against a
/// broker the tool starts (<c>--broker-dll</c>, so one build and then another), with the figures an operator would
/// look at: the broker's RSS before and after, what Redis sent (<c>INFO stats</c> total_net_output_bytes), what it
/// holds (<c>PUBSUB NUMPAT</c>, <c>MEMORY USAGE</c>, <c>XLEN</c>), and Redis's PUBLISH rate (<c>redis-benchmark</c>).
/// Each attack has a fresh redis-server on a free port and fresh nodes (one, or two where the attack crosses them),
/// loopback only, bounded in count and time. Token authentication: <c>alice</c> may publish and subscribe
/// <c>orders.&gt;</c> and <c>feed.&gt;</c>; <c>mallory</c> has no permission at all and acts under her own reply inbox.
/// <para>
/// The brokers are started with keys every build since the cluster knows (listeners, the two tokens, the Redis,
/// history rules, <c>History:MaxTopics</c>): a build rejects keys it does not know, and the attacks must run against
/// each build at its defaults. The attacks and their sizes are in <see cref="AttackRuns"/>; loadtest/docs/attacks.md
/// has the figures.
/// </para>
/// </summary>
internal sealed partial class AttacksCommand : IScenario
{
    public const string AliceToken = "attacks-alice-token-0123";
    public const string MalloryToken = "attacks-mallory-token-0123";

    private static readonly Option<string> Which = OptionKinds.Text("attacks", "1,2,3,4,5,6,7,rate", "LIST",
        "which to run, comma-separated: 1 inbox globs, 2 fail-fast requests, 3 shared long-poll backlog, 4 history resume, 5 refused SSE histories, 6 closed WebSockets, 7 queue-group toggles, rate Redis PUBLISH rate with 5,000 globs against 16 (alternated)");

    private static readonly Option<double> Scale = OptionKinds.Seconds("scale", 1, 0.01, 10,
        "multiply every attack's count (globs, requests, publications, connections, groups) by this; 1 = the sizes in loadtest/docs/attacks.md");

    public string Name => "attacks";

    public string Description =>
        "Runs the cluster, history, SSE and WebSocket attacks against a broker build and prints RSS, Redis bytes and counts, and Redis's PUBLISH rate. "
        + "Each attack: a fresh redis-server on a free port and fresh nodes, loopback only, bounded (loadtest/docs/attacks.md).";

    public IReadOnlyList<Option> Options { get; } =
    [
        Which, Scale, TargetCommandOptions.BrokerDll, TargetCommandOptions.Host, TargetCommandOptions.Ports, TargetCommandOptions.HttpPort,
        TargetCommandOptions.MonitoringPort, TargetCommandOptions.SetupTimeout,
    ];

    public CommandSettings Read(ParseResult parsed)
    {
        string[] which = parsed.GetRequiredValue(Which).Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        if (which.FirstOrDefault(w => !AttackRuns.Names.Contains(w)) is { } unknown)
        {
            throw new UsageException($"--attacks: no attack '{unknown}'; the attacks are {string.Join(',', AttackRuns.Names)}.");
        }

        (int first, int last) = TargetCommandOptions.PortRange(parsed);
        var target = new TargetOptions(
            "cluster", "tcp", StartServer: true, parsed.GetRequiredValue(TargetCommandOptions.Host), Port: null, first, last,
            parsed.GetValue(TargetCommandOptions.HttpPort), ServerCpus: null, ClientCpus: null, ServerPid: null,
            parsed.GetRequiredValue(TargetCommandOptions.BrokerDll), parsed.GetValue(TargetCommandOptions.SetupTimeout),
            parsed.GetValue(TargetCommandOptions.MonitoringPort), Token: AliceToken);
        return new(new AttacksOptions(which, parsed.GetValue(Scale)), target);
    }

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (AttacksOptions options, TargetOptions target) = Read(parsed).Of<AttacksOptions>();
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"attacks {string.Join(',', options.Which)} (scale {options.Scale}) against {target.BrokerDll}; {MachineLine()}"));
        var runs = new AttackRuns(target, options.Scale);
        int failed = 0;
        foreach (string attack in options.Which)
        {
            long start = Stopwatch.GetTimestamp();
            try
            {
                await runs.RunAsync(attack, cancellationToken);
            }
            catch (Exception e) when (e is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
            {
                failed++;
                Console.WriteLine($"attack {attack}: FAILED: {e.GetType().Name}: {e.Message}");
            }

            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"attack {attack}: {Stopwatch.GetElapsedTime(start).TotalSeconds:F0} s; load average {LoadAverage()}"));
        }

        return failed == 0 ? ExitCodes.Ok : ExitCodes.RunFailed;
    }

    /// <summary>The machine, its cores and load average now: a rate depends on them, bytes and counts do not.</summary>
    public static string MachineLine() =>
        string.Create(CultureInfo.InvariantCulture, $"{Environment.MachineName}, {Environment.ProcessorCount} cores, load average {LoadAverage()}, {DateTime.UtcNow:yyyy-MM-dd HH:mm} UTC");

    public static string LoadAverage() =>
        File.Exists("/proc/loadavg") ? string.Join(' ', File.ReadAllText("/proc/loadavg").Split(' ').Take(3)) : "?";

    /// <summary>The broker arguments of the two identities: alice granted <c>orders.&gt;</c> and <c>feed.&gt;</c>, mallory nothing.</summary>
    public static string[] TokenArguments() =>
    [
        "--Herald:Security:Auth:Mode=Token",
        "--Herald:Security:Auth:Tokens:0:Name=alice",
        "--Herald:Security:Auth:Tokens:0:Sha256=" + Sha256(AliceToken),
        "--Herald:Security:Auth:Tokens:0:Permissions:Publish:0=orders.>",
        "--Herald:Security:Auth:Tokens:0:Permissions:Publish:1=feed.>",
        "--Herald:Security:Auth:Tokens:0:Permissions:Subscribe:0=orders.>",
        "--Herald:Security:Auth:Tokens:0:Permissions:Subscribe:1=feed.>",
        "--Herald:Security:Auth:Tokens:1:Name=mallory",
        "--Herald:Security:Auth:Tokens:1:Sha256=" + Sha256(MalloryToken),
    ];

    private static string Sha256(string token) => Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(token)));

    private sealed record AttacksOptions(string[] Which, double Scale);
}

/// <summary>A broker's RSS, read from <c>/proc</c> (<see cref="TargetReport.Rss"/>), in MB for the lines the attacks print.</summary>
internal static class BrokerRss
{
    public static string Mb(HeraldNode node) => TargetReport.Rss(node.Child?.Process) is { } rss ? (rss / 1_000_000).ToString(CultureInfo.InvariantCulture) : "?";

    public static long Bytes(HeraldNode node) => TargetReport.Rss(node.Child?.Process) ?? 0;
}
