using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Tests;

/// <summary>
/// The cluster target: two Herald nodes over one real redis-server, all started by the tool. A fan-out and a
/// request/reply run end to end at a tiny size with clients on both nodes (so every delivery to the other
/// node, and every reply, crossed Redis) and lose nothing; clients are spread by index; the nodes and
/// Redis are gone after dispose; nonsense options are usage errors. No speed is asserted.
/// </summary>
public class ClusterTargetTests
{
    private static readonly HttpClient Http = new() { Timeout = TimeSpan.FromSeconds(10) };

    /// <summary>Two nodes, one TCP port each: node k on TCP first + k, HTTP first + 2 + k, monitoring first + 4 + k.</summary>
    private static string[] ClusterArgs(out int first)
    {
        first = Repo.FreePorts(6);
        CultureInfo c = CultureInfo.InvariantCulture;
        return
        [
            "--target", "cluster", "--nodes", "2",
            "--ports", $"{first.ToString(c)}-{first.ToString(c)}", "--http-port", (first + 2).ToString(c), "--monitoring-port", (first + 4).ToString(c),
            "--broker-dll", Repo.BrokerDll, "--setup-timeout", "60",
        ];
    }

    private static readonly string[] Bounded = ["--warmup", "0.3", "--seconds", "1", "--grace", "5"];

    [Theory]
    [InlineData("tcp")]
    [InlineData("longpoll")]
    public async Task Fanout_across_two_nodes_delivers_every_message_in_order(string transport)
    {
        Assert.Null(Repo.EnsurePeerServers());
        string output = Repo.OutFile($"cluster-fanout-{transport}");
        int exit = await Repo.RunAsync("fanout", [.. ClusterArgs(out _), "--transport", transport, .. Bounded, "--subscribers", "4", "--max-lead", "2000", "--out", output]);

        AssertPassed(output, exit, $"cluster/{transport}", "deliveries", "missing", "reordered", "unexpected", "undeliveredAfterGrace", "disconnectedSubscribers");
    }

    [Fact]
    public async Task Rpc_across_two_nodes_answers_every_call()
    {
        // The responder is client 0 (node 0), the caller client 1 (node 1): every request and every reply crosses Redis.
        Assert.Null(Repo.EnsurePeerServers());
        string output = Repo.OutFile("cluster-rpc");
        int exit = await Repo.RunAsync("rpc", [.. ClusterArgs(out _), .. Bounded, "--callers", "1", "--responders", "1", "--max-lead", "500", "--out", output]);

        AssertPassed(output, exit, "cluster/tcp", "calls", "unexpected", "missing", "reordered", "unanswered");
    }

    [Fact]
    public async Task Clients_are_spread_over_the_nodes_by_index_and_every_server_is_gone_after_dispose()
    {
        Assert.Null(Repo.EnsurePeerServers());
        TargetOptions options = Repo.TargetOptionsOf(ClusterArgs(out int first));
        int[] pids;
        await using (ITarget started = await TargetFactory.StartAsync(options, CancellationToken.None))
        {
            var cluster = Assert.IsType<ClusterTarget>(started);
            Assert.Equal(2, cluster.Nodes.Count);
            Assert.Equal(2, started.ServerProcesses.Count);
            Assert.Equal(started.ServerProcess?.Id, started.ServerProcesses[0].Id);
            Assert.Contains("--Herald:Cluster:Redis=127.0.0.1:", started.ServerCommandLine, StringComparison.Ordinal);
            pids = [.. started.ServerProcesses.Select(p => p.Id), .. cluster.RedisProcesses.Select(p => p.Id)];

            using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
            IPubSubClient[] clients = await Task.WhenAll(Enumerable.Range(0, 5).Select(i => started.ConnectAsync(i, timeout.Token)));
            try
            {
                // clients 0, 2, 4 on node 0 and 1, 3 on node 1, as each node's own /varz counts them
                Assert.Equal(3, await ConnectionsAsync(first + 4, timeout.Token));
                Assert.Equal(2, await ConnectionsAsync(first + 5, timeout.Token));
            }
            finally
            {
                await Task.WhenAll(clients.Select(c => c.DisposeAsync().AsTask()));
            }
        }

        Assert.All(pids, pid => Assert.False(Repo.IsRunning(pid)));
    }

    [Fact]
    public void History_starts_the_brokers_with_a_history_rule_and_says_so()
    {
        TargetOptions options = Repo.TargetOptionsOf(["--target", "cluster", "--nodes", "2", "--history", "feed.>"]);

        Assert.Equal(["--Herald:History:Topics:0:Pattern=feed.>", "--Herald:History:Topics:0:MaxMessages=1000"], options.ServerArguments);
        Assert.Contains("history on feed.>", options.Describe(), StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("--target", "cluster", "--nodes", "0")]
    [InlineData("--target", "cluster", "--nodes", "33")]
    [InlineData("--target", "cluster", "--nodes", "two")]
    [InlineData("--target", "herald", "--nodes", "2")]
    [InlineData("--target", "redis", "--nodes", "1")]
    [InlineData("--target", "herald", "--shards", "2")]
    [InlineData("--target", "cluster", "--shards", "0")]
    [InlineData("--target", "cluster", "--shards", "17")]
    [InlineData("--target", "cluster", "--server", "external")]
    [InlineData("--target", "cluster", "--nodes", "32", "--ports", "65000-65100")]
    [InlineData("--target", "nats", "--history", ">")]
    [InlineData("--target", "herald", "--server", "external", "--history", ">")]
    public async Task Nonsense_is_a_usage_error(params string[] args)
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("fanout", args));
    }

    /// <summary>
    /// The run in <paramref name="output"/> passed its checks on two nodes of <paramref name="label"/>: its one
    /// repetition counted some <paramref name="counted"/> and none of <paramref name="none"/>.
    /// </summary>
    private static void AssertPassed(string output, int exit, string label, string counted, params string[] none)
    {
        JsonElement json = Repo.ReadJson(output);
        Assert.Equal(ExitCodes.Ok, exit);
        Assert.Equal(label, json.GetProperty("target").GetProperty("label").GetString());
        Assert.StartsWith("2 x Herald", json.GetProperty("target").GetProperty("server").GetString(), StringComparison.Ordinal);
        JsonElement run = Assert.Single(json.GetProperty("repetitions").EnumerateArray());
        Assert.True(run.GetProperty(counted).GetInt64() > 0, $"no {counted}");
        foreach (string name in none)
        {
            Assert.True(run.GetProperty(name).GetInt64() == 0, $"{name}: {run.GetProperty(name).GetInt64()}");
        }

        Assert.True(json.GetProperty("ok").GetBoolean());
    }

    /// <summary>The node's open connections from its <c>/varz</c>.</summary>
    private static async Task<long> ConnectionsAsync(int monitoringPort, CancellationToken cancellationToken)
    {
        string varz = await Http.GetStringAsync(new Uri($"http://127.0.0.1:{monitoringPort.ToString(CultureInfo.InvariantCulture)}/varz"), cancellationToken);
        using JsonDocument document = JsonDocument.Parse(varz);
        return document.RootElement.GetProperty("connections").GetInt64();
    }
}
