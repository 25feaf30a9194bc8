using System.Globalization;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Client;
using Herald.Protocol;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// What one identity's interest costs the cluster's Redis (spec cluster.md §2, §4): two real nodes on a test-owned
/// <c>redis-server</c>, token authentication, <c>mallory</c> with no permissions (she acts only under her own reply
/// inbox, which every identity is granted) and <c>alice</c> allowed <c>orders.&gt;</c>. The bounds are read from
/// Redis itself (<c>PUBSUB NUMPAT</c>, <c>PUBSUB CHANNELS</c>, <c>INFO stats</c>), never from a time.
/// </summary>
public sealed class ClusterInterestBoundsTests(ITestOutputHelper output)
{
    private const string AliceToken = "cluster-interest-alice-0123";
    private const string MalloryToken = "cluster-interest-mallory-0123";
    private static readonly string MalloryInbox = Identity.InboxPrefixOf("mallory");

    [Fact]
    public async Task Inbox_patterns_of_one_identity_cost_redis_a_bounded_number_of_subscriptions_and_count_against_its_wildcard_quota()
    {
        const int PerNode = 1000;
        const int Quota = 2500;
        await using TestCluster cluster = await StartAsync(o => o.Limits.MaxWildcardPatternsPerIdentity = Quota);
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IServer server = redis.GetServer(redis.GetEndPoints()[0]);

        // The bystander: alice's subscriber on node 1, her publisher on node 0.
        await using var aliceSubscriber = await ProtocolClient.OpenAsync(cluster[1].Port, "alice-sub", auth: AliceToken);
        await aliceSubscriber.SubscribeAsync(1, "orders.>");
        await aliceSubscriber.PingPongAsync();
        await using var alicePublisher = await ProtocolClient.OpenAsync(cluster[0].Port, "alice-pub", auth: AliceToken);
        int sent = 0;
        async Task AliceCarriesOnAsync()
        {
            string text = $"order {++sent}";
            await alicePublisher.PublishAsync($"orders.{sent}", text);
            Assert.Equal(text, (await aliceSubscriber.ReadMessageAsync(TimeSpan.FromMinutes(1))).Text);
        }

        await AliceCarriesOnAsync();
        (long patterns, long channels) before = await RedisInterestAsync(server);

        // mallory's responder on node 1 and requester on node 0, under her inbox, before and after her flood.
        await using HeraldClient responder = Client(cluster[1], MalloryToken);
        await using HeraldSubscription serving = await responder.SubscribeAsync(MalloryInbox + ".svc.*", async m => await responder.PublishAsync(m.ReplyTo!, "echo: " + m.GetString()));
        await responder.FlushAsync();
        await using HeraldClient requester = Client(cluster[0], MalloryToken);
        Assert.Equal("echo: before", (await requester.RequestAsync(MalloryInbox + ".svc.echo", "before", TimeSpan.FromSeconds(30))).GetString());

        // mallory's flood: wildcard patterns and exact topics under her own inbox, on both nodes.
        await using var flood0 = await ProtocolClient.OpenAsync(cluster[0].Port, "mallory-0", auth: MalloryToken);
        await using var flood1 = await ProtocolClient.OpenAsync(cluster[1].Port, "mallory-1", auth: MalloryToken);
        for (int i = 0; i < PerNode; i++)
        {
            await flood0.SubscribeAsync((uint)(i + 1), $"{MalloryInbox}.p{i}.*");
            await flood1.SubscribeAsync((uint)(i + 1), $"{MalloryInbox}.r{i}.>");
            await flood1.SubscribeAsync((uint)(PerNode + i + 1), $"{MalloryInbox}.e{i}");
            if (i % 250 == 0)
            {
                await AliceCarriesOnAsync();
            }
        }

        Assert.Empty(await UntilPongAsync(flood0)); // every one accepted: within her quotas, live on every node
        Assert.Empty(await UntilPongAsync(flood1));
        (long patterns, long channels) during = await RedisInterestAsync(server);
        output.WriteLine($"mallory holds {PerNode} inbox globs on node 0, {PerNode} globs and {PerNode} exact inbox topics on node 1");
        output.WriteLine($"Redis PUBSUB NUMPAT {before.patterns} -> {during.patterns}, PUBSUB CHANNELS {before.channels} -> {during.channels}; node 0 covers [{string.Join(", ", cluster[0].Engine().Covering)}], node 1 [{string.Join(", ", cluster[1].Engine().Covering)}]");
        Assert.All(cluster.Nodes, node => Assert.InRange(node.Engine().RedisSubscriptions, 1, 16 + 1));
        Assert.InRange(during.patterns - before.patterns, 0, 2 * 16); // at most Cluster:MaxRedisSubscriptionsPerInbox per node
        Assert.InRange(during.channels - before.channels, 0, 2 * 16);

        // Replies to her inbox still cross the nodes under the aggregate, both ways; alice carries on.
        Assert.Equal("echo: during", (await requester.RequestAsync(MalloryInbox + ".svc.echo", "during", TimeSpan.FromSeconds(30))).GetString());
        await flood1.PublishAsync($"{MalloryInbox}.p7.x", "to node 0"); // her own glob on node 0 from node 1
        Assert.Equal("to node 0", (await flood0.ReadMessageAsync(TimeSpan.FromMinutes(1))).Text);
        await flood0.PublishAsync($"{MalloryInbox}.e7", "to node 1");
        Assert.Equal("to node 1", (await flood1.ReadMessageAsync(TimeSpan.FromMinutes(1))).Text);
        await AliceCarriesOnAsync();

        // Past her wildcard quota (per node, across her connections: 1000 + her responder's one on node 1), refused, not closed.
        const int More = 2000;
        for (int i = 0; i < More; i++)
        {
            await flood1.SubscribeAsync((uint)(10_000 + i), $"{MalloryInbox}.q{i}.*");
        }

        List<Frame> answers = await UntilPongAsync(flood1);

        int held = PerNode + 1;
        Assert.Equal(held + More - Quota, answers.Count);
        Assert.All(answers, a => Assert.Equal((ErrorCode.TooManyTopics, false), (a.Error!.Value.Code, a.Error.Value.Fatal)));
        Assert.Contains("mallory", answers[0].Error!.Value.Message);
        Assert.Contains("wildcard", answers[0].Error!.Value.Message);
        output.WriteLine($"past the quota of {Quota}: {answers.Count} SUBSCRIBEs refused: {answers[0].Error!.Value.Message}");

        (long patterns, long channels) after = await RedisInterestAsync(server);
        output.WriteLine($"at her quota: Redis PUBSUB NUMPAT {after.patterns}, PUBSUB CHANNELS {after.channels}");
        Assert.InRange(after.patterns - before.patterns, 0, 2 * 16);
        Assert.Equal("echo: after", (await requester.RequestAsync(MalloryInbox + ".svc.echo", "after", TimeSpan.FromSeconds(30))).GetString());
        await AliceCarriesOnAsync();
    }

