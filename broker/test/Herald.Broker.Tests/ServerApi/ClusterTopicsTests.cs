using System.Globalization;
using System.Net;
using System.Text;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;
using Herald.Testing;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests.ServerApi;

/// <summary>
/// <c>GET /api/v1/topics</c> across a cluster on a real redis-server: every node answers with the cluster's topics, each
/// pattern's subscribers added up over the nodes, paged and filtered over the sum; a node cut off from Redis is named as
/// not answering; a publish-only key is refused; a client that makes many topics cannot make a node's answer on Redis, or
/// the page, larger than the page size allows.
/// </summary>
public sealed class ClusterTopicsTests(ITestOutputHelper output)
{
    [Fact]
    public async Task Topics_subscribed_on_three_nodes_come_back_summed_and_paged_and_a_node_cut_off_is_named_as_not_answering()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configure: Configure);
        await using var link = new CuttableLink(cluster.Redis.Port); // node C's network to Redis
        await using TestBroker c = await TestBroker.StartAsync(o =>
        {
            Configure(o);
            o.Cluster.Redis = $"127.0.0.1:{link.Port}";
        });
        TestBroker[] nodes = [cluster[0], cluster[1], c];
        foreach (TestBroker node in nodes)
        {
            await Until.True(() => node.Engine().Nodes.Known.Count == 3, "every node knows the other two");
        }

        await using ProtocolClient onA = await ProtocolClient.OpenAsync(cluster[0].Port, "on-a");
        await using ProtocolClient onB = await ProtocolClient.OpenAsync(cluster[1].Port, "on-b");
        await using ProtocolClient onC = await ProtocolClient.OpenAsync(c.Port, "on-c");
        await Subscribe(onA, "t.1", "t.2");
        await Subscribe(onB, "t.1");
        await Subscribe(onC, "t.1", "t.3", "c.only");

        JsonElement all = await Until.Value(() => GetAsync(cluster[1], "/api/v1/topics?prefix=t."), p => p.GetProperty("silent").GetArrayLength() == 0, "every node answered");
        Assert.Equal(["t.1=3", "t.2=1", "t.3=1"], Entries(all));
        Assert.Equal(3, all.GetProperty("nodes").GetArrayLength());
        Assert.Equal(6, all.GetProperty("subscriptions").GetInt32());

        JsonElement first = await Until.Value(() => GetAsync(cluster[0], "/api/v1/topics?prefix=t.&limit=1"), NoneSilent, "every node answered");
        Assert.Equal("t.1=3 next t.1", $"{string.Join(',', Entries(first))} next {first.GetProperty("next").GetString()}");
        JsonElement second = await Until.Value(() => GetAsync(cluster[0], "/api/v1/topics?prefix=t.&limit=1&after=t.1"), NoneSilent, "every node answered");
        Assert.Equal("t.2=1 next t.2", $"{string.Join(',', Entries(second))} next {second.GetProperty("next").GetString()}");
        JsonElement last = await Until.Value(() => GetAsync(cluster[0], "/api/v1/topics?prefix=t.&after=t.2"), NoneSilent, "every node answered");
        Assert.Equal(["t.3=1"], Entries(last));
        Assert.False(last.TryGetProperty("next", out _));

        using (HttpResponseMessage publisher = await cluster[1].Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/topics", TestApiKeys.Publisher)))
        {
            Assert.Equal(HttpStatusCode.Forbidden, publisher.StatusCode);
        }

        link.Cut();
        string cId = c.Engine().Shards.NodeId.ToString("x16", CultureInfo.InvariantCulture);
        JsonElement without = await GetAsync(cluster[0], "/api/v1/topics");
        output.WriteLine($"after the cut: {without}");
        Assert.Contains(cId, without.GetProperty("silent").EnumerateArray().Select(s => s.GetString()));
        Assert.DoesNotContain(cId, without.GetProperty("nodes").EnumerateArray().Select(n => n.GetProperty("node").GetString()));
        Assert.DoesNotContain("c.only=1", Entries(without));
    }

    [Fact]
    public async Task A_client_with_many_topics_makes_no_node_answer_larger_than_the_page()
    {
        const int Topics = 300;
        const int Page = 20;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configure: o =>
        {
            Configure(o);
            o.Api.MaxTopicsPage = Page;
        });
        foreach (TestBroker node in cluster.Nodes)
        {
            await Until.True(() => node.Engine().Nodes.Known.Count == 2, "both nodes know each other");
        }

        await using ProtocolClient hog = await ProtocolClient.OpenAsync(cluster[1].Port, "hog");
        await Subscribe(hog, [.. Enumerable.Range(0, Topics).Select(i => $"hog.topic.with.a.long.name.{i:D3}")]);
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(cluster[0].Port, "bystander");
        await Subscribe(bystander, "a.bystander");

        // Node B's answer to node A, as Redis carries it on A's reply channel.
        string a = cluster[0].Engine().Shards.NodeId.ToString("x16", CultureInfo.InvariantCulture);
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        var replies = new List<byte[]>();
        await redis.GetSubscriber().SubscribeAsync(RedisChannel.Literal(cluster[0].Engine().Shards.First.Prefix + ".ctr:" + a), (_, body) =>
        {
            lock (replies)
            {
                replies.Add((byte[])body!);
            }
        });

        JsonElement page = await Until.Value(() => GetAsync(cluster[0], "/api/v1/topics"), NoneSilent, "both nodes answered");
        Assert.Equal(Page, page.GetProperty("entries").GetArrayLength());
        Assert.Equal("a.bystander=1", Entries(page)[0]); // the bystander's topic comes first, in order, with the hog's
        Assert.Equal(Topics + 1, page.GetProperty("patterns").GetInt32()); // the totals count everything
        Assert.Equal("hog.topic.with.a.long.name.018", page.GetProperty("next").GetString());

        await Until.True(() => { lock (replies) { return replies.Count > 0; } }, "the test saw node B's answer on Redis");
        byte[] reply;
        lock (replies)
        {
            reply = replies[^1];
        }

        string json = Encoding.UTF8.GetString(reply);
        int entries = JsonDocument.Parse(json[json.IndexOf('{', StringComparison.Ordinal)..]).RootElement.GetProperty("Entries").GetArrayLength();
        output.WriteLine($"{Topics} topics on node B: its answer on Redis carried {entries} entries in {reply.Length} bytes; the page {Page} entries");
        Assert.Equal(Page + 1, entries);
        Assert.True(reply.Length < (Page + 1) * 100, $"node B's answer is {reply.Length} bytes");
    }

    private static bool NoneSilent(JsonElement page) => page.GetProperty("silent").GetArrayLength() == 0;

    private static async Task Subscribe(ProtocolClient client, params string[] patterns)
    {
        for (int i = 0; i < patterns.Length; i++)
        {
            await client.SubscribeAsync((uint)i + 1, patterns[i]);
        }

        Assert.Empty(await client.PingPongAsync()); // answered once every node can route them
    }

    private static string[] Entries(JsonElement page) =>
        [.. page.GetProperty("entries").EnumerateArray().Select(e => $"{e.GetProperty("pattern").GetString()}={e.GetProperty("subscribers").GetInt32()}")];

    private static async Task<JsonElement> GetAsync(TestBroker node, string path)
    {
        using HttpResponseMessage response = await node.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, path, TestApiKeys.Reader));
        string text = await response.Content.ReadAsStringAsync();
        Assert.True(response.StatusCode == HttpStatusCode.OK, $"{path}: {(int)response.StatusCode} {text}");
        return JsonDocument.Parse(text).RootElement.Clone();
    }

    private static void Configure(Hosting.HeraldOptions o)
    {
        TestApiKeys.Configure(o);
        o.Cluster.HeartbeatInterval = TimeSpan.FromSeconds(1); // a node cut off stays a member for 3 s: long enough to be asked
        o.Cluster.ControlReplyTimeout = TimeSpan.FromSeconds(1); // how long a silent node delays the answer
    }
}
