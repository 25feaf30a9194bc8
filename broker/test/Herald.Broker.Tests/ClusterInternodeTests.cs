using System.Globalization;
using System.Text;
using Herald.Broker.Cluster;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using StackExchange.Redis;
using Xunit.Abstractions;
using Member = Herald.Broker.Tests.ClusterQueueGroupTests.Member;

namespace Herald.Broker.Tests;

/// <summary>
/// What travels between nodes through Redis, tried as an attacker would: a queue-group change costs the other nodes
/// what changed, not a read of the whole record (cluster.md §11); a signed envelope captured from Redis and published
/// again is refused (cluster.md §3). Real nodes on a test-owned <c>redis-server</c>; the bounds are asserted on what
/// that Redis counts (<c>INFO</c>) and on the nodes' own counters, never on a time.
/// </summary>
public sealed class ClusterInternodeTests(ITestOutputHelper output)
{
    private const string AliceToken = "internode-alice";
    private const string MalloryToken = "internode-mallory";
    private const string Secret = "internode-cluster-secret";

    [Fact]
    public async Task A_group_toggled_on_one_node_costs_the_other_node_the_change_and_not_a_read_of_the_whole_record()
    {
        const int Held = 2000, Toggles = 20;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            Tokens(o);
            o.Cluster.HeartbeatInterval = TimeSpan.FromSeconds(1);
        });
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();

        // The bystander: alice's group orders.* / w, one member on each node.
        Member[] alices = [await Member.JoinAsync(cluster[0], "orders", "w", AliceToken), await Member.JoinAsync(cluster[1], "orders", "w", AliceToken)];

        // mallory, with no permission at all, holds many groups under her own inbox on node 0 (one pattern, many queue
        // names: one Redis subscription, many groups).
        await using ProtocolClient mallory = await ProtocolClient.OpenAsync(cluster[0].Port, "mallory", capabilities: Capabilities.QueueGroups, auth: MalloryToken);
        string inbox = Identity.InboxPrefixOf("mallory");
        for (int i = 0; i < Held; i++)
        {
            int n = i;
            await mallory.SendAsync(w => FrameWriter.WriteSubscribe(w, (uint)(n + 1), Encoding.UTF8.GetBytes($"{inbox}.jobs"), queue: Encoding.UTF8.GetBytes($"q{n}")));
        }

        Assert.Empty(await mallory.PingPongAsync()); // written and announced
        ClusterGroups seen = cluster[1].Engine().Groups;
        ulong node0 = cluster[0].Engine().NodeId;
        await Until.True(() => seen.View.Of(node0, self: false).Groups == Held + 1, "node 1 knows node 0's groups");
        long record = (long?)await db.ExecuteAsync("MEMORY", "USAGE", ClusterGroups.KeyOf("{herald}:", node0), "SAMPLES", "0") ?? 0;

        long calls = await HashGetAllCallsAsync(db), bytes = await OutputBytesAsync(db);
        for (int t = 0; t < Toggles; t++)
        {
            await mallory.UnsubscribeAsync(1);
            Assert.Empty(await mallory.PingPongAsync());
            await mallory.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, Encoding.UTF8.GetBytes($"{inbox}.jobs"), queue: "q0"u8));
            Assert.Empty(await mallory.PingPongAsync());
        }

        long version = cluster[0].Engine().Groups.Version;
        await Until.True(() => seen.View.Of(node0, self: false).Version == version, "node 1 has read node 0's last change");
        long readCalls = await HashGetAllCallsAsync(db) - calls, sent = await OutputBytesAsync(db) - bytes;
        output.WriteLine($"{Held} groups held (record {record} B in Redis); {2 * Toggles} changes: {readCalls} HGETALL in all (heartbeats' included), {sent} B out of Redis ({sent / (2 * Toggles)} B a change)");

        Assert.Equal(Held + 1, seen.View.Of(node0, self: false).Groups);
        Assert.Equal(new Dictionary<ulong, int> { [node0] = 1 }, ClusterQueueGroupTests.Elsewhere(cluster[1], $"{inbox}.jobs", Herald.Broker.Routing.Subscription.GroupKey("mallory", $"{inbox}.jobs", "q0")));
        Assert.True(sent < 2 * Toggles * 2048, $"{sent} B out of Redis for {2 * Toggles} changes: more than 2 KiB a change (the record is {record} B)");

        // The bystander's group still gets each publication of either node exactly once in all.
        var sentTexts = new List<string>();
        for (int node = 0; node < 2; node++)
        {
            await using ProtocolClient publisher = await ProtocolClient.OpenAsync(cluster[node].Port, $"publisher-{node}", auth: AliceToken);
            for (int i = 0; i < 40; i++)
            {
                await publisher.PublishAsync("orders.job", $"{node}:{i}");
                sentTexts.Add($"{node}:{i}");
            }

            await publisher.PublishAsync("orders.end", $"end{node}");
            Assert.Empty(await publisher.PingPongAsync());
        }

        List<string>[] got = await Task.WhenAll(alices.Select(m => m.UntilMarkersAsync(2)));
        Assert.Equal(sentTexts.Order(), got.SelectMany(g => g).Order());
        foreach (Member alice in alices)
        {
            await alice.Client.DisposeAsync();
        }
    }

    [Fact]
    public async Task A_signed_envelope_captured_from_redis_and_published_again_is_refused_and_counted()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            Tokens(o);
            o.Cluster.Secret = Secret;
        });
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        ChannelMessageQueue tap = await redis.GetSubscriber().SubscribeAsync(RedisChannel.Pattern("{herald}:orders.*"));

        await using ProtocolClient victim = await ProtocolClient.OpenAsync(cluster[1].Port, "victim", auth: AliceToken);
        await victim.SubscribeAsync(1, "orders.paid");
        await victim.PingPongAsync();
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(cluster[1].Port, "bystander", auth: AliceToken);
        await bystander.SubscribeAsync(1, "orders.other");
        await bystander.PingPongAsync();
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(cluster[0].Port, "alice", auth: AliceToken);

        await alice.PublishAsync("orders.paid", "pay 100");
        Assert.Equal("pay 100", (await victim.ReadMessageAsync()).Text);
        ChannelMessage captured = await tap.ReadAsync();
        output.WriteLine($"captured {((byte[])captured.Message!).Length} B on {captured.Channel}");

        // Published again, as is, on its channel and on another channel node 1 listens on.
        for (int i = 0; i < 3; i++)
        {
            await redis.GetSubscriber().PublishAsync(RedisChannel.Literal(captured.Channel.ToString()), captured.Message);
            await redis.GetSubscriber().PublishAsync(RedisChannel.Literal("{herald}:orders.other"), captured.Message);
        }

        await alice.PublishAsync("orders.other", "bystander's");
        await alice.PublishAsync("orders.paid", "marker");
        Assert.Equal("marker", (await victim.ReadMessageAsync()).Text); // the replays came before it, and none was delivered
        Assert.Equal("bystander's", (await bystander.ReadMessageAsync()).Text);
        long replayed = cluster[1].Engine().Metrics.Replayed;
        output.WriteLine($"replays refused by node 1: {replayed}");
        Assert.Equal(6, replayed);
    }

    [Fact]
    public async Task A_flood_from_another_node_past_the_inbound_bound_is_shed_counted_and_told_to_its_subscribers_while_a_bystander_gets_everything()
    {
        long shed = await FloodAsync(maxMessages: 8, maxBytes: 0, largeBytes: 0);
        Assert.True(shed > 0, "node 0 shed nothing");
    }

    /// <summary>
    /// Frames large in bytes and few in number: a count bound alone would let the node hold count x frame size. The
    /// count bound is out of reach here (more than the whole flood), so whatever node 0 sheds, it sheds by bytes.
    /// </summary>
    [Fact]
    public async Task A_flood_of_large_frames_from_another_node_is_bounded_by_bytes_shed_counted_and_told_while_a_bystander_gets_everything()
    {
        const long MaxBytes = 512 * 1024;
        const int Large = 128 * 1024;
        long shed = await FloodAsync(maxMessages: 100_000, maxBytes: MaxBytes, largeBytes: Large);
        Assert.True(shed > 0, $"node 0 shed nothing with {MaxBytes} B as its bound");
    }

    /// <summary>
    /// <see cref="InboundFlood"/> from node 1 to a victim on node 0 bounded as given, with a bystander on another topic (another Redis
    /// subscription): each publication node 0 sheds is told to the victim, in the notice's own words (not a slow consumer's),
    /// nothing is lost silently, and the bystander gets everything. Returns what node 0 shed.
    /// </summary>
    private async Task<long> FloodAsync(int maxMessages, long maxBytes, int largeBytes)
    {
        int flood = InboundFlood.OnFlood(largeBytes);
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configureNode: (node, o) =>
        {
            o.Cluster.MaxInboundMessages = node == 0 ? maxMessages : 10_000;
            o.Cluster.MaxInboundBytes = node == 0 ? maxBytes : 16 * 1024 * 1024;
            o.Limits.MaxPendingBytes = 64 * 1024 * 1024; // the victim reads once the flood is routed: what node 0 routes waits for it whole
        });

        // On node 0, the victim and a bystander on another topic (another Redis subscription); the publisher on node 1.
        await using ProtocolClient victim = await ProtocolClient.OpenAsync(cluster[0].Port, "victim", capabilities: Capabilities.Zstd);
        await victim.SubscribeAsync(1, "flood");
        await victim.PingPongAsync();
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(cluster[0].Port, "bystander");
        await bystander.SubscribeAsync(1, "calm");
        await bystander.PingPongAsync();
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");

        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher", capabilities: Capabilities.Zstd);
        ClusterMetrics metrics = cluster[0].Engine().Metrics;
        await InboundFlood.SendAsync(publisher, metrics, largeBytes); // node 0 cannot keep up
        await publisher.PublishAsync("flood", "end");

        long received = 0, told = 0;
        for (Frame frame = await victim.ReadAsync(); frame.Type != FrameType.Message || frame.Text != "end"; frame = await victim.ReadAsync())
        {
            if (frame.Type == FrameType.Error)
            {
                Assert.Equal(ErrorCode.MessagesDropped, frame.Error!.Value.Code);
                Assert.False(frame.Error.Value.Fatal);
                Assert.StartsWith("Inbound shed:", frame.Error.Value.Message, StringComparison.Ordinal); // what happened, not "Slow consumer"
                told += (long)frame.Error.Value.Count;
            }
            else
            {
                received++;
            }
        }

        output.WriteLine($"{flood} publications from node 1 (large ones {largeBytes} B; node 0's bounds {maxMessages} messages, {maxBytes} B): node 0 shed {metrics.InboundShed}, routed {metrics.Received}; the victim received {received} and was told of {told} lost");
        Assert.Equal(metrics.InboundShed, told); // each shed publication told to its one subscriber
        Assert.Equal(flood, received + told);    // nothing lost silently
        for (int i = 0; i < InboundFlood.Calm; i++)
        {
            Assert.Equal($"calm {i}", (await bystander.ReadMessageAsync()).Text);
        }

        return metrics.InboundShed;
    }

    private static void Tokens(Herald.Broker.Hosting.HeraldOptions o)
    {
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.Zero;
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Publish = { "orders.>" }, Subscribe = { "orders.>" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "mallory", Sha256 = TestTokens.Sha256(MalloryToken) });
    }

    private static async Task<long> OutputBytesAsync(IDatabase db) => long.Parse(Field(await InfoAsync(db, "stats"), "total_net_output_bytes"), CultureInfo.InvariantCulture);

    private static async Task<long> HashGetAllCallsAsync(IDatabase db)
    {
        string line = Field(await InfoAsync(db, "commandstats"), "cmdstat_hgetall", orElse: "calls=0,");
        return long.Parse(line["calls=".Length..line.IndexOf(',', StringComparison.Ordinal)], CultureInfo.InvariantCulture);
    }

    private static async Task<string> InfoAsync(IDatabase db, string section) => (string)(await db.ExecuteAsync("INFO", section))!;

    private static string Field(string info, string name, string? orElse = null) =>
        info.Split('\n').Select(l => l.Trim()).FirstOrDefault(l => l.StartsWith(name + ":", StringComparison.Ordinal))?[(name.Length + 1)..]
        ?? orElse ?? throw new InvalidOperationException($"INFO has no {name}");
}