    [Fact]
    public async Task A_request_nobody_answers_reads_from_redis_only_what_its_answer_needs()
    {
        const int Topics = 1200;
        const int Requests = 50;
        await using TestCluster cluster = await StartAsync();
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IServer server = redis.GetServer(redis.GetEndPoints()[0]);

        // alice holds many long topics on node 1: its cover is large.
        await using var alice = await ProtocolClient.OpenAsync(cluster[1].Port, "alice-many", auth: AliceToken);
        string padding = new('x', 150);
        for (int i = 0; i < Topics; i++)
        {
            await alice.SubscribeAsync((uint)(i + 1), $"orders.{padding}.{i}");
        }

        Assert.Empty(await UntilPongAsync(alice));
        long coversBytes = await CoversBytesAsync(server, redis.GetDatabase());

        // Bystanders: alice's service on node 1, and mallory's own under her inbox.
        await using HeraldClient aliceService = Client(cluster[1], AliceToken);
        await using HeraldSubscription aliceServing = await aliceService.SubscribeAsync("orders.svc", async m => await aliceService.PublishAsync(m.ReplyTo!, "done: " + m.GetString()));
        await using HeraldClient malloryService = Client(cluster[1], MalloryToken);
        await using HeraldSubscription malloryServing = await malloryService.SubscribeAsync(MalloryInbox + ".svc", async m => await malloryService.PublishAsync(m.ReplyTo!, "echo: " + m.GetString()));
        await aliceService.FlushAsync();
        await malloryService.FlushAsync();
        await using HeraldClient aliceRequester = Client(cluster[0], AliceToken);
        await using HeraldClient mallory = Client(cluster[0], MalloryToken);
        Assert.Equal("done: 1", (await aliceRequester.RequestAsync("orders.svc", "1", TimeSpan.FromSeconds(30))).GetString());
        Assert.Equal("echo: 1", (await mallory.RequestAsync(MalloryInbox + ".svc", "1", TimeSpan.FromSeconds(30))).GetString());

        long before = await NetOutputAsync(server);
        for (int i = 0; i < Requests; i++)
        {
            await Assert.ThrowsAsync<HeraldNoRespondersException>(() => mallory.RequestAsync(MalloryInbox + ".nobody", "x", TimeSpan.FromSeconds(60)));
        }

        long after = await NetOutputAsync(server);
        long perRequest = (after - before) / Requests;
        output.WriteLine($"covers hash: {coversBytes} bytes; {Requests} no-responder requests made Redis send {after - before} bytes ({perRequest} per request)");
        Assert.InRange(perRequest, 0, 4096);
        Assert.True(coversBytes > 25 * 4096, $"the covers are {coversBytes} bytes: too small to tell");

        // Answered ones are still answered, across the nodes.
        Assert.Equal("done: 2", (await aliceRequester.RequestAsync("orders.svc", "2", TimeSpan.FromSeconds(30))).GetString());
        Assert.Equal("echo: 2", (await mallory.RequestAsync(MalloryInbox + ".svc", "2", TimeSpan.FromSeconds(30))).GetString());
    }

