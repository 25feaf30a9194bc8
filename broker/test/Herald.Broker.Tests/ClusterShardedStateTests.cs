using Herald.Broker.Cluster;
using Herald.Broker.Hosting;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using StackExchange.Redis;
using StreamPosition = Herald.Protocol.StreamPosition;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// Topic histories and presence on their topic's shard (spec cluster.md §9, §12, §13), on real redis-server shards: each
/// topic's keys only in its own shard's Redis, resumes and presence answers the same on every node, one shard killed
/// leaving the other shards' topics served (a bystander asserted) and its own answered PresenceUnavailable or waiting,
/// then back; and what adding a shard does to the topics that move.
/// </summary>
public sealed class ClusterShardedStateTests(ITestOutputHelper output)
{
    private const Capabilities Caps = Capabilities.Headers | Capabilities.Presence;

    [Fact]
    public async Task Presence_of_topics_on_two_shards_is_kept_each_in_its_shards_redis_and_every_node_answers_it()
    {
        await using TestCluster cluster = await TestCluster.StartShardedAsync(shards: 2, nodes: 2);
        string onFirst = TopicOn(0, 2, "room.");
        string onSecond = TopicOn(1, 2, "room.");
        await using ProtocolClient member = await ProtocolClient.OpenAsync(cluster[0].Port, "member", capabilities: Caps);
        await member.SubscribeAsync(1, onFirst, SubscribeOptions.Join);
        await member.SubscribeAsync(2, onSecond, SubscribeOptions.Join);
        Assert.Empty(await member.BarrierAsync());
        await using ProtocolClient other = await ProtocolClient.OpenAsync(cluster[1].Port, "other", capabilities: Caps);
        await other.SubscribeAsync(1, onSecond, SubscribeOptions.Join);
        Assert.Empty(await other.BarrierAsync());

        foreach (TestBroker node in cluster.Nodes)
        {
            await using ProtocolClient reader = await ProtocolClient.OpenAsync(node.Port, "reader", capabilities: Caps);
            Assert.Equal((ErrorCode.None, 1ul), Occupancy(await reader.PresenceAsync(1, onFirst, 10)));
            Assert.Equal((ErrorCode.None, 2ul), Occupancy(await reader.PresenceAsync(2, onSecond, 10)));
        }

        string node0 = cluster[0].Engine().Presence.ClientPrefix;
        IDatabase first = cluster.Database(0);
        IDatabase second = cluster.Database(1);
        Assert.Equal((1L, 0L), (await first.SortedSetLengthAsync($"{{herald}}:pm:{onFirst}"), await first.SortedSetLengthAsync($"{{herald}}:pm:{onSecond}")));
        Assert.Equal((0L, 2L), (await second.SortedSetLengthAsync($"{{herald}}:pm:{onFirst}"), await second.SortedSetLengthAsync($"{{herald}}:pm:{onSecond}")));
        Assert.Equal([onFirst], (await first.HashKeysAsync($"{{herald}}:pn:{node0}")).Select(k => (string)k!)); // each shard's table of node 0: its own topics
        Assert.Equal([onSecond], (await second.HashKeysAsync($"{{herald}}:pn:{node0}")).Select(k => (string)k!));
        await Until.True(async () => await first.SortedSetLengthAsync("{herald}:pnodes") == 2 && await second.SortedSetLengthAsync("{herald}:pnodes") == 2, "both nodes beat on both shards");
        output.WriteLine($"{onFirst} on shard 0, {onSecond} on shard 1");
    }

