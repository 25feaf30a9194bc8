using System.CommandLine;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>shards</c>: what a cluster publication costs Redis, on each shard (cluster.md §13), against a cluster the tool
/// starts (<c>--target cluster --nodes N --shards S</c>). Client 0 (node 0) publishes <c>--publications</c> messages
/// round-robin over <c>--topics</c> topics, which client 1 (node 1 % N) subscribes to one by one, so the topics spread
/// over the shards as the nodes place them; every node forwards each publication to its topic's shard with one
/// PUBLISH. Each shard's <c>INFO cpu</c> (used_cpu_sys + used_cpu_user) and <c>INFO commandstats</c> PUBLISH calls
/// are read before and after the measured publications, once a warm-up has arrived: the figure is each shard's
/// Redis CPU seconds per million cluster publications (the cluster's, not the shard's), the split of the PUBLISH
/// calls, and what that cost projects: the cluster's publications/s when its busiest shard has one core to itself.
/// The subscriber checks that every publication arrived once and in order per topic. Flow control keeps the
/// publisher within <c>--max-lead</c> of the subscriber. No speed is asserted; the machine's load is in the result.
/// </summary>
internal sealed class ShardsScenario : IScenario
{
    public string Name => "shards";

    internal static readonly Option<int> Topics = OptionKinds.Integer("topics", 1_000, 1, 100_000, "topics the publications go round (each on its shard)");

    internal static readonly Option<int> Publications = OptionKinds.Integer("publications", 1_000_000, 1, 1_000_000_000, "measured publications");

    internal static readonly Option<int> WarmupPublications = OptionKinds.Integer("warmup-publications", 100_000, 0, 1_000_000_000, "publications before the measurement");

    internal static readonly Option<int> Payload = OptionKinds.Integer("payload", 128, 8, 1024 * 1024, "payload size in bytes (the first 8: a sequence number)");

    internal static readonly Option<int> MaxLead = OptionKinds.Integer("max-lead", 10_000, 1, 10_000_000, "publications the publisher may be ahead of the subscriber");

    internal static readonly Option<double> MaxSeconds = OptionKinds.Seconds("max-seconds", 300, 0.1, 24 * 3600, "give up a repetition's publishing after S s");

    internal static readonly Option<double> Grace = OptionKinds.Seconds("grace", 10, 0, 600, "wait for the last deliveries after publishing");

