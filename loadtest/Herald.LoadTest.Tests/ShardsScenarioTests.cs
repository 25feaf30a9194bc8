using System.Globalization;
using System.Net;
using System.Text.Json;
using Herald.LoadTest.Scenarios;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>shards</c> and the cluster target's <c>--shards</c>: the nodes are given every shard (one as
/// <c>Herald:Cluster:Redis</c>, several as <c>Herald:Cluster:Shards:i:Redis</c>), a tiny run over real nodes and
/// redis-servers loses nothing and finds PUBLISH traffic and CPU on every shard (read from each redis-server's
/// <c>INFO</c>), and the cost per million is computed from <c>INFO</c> text as Redis writes it. No speed is asserted.
/// </summary>
public class ShardsScenarioTests
{
    /// <summary><c>INFO cpu</c> as redis-server 7.0 writes it (CRLF line ends, a heading).</summary>
    private const string CpuBefore = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n";

    private const string CpuAfter = "# CPU\r\nused_cpu_sys:2.000000\r\nused_cpu_user:4.750000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n";

    private const string StatsBefore = "# Commandstats\r\ncmdstat_ping:calls=3,usec=4,usec_per_call=1.33,rejected_calls=0,failed_calls=0\r\ncmdstat_publish:calls=1000,usec=900,usec_per_call=0.90,rejected_calls=0,failed_calls=0\r\n";

    private const string StatsAfter = "# Commandstats\r\ncmdstat_ping:calls=9,usec=9,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\ncmdstat_publish:calls=501000,usec=450900,usec_per_call=0.90,rejected_calls=0,failed_calls=0\r\n";

    [Fact]
    public void The_cost_per_million_is_the_CPU_between_two_INFO_readings_over_the_clusters_publications()
    {
        Assert.Equal(3.75, RedisInfo.CpuSeconds(CpuBefore), 9); // sys + user, not the children's
        Assert.Equal(1000, RedisInfo.Calls(StatsBefore, "publish"));
        Assert.Equal(0, RedisInfo.Calls(StatsBefore, "spublish"));

        ShardCost shard = ShardCost.Between(CpuBefore, StatsBefore, CpuAfter, StatsAfter);

        Assert.Equal(3.0, shard.CpuSeconds, 9);
        Assert.Equal(500_000, shard.Publishes);
        Assert.Equal(1.5, shard.CpuSecondsPerMillion(2_000_000), 9); // per million of all shards' publications, not this one's
        Assert.Equal(1e6 / 2.0, ShardCost.ProjectedRate([new ShardCost(1.0, 500_000), new ShardCost(2.0, 500_000)], 1_000_000), 6); // the busiest shard bounds the cluster
        Assert.Throws<FormatException>(() => RedisInfo.CpuSeconds("# CPU\r\n"));
    }

    [Fact]
    public void One_shard_keeps_the_single_Redis_form_and_several_are_the_shard_list_in_order()
    {
        IPEndPoint[] shards = [new(IPAddress.Loopback, 7001), new(IPAddress.Loopback, 7002)];

        Assert.Equal(["--Herald:Cluster:Redis=127.0.0.1:7001"], ClusterTarget.ShardArguments(shards[..1]));
        Assert.Equal(["--Herald:Cluster:Shards:0:Redis=127.0.0.1:7001", "--Herald:Cluster:Shards:1:Redis=127.0.0.1:7002"], ClusterTarget.ShardArguments(shards));
        Assert.Equal(2, Repo.TargetOptionsOf(["--target", "cluster", "--shards", "2"]).Shards);
        Assert.Equal(1, Repo.TargetOptionsOf(["--target", "cluster"]).Shards);
    }

    [Theory]
    [InlineData("--target", "herald")]
    [InlineData("--target", "cluster", "--transport", "longpoll")]
    [InlineData("--target", "cluster", "--payload", "7")]
    public async Task Shards_runs_against_a_framed_cluster_only(params string[] args)
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("shards", args));
    }

    [Theory]
    [InlineData(2)]
    public async Task A_tiny_run_loses_nothing_and_every_shard_gets_publications_and_CPU(int shards)
    {
        Assert.Null(Repo.EnsurePeerServers());
        string output = Repo.OutFile($"shards-{shards}");
        int first = Repo.FreePorts(3);
        string Port(int offset) => (first + offset).ToString(CultureInfo.InvariantCulture);

        // One node (the publisher's and the subscriber's): each publication still goes to its topic's shard and back.
        int exit = await Repo.RunAsync("shards",
        [
            "--target", "cluster", "--nodes", "1", "--shards", shards.ToString(CultureInfo.InvariantCulture),
            "--ports", $"{Port(0)}-{Port(0)}", "--http-port", Port(1), "--monitoring-port", Port(2), "--broker-dll", Repo.BrokerDll, "--setup-timeout", "60",
            "--topics", "32", "--publications", "4000", "--warmup-publications", "200", "--max-lead", "500", "--out", output,
        ]);

        JsonElement json = Repo.ReadJson(output);
        Assert.Equal(ExitCodes.Ok, exit);
        Assert.True(json.GetProperty("ok").GetBoolean());
        JsonElement run = Assert.Single(json.GetProperty("repetitions").EnumerateArray());
        Assert.Equal(4000, run.GetProperty("publications").GetInt64());
        Assert.Equal(4200, run.GetProperty("received").GetInt64()); // the warm-up's and the measured, each once
        Assert.Equal(0, run.GetProperty("reordered").GetInt64());
        JsonElement[] costs = [.. run.GetProperty("shards").EnumerateArray()];
        Assert.Equal(shards, costs.Length);
        Assert.Equal(4000, costs.Sum(c => c.GetProperty("publishCalls").GetInt64())); // one PUBLISH per publication, on its topic's shard
        Assert.All(costs, c => Assert.True(c.GetProperty("publishCalls").GetInt64() > 0, "a shard got no PUBLISH"));
        Assert.All(costs, c => Assert.True(c.GetProperty("cpuSeconds").GetDouble() > 0, "a shard used no CPU"));
        string[] headlines = [.. json.GetProperty("headlines").EnumerateArray().Select(h => h.GetProperty("name").GetString()!)];
        Assert.Contains($"Redis CPU s per M publications, shard {shards - 1}", headlines);
        Assert.Contains("projected publications/s, one core per shard", headlines);
        Assert.Contains(shards == 1 ? "--Herald:Cluster:Redis=127.0.0.1:" : $"--Herald:Cluster:Shards:{shards - 1}:Redis=127.0.0.1:",
            json.GetProperty("target").GetProperty("commandLine").GetString(), StringComparison.Ordinal);
    }
}