    [Fact]
    public async Task Join_and_leave_events_of_topics_on_two_shards_reach_another_node_in_order_with_the_members_publications()
    {
        await using TestCluster cluster = await TestCluster.StartShardedAsync(shards: 2, nodes: 2);
        string[] topics = [TopicOn(0, 2, "room."), TopicOn(1, 2, "room.")];
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(cluster[1].Port, "watcher", capabilities: Caps);
        await watcher.SubscribeAsync(1, topics[0], SubscribeOptions.PresenceEvents);
        await watcher.SubscribeAsync(2, topics[1], SubscribeOptions.PresenceEvents);
        await watcher.BarrierAsync();
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");

        await using ProtocolClient member = await ProtocolClient.OpenAsync(cluster[0].Port, "member", capabilities: Caps);
        for (int i = 0; i < 2; i++)
        {
            await member.SubscribeAsync((uint)(7 + i), topics[i], SubscribeOptions.Join);
            await member.PublishAsync(topics[i], $"hello {i}");
            await member.UnsubscribeAsync((uint)(7 + i));
        }

        Assert.DoesNotContain(await member.BarrierAsync(), f => f.Type == FrameType.Error); // joined and left: its own publications only

        // The two topics reach node 1 through two shards, so only each topic's own order is promised (cluster.md §4).
        var received = new List<Frame>();
        for (int n = 0; n < 6; n++)
        {
            received.Add(await watcher.ReadMessageAsync());
        }

        for (int i = 0; i < 2; i++)
        {
            Frame[] ofTopic = [.. received.Where(f => f.Sid == (uint)(i + 1))];
            Assert.Equal(3, ofTopic.Length);
            Assert.Equal(("join", "1"), (ofTopic[0].Header("Herald-Presence").Single(), ofTopic[0].Header("Herald-Occupancy").Single()));
            Assert.Equal($"hello {i}", ofTopic[1].Text);
            Assert.Equal(("leave", "0"), (ofTopic[2].Header("Herald-Presence").Single(), ofTopic[2].Header("Herald-Occupancy").Single()));
        }

        Assert.Empty(await watcher.BarrierAsync());
    }

    [Fact]
    public async Task A_killed_shard_answers_PresenceUnavailable_for_its_topics_only_and_its_members_are_back_when_it_is()
    {
        await using TestCluster cluster = await TestCluster.StartShardedAsync(shards: 2, nodes: 2);
        string kept = TopicOn(0, 2, "room.");
        string doomed = TopicOn(1, 2, "room.");
        await using ProtocolClient member = await ProtocolClient.OpenAsync(cluster[0].Port, "member", capabilities: Caps);
        await member.SubscribeAsync(1, kept, SubscribeOptions.Join);
        await member.SubscribeAsync(2, doomed, SubscribeOptions.Join);
        Assert.Empty(await member.BarrierAsync());
        await using ProtocolClient other = await ProtocolClient.OpenAsync(cluster[1].Port, "other", capabilities: Caps);

        cluster.Shards[1].Kill(); // no persistence: its members go with it
        await Until.True(() => !cluster[0].Engine().Shards.All[1].IsConnected && !cluster[1].Engine().Shards.All[1].IsConnected, "both nodes see shard 1 gone");
        Assert.True(cluster[1].Engine().Shards.All[0].IsConnected);
        PresenceReplyFrame during = await other.PresenceAsync(1, doomed, 10);
        Assert.Equal((ErrorCode.PresenceUnavailable, 0ul), Occupancy(during));
        await other.SubscribeAsync(5, doomed, SubscribeOptions.Join);
        Frame refused = Assert.Single(await other.BarrierAsync());
        Assert.Equal((ErrorCode.PresenceUnavailable, 5u), (refused.Error!.Value.Code, refused.Error.Value.Sid));

        // The bystander: the other shard's topic is read and joined as before.
        Assert.Equal((ErrorCode.None, 1ul), Occupancy(await other.PresenceAsync(2, kept, 10)));
        await other.SubscribeAsync(6, kept, SubscribeOptions.Join);
        Assert.Empty(await other.BarrierAsync());
        Assert.Equal((ErrorCode.None, 2ul), Occupancy(await member.PresenceAsync(3, kept, 10)));

        await cluster.Shards[1].RestartAsync(); // empty: node 0 writes its member of the doomed topic again
        await Until.True(() => cluster[0].Engine().Shards.All[1].IsConnected && cluster[1].Engine().Shards.All[1].IsConnected, "both nodes back on shard 1");
        uint request = 10;
        PresenceReplyFrame after = await Until.Value(() => other.PresenceAsync(request++, doomed, 10), r => r.Code == ErrorCode.None && r.Members == 1, "node 0's member back in shard 1");
        Assert.StartsWith(cluster[0].Engine().Presence.ClientPrefix, Assert.Single(after.Entries).Client, StringComparison.Ordinal);
        await other.SubscribeAsync(7, doomed, SubscribeOptions.Join);
        Assert.Empty(await other.BarrierAsync());
        Assert.Equal((ErrorCode.None, 2ul), Occupancy(await other.PresenceAsync(99, doomed, 0)));
        Assert.Equal((ErrorCode.None, 2ul), Occupancy(await other.PresenceAsync(100, kept, 0)));
        Assert.Equal(0L, await cluster.Database(1).SortedSetLengthAsync($"{{herald}}:pm:{kept}"));
    }

