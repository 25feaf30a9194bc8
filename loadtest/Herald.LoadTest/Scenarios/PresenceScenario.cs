using System.CommandLine;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>presence</c>: what presence (spec §15) costs the broker, each figure beside the same work without it, in one run
/// against a broker started fresh for every repetition:
/// <list type="number">
/// <item>subscribing: <c>--connections</c> x <c>--subscriptions</c> single-topic subscriptions without the join bit and as
/// many with it (each connection pipelining its own; the two phases swap order every other repetition), subscriptions/s
/// of each and their ratio, after a warm-up of both kinds;</item>
/// <item>memory: the broker's GC heap (<c>/varz</c>) and RSS after each phase, less before it, per subscription; a
/// member's cost is a joined subscription's less a plain one's;</item>
/// <item>a topic of <c>--members</c> members (one connection each: a member is a connection on a topic) joined while
/// <c>--watchers</c> subscriptions take its events: joins/s, the join events each watcher got and the events
/// suppressed above <c>--max-events-members</c> (<c>/varz</c>), and the GC heap each join added there (one shared topic:
/// a subscription and a member per connection);</item>
/// <item>queries on that topic: <c>--queries</c> occupancy calls one after another (p50, p99) and <c>--reads</c> reads
/// of every member in pages of 1,000 (time, pages).</item>
/// </list>
/// The broker is started with the subscription rate and per-address limits off and the presence limits above what the
/// run holds (<see cref="ServerArguments"/>): the run measures presence, not the limits that protect it.
/// </summary>
internal sealed class PresenceScenario : IScenario
{
    public string Name => "presence";

    internal static readonly Option<int> Connections = OptionKinds.Integer("connections", 200, 1, 10_000, "connections of the subscribe and memory phases");

    internal static readonly Option<int> Subscriptions = OptionKinds.Integer("subscriptions", 500, 1, 5_000, "single-topic subscriptions per connection in each of those phases");

    internal static readonly Option<int> Members = OptionKinds.Integer("members", 10_000, 1, 100_000, "members of the one large topic (a connection each)");

    internal static readonly Option<int> Watchers = OptionKinds.Integer("watchers", 10, 1, 1_000, "subscriptions taking that topic's join and leave events");

    internal static readonly Option<int> Queries = OptionKinds.Integer("queries", 1_000, 1, 1_000_000, "occupancy calls, one after another");

    internal static readonly Option<int> Reads = OptionKinds.Integer("reads", 5, 1, 1_000, "full paged reads of the large topic's members");

    internal static readonly Option<int> MaxEventsMembers = OptionKinds.Integer("max-events-members", 1_000, 1, 10_000_000,
        "the started broker's Presence:MaxEventsMembers: members above which join and leave events are suppressed");

    internal static readonly Option<double> Settle = OptionKinds.Seconds("settle", 2, 0, 600, "wait before each memory reading");

    /// <summary>Members a page lists at most (spec §15.3).</summary>
    public const int PageSize = 1_000;