    public string Description => """
        Redis CPU seconds per million cluster publications on each shard (--target cluster --nodes N --shards S).
        Client 0 (node 0) publishes round-robin over --topics topics that client 1 (node 1 % N) subscribes to; each shard's
        INFO cpu (used_cpu_sys + used_cpu_user) and PUBLISH calls are read before and after the measured publications.
        Reports each shard's CPU per million, the busiest shard's share of the PUBLISH calls, the publication rate and the
        rate the busiest shard's cost projects at one core per shard (a projection, not a measurement).
        Exit codes: 0 ok, 1 a check failed (a publication lost or out of order per topic), 2 usage, 3 server unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } = [Topics, Publications, WarmupPublications, Payload, MaxLead, MaxSeconds, Grace, ScenarioOptions.Repeat, ScenarioOptions.Out, .. TargetCommandOptions.All];

    public CommandSettings Read(ParseResult parsed) => new(ShardsOptions.Read(parsed), null);

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        var options = (ShardsOptions)Read(parsed).Scenario;
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"shards: {options.Publications:N0} publications (after {options.Warmup:N0}) of {options.Payload} B round-robin over {options.Topics:N0} topics, max lead {options.MaxLead:N0}, {options.Repeat} repetition(s); {options.Target.Describe()}"));
        return await ScenarioSkeleton.RunRepetitionsAsync(
            options.Target,
            options.Repeat,
            async (target, log) => await ShardsRun.RunAsync((ClusterTarget)target, options, log, cancellationToken),
            run => run.Print(Console.Out),
            (target, runs, log) => Report(target, options, runs, log),
            cancellationToken);
    }

    /// <summary>The headlines of <paramref name="runs"/> on <paramref name="shards"/> shards: each a median over the repetitions that measured.</summary>
    public static List<Headline> Headlines(IReadOnlyList<ShardsRun> runs, int shards)
    {
        ShardsRun[] measured = [.. runs.Where(r => r.Shards.Count == shards)];
        List<Headline> headlines = [];
        for (int i = 0; i < shards; i++)
        {
            int shard = i;
            headlines.Add(Of($"Redis CPU s per M publications, shard {shard.ToString(CultureInfo.InvariantCulture)}", "s", false, r => r.Shards[shard].CpuSecondsPerMillion(r.Published)));
        }

        headlines.Add(Of("Redis CPU s per M publications, all shards", "s", false, r => r.Shards.Sum(s => s.CpuSecondsPerMillion(r.Published))));
        headlines.Add(Of("busiest shard's share of PUBLISH %", "%", false, r => 100.0 * r.Shards.Max(s => s.Publishes) / Math.Max(1, r.Shards.Sum(s => s.Publishes))));
        headlines.Add(Of("publications/s", "publications/s", true, r => r.Published / r.Seconds));
        headlines.Add(Of("projected publications/s, one core per shard", "publications/s", true, r => ShardCost.ProjectedRate(r.Shards, r.Published)));
        return headlines;

        Headline Of(string name, string unit, bool higherIsBetter, Func<ShardsRun, double> value) =>
            Headline.Of(name, unit, higherIsBetter, [.. measured.Select(value).Where(double.IsFinite)]);
    }

    private static int Report(ITarget target, ShardsOptions options, List<ShardsRun> runs, RunLog log) =>
        ScenarioSkeleton.Report(target, "shards", "shards", runs, Headlines(runs, options.Target.Shards), options.OutFile, json =>
        {
            json.WriteNumber("nodes", options.Target.Nodes ?? ClusterTarget.DefaultNodes);
            json.WriteNumber("shards", options.Target.Shards);
            json.WriteNumber("topics", options.Topics);
            json.WriteNumber("publications", options.Publications);
            json.WriteNumber("warmupPublications", options.Warmup);
            json.WriteNumber("payload", options.Payload);
            json.WriteNumber("maxLead", options.MaxLead);
            json.WriteNumber("repeat", options.Repeat);
        }, log);
}

/// <summary>The options of <c>shards</c>, read and checked once.</summary>
internal sealed record ShardsOptions(TargetOptions Target, int Topics, int Publications, int Warmup, int Payload, int MaxLead, double MaxSeconds, double Grace, int Repeat, string? OutFile)
{
    public static ShardsOptions Read(ParseResult parsed)
    {
        TargetOptions target = TargetOptions.Read(parsed);
        if (target.Target != "cluster" || target.Transport == "longpoll")
        {
            throw new UsageException($"shards runs against --target cluster over tcp, tls or websocket (it reads the cluster's redis-servers), not {target.Target}/{target.Transport}.");
        }

        return new ShardsOptions(
            target,
            parsed.GetValue(ShardsScenario.Topics),
            parsed.GetValue(ShardsScenario.Publications),
            parsed.GetValue(ShardsScenario.WarmupPublications),
            parsed.GetValue(ShardsScenario.Payload),
            parsed.GetValue(ShardsScenario.MaxLead),
            parsed.GetValue(ShardsScenario.MaxSeconds),
            parsed.GetValue(ShardsScenario.Grace),
            parsed.GetValue(ScenarioOptions.Repeat),
            parsed.GetValue(ScenarioOptions.Out));
    }
}

/// <summary>
/// One shard over the measured publications: the Redis CPU seconds (<c>INFO cpu</c>) and PUBLISH calls
/// (<c>INFO commandstats</c>) it used between the two readings.
/// </summary>
internal readonly record struct ShardCost(double CpuSeconds, long Publishes)
{
    /// <summary>From two readings of the same redis-server, before and after.</summary>
    public static ShardCost Between(string cpuBefore, string statsBefore, string cpuAfter, string statsAfter) =>
        new(RedisInfo.CpuSeconds(cpuAfter) - RedisInfo.CpuSeconds(cpuBefore), RedisInfo.Calls(statsAfter, "publish") - RedisInfo.Calls(statsBefore, "publish"));

    /// <summary>This shard's CPU seconds per million of the cluster's <paramref name="publications"/> (all shards' together).</summary>
    public double CpuSecondsPerMillion(long publications) => publications == 0 ? double.NaN : CpuSeconds * 1e6 / publications;

    /// <summary>
    /// The cluster's publications/s when each shard has one core (Redis runs commands on one thread) and the busiest
    /// one is saturated: a million over the busiest shard's CPU seconds per million. A projection from the cost measured,
    /// assuming it stays linear in the rate; the nodes, the network and the subscribers are not in it.
    /// </summary>
    public static double ProjectedRate(IReadOnlyList<ShardCost> shards, long publications) =>
        shards.Count == 0 ? double.NaN : 1e6 / shards.Max(s => s.CpuSecondsPerMillion(publications));

    public void Write(Utf8JsonWriter json, long publications)
    {
        json.WriteStartObject();
        json.WriteNumber("cpuSeconds", CpuSeconds);
        json.WriteNumber("publishCalls", Publishes);
        ResultFile.WriteNumberOrNull(json, "cpuSecondsPerMillion", CpuSecondsPerMillion(publications));
        json.WriteEndObject();
    }
}