    [Fact]
    public async Task A_stalled_shard_delays_no_presence_heartbeat_of_another_so_no_live_node_is_swept_there()
    {
        const int Interval = 200;
        await using TestCluster cluster = await TestCluster.StartShardedAsync(shards: 2, nodes: 2, o => o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(Interval));
        string kept = TopicOn(0, 2, "room.");
        await using ProtocolClient member = await ProtocolClient.OpenAsync(cluster[0].Port, "member", capabilities: Caps);
        await member.SubscribeAsync(1, kept, SubscribeOptions.Join);
        Assert.Empty(await member.BarrierAsync());
        IDatabase first = cluster.Database(0);
        string node0 = cluster[0].Engine().Presence.ClientPrefix;
        string node1 = cluster[1].Engine().Presence.ClientPrefix;

        cluster.Shards[1].Pause(); // connected, answering nothing: each command there waits for its timeout
        try
        {
            // Both nodes beat shard 0 while shard 1 stalls: counted by Redis's own clock in shard 0's pnodes, 10 intervals on.
            double paused = (await first.SortedSetScoreAsync("{herald}:pnodes", node0))!.Value;
            await Until.True(async () => (await first.SortedSetScoreAsync("{herald}:pnodes", node0)) > paused + (10 * Interval) && (await first.SortedSetScoreAsync("{herald}:pnodes", node1)) > paused + (10 * Interval), "both nodes beat shard 0 ten intervals on");

            Assert.Equal((0L, 0L), (cluster[0].Engine().Presence.Swept, cluster[1].Engine().Presence.Swept)); // no live node taken for dead on shard 0
            await using ProtocolClient bystander = await ProtocolClient.OpenAsync(cluster[1].Port, "bystander", capabilities: Caps);
            PresenceReplyFrame read = await bystander.PresenceAsync(1, kept, 10);
            Assert.Equal((ErrorCode.None, 1ul), Occupancy(read));
            Assert.StartsWith(node0, Assert.Single(read.Entries).Client, StringComparison.Ordinal);
            await bystander.SubscribeAsync(2, kept, SubscribeOptions.Join);
            Assert.Empty(await bystander.BarrierAsync());
            Assert.Equal((ErrorCode.None, 2ul), Occupancy(await bystander.PresenceAsync(3, kept, 0)));
        }
        finally
        {
            cluster.Shards[1].Resume();
        }
    }

    [Fact]
    public async Task Histories_of_topics_on_three_shards_are_each_in_their_shards_redis_and_resume_on_another_node()
    {
        await using TestCluster cluster = await TestCluster.StartShardedAsync(shards: 3, nodes: 2, History("feed.>"));
        string[] topics = [TopicOn(0, 3, "feed."), TopicOn(1, 3, "feed."), TopicOn(2, 3, "feed.")];
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        foreach (string topic in topics)
        {
            for (int i = 1; i <= 3; i++)
            {
                await publisher.PublishAsync(topic, $"{topic} m{i}");
            }
        }

        await publisher.PingPongAsync(); // handed to each shard, in order, before the resumes read them
        for (int shard = 0; shard < 3; shard++)
        {
            for (int s = 0; s < 3; s++)
            {
                IDatabase db = cluster.Database(s);
                bool here = s == shard;
                await Until.True(async () => await db.KeyExistsAsync($"{{herald}}:s:{topics[shard]}") == here, $"{topics[shard]}'s stream {(here ? "on" : "not on")} shard {s}");
                Assert.Equal(here, await db.KeyExistsAsync($"{{herald}}:h:{topics[shard]}"));
            }
        }

        await using ProtocolClient back = await ProtocolClient.OpenAsync(cluster[1].Port, "back", capabilities: Capabilities.Headers); // a node that never had these topics
        for (int shard = 0; shard < 3; shard++)
        {
            uint sid = (uint)(shard + 1);
            string topic = topics[shard];
            await back.SubscribeAsync(sid, topic, new StreamPosition(1, await Epoch(cluster.Database(shard), topic)));
            Frame status = await back.ReadMessageAsync();
            Assert.Equal(("200", "Recovered", sid, 3ul), (status.Status, status.Header(StreamPosition.DescriptionHeader)[0], status.Sid, status.Position!.Value.Offset));
            List<Frame> replayed = [await back.ReadMessageAsync(), await back.ReadMessageAsync()];
            Assert.Equal([$"{topic} m2", $"{topic} m3"], replayed.Select(f => f.Text));
            Assert.Equal([2ul, 3ul], replayed.Select(f => f.Position!.Value.Offset));
        }

        foreach (string topic in topics)
        {
            await publisher.PublishAsync(topic, $"{topic} m4");
        }

        List<Frame> live = [await back.ReadMessageAsync(), await back.ReadMessageAsync(), await back.ReadMessageAsync()];
        Assert.Equal(topics.Select(t => $"{t} m4").Order(StringComparer.Ordinal), live.Select(f => f.Text!).Order(StringComparer.Ordinal));
        Assert.All(live, f => Assert.Equal(4ul, f.Position!.Value.Offset));
        Assert.Empty(await back.PingPongAsync());
    }

