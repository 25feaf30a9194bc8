using System.Text.Json;
using Herald.Broker.Cluster;
using Herald.Broker.History;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// What a shard's outage cost its subscribers, told (cluster.md §13 "Faults", README §6.3, longpoll §2, sse §2): on real
/// redis-servers, a shard killed and restarted on its port; every subscription whose publications pass through it (an
/// exact topic of that shard, any glob) is told, with its sid, that it may have lost messages, on every transport; a
/// subscription to a topic of another shard is told nothing (proved by a barrier after the notices). Counted per shard.
/// </summary>
public sealed class ClusterShardLossTests(ITestOutputHelper output)
{
    [Fact]
    public async Task A_subscription_made_while_its_shard_is_down_is_counted_as_not_made_there_made_when_it_is_back_and_told()
    {
        const int Shards = 2;
        await using TestCluster cluster = await TestCluster.StartShardedAsync(Shards, nodes: 1, Quick);
        TestBroker node = cluster[0];
        ClusterEngine engine = node.Engine();
        string victim = ClusterShardTests.TopicOn(0, Shards, "late.v");
        string bystander = ClusterShardTests.TopicOn(1, Shards, "late.b");
        cluster.Shards[0].Kill();
        await Until.True(() => !engine.ConnectedTo(0), "the node sees shard 0 gone");

        await using var client = await ProtocolClient.OpenAsync(node.Port, "late");
        await client.SubscribeAsync(1, victim);
        await client.SubscribeAsync(2, bystander);
        Assert.Empty(await client.PingPongAsync()); // settled: shard 0 failed fast, shard 1 made its part
        output.WriteLine($"subscribe failures: shard 0 {engine.Metrics.SubscribeFailuresOn(0)}, shard 1 {engine.Metrics.SubscribeFailuresOn(1)}");
        long failed = engine.Metrics.SubscribeFailuresOn(0);
        Assert.True(failed > 0, "the victim's channel was not made on shard 0"); // tried at each change of the cover while the shard is down
        Assert.Equal(0, engine.Metrics.SubscribeFailuresOn(1));
        using (JsonDocument varz = JsonDocument.Parse(await node.Monitoring.GetStringAsync("/varz")))
        {
            long[] shown = [.. varz.RootElement.GetProperty("cluster").GetProperty("shards").EnumerateArray().Select(shard => shard.GetProperty("subscribe_failures").GetInt64())];
            Assert.True(shown[0] >= failed, $"/varz shows shard 0's {shown[0]} failed subscribes"); // a later change of the cover may have tried again meanwhile
            Assert.Equal(0L, shown[1]);
        }

        await cluster.Shards[0].RestartAsync();
        ErrorFrame notice = await NoticeAsync(client);
        Assert.Equal(new uint[] { 1 }, notice.Sids); // what it may have missed meanwhile is told; the bystander topic is not named
        await using ConnectionMultiplexer shard0 = await ConnectionMultiplexer.ConnectAsync(cluster.Shards[0].Configuration);
        await Until.True(async () => ((RedisResult[])(await shard0.GetDatabase().ExecuteAsync("PUBSUB", "CHANNELS"))!).Length > 0, "the victim's channel subscribed on shard 0 once it is back");
        Assert.Equal(0, engine.Metrics.SubscribeFailuresOn(1));
    }

