using System.Text;
using Herald.Broker.Cluster;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Client;
using Herald.Protocol;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// Topics over several shards (cluster.md §13): real nodes on 2 or 3 <c>redis-server</c>s, each a shard. Topics are
/// chosen by the placement itself (<see cref="ClusterShards.ShardOf"/>) so that each test has topics on every shard.
/// Absence is proved by a marker on the same shard (one glob per shard, one reader: in order); counts are each node's own.
/// </summary>
public sealed class ClusterShardTests(ITestOutputHelper output)
{
    /// <summary>A topic <c>{stem}{n}</c> that lives on <paramref name="shard"/> of <paramref name="shards"/>, the <paramref name="nth"/> such one.</summary>
    internal static string TopicOn(int shard, int shards, string stem, int nth = 0)
    {
        for (int i = 0; ; i++)
        {
            string topic = stem + i.ToString(System.Globalization.CultureInfo.InvariantCulture);
            if (ClusterShards.ShardOf(Encoding.UTF8.GetBytes(topic), shards) == shard && nth-- == 0)
            {
                return topic;
            }
        }
    }

    [Fact]
    public async Task A_wildcard_subscriber_receives_matching_topics_from_every_shard_each_topic_in_order()
    {
        const int Shards = 3;
        const int Rounds = 20;
        await using TestCluster cluster = await TestCluster.StartShardedAsync(Shards, nodes: 2);
        string[] topics = [.. Enumerable.Range(0, Shards).SelectMany(shard => new[] { TopicOn(shard, Shards, "feed.a"), TopicOn(shard, Shards, "feed.b") })];
        string[] markers = [.. Enumerable.Range(0, Shards).Select(shard => TopicOn(shard, Shards, "feed.end"))];
        await using var wildcard = await ProtocolClient.OpenAsync(cluster[0].Port, "wildcard");
        await using var exact = await ProtocolClient.OpenAsync(cluster[0].Port, "exact");
        await wildcard.SubscribeAsync(1, "feed.>");
        await exact.SubscribeAsync(1, topics[5]); // a topic of shard 2, under the glob too
        await wildcard.PingPongAsync(); // live on every shard
        await exact.PingPongAsync();

        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        for (int round = 0; round < Rounds; round++)
        {
            foreach (string topic in topics)
            {
                await publisher.PublishAsync(topic, $"{topic}:{round}");
            }
        }

        foreach (string marker in markers)
        {
            await publisher.PublishAsync(marker, "end"); // after everything its shard carries from this publisher
        }

        var got = new Dictionary<string, List<int>>();
        for (int seen = 0; seen < Shards;)
        {
            Frame message = await wildcard.ReadMessageAsync();
            if (markers.Contains(message.Topic))
            {
                seen++;
                continue;
            }

            (got.TryGetValue(message.Topic, out List<int>? rounds) ? rounds : got[message.Topic] = []).Add(int.Parse(message.Text.Split(':')[1], System.Globalization.CultureInfo.InvariantCulture));
        }

        Assert.Equal(topics.Order(), got.Keys.Order()); // every shard's topics
        Assert.All(got.Values, rounds => Assert.Equal(Enumerable.Range(0, Rounds), rounds)); // each once, in order
        for (int round = 0; round < Rounds; round++)
        {
            Assert.Equal($"{topics[5]}:{round}", (await exact.ReadMessageAsync()).Text);
        }

        ClusterEngine sender = cluster[1].Engine();
        ClusterEngine receiver = cluster[0].Engine();
        for (int shard = 0; shard < Shards; shard++)
        {
            output.WriteLine($"shard {shard}: node 1 sent {sender.SentTo(shard)}, node 0 received {receiver.Metrics.ReceivedOn(shard)}, subscriptions {receiver.RedisSubscriptionsOn(shard)}");
            Assert.Equal((2 * Rounds) + 1, sender.SentTo(shard)); // each shard carries its own topics only
            Assert.Equal((2 * Rounds) + 1, receiver.Metrics.ReceivedOn(shard));
        }

        Assert.Equal(0, receiver.Metrics.Duplicates + receiver.Metrics.Invalid);

        // /varz cluster.shards: each shard's place, Redis, and what this node sent there.
        using System.Text.Json.JsonDocument varz = System.Text.Json.JsonDocument.Parse(await cluster[1].Monitoring.GetStringAsync("/varz"));
        System.Text.Json.JsonElement[] shards = [.. varz.RootElement.GetProperty("cluster").GetProperty("shards").EnumerateArray()];
        Assert.Equal([0, 1, 2], shards.Select(shard => shard.GetProperty("index").GetInt32()));
        Assert.Equal(cluster.Shards.Select(server => server.Configuration), shards.Select(shard => shard.GetProperty("endpoints")[0].GetString()));
        Assert.All(shards, shard => Assert.True(shard.GetProperty("connected").GetBoolean()));
        Assert.All(shards, shard => Assert.Equal((2 * Rounds) + 1, shard.GetProperty("sent").GetInt64()));
    }