    [Fact]
    public async Task A_killed_shards_history_topic_waits_and_repairs_while_a_bystander_topic_on_the_other_shard_loses_nothing()
    {
        string directory = Directory.CreateTempSubdirectory("herald-redis-").FullName;
        await using TestCluster cluster = await TestCluster.StartShardedAsync(shards: 2, nodes: 2, History("feed.>"), persistent: 1, directory: directory);
        string bystander = TopicOn(0, 2, "feed.");
        string doomed = TopicOn(1, 2, "feed.");
        await using ProtocolClient subscriber = await ProtocolClient.OpenAsync(cluster[1].Port, "subscriber", capabilities: Capabilities.Headers);
        await subscriber.SubscribeAsync(1, bystander);
        await subscriber.SubscribeAsync(2, doomed);
        await subscriber.PingPongAsync();
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        await publisher.PublishAsync(doomed, "d1");
        Assert.Equal(("d1", 1ul), Seen(await subscriber.ReadMessageAsync()));

        cluster.Shards[1].Kill(); // its streams survive it (append-only file)
        await Until.True(() => !cluster[0].Engine().Shards.All[1].IsConnected && !cluster[1].Engine().Shards.All[1].IsConnected, "both nodes see shard 1 gone");
        for (int i = 2; i <= 4; i++)
        {
            await publisher.PublishAsync(doomed, $"d{i}"); // wait at node 0 for shard 1
        }

        for (int i = 1; i <= 3; i++)
        {
            await publisher.PublishAsync(bystander, $"b{i}"); // on shard 0: not held behind the doomed topic's
        }

        List<Frame> during = [await subscriber.ReadMessageAsync(), await subscriber.ReadMessageAsync(), await subscriber.ReadMessageAsync()];
        Assert.Equal([("b1", 1ul), ("b2", 2ul), ("b3", 3ul)], during.Select(Seen));
        Assert.Empty(await subscriber.PingPongAsync()); // nothing of the doomed topic without its shard
        output.WriteLine($"while shard 1 was down: {string.Join(", ", during.Select(f => f.Text))}");

        await cluster.Shards[1].RestartAsync();
        await Until.True(() => cluster[0].Engine().Shards.All[1].IsConnected && cluster[1].Engine().Shards.All[1].IsConnected, "both nodes back on shard 1");
        var received = new List<Frame> { await ReceivedAgainAsync(publisher, subscriber, doomed) };
        await publisher.PublishAsync(doomed, "end");
        while (received[^1].Text != "end")
        {
            received.Add(await subscriber.ReadMessageAsync());
        }

        Assert.All(received, f => Assert.Equal(2u, f.Sid));
        Assert.Equal(["d2", "d3", "d4"], received.Take(3).Select(f => f.Text)); // what waited at node 0, or was read back by node 1
        Assert.Equal(Enumerable.Range(2, received.Count).Select(i => (ulong)i), received.Select(f => f.Position!.Value.Offset)); // no gap, none twice
        Assert.Empty(await subscriber.PingPongAsync());
    }