    public string Description => """
        what presence costs: subscribe rate with and without join, memory per member, queries and events on a large topic.
        Herald over TCP, TLS or WebSocket (or a cluster of it), started by the tool for every repetition with the subscription rate
        and per-address limits off. Phases: plain vs joined subscriptions (rate, GC heap and RSS per subscription), then a topic of
        --members members joined under --watchers events subscriptions, its occupancy latency and full paged reads.
        Exit codes: 0 ok, 1 a check failed (a join refused, a count wrong, an event missing), 2 usage, 3 server unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } = [Connections, Subscriptions, Members, Watchers, Queries, Reads, MaxEventsMembers, Settle, ScenarioOptions.Repeat, ScenarioOptions.Out, .. TargetCommandOptions.All];

    public CommandSettings Read(ParseResult parsed) => new(PresenceOptions.Read(parsed), null);

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        var options = (PresenceOptions)Read(parsed).Scenario;
        HeraldNode.TcpReceiveBufferSize.Value = 4096; // async-local: thousands of mostly idle clients
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"presence: {options.Target.Describe()}, {options.Connections:N0} x {options.Subscriptions:N0} subscriptions per phase, a topic of {options.Members:N0} members under {options.Watchers:N0} watchers, {options.Repeat} repetition(s)"));
        return await ScenarioSkeleton.RunOnFreshTargetsAsync(
            options.Target,
            options.Repeat,
            async (target, repetition) => await PresenceRun.RunAsync(target, options, repetition, cancellationToken),
            run => run.Print(Console.Out),
            (target, runs) => Report(target, options, runs),
            cancellationToken);
    }

    /// <summary>The limits the run would otherwise meet, lifted on the broker it starts; presence's own above what it holds.</summary>
    public static string[] ServerArguments(int connections, int subscriptions, int members, int maxEventsMembers)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        return
        [
            "--Herald:Limits:SubscriptionRatePerSecond=0",
            "--Herald:Limits:MaxSubscriptionsPerIdentity=0",
            "--Herald:Limits:MaxConnectionsPerIdentity=0",
            $"--Herald:Limits:MaxSubscriptionsPerConnection={Math.Max(10_000, 2 * subscriptions).ToString(c)}",
            "--Herald:Presence:MaxPerIdentity=10000000",
            $"--Herald:Presence:MaxMembersPerTopic={Math.Max(10_000, members).ToString(c)}",
            $"--Herald:Presence:MaxEntries={Math.Max(1_000_000, (connections * subscriptions) + members).ToString(c)}",
            $"--Herald:Presence:MaxEventsMembers={maxEventsMembers.ToString(c)}",
        ];
    }

    private static int Report(ITarget target, PresenceOptions options, List<PresenceRun> runs)
    {
        Headline[] headlines =
        [
            Of("subscribe/s, plain", "subscriptions/s", true, r => r.PlainRate),
            Of("subscribe/s, with join", "subscriptions/s", true, r => r.JoinRate),
            Of("join/plain subscribe rate", "x", true, r => r.JoinRate / r.PlainRate),
            Of("GC heap per plain subscription", "bytes", false, r => r.PlainHeap / r.Subscriptions),
            Of("GC heap per member", "bytes", false, r => (r.JoinHeap - r.PlainHeap) / r.Subscriptions),
            Of("RSS per member", "bytes", false, r => (r.JoinRss - r.PlainRss) / r.Subscriptions),
            Of("joins/s into a watched topic", "joins/s", true, r => r.WatchedJoinRate),
            Of("GC heap per join of the large topic", "bytes", false, r => r.LargeTopicHeap / options.Members),
            Of("join events per watcher", "events", true, r => r.JoinEventsPerWatcher),
            Of("events suppressed", "events", false, r => r.Suppressed),
            Of("occupancy p50 latency us", "us", false, r => r.Occupancy.Percentile(50)),
            Of("occupancy p99 latency us", "us", false, r => r.Occupancy.Percentile(99)),
            Of("full read ms", "ms", false, r => r.FullReadMs),
        ];
        List<string> failures = ScenarioSkeleton.Failures(runs, i => runs.Count > 1 ? string.Create(CultureInfo.InvariantCulture, $"repetition {i}") : null);

        Console.WriteLine();
        Console.WriteLine($"presence on {target.Label} ({(failures.Count == 0 ? "OK" : "FAILED")})");
        ScenarioClients.PrintHeadlines(headlines);
        Outcome.PrintFailures(failures);
        if (options.OutFile is { } path)
        {
            ScenarioSkeleton.WriteResult(path, "presence", target, headlines, json =>
            {
                json.WriteNumber("connections", options.Connections);
                json.WriteNumber("subscriptionsPerConnection", options.Subscriptions);
                json.WriteNumber("members", options.Members);
                json.WriteNumber("watchers", options.Watchers);
                json.WriteNumber("queries", options.Queries);
                json.WriteNumber("reads", options.Reads);
                json.WriteNumber("pageSize", PageSize);
                json.WriteNumber("maxEventsMembers", options.MaxEventsMembers);
                json.WriteNumber("settleSeconds", options.Settle);
                json.WriteNumber("repeat", options.Repeat);
            }, TargetReport.ServerRss(target), json => ScenarioSkeleton.WriteRows(json, "repetitions", runs), failures, interrupted: false, log: null);
            Console.WriteLine($"  result written to   : {path}");
        }

        return ScenarioSkeleton.ExitCode(interrupted: false, failures);

        Headline Of(string name, string unit, bool higherIsBetter, Func<PresenceRun, double?> value) =>
            Headline.Of(name, unit, higherIsBetter, [.. runs.Select(value).OfType<double>().Where(double.IsFinite)]);
    }
}

/// <summary>The options of <c>presence</c>, read and checked once; <see cref="Target"/> carries the broker arguments.</summary>
internal sealed record PresenceOptions(
    TargetOptions Target,
    int Connections,
    int Subscriptions,
    int Members,
    int Watchers,
    int Queries,
    int Reads,
    int MaxEventsMembers,
    double Settle,
    int Repeat,
    string? OutFile)
{
    public static PresenceOptions Read(ParseResult parsed)
    {
        TargetOptions target = TargetOptions.Read(parsed);
        if (target.Target is not ("herald" or "cluster") || target.Transport == "longpoll")
        {
            throw new UsageException($"presence runs against herald or cluster over tcp, tls or websocket (the framed protocol), not {target.Target}/{target.Transport}.");
        }

        int connections = parsed.GetValue(PresenceScenario.Connections);
        int subscriptions = parsed.GetValue(PresenceScenario.Subscriptions);
        int members = parsed.GetValue(PresenceScenario.Members);
        int maxEvents = parsed.GetValue(PresenceScenario.MaxEventsMembers);
        string[] broker = target.StartServer ? PresenceScenario.ServerArguments(connections, subscriptions, members, maxEvents) : [];
        return new PresenceOptions(
            target with { Headers = true, ServerArguments = [.. target.ServerArguments ?? [], .. broker] }, // headers: presence is granted only with them
            connections,
            subscriptions,
            members,
            parsed.GetValue(PresenceScenario.Watchers),
            parsed.GetValue(PresenceScenario.Queries),
            parsed.GetValue(PresenceScenario.Reads),
            maxEvents,
            parsed.GetValue(PresenceScenario.Settle),
            parsed.GetValue(ScenarioOptions.Repeat),
            parsed.GetValue(ScenarioOptions.Out));
    }
}