    [Fact]
    public async Task Requests_across_shards_are_answered_and_one_nobody_serves_fails_at_once_on_every_shard()
    {
        const int Shards = 3;
        await using TestCluster cluster = await TestCluster.StartShardedAsync(Shards, nodes: 2);
        string[] served = [.. Enumerable.Range(0, Shards).Select(shard => TopicOn(shard, Shards, "svc.echo"))];
        string[] nobody = [.. Enumerable.Range(0, Shards).Select(shard => TopicOn(shard, Shards, "svc.nobody"))];
        await using HeraldClient responder = new($"tcp://127.0.0.1:{cluster[1].Port}");
        var serving = new List<HeraldSubscription>();
        foreach (string topic in served)
        {
            serving.Add(await responder.SubscribeAsync(topic, async m => await responder.PublishAsync(m.ReplyTo!, "echo: " + m.GetString())));
        }

        serving.Add(await responder.SubscribeAsync("wild.*", async m => await responder.PublishAsync(m.ReplyTo!, "wild: " + m.GetString())));
        await responder.FlushAsync(); // live on every shard, its covers written there
        await using HeraldClient requester = new($"tcp://127.0.0.1:{cluster[0].Port}");

        foreach (string topic in served)
        {
            Assert.Equal("echo: " + topic, (await requester.RequestAsync(topic, topic, TimeSpan.FromSeconds(30))).GetString());
        }

        foreach (string topic in Enumerable.Range(0, Shards).Select(shard => TopicOn(shard, Shards, "wild.")))
        {
            Assert.Equal("wild: " + topic, (await requester.RequestAsync(topic, topic, TimeSpan.FromSeconds(30))).GetString());
        }

        // Nobody on either node, on each shard: a no-responders status, not the 60 s timeout (a hang bound, not a time measured).
        foreach (string topic in nobody)
        {
            await Assert.ThrowsAsync<HeraldNoRespondersException>(() => requester.RequestAsync(topic, "x", TimeSpan.FromSeconds(60)));
        }

        foreach (HeraldSubscription subscription in serving)
        {
            await subscription.DisposeAsync();
        }
    }