    [Fact]
    public async Task Adding_a_shard_moves_the_topics_the_jump_hash_gives_it_and_a_resume_of_a_moved_history_is_told_it_is_lost()
    {
        RedisServer first = await RedisServer.StartAsync();
        await using RedisServer firstOwned = first;
        string stays = TopicOn(0, 2, "feed.");
        string moves = TopicOn(1, 2, "feed.");
        var positions = new Dictionary<string, StreamPosition>();
        await using (TestCluster before = await TestCluster.StartShardedAsync(shards: 1, nodes: 1, History("feed.>"), existing: [first]))
        {
            await using ProtocolClient publisher = await ProtocolClient.OpenAsync(before[0].Port, "publisher", capabilities: Capabilities.Headers);
            foreach (string topic in new[] { stays, moves })
            {
                await publisher.SubscribeAsync(1, topic);
                await publisher.PingPongAsync();
                await publisher.PublishAsync(topic, "m1");
                await publisher.PublishAsync(topic, "m2");
                positions[topic] = (await publisher.ReadMessageAsync()).Position!.Value;
                await publisher.ReadMessageAsync();
                await publisher.UnsubscribeAsync(1);
            }
        }

        await using TestCluster after = await TestCluster.StartShardedAsync(shards: 2, nodes: 1, History("feed.>"), existing: [first]);
        await using ProtocolClient resumer = await ProtocolClient.OpenAsync(after[0].Port, "resumer", capabilities: Capabilities.Headers);
        await resumer.SubscribeAsync(1, stays, positions[stays]);
        Frame kept = await resumer.ReadMessageAsync();
        Assert.Equal(("200", 2ul), (kept.Status, kept.Position!.Value.Offset));
        Assert.Equal("m2", (await resumer.ReadMessageAsync()).Text);

        await resumer.SubscribeAsync(2, moves, positions[moves]);
        Frame lost = await resumer.ReadMessageAsync();
        output.WriteLine($"{moves}, moved to shard 1: {lost.Status} {lost.Header(StreamPosition.DescriptionHeader)[0]}");
        Assert.Equal(("410", 2u), (lost.Status, lost.Sid));
        Assert.StartsWith("History lost", lost.Header(StreamPosition.DescriptionHeader)[0]);
        Assert.NotEqual(positions[moves].Epoch, lost.Position!.Value.Epoch);
        Assert.True(await after.Database(0).KeyExistsAsync($"{{herald}}:s:{moves}"), "the moved topic's old stream stays on shard 0, unread, until it expires");
        Assert.Empty(await resumer.PingPongAsync());
    }

    [Fact]
    public void Adding_a_shard_moves_about_one_topic_in_n_plus_one_and_only_to_the_new_shard()
    {
        const int Topics = 20_000;
        for (int n = 1; n <= 4; n++)
        {
            int moved = 0;
            for (int i = 0; i < Topics; i++)
            {
                byte[] topic = System.Text.Encoding.UTF8.GetBytes($"orders.{i}");
                int was = ClusterShards.ShardOf(topic, n);
                int now = ClusterShards.ShardOf(topic, n + 1);
                if (was != now)
                {
                    Assert.Equal(n, now); // a topic that moves goes to the new shard, never between old ones
                    moved++;
                }
            }

            output.WriteLine($"{n} -> {n + 1} shards: {moved} of {Topics} topics move ({moved * 100.0 / Topics:0.0} %, 1/(N+1) = {100.0 / (n + 1):0.0} %)");
            Assert.InRange(moved, Topics / (n + 1) * 9 / 10, Topics / (n + 1) * 11 / 10);
        }
    }

    /// <summary>Publishes on <paramref name="topic"/> until <paramref name="subscriber"/>'s node receives from its shard again (its subscription made again there).</summary>
    private static async Task<Frame> ReceivedAgainAsync(ProtocolClient publisher, ProtocolClient subscriber, string topic)
    {
        for (int i = 0; ; i++)
        {
            Assert.True(i < 120, "the subscriber's node never received again");
            await publisher.PublishAsync(topic, $"after {i}");
            if (await subscriber.TryReadAsync(TimeSpan.FromMilliseconds(500)).ContinueWith(t => t.IsCompletedSuccessfully ? t.Result : null) is { } frame)
            {
                return frame;
            }
        }
    }

    private static (ErrorCode, ulong) Occupancy(PresenceReplyFrame reply) => (reply.Code, reply.Members);

    private static (string?, ulong) Seen(Frame frame) => (frame.Text, frame.Position!.Value.Offset);

    private static async Task<string> Epoch(IDatabase db, string topic) => (string)(await db.HashGetAsync($"{{herald}}:h:{topic}", "e"))!;

    private static Action<HeraldOptions> History(string pattern) =>
        o => o.History.Topics.Add(new Herald.Broker.History.HistoryRule { Pattern = pattern, MaxMessages = 1000 });

    /// <summary>The first topic <paramref name="stem"/> and a number that lives on <paramref name="shard"/> of <paramref name="count"/>.</summary>
    private static string TopicOn(int shard, int count, string stem)
    {
        for (int i = 0; ; i++)
        {
            string topic = stem + i.ToString(System.Globalization.CultureInfo.InvariantCulture);
            if (ClusterShards.ShardOf(System.Text.Encoding.UTF8.GetBytes(topic), count) == shard)
            {
                return topic;
            }
        }
    }
}