    [Fact]
    public async Task Subscribers_of_a_restarted_shards_topics_and_of_globs_are_told_by_sid_on_every_transport_and_a_bystander_topic_is_not()
    {
        const int Shards = 2;
        string directory = Directory.CreateTempSubdirectory("herald-redis-").FullName; // shard 0 keeps its keys: the long-poll session may live there (cluster.md §10)
        await using TestCluster cluster = await TestCluster.StartShardedAsync(Shards, nodes: 1, Quick, persistent: 0, directory: directory);
        TestBroker node = cluster[0];
        string victim = ClusterShardTests.TopicOn(0, Shards, "loss.v");
        string bystander = ClusterShardTests.TopicOn(1, Shards, "loss.b");

        await using var tcp = await ProtocolClient.OpenAsync(node.Port, "tcp");
        await tcp.SubscribeAsync(1, victim);
        await tcp.SubscribeAsync(2, bystander);
        await tcp.SubscribeAsync(3, "loss.>");
        Assert.Empty(await tcp.PingPongAsync());
        await using var onlyBystander = await ProtocolClient.OpenAsync(node.Port, "bystander");
        await onlyBystander.SubscribeAsync(7, bystander);
        Assert.Empty(await onlyBystander.PingPongAsync());
        await using var webSocket = await ProtocolClient.ConnectWebSocketAsync(node.HttpPort);
        await webSocket.HelloAsync("ws");
        await webSocket.SubscribeAsync(5, victim);
        Assert.Empty(await webSocket.PingPongAsync());
        LongPollClient poll = await LongPollClient.CreateAsync(node.Http);
        await poll.SubscribeAsync(1, victim);
        await poll.SubscribeAsync(2, bystander);
        await poll.SubscribeAsync(3, "loss.*");
        await using SseClient sse = await SseClient.OpenAsync(node.HttpPort, $"topic={bystander}&topic={victim}"); // sids 1 and 2, in the URL's order

        ClusterEngine engine = node.Engine();
        cluster.Shards[0].Kill();
        await Until.True(() => !engine.ConnectedTo(0), "the node sees shard 0 gone");
        Assert.Equal(0, engine.Metrics.LossNoticesOn(0)); // told when it is back, not before
        await cluster.Shards[0].RestartAsync();
        await Until.True(() => engine.Metrics.LossNoticesOn(0) >= 6, "the subscribers of shard 0 are told once it is back");

        ErrorFrame notice = await NoticeAsync(tcp);
        output.WriteLine($"TCP: {notice}, sids {string.Join(",", notice.Sids!)}");
        Assert.Equal((ErrorCode.MessagesDropped, false, 0UL, 0U), (notice.Code, notice.Fatal, notice.Count, notice.Sid)); // count 0: how many is unknown
        Assert.Equal(new uint[] { 1, 3 }, notice.Sids); // the victim topic and the glob; not the bystander topic (sid 2)
        ErrorFrame overWebSocket = await NoticeAsync(webSocket);
        Assert.Equal(new uint[] { 5 }, overWebSocket.Sids);

        PollResult polled = await MarkedPollAsync(poll);
        Assert.Equal(0, polled.Dropped);
        Assert.Equal([1U, 3U], polled.Json!.Value.GetProperty("gaps").EnumerateArray().Select(sid => sid.GetUInt32()));

        SseEvent dropped = await NextEventAsync(sse, "dropped");
        Assert.Equal(0, dropped.Json.GetProperty("dropped").GetInt64());
        Assert.Equal([2U], dropped.Json.GetProperty("gaps").EnumerateArray().Select(sid => sid.GetUInt32()));

        // Told once, to those only: the bystander's connection got nothing before its PONG, and nothing is told for shard 1.
        Assert.Empty(await onlyBystander.BarrierAsync());
        Assert.Empty(await tcp.BarrierAsync());
        Assert.Equal(6, engine.Metrics.LossNoticesOn(0)); // TCP 2, WebSocket 1, long-poll 2, SSE 1, and no more
        Assert.Equal(0, engine.Metrics.LossNoticesOn(1));
        using JsonDocument varz = JsonDocument.Parse(await node.Monitoring.GetStringAsync("/varz"));
        Assert.Equal([6L, 0L], varz.RootElement.GetProperty("cluster").GetProperty("shards").EnumerateArray().Select(shard => shard.GetProperty("loss_notices").GetInt64()));

        // The glob that carries the victim topic (its cover, cluster.md §2) is subscribed on shard 0 again.
        await using ConnectionMultiplexer shard0 = await ConnectionMultiplexer.ConnectAsync(cluster.Shards[0].Configuration);
        await Until.True(async () => (long)await shard0.GetDatabase().ExecuteAsync("PUBSUB", "NUMPAT") > 0, "the glob subscribed on shard 0 again");
    }

    [Fact]
    public async Task With_one_Redis_every_subscriber_of_the_node_but_one_to_a_history_topic_is_told_when_it_is_back()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1, o =>
        {
            Quick(o);
            o.History.Topics.Add(new HistoryRule { Pattern = "one.kept", MaxMessages = 10 });
        });
        TestBroker node = cluster[0];
        await using var tcp = await ProtocolClient.OpenAsync(node.Port, "tcp");
        await tcp.SubscribeAsync(4, "one.a");
        await tcp.SubscribeAsync(6, "one.kept"); // a history topic: read back from its stream (cluster.md §9), not told
        await tcp.SubscribeAsync(9, "one.*");
        Assert.Empty(await tcp.PingPongAsync());

        ClusterEngine engine = node.Engine();
        cluster.Redis.Kill();
        await Until.True(() => !engine.IsConnected, "the node sees Redis gone");
        await cluster.Redis.RestartAsync();
        await Until.True(() => engine.Metrics.LossNoticesOn(0) >= 2, "every subscriber is told once Redis is back");

        ErrorFrame notice = await NoticeAsync(tcp);
        Assert.Equal(new uint[] { 4, 9 }, notice.Sids);
        Assert.Empty(await tcp.BarrierAsync());
        Assert.Equal(2, engine.Metrics.LossNoticesOn(0));
    }

    /// <summary>Redis found gone within a second; a poll held longer than the test's HTTP client waits (60 s).</summary>
    private static void Quick(Herald.Broker.Hosting.HeraldOptions o)
    {
        o.Cluster.ConnectTimeout = TimeSpan.FromSeconds(1);
        o.LongPoll.PollTimeout = TimeSpan.FromMinutes(5);
        o.LongPoll.InactivityTimeout = TimeSpan.FromMinutes(10);
    }

    /// <summary>
    /// A poll (ack 0) once the loss mark is there: answered at once with the mark alone, the first time (longpoll §2); if
    /// the owner has not appended it to the session's stream in Redis yet (cluster.md §10), the append wakes the poll. Its
    /// timeout is longer than the test's HTTP client waits: a poll held past the mark fails the test.
    /// </summary>
    private static Task<PollResult> MarkedPollAsync(LongPollClient poll) => poll.PollAsync(0, json: true);

    /// <summary>The next frame, which must be the loss notice: a non-fatal ERROR naming sids.</summary>
    private static async Task<ErrorFrame> NoticeAsync(ProtocolClient client)
    {
        Frame frame = await client.ReadAsync();
        while (frame.Type == FrameType.Ping)
        {
            frame = await client.ReadAsync();
        }

        Assert.True(frame.Type == FrameType.Error && frame.Error!.Value.Sids is not null, $"Expected a loss notice, got {frame}");
        return frame.Error!.Value;
    }

    private static async Task<SseEvent> NextEventAsync(SseClient stream, string type)
    {
        SseEvent e = await stream.ReadEventAsync();
        while (e.Type != type)
        {
            Assert.True(e.Type == "status", $"Expected {type}, got {e.Type}: {e.Data}"); // no history here: no status either, but tolerated
            e = await stream.ReadEventAsync();
        }

        return e;
    }
}