    private static Task<TestCluster> StartAsync(Action<HeraldOptions>? more = null) => TestCluster.StartAsync(nodes: 2, o =>
    {
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.Zero;
        o.Limits.PingInterval = TimeSpan.FromMinutes(10); // the clients here answer no PING: none is sent while they work on a loaded machine
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Publish = { "orders.>" }, Subscribe = { "orders.>" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "mallory", Sha256 = TestTokens.Sha256(MalloryToken) });
        more?.Invoke(o);
    });

    /// <summary>
    /// PING, then every frame until the PONG (errors and messages alike), waiting up to a minute for each: the PONG comes
    /// once Redis has every subscription change, thousands here (a hang bound for a loaded machine, not a time measured).
    /// </summary>
    private static async Task<List<Frame>> UntilPongAsync(ProtocolClient client)
    {
        await client.SendAsync(FrameWriter.WritePing);
        var before = new List<Frame>();
        for (Frame frame = await client.ReadAsync(TimeSpan.FromMinutes(1)); frame.Type != FrameType.Pong; frame = await client.ReadAsync(TimeSpan.FromMinutes(1)))
        {
            before.Add(frame);
        }

        return before;
    }

    private static HeraldClient Client(TestBroker node, string token) =>
        new(new HeraldClientOptions { Url = $"tcp://127.0.0.1:{node.Port}", Credential = token });

    private static async Task<(long Patterns, long Channels)> RedisInterestAsync(IServer server)
    {
        long patterns = await server.SubscriptionPatternCountAsync();
        RedisChannel[] channels = await server.SubscriptionChannelsAsync();
        return (patterns, channels.Length);
    }

    private static async Task<long> NetOutputAsync(IServer server)
    {
        IGrouping<string, KeyValuePair<string, string>>[] info = await server.InfoAsync("stats");
        return long.Parse(info.SelectMany(g => g).First(kv => kv.Key == "total_net_output_bytes").Value, CultureInfo.InvariantCulture);
    }

    /// <summary>What the nodes keep of their covers in Redis (spec cluster.md §4), in bytes (<c>MEMORY USAGE</c> of every covers key).</summary>
    private static async Task<long> CoversBytesAsync(IServer server, IDatabase db)
    {
        long bytes = 0;
        await foreach (RedisKey key in server.KeysAsync(pattern: "{herald}:cover*"))
        {
            bytes += (long)await db.ExecuteAsync("MEMORY", "USAGE", key);
        }

        return bytes;
    }
}