    [Fact]
    public async Task A_queue_group_over_topics_on_every_shard_gets_each_publication_once_in_all()
    {
        const int Shards = 2;
        const string Token = "shard-queue-alice";
        await using TestCluster cluster = await TestCluster.StartShardedAsync(Shards, nodes: 2, o =>
        {
            o.Cluster.HeartbeatInterval = TimeSpan.FromSeconds(1);
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.FailureDelay = TimeSpan.Zero;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(Token), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
        });

        // A member on each node, each also a plain subscriber of the markers (one per shard, under the same glob).
        ProtocolClient[] members = [await MemberAsync(cluster[0]), await MemberAsync(cluster[1])];
        string key = ClusterQueueGroupTests.Key("grp", "w");
        await Until.True(() => ClusterQueueGroupTests.Elsewhere(cluster[0], "grp.x", key).Count == 1 && ClusterQueueGroupTests.Elsewhere(cluster[1], "grp.x", key).Count == 1, "each node knows the other's member");

        string[] topics = [.. Enumerable.Range(0, Shards).SelectMany(shard => Enumerable.Range(0, 3).Select(n => TopicOn(shard, Shards, "grp.t", n)))];
        string[] markers = [.. Enumerable.Range(0, Shards).Select(shard => TopicOn(shard, Shards, "grp.end"))];
        var sent = new List<string>();
        for (int node = 0; node < 2; node++)
        {
            await using ProtocolClient publisher = await ProtocolClient.OpenAsync(cluster[node].Port, $"publisher-{node}", auth: Token);
            for (int i = 0; i < 20; i++)
            {
                foreach (string topic in topics)
                {
                    string text = $"{node}:{topic}:{i}";
                    await publisher.PublishAsync(topic, text);
                    sent.Add(text);
                }
            }

            foreach (string marker in markers)
            {
                await publisher.PublishAsync(marker, "end");
            }

            Assert.Empty(await publisher.PingPongAsync());
        }

        List<string>[] got = await Task.WhenAll(members.Select(member => GroupDeliveriesAsync(member, markers.Length * 2)));
        output.WriteLine($"member on node 0: {got[0].Count}, on node 1: {got[1].Count}, of {sent.Count}");
        Assert.Equal(sent.Order(), got.SelectMany(g => g).Order()); // each publication exactly once, in all
        Assert.All(got, g => Assert.NotEmpty(g));
        foreach (ProtocolClient member in members)
        {
            await member.DisposeAsync();
        }

        async Task<ProtocolClient> MemberAsync(TestBroker node)
        {
            ProtocolClient client = await ProtocolClient.OpenAsync(node.Port, "grp-member", capabilities: Capabilities.QueueGroups, auth: Token);
            await client.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "grp.*"u8.ToArray(), queue: "w"u8.ToArray()));
            await client.SubscribeAsync(2, "grp.*");
            Assert.Empty(await client.PingPongAsync()); // live on every shard, its group written and announced
            return client;
        }

        // What the group (sid 1) gave this member until every marker reached its plain subscription (sid 2): a marker
        // follows, on its shard's one glob, everything its publisher sent there before it.
        async Task<List<string>> GroupDeliveriesAsync(ProtocolClient member, int expectedMarkers)
        {
            var delivered = new List<string>();
            for (int seen = 0; seen < expectedMarkers;)
            {
                Frame message = await member.ReadMessageAsync();
                if (markers.Contains(message.Topic))
                {
                    seen += message.Sid == 2 ? 1 : 0;
                }
                else if (message.Sid == 1)
                {
                    delivered.Add(message.Text);
                }
            }

            return delivered;
        }
    }

    [Fact]
    public async Task With_a_secret_signed_envelopes_cross_every_shard_and_a_genuine_one_copied_onto_another_shard_is_refused()
    {
        const int Shards = 2;
        await using TestCluster cluster = await TestCluster.StartShardedAsync(Shards, nodes: 2, o => o.Cluster.Secret = "our-cluster-secret-0123456789");
        string first = TopicOn(0, Shards, "sig.");
        string second = TopicOn(1, Shards, "sig.");
        await using var subscriber = await ProtocolClient.OpenAsync(cluster[0].Port, "subscriber");
        await subscriber.SubscribeAsync(1, "sig.>"); // the glob on both shards
        await subscriber.PingPongAsync();

        // A listener of our own on shard 0 keeps the genuine envelope node 1 sends there.
        await using ConnectionMultiplexer shard0 = await ConnectionMultiplexer.ConnectAsync(cluster.Shards[0].Configuration);
        await using ConnectionMultiplexer shard1 = await ConnectionMultiplexer.ConnectAsync(cluster.Shards[1].Configuration);
        ChannelMessageQueue captured = await shard0.GetSubscriber().SubscribeAsync(RedisChannel.Literal("{herald}:" + first));

        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await publisher.PublishAsync(first, "on shard 0");
        await publisher.PublishAsync(second, "on shard 1");
        Frame[] both = [await subscriber.ReadMessageAsync(), await subscriber.ReadMessageAsync()];
        Assert.Equal(["on shard 0", "on shard 1"], both.Select(m => m.Text).Order());
        byte[] genuine = (byte[])(await captured.ReadAsync()).Message!;

        // The same bytes onto shard 1, where the node's glob brings them: signed by a node, but not of a shard-1 topic.
        await shard1.GetSubscriber().PublishAsync(RedisChannel.Literal("{herald}:" + first), genuine);
        await publisher.PublishAsync(second, "marker"); // after the copy, on shard 1's one glob
        Assert.Equal("marker", (await subscriber.ReadMessageAsync()).Text);
        Assert.Equal(1, cluster[0].Engine().Metrics.Invalid);
        Assert.Equal(0, cluster[0].Engine().Metrics.Replayed);
    }

    [Fact]
    public async Task A_shard_killed_mid_stream_costs_a_bystander_topic_on_another_shard_nothing_and_its_own_topics_resume_after_its_restart()
    {
        const int Shards = 2;
        await using TestCluster cluster = await TestCluster.StartShardedAsync(Shards, nodes: 2, o => o.Cluster.ConnectTimeout = TimeSpan.FromSeconds(1));
        string victim = TopicOn(0, Shards, "victim.");
        string bystander = TopicOn(1, Shards, "bystander.");
        await using var subscriber = await ProtocolClient.OpenAsync(cluster[0].Port, "subscriber");
        await subscriber.SubscribeAsync(1, victim);
        await subscriber.SubscribeAsync(2, bystander);
        await subscriber.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        ClusterEngine sender = cluster[1].Engine();

        // Before: both topics flow.
        var received = new List<Frame>();
        for (int i = 0; i < 50; i++)
        {
            await publisher.PublishAsync(bystander, $"b{i}");
            if (i % 10 == 0)
            {
                await publisher.PublishAsync(victim, $"v{i}");
            }
        }

        for (int i = 0; i < 55; i++)
        {
            received.Add(await subscriber.ReadMessageAsync());
        }

        // Shard 0 killed: both nodes see it gone; shard 1 still there.
        cluster.Shards[0].Kill();
        await Until.True(() => !sender.ConnectedTo(0) && !cluster[0].Engine().ConnectedTo(0), "both nodes see shard 0 gone");
        Assert.True(sender.ConnectedTo(1) && cluster[0].Engine().ConnectedTo(1));
        long droppedBefore = sender.DroppedFor(0);
        for (int i = 50; i < 100; i++)
        {
            await publisher.PublishAsync(bystander, $"b{i}");
            if (i % 10 == 0)
            {
                await publisher.PublishAsync(victim, $"lost{i}"); // stays on node 1: its shard is down
            }
        }

        Assert.Empty(await publisher.PingPongAsync()); // taken by node 1
        for (int i = 0; i < 50; i++)
        {
            received.Add(await subscriber.ReadMessageAsync());
        }

        Assert.Equal(Enumerable.Range(0, 100).Select(i => $"b{i}"), received.Where(m => m.Topic == bystander).Select(m => m.Text)); // nothing lost, in order
        Assert.Equal(Enumerable.Range(0, 5).Select(i => $"v{i * 10}"), received.Where(m => m.Topic == victim).Select(m => m.Text));
        await Until.True(() => sender.DroppedFor(0) - droppedBefore == 5, "what node 1 could not send to shard 0 is counted for shard 0");
        Assert.Equal(0, sender.DroppedFor(1));

        // Back: its topics come back (subscriptions made again there), the bystander never stopped.
        await cluster.Shards[0].RestartAsync();
        await using ConnectionMultiplexer shard0 = await ConnectionMultiplexer.ConnectAsync(cluster.Shards[0].Configuration);
        await Until.True(
            async () => sender.ConnectedTo(0) && cluster[0].Engine().ConnectedTo(0) && await SubscribedAsync(shard0, "{herald}:" + victim),
            "node 0 subscribes to the victim topic on shard 0 again, and node 1 reaches it");
        await publisher.PublishAsync(victim, "back");
        await publisher.PublishAsync(bystander, "after");
        Frame[] after = [await subscriber.ReadAsync(), await subscriber.ReadAsync(), await subscriber.ReadAsync()];
        Assert.Equal(["after", "back"], after.Where(f => f.Type == FrameType.Message).Select(m => m.Text).Order());
        Assert.Equal([1U], after.Single(f => f.Type == FrameType.Error).Error!.Value.Sids!); // told the victim topic may have lost messages (ClusterShardLossTests)
        output.WriteLine($"node 1: sent to shard 0 {sender.SentTo(0)}, dropped for shard 0 {sender.DroppedFor(0)}, sent to shard 1 {sender.SentTo(1)}");
    }

    [Fact]
    public async Task A_shard_that_stalls_longer_than_the_members_expiry_delays_no_heartbeat_on_another_shard()
    {
        const int Interval = 200;

        // Shard 1's commands wait a minute before they time out: a beat that waited for every shard would renew
        // nothing on shard 0 meanwhile, and each node would fall out of the other's member list there (3 intervals).
        await using TestCluster cluster = await TestCluster.StartShardedAsync(shards: 2, nodes: 2, o =>
        {
            o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(Interval);
            o.Cluster.Shards[1].Redis += ",asyncTimeout=60000,syncTimeout=60000";
        });
        await Until.True(() => cluster[0].Engine().Nodes.Known.Count == 2 && cluster[1].Engine().Nodes.Known.Count == 2, "each node sees the other");
        IDatabase first = cluster.Database(0);
        string node0 = cluster[0].Engine().NodeId.ToString("x16", System.Globalization.CultureInfo.InvariantCulture);

        cluster.Shards[1].Pause(); // connected, answering nothing
        try
        {
            double paused = (await first.SortedSetScoreAsync("{herald}:nodes", node0))!.Value;
            await Until.True(async () => await first.SortedSetScoreAsync("{herald}:nodes", node0) > paused + (10 * Interval), "node 0 renews itself on shard 0 ten intervals on");
            output.WriteLine($"node 0's heartbeat on shard 0 moved from {paused} past {paused + (10 * Interval)} while shard 1 stalled");
            Assert.Equal(2, cluster[0].Engine().Nodes.Known.Count);
            Assert.Equal(2, cluster[1].Engine().Nodes.Known.Count);
        }
        finally
        {
            cluster.Shards[1].Resume();
        }
    }

    [Fact]
    public async Task The_three_masters_of_a_Redis_Cluster_serve_as_three_shards_by_their_prefixes_hash_tags()
    {
        const int Shards = 3;
        await using TestCluster cluster = await TestCluster.StartOnRedisClusterShardsAsync(nodes: 2);
        await using StackExchange.Redis.ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.RedisCluster.Configuration);
        string[] masters = [.. cluster.ShardPrefixes.Select(prefix => redis.GetDatabase().IdentifyEndpoint(prefix, CommandFlags.DemandMaster)!.ToString()!)];
        output.WriteLine($"prefixes {string.Join(" ", cluster.ShardPrefixes)} on masters {string.Join(" ", masters)}");
        Assert.Equal(Shards, masters.Distinct().Count()); // each shard's keys and publications on its own master

        string[] topics = [.. Enumerable.Range(0, Shards).Select(shard => TopicOn(shard, Shards, "rc."))];
        await using var wildcard = await ProtocolClient.OpenAsync(cluster[0].Port, "wildcard");
        await wildcard.SubscribeAsync(1, "rc.>");
        await wildcard.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        for (int round = 0; round < 10; round++)
        {
            foreach (string topic in topics)
            {
                await publisher.PublishAsync(topic, $"{topic}:{round}");
            }
        }

        var got = new Dictionary<string, List<string>>();
        for (int i = 0; i < 10 * Shards; i++)
        {
            Frame message = await wildcard.ReadMessageAsync();
            (got.TryGetValue(message.Topic, out List<string>? texts) ? texts : got[message.Topic] = []).Add(message.Text);
        }

        Assert.All(topics, topic => Assert.Equal(Enumerable.Range(0, 10).Select(round => $"{topic}:{round}"), got[topic])); // each in order
        for (int shard = 0; shard < Shards; shard++)
        {
            Assert.Equal(10, cluster[1].Engine().SentTo(shard));
        }

        // Fail-fast requests read each topic's shard's covers, on its master.
        await using HeraldClient responder = new($"tcp://127.0.0.1:{cluster[0].Port}");
        await using HeraldSubscription serving = await responder.SubscribeAsync(topics[2], async m => await responder.PublishAsync(m.ReplyTo!, "42"));
        await responder.FlushAsync();
        await using HeraldClient requester = new($"tcp://127.0.0.1:{cluster[1].Port}");
        Assert.Equal("42", (await requester.RequestAsync(topics[2], "?", TimeSpan.FromSeconds(30))).GetString());
        await Assert.ThrowsAsync<HeraldNoRespondersException>(() => requester.RequestAsync(TopicOn(2, Shards, "nobody."), "x", TimeSpan.FromSeconds(60)));
    }

    private static async Task<bool> SubscribedAsync(ConnectionMultiplexer redis, string channel)
    {
        RedisResult numsub = await redis.GetDatabase().ExecuteAsync("PUBSUB", "NUMSUB", channel);
        return (long)((RedisResult[])numsub!)[1] > 0;
    }
}
