using System.Net.Http.Json;
using System.Text.Json;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Client;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Issue 14, one topic space: three real Herald nodes on one real <c>redis-server</c>, clients over TCP and
/// long-poll on different nodes. Absence is proved by a marker published after what must not arrive, on
/// the same path (the same publisher, the same node), and read by the same subscriber; counters are each
/// node's own engine's.
/// </summary>
public sealed class ClusterTests
{
    [Fact]
    public async Task A_publication_on_one_node_reaches_matching_subscribers_on_every_node_once_over_TCP_and_long_poll()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3);
        await using var local = await ProtocolClient.OpenAsync(cluster[0].Port, "local");           // the publisher's node, exact
        await using var euOnly = await ProtocolClient.OpenAsync(cluster[1].Port, "eu-only");       // another node, '*'
        LongPollClient all = await LongPollClient.CreateAsync(cluster[2].Http);                     // a third node, '>', long-poll
        await local.SubscribeAsync(1, "orders.1.eu");
        await local.SubscribeAsync(2, "orders.end.eu");
        await euOnly.SubscribeAsync(1, "orders.*.eu");
        await all.SubscribeAsync(1, "orders.>"); // answered once the node's Redis subscription is made
        await local.PingPongAsync(); // the PONG comes once Redis has the subscriptions: live on every node
        await euOnly.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");

        await publisher.PublishAsync("orders.1.eu", "one");
        await publisher.PublishAsync("orders.2.us", "two");
        await publisher.PublishAsync("orders.3.eu.late", "three");
        await publisher.PublishAsync("orders.end.eu", "end"); // the marker: on the path of what it bounds (cluster.md §4: order is per topic pattern's subscription)

        Assert.Equal(["orders.1.eu:one", "orders.end.eu:end"], await UntilMarkerAsync(local));      // from its own node, not again from Redis
        Assert.Equal(["orders.1.eu:one", "orders.end.eu:end"], await UntilMarkerAsync(euOnly));     // '*' is one token: not orders.3.eu.late
        List<string> polled = [];
        for (long ack = 0; !polled.Contains("orders.end.eu:end");)
        {
            PollResult poll = await all.PollAsync(ack);
            polled.AddRange(poll.Messages.Select(m => $"{m.Topic}:{m.Text}"));
            ack = poll.Count > 0 ? poll.LastSequence : ack;
        }

        Assert.Equal(["orders.1.eu:one", "orders.2.us:two", "orders.3.eu.late:three", "orders.end.eu:end"], polled);
        Assert.Equal(0, cluster[0].Engine().Metrics!.Received); // its own publications are never routed twice
        Assert.Equal(4, cluster[2].Engine().Metrics!.Received);
        using JsonDocument varz = JsonDocument.Parse(await cluster[2].Monitoring.GetStringAsync("/varz"));
        JsonElement shown = varz.RootElement.GetProperty("cluster");
        Assert.Equal(4, shown.GetProperty("received").GetInt64());
        Assert.Equal(0, shown.GetProperty("inbound_queued").GetInt64()); // all routed: no lag left
        Assert.Equal(1, shown.GetProperty("redis_subscriptions").GetInt32());
        Assert.Equal(["{herald}:orders.*"], cluster[2].Engine().Covering);
    }

    [Fact]
    public async Task On_a_Redis_Cluster_of_three_masters_publications_cross_nodes_with_wildcards_and_requests_are_answered()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, redisCluster: true);
        await using var exact = await ProtocolClient.OpenAsync(cluster[1].Port, "exact");
        await using var wildcard = await ProtocolClient.OpenAsync(cluster[1].Port, "wildcard");
        await exact.SubscribeAsync(1, "metrics.cpu");
        await exact.PingPongAsync();
        await wildcard.SubscribeAsync(1, "metrics.>");
        await wildcard.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");

        // Topics that hash to different slots, so different masters: classic pub/sub reaches every shard.
        string[] topics = ["metrics.cpu", "metrics.disk", "metrics.net.eth0", "metrics.mem"];
        foreach (string topic in topics)
        {
            await publisher.PublishAsync(topic, topic);
        }

        Assert.Equal("metrics.cpu", (await exact.ReadMessageAsync()).Text);
        var seen = new List<string>();
        while (seen.Count < topics.Length)
        {
            seen.Add((await wildcard.ReadMessageAsync()).Text);
        }

        Assert.Equal(topics, seen); // one publisher: in order, each once
        await using HeraldClient responder = new($"tcp://127.0.0.1:{cluster[1].Port}");
        await using HeraldSubscription serving = await responder.SubscribeAsync("svc.sum", async m => await responder.PublishAsync(m.ReplyTo!, "42"));
        await responder.FlushAsync();
        await using HeraldClient requester = new($"http://127.0.0.1:{cluster[0].HttpPort}");
        Assert.Equal("42", (await requester.RequestAsync("svc.sum", "40+2", TimeSpan.FromSeconds(30))).GetString());
        await Assert.ThrowsAsync<HeraldNoRespondersException>(() => requester.RequestAsync("svc.none", "x", TimeSpan.FromSeconds(60)));
    }

    [Fact]
    public async Task A_node_receives_only_what_its_clients_are_interested_in()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2);
        await using ProtocolClient subscriber = await SubscribedAsync(cluster[1], "subscriber", "wanted.>");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");

        for (int i = 0; i < 20; i++)
        {
            await publisher.PublishAsync($"unwanted.{i}", "x");
        }

        await publisher.PublishAsync("wanted.marker", "end");
        Frame marker = await subscriber.ReadMessageAsync();

        Assert.Equal("wanted.marker", marker.Topic);
        Assert.Equal(1, cluster[1].Engine().Metrics!.Received); // the 20 others never left Redis for this node
        Assert.Equal(21, cluster[0].Engine().Metrics!.Sent);
        Assert.Equal(["{herald}:wanted.*"], cluster[1].Engine().Covering);
    }

    [Fact]
    public async Task Request_reply_crosses_nodes_and_a_request_nobody_serves_on_any_node_fails_at_once()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2);
        await using HeraldClient responder = new($"tcp://127.0.0.1:{cluster[1].Port}");
        await using HeraldSubscription serving = await responder.SubscribeAsync("svc.echo", async m =>
            await responder.PublishAsync(m.ReplyTo!, "echo: " + m.GetString()));
        await responder.FlushAsync(); // PING/PONG: the subscription is in Redis
        await using HeraldClient requester = new($"tcp://127.0.0.1:{cluster[0].Port}");
        await using HeraldClient pollRequester = new($"http://127.0.0.1:{cluster[0].HttpPort}");

        Assert.Equal("echo: hi", (await requester.RequestAsync("svc.echo", "hi", TimeSpan.FromSeconds(30))).GetString());
        Assert.Equal("echo: poll", (await pollRequester.RequestAsync("svc.echo", "poll", TimeSpan.FromSeconds(30))).GetString());

        // Nobody on either node: a no-responders status, not the 60 s timeout (a hang bound, not a time measured).
        await Assert.ThrowsAsync<HeraldNoRespondersException>(() => requester.RequestAsync("svc.nobody", "x", TimeSpan.FromSeconds(60)));
        await Assert.ThrowsAsync<HeraldNoRespondersException>(() => pollRequester.RequestAsync("svc.nobody", "x", TimeSpan.FromSeconds(60)));
    }

    [Fact]
    public async Task A_subscriber_gets_every_message_once_and_in_order_while_its_node_widens_and_narrows_its_Redis_subscriptions()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2);
        await using ProtocolClient steady = await SubscribedAsync(cluster[1], "steady", "stream.a");
        await using var churn = await ProtocolClient.OpenAsync(cluster[1].Port, "churn");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        const int Count = 10_000;

        Task publishing = Task.Run(async () =>
        {
            for (int i = 0; i < Count; i++)
            {
                await publisher.PublishAsync("stream.a", i.ToString(System.Globalization.CultureInfo.InvariantCulture));
                if (i % 20 == 19)
                {
                    await publisher.PingPongAsync(); // paced: the stream spans many subscription changes
                }
            }

            await publisher.PingPongAsync();
        });

        // Meanwhile: 'stream.>' makes the node trade its exact channel for a glob, and back again when it goes.
        for (uint sid = 1; !publishing.IsCompleted; sid++)
        {
            await churn.SubscribeAsync(sid, "stream.>");
            await churn.PingPongAsync();
            await churn.UnsubscribeAsync(sid);
            await churn.PingPongAsync();
        }

        await publishing;
        var received = new List<int>(Count);
        while (received.Count < Count)
        {
            Frame message = await steady.ReadMessageAsync();
            received.Add(int.Parse(message.Text, System.Globalization.CultureInfo.InvariantCulture));
        }

        Assert.Equal(Enumerable.Range(0, Count), received); // none lost, none twice, in order
        await publisher.PublishAsync("stream.a", "marker");
        Assert.Equal("marker", (await steady.ReadMessageAsync()).Text); // and nothing after the last one but the marker
    }

    [Fact]
    public async Task A_node_that_loses_Redis_serves_its_own_clients_says_so_and_joins_again_when_Redis_is_back()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2);
        await using ProtocolClient remote = await SubscribedAsync(cluster[1], "remote", "news");
        await using ProtocolClient local = await SubscribedAsync(cluster[0], "local", "news");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        await publisher.PublishAsync("news", "before");
        Assert.Equal("before", (await remote.ReadMessageAsync()).Text);
        Assert.Equal("before", (await local.ReadMessageAsync()).Text);

        cluster.Redis.Kill();
        await Until.True(() => !cluster[0].Engine().IsConnected, "node 0 sees Redis gone");
        await publisher.PublishAsync("news", "during");
        Assert.Equal("during", (await local.ReadMessageAsync()).Text); // local traffic goes on
        await Until.True(() => cluster[0].Engine().Metrics!.Dropped == 1, "what it could not forward is counted"); // by the sender, after the routing
        using (JsonDocument varz = JsonDocument.Parse(await cluster[0].Monitoring.GetStringAsync("/varz")))
        {
            Assert.False(varz.RootElement.GetProperty("cluster").GetProperty("connected").GetBoolean());
        }

        using (JsonDocument ready = JsonDocument.Parse(await cluster[0].Monitoring.GetStringAsync("/readyz")))
        {
            Assert.Equal("redis unreachable", ready.RootElement.GetProperty("cluster").GetString()); // and still 200: it serves its clients
        }

        await cluster.Redis.RestartAsync();
        await Until.True(() => cluster[0].Engine().IsConnected && cluster[1].Engine().IsConnected, "both nodes back on Redis");

        // Resubscribed: publications cross again (the first ones may go before node 1's subscription is back). Each
        // subscriber is told once, between them, that it may have lost messages (cluster.md §13: what crossed meanwhile).
        int[] notices = new int[2];
        for (int i = 0; ; i++)
        {
            await publisher.PublishAsync("news", $"after {i}");
            Assert.Equal($"after {i}", (await ReadAsync(local, 0, null))!.Text);
            Frame? crossed = await ReadAsync(remote, 1, TimeSpan.FromMilliseconds(500));
            if (crossed is not null)
            {
                Assert.StartsWith("after ", crossed.Text, StringComparison.Ordinal);
                break;
            }

            Assert.True(i < 120, "node 1 never received again after Redis came back");
        }

        await Until.True(() => cluster[0].Engine().Metrics.LossNoticesOn(0) == 1 && cluster[1].Engine().Metrics.LossNoticesOn(0) == 1, "each node told its subscriber");
        notices[0] += (await local.BarrierAsync()).Count(f => f.Error?.Sids is [1]);
        notices[1] += (await remote.BarrierAsync()).Count(f => f.Error?.Sids is [1]);
        Assert.Equal([1, 1], notices);

        // The next frame but loss notices (counted); null when nothing came within the timeout.
        async Task<Frame?> ReadAsync(ProtocolClient client, int which, TimeSpan? timeout)
        {
            while (true)
            {
                Frame? frame = await client.TryReadAsync(timeout).ContinueWith(t => t.IsCompletedSuccessfully ? t.Result : null);
                if (frame?.Error?.Sids is [1])
                {
                    notices[which]++;
                    continue;
                }

                return frame;
            }
        }
    }

    [Fact]
    public async Task Isolation_holds_across_nodes_a_responder_answers_only_what_it_was_delivered_and_nobody_reads_another_identitys_inbox()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.FailureDelay = TimeSpan.Zero;
            o.Security.Auth.Tokens.Add(Token("alice", AliceToken, publish: ["svc.>"], subscribe: []));
            o.Security.Auth.Tokens.Add(Token("bob", BobToken, publish: [], subscribe: ["svc.>"]));
            o.Security.Auth.Tokens.Add(Token("eve", EveToken, publish: ["svc.>"], subscribe: ["svc.>"])); // no grant of others' inboxes (spec §10)
        });
        await using var alice = await ProtocolClient.OpenAsync(cluster[0].Port, "alice", auth: AliceToken);
        string inbox = Identity.InboxPrefixOf("alice") + ".req";
        await alice.SubscribeAsync(1, inbox + ".>");
        await alice.PingPongAsync();
        await using var bob = await ProtocolClient.OpenAsync(cluster[1].Port, "bob", auth: BobToken);
        await bob.SubscribeAsync(1, "svc.>");
        await bob.PingPongAsync();
        await using var eve = await ProtocolClient.OpenAsync(cluster[1].Port, "eve", auth: EveToken);

        // Eve, on the responder's node, may not subscribe to Alice's inboxes.
        await eve.SubscribeAsync(1, inbox + ".>");
        Frame refused = await eve.ReadAsync();
        Assert.Equal(ErrorCode.PermissionDenied, refused.Error?.Code);

        // Alice asks on node 0; Bob, on node 1, is delivered the request, may answer it once, and it crosses back.
        await alice.PublishAsync("svc.time", "what time?", replyTo: inbox + ".1");
        Frame request = await bob.ReadMessageAsync();
        Assert.Equal(inbox + ".1", request.ReplyTo);
        await bob.PublishAsync(inbox + ".1", "noon");
        Frame answer = await alice.ReadMessageAsync();
        Assert.Equal((inbox + ".1", "noon"), (answer.Topic, answer.Text));

        // A second answer, or one to an inbox he was not asked to answer: refused on his node, nothing crosses.
        await bob.PublishAsync(inbox + ".1", "again");
        Assert.Equal(ErrorCode.PermissionDenied, (await bob.ReadAsync()).Error?.Code);
        await bob.PublishAsync(inbox + ".2", "unasked");
        Assert.Equal(ErrorCode.PermissionDenied, (await bob.ReadAsync()).Error?.Code);

        // Eve's own publication into Alice's inbox is refused too; then a marker proves nothing else reached Alice.
        await eve.PublishAsync(inbox + ".3", "forged");
        Assert.Equal(ErrorCode.PermissionDenied, (await eve.ReadAsync()).Error?.Code);
        await alice.PublishAsync("svc.time", "marker", replyTo: inbox + ".4");
        Assert.Equal("marker", (await bob.ReadMessageAsync()).Text);
        await bob.PublishAsync(inbox + ".4", "end");
        Frame next = await alice.ReadMessageAsync();
        Assert.Equal((inbox + ".4", "end"), (next.Topic, next.Text));
    }

    [Fact]
    public async Task Varz_lists_the_nodes_of_the_cluster_and_a_node_that_stops_leaves_the_list()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3, o => o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(100));
        string[] ids = [.. cluster.Nodes.Select(n => n.Engine().NodeId.ToString("x16", System.Globalization.CultureInfo.InvariantCulture))];
        await Until.True(async () => (await NodesAsync(cluster[0])).Order().SequenceEqual(ids.Order()), "node 0 lists all three");

        await cluster[2].StopAsync();
        await Until.True(async () => (await NodesAsync(cluster[0])).Order().SequenceEqual(ids[..2].Order()), "node 2 has left node 0's list");
    }

    [Fact]
    public async Task A_node_killed_with_SIGKILL_changes_nothing_for_the_clients_of_the_others_and_leaves_the_cluster()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(200));
        (BrokerProcess process, int doomedPort) = await cluster.StartProcessNodeAsync("--Herald:Cluster:HeartbeatInterval=00:00:00.200");
        await using BrokerProcess doomed = process;
        await using var doomedClient = await ProtocolClient.OpenAsync(doomedPort, "on-the-doomed-node");
        await doomedClient.SubscribeAsync(1, "svc.doomed"); // a subscriber that never answers, and only it: its node's cover in Redis
        await doomedClient.PingPongAsync();
        await Until.True(async () => (await NodesAsync(cluster[0])).Length == 3, "node 0 lists the doomed node");

        await using ProtocolClient subscriber = await SubscribedAsync(cluster[0], "subscriber", "feed");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await using HeraldClient requester = new($"tcp://127.0.0.1:{cluster[0].Port}");
        const int Count = 2000;

        // Mid-stream between the two other nodes, the third dies.
        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync("feed", i.ToString(System.Globalization.CultureInfo.InvariantCulture));
            if (i == Count / 2)
            {
                doomed.Kill();
            }
        }

        for (int i = 0; i < Count; i++)
        {
            Assert.Equal(i.ToString(System.Globalization.CultureInfo.InvariantCulture), (await subscriber.ReadMessageAsync()).Text);
        }

        await Until.True(async () => (await NodesAsync(cluster[0])).Length == 2, "node 0 drops the killed node after three silent heartbeats");
        await Until.True(() => Task.FromResult(cluster[1].Engine().Nodes.Known.Count == 2), "node 1 drops it too");

        // Its subscriptions went with it: a request to what only it served now fails fast again.
        await Assert.ThrowsAsync<HeraldNoRespondersException>(() => requester.RequestAsync("svc.doomed", "anyone now?", TimeSpan.FromSeconds(60)));
    }

    [Fact]
    public async Task What_else_appears_on_the_clusters_channels_is_counted_and_skipped_and_strangers_origins_are_not_remembered_without_bound()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1, o => o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(100));
        await using ProtocolClient subscriber = await SubscribedAsync(cluster[0], "subscriber", "feed");
        await using StackExchange.Redis.ConnectionMultiplexer redis = await StackExchange.Redis.ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        StackExchange.Redis.ISubscriber intruder = redis.GetSubscriber();
        var channel = StackExchange.Redis.RedisChannel.Literal("{herald}:feed");

        // Not envelopes: skipped and counted; the subscriber sees none of it.
        await intruder.PublishAsync(channel, "plain text");
        await intruder.PublishAsync(channel, new byte[] { 0x48, 0x01, 0, 0 });
        await intruder.PublishAsync(channel, Envelope(origin: 7, sequence: 1, body: [0x93, 0x03, 0x01, 0xa1, (byte)'x'])); // a SUBSCRIBE body

        // Well-formed envelopes from 200 origins that are no members (Redis is trusted: they are delivered).
        for (ulong origin = 1; origin <= 200; origin++)
        {
            await intruder.PublishAsync(channel, Envelope(origin, 1, [0x95, 0x05, 0xa4, .. "feed"u8, 0xc0, 0x00, 0xc4, 0x01, (byte)origin]));
        }

        for (int i = 1; i <= 200; i++)
        {
            Assert.Equal([(byte)i], (await subscriber.ReadMessageAsync()).Payload!);
        }

        Assert.Equal(3, cluster[0].Engine().Metrics!.Invalid);
        Assert.InRange(cluster[0].Engine().OriginsRemembered, 1, 65); // forgotten past 64: none is a member
    }

    [Fact]
    public async Task With_a_cluster_secret_nodes_exchange_signed_publications_and_whoever_else_publishes_on_Redis_reaches_nobody()
    {
        const string Secret = "our-cluster-secret-0123456789";
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Cluster.Secret = Secret);
        await using ProtocolClient subscriber = await SubscribedAsync(cluster[1], "subscriber", "feed");
        await using StackExchange.Redis.ConnectionMultiplexer redis = await StackExchange.Redis.ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        StackExchange.Redis.ISubscriber intruder = redis.GetSubscriber();
        var channel = StackExchange.Redis.RedisChannel.Literal("{herald}:feed");
        byte[] body = [0x95, 0x05, 0xa4, .. "feed"u8, 0xc0, 0x00, 0xc4, 0x06, .. "forged"u8];

        // Unsigned, and signed with another secret: neither is routed.
        await intruder.PublishAsync(channel, Envelope(origin: 7, sequence: 1, body));
        byte[] wrong = Signed(origin: 7, sequence: 2, body, "not-our-secret-0123456789");
        await intruder.PublishAsync(channel, wrong);

        // A node's own publication crosses as before: the marker that nothing forged came first.
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        await publisher.PublishAsync("feed", "genuine");
        Assert.Equal("genuine", (await subscriber.ReadMessageAsync()).Text);
        Assert.Equal(2, cluster[1].Engine().Metrics!.Invalid);
    }

    private static byte[] Signed(ulong origin, ulong sequence, byte[] body, string secret)
    {
        byte[] bytes = new byte[34 + body.Length];
        bytes[0] = 0x48;
        bytes[1] = 0x02;
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(bytes.AsSpan(2), origin);
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(bytes.AsSpan(10), sequence);
        body.CopyTo(bytes, 34);
        byte[] mac = System.Security.Cryptography.HMACSHA256.HashData(System.Text.Encoding.UTF8.GetBytes(secret), bytes);
        mac.AsSpan(0, 16).CopyTo(bytes.AsSpan(18));
        return bytes;
    }

    private static byte[] Envelope(ulong origin, ulong sequence, byte[] body)
    {
        byte[] bytes = new byte[18 + body.Length];
        bytes[0] = 0x48;
        bytes[1] = 0x01;
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(bytes.AsSpan(2), origin);
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(bytes.AsSpan(10), sequence);
        body.CopyTo(bytes, 18);
        return bytes;
    }

    [Fact]
    public async Task A_stalled_Redis_never_holds_a_publisher_and_what_waits_for_it_stays_within_MaxForwardQueueBytes()
    {
        const long Limit = 256 * 1024;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Cluster.MaxForwardQueueBytes = Limit);
        await using ProtocolClient remote = await SubscribedAsync(cluster[1], "remote", "bulk");
        await using ProtocolClient local = await SubscribedAsync(cluster[0], "local", "bulk");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        byte[] payload = new byte[4096];

        cluster.Redis.Pause(); // connected, silent: nothing it is sent is taken
        try
        {
            const int Count = 2000; // 8 MB: far past the limit, and past what the sockets hold
            Task reading = Task.Run(async () =>
            {
                for (int i = 0; i < Count; i++)
                {
                    await local.ReadMessageAsync(); // the publisher's own node delivers all of it meanwhile
                }
            });
            for (int i = 0; i < Count; i++)
            {
                await publisher.PublishAsync("bulk", payload);
                Assert.True(cluster[0].Engine().ForwardQueueBytes <= Limit, $"{cluster[0].Engine().ForwardQueueBytes} bytes queued for Redis");
            }

            await publisher.PingPongAsync(); // all taken: the publisher was never held up
            await reading;
            Assert.True(cluster[0].Engine().Metrics!.Dropped > 0, "past the limit, publications stayed local and were counted");
        }
        finally
        {
            cluster.Redis.Resume();
        }
    }

    [Fact]
    public async Task With_ReceiveAll_a_publishers_order_holds_across_topics_at_another_nodes_subscriber()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Cluster.ReceiveAll = true);
        await using ProtocolClient subscriber = await SubscribedAsync(cluster[1], "subscriber", "orders.*", "audit");
        Assert.Equal(["{herald}:[^.]*"], cluster[1].Engine().Covering); // one subscription for everything
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        const int Count = 2000;

        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync(i % 2 == 0 ? "orders.new" : "audit", i.ToString(System.Globalization.CultureInfo.InvariantCulture));
        }

        for (int i = 0; i < Count; i++)
        {
            Frame message = await subscriber.ReadMessageAsync();
            Assert.Equal((i % 2 == 0 ? "orders.new" : "audit", i.ToString(System.Globalization.CultureInfo.InvariantCulture)), (message.Topic, message.Text));
        }
    }

    private const string AliceToken = "alice-token-0123456789";
    private const string BobToken = "bob-token-0123456789";
    private const string EveToken = "eve-token-0123456789";

    private static TokenOptions Token(string name, string token, string[] publish, string[] subscribe)
    {
        var options = new TokenOptions { Name = name, Sha256 = TestTokens.Sha256(token) };
        options.Permissions.Publish.AddRange(publish);
        options.Permissions.Subscribe.AddRange(subscribe);
        return options;
    }

    private static async Task<string[]> NodesAsync(TestBroker node)
    {
        using JsonDocument varz = JsonDocument.Parse(await node.Monitoring.GetStringAsync("/varz"));
        return [.. varz.RootElement.GetProperty("cluster").GetProperty("nodes").EnumerateArray().Select(n => n.GetProperty("id").GetString()!)];
    }

    /// <summary>A client of <paramref name="node"/> subscribed to <paramref name="patterns"/> (sids 1, 2...), live on every node: its PONG came.</summary>
    [Fact]
    public async Task A_client_resumes_on_another_node_from_the_clusters_history_in_redis()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3, configure: History("feed.>"));
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        StreamPosition held;
        await using (var first = await ProtocolClient.OpenAsync(cluster[1].Port, "first", capabilities: Capabilities.Headers))
        {
            await first.SubscribeAsync(1, "feed.a", new StreamPosition(0, ""));
            Frame live = await first.ReadMessageAsync();
            Assert.Equal(("200", "Live", 0ul), (live.Status, live.Header(StreamPosition.DescriptionHeader)[0], live.Position!.Value.Offset));
            await publisher.PublishAsync("feed.a", "m1");
            Frame m1 = await first.ReadMessageAsync();
            Assert.Equal(("m1", new StreamPosition(1, live.Position.Value.Epoch)), (m1.Text, m1.Position!.Value));
            held = m1.Position.Value;
        }

        for (int i = 2; i <= 4; i++)
        {
            await publisher.PublishAsync("feed.a", $"m{i}");
        }

        await publisher.PingPongAsync(); // handed to Redis, in order, before the resume reads it
        await using var back = await ProtocolClient.OpenAsync(cluster[2].Port, "back", capabilities: Capabilities.Headers); // a node that never had this topic
        await back.SubscribeAsync(7, "feed.a", held);
        List<Frame> frames = [await back.ReadMessageAsync(), await back.ReadMessageAsync(), await back.ReadMessageAsync(), await back.ReadMessageAsync()];
        await publisher.PublishAsync("feed.a", "m5");
        frames.Add(await back.ReadMessageAsync());

        Assert.Equal(("200", "Recovered"), (frames[0].Status, frames[0].Header(StreamPosition.DescriptionHeader)[0]));
        Assert.Equal(new StreamPosition(4, held.Epoch), frames[0].Position);
        Assert.Equal(["m2", "m3", "m4", "m5"], frames.Skip(1).Select(f => f.Text));
        Assert.Equal([2ul, 3ul, 4ul, 5ul], frames.Skip(1).Select(f => f.Position!.Value.Offset));
        Assert.All(frames, f => Assert.Equal(7u, f.Sid));
        Assert.Empty(await back.PingPongAsync());
    }

    [Fact]
    public async Task A_resume_on_another_node_in_the_middle_of_a_busy_stream_has_no_gap_and_no_duplicate()
    {
        const int Total = 2000;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3, configure: History("feed.>", maxMessages: Total));
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(cluster[1].Port, "watcher", capabilities: Capabilities.Headers);
        await watcher.SubscribeAsync(1, "feed.busy");
        await watcher.PingPongAsync();
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        Task publishing = Task.Run(async () =>
        {
            for (int i = 1; i <= Total; i++)
            {
                await publisher.PublishAsync("feed.busy", $"m{i}");
                if (i % 50 == 0)
                {
                    await publisher.PingPongAsync(); // paced: the stream spans the resume
                }
            }
        });

        StreamPosition position = default;
        for (int i = 1; i <= 300; i++)
        {
            Frame seen = await watcher.ReadMessageAsync();
            Assert.Equal((ulong)i, seen.Position!.Value.Offset);
            position = seen.Position.Value;
        }

        await using var resumer = await ProtocolClient.OpenAsync(cluster[2].Port, "resumer", capabilities: Capabilities.Headers);
        await resumer.SubscribeAsync(2, "feed.busy", position); // while the publisher goes on
        Assert.Equal("200", (await resumer.ReadMessageAsync()).Status);
        await publishing;

        var offsets = new List<ulong>();
        while (offsets.Count < Total - 300)
        {
            offsets.Add((await resumer.ReadMessageAsync()).Position!.Value.Offset);
        }

        Assert.Equal(Enumerable.Range(301, Total - 300).Select(i => (ulong)i), offsets);
        Assert.Empty(await resumer.PingPongAsync()); // nothing twice
    }

    [Fact]
    public async Task When_redis_loses_the_history_a_resume_is_told_so_and_no_echo_holds_for_history_topics()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configure: History("feed.>"));
        await using ProtocolClient author = await ProtocolClient.OpenAsync(cluster[0].Port, "author", capabilities: Capabilities.Headers);
        await author.SubscribeAsync(1, "feed.doc", SubscribeOptions.NoEcho);
        await using ProtocolClient reader = await ProtocolClient.OpenAsync(cluster[0].Port, "reader", capabilities: Capabilities.Headers);
        await reader.SubscribeAsync(1, "feed.doc");
        await reader.PingPongAsync();
        await Until.True(() => cluster[0].Engine().IsSettled, "interest settled");
        await author.PublishAsync("feed.doc", "edit 1");
        Frame edit = await reader.ReadMessageAsync();
        Assert.Equal(("edit 1", 1ul), (edit.Text, edit.Position!.Value.Offset));
        Assert.Empty(await author.PingPongAsync()); // the author's own, back from Redis, skipped for its no-echo subscription

        cluster.Redis.Kill(); // no persistence: the history goes with it
        await cluster.Redis.RestartAsync();
        await Until.True(() => cluster[0].Engine().IsConnected && cluster[1].Engine().IsConnected, "both nodes back on Redis");
        await using var back = await ProtocolClient.OpenAsync(cluster[1].Port, "back", capabilities: Capabilities.Headers);
        await back.SubscribeAsync(1, "feed.doc", edit.Position.Value);
        Frame lost = await back.ReadMessageAsync();

        Assert.Equal("410", lost.Status);
        Assert.StartsWith("History lost", lost.Header(StreamPosition.DescriptionHeader)[0]);
        Assert.NotEqual(edit.Position.Value.Epoch, lost.Position!.Value.Epoch);
        Assert.Equal(0ul, lost.Position.Value.Offset);
    }

    [Fact]
    public async Task A_history_topic_loses_nothing_to_a_redis_restart_publications_wait_and_gaps_are_read_back()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configure: History("feed.>"), redisArguments: ["--appendonly", "yes", "--appendfsync", "always"]);
        await using ProtocolClient subscriber = await ProtocolClient.OpenAsync(cluster[1].Port, "subscriber", capabilities: Capabilities.Headers);
        await subscriber.SubscribeAsync(1, "feed.s");
        await subscriber.PingPongAsync();
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        await publisher.PublishAsync("feed.s", "m1");
        Assert.Equal(1ul, (await subscriber.ReadMessageAsync()).Position!.Value.Offset);

        cluster.Redis.Kill(); // the streams survive it (append-only file)
        await Until.True(() => !cluster[0].Engine().IsConnected && !cluster[1].Engine().IsConnected, "both nodes see Redis gone");
        for (int i = 2; i <= 4; i++)
        {
            await publisher.PublishAsync("feed.s", $"m{i}"); // wait at node 0 for Redis
        }

        await publisher.PingPongAsync();
        await cluster.Redis.RestartAsync();
        await Until.True(() => cluster[0].Engine().IsConnected && cluster[1].Engine().IsConnected, "both nodes back on Redis");

        var received = new List<Frame> { await ReceivedAgainAsync(publisher, subscriber, "feed.s") };

        await publisher.PublishAsync("feed.s", "end");
        while (received[^1].Text != "end")
        {
            received.Add(await subscriber.ReadMessageAsync());
        }

        Assert.Equal(["m2", "m3", "m4"], received.Take(3).Select(f => f.Text)); // what waited at node 0, or was read back by node 1
        Assert.Equal(Enumerable.Range(2, received.Count).Select(i => (ulong)i), received.Select(f => f.Position!.Value.Offset)); // no gap, none twice
        Assert.Empty(await subscriber.PingPongAsync());
    }

    [Fact]
    public async Task A_long_poll_session_on_another_node_resumes_what_a_tcp_client_left()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configure: History("feed.>"));
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher", capabilities: Capabilities.Headers);
        await publisher.SubscribeAsync(1, "feed.lp");
        await publisher.PingPongAsync();
        for (int i = 1; i <= 3; i++)
        {
            await publisher.PublishAsync("feed.lp", $"m{i}");
        }

        StreamPosition first = (await publisher.ReadMessageAsync()).Position!.Value; // its own, back through Redis
        await publisher.ReadMessageAsync();
        await publisher.ReadMessageAsync();
        LongPollClient session = await LongPollClient.CreateAsync(cluster[1].Http, new { headers = true });

        using HttpResponseMessage subscribed = await cluster[1].Http.PostAsJsonAsync($"{session.Base}/subscriptions", new { sid = 4, pattern = "feed.lp", since = new { offset = first.Offset, epoch = first.Epoch } });
        Assert.Equal(System.Net.HttpStatusCode.NoContent, subscribed.StatusCode); // answered once the replay is queued
        PollResult poll = await session.PollAsync(0);

        Assert.Equal(["200", null, null], poll.Messages.Select(m => m.Status));
        Assert.Equal(["", "m2", "m3"], poll.Messages.Select(m => m.Text));
        Assert.Equal([3ul, 2ul, 3ul], poll.Messages.Select(m => m.Position!.Value.Offset));
    }

    [Fact]
    public async Task In_a_cluster_a_history_publication_that_could_not_carry_its_position_is_refused_before_redis()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1, configure: o =>
        {
            History("feed.>")(o);
            o.Limits.MaxFrameBytes = 1024;
            o.Limits.MaxTopicLength = 64;
        });
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");

        await publisher.PublishAsync("feed." + new string('t', 59), new byte[865], "_INBOX." + new string('r', 57));

        ErrorFrame error = await publisher.ExpectClosedWithAsync(ErrorCode.FrameTooLarge);
        Assert.Contains("keeps a history", error.Message, StringComparison.Ordinal);
        Assert.Equal(0, cluster[0].Engine().Metrics!.Sent); // nothing reached Redis
    }

    [Fact]
    public async Task A_client_of_a_node_killed_with_SIGKILL_mid_stream_resumes_on_another_with_nothing_lost_or_twice()
    {
        const int Count = 2000;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configure: History("feed.>", maxMessages: Count));
        (BrokerProcess process, int doomedPort) = await cluster.StartProcessNodeAsync("--Herald:History:Topics:0:Pattern=feed.>", $"--Herald:History:Topics:0:MaxMessages={Count}");
        await using BrokerProcess doomed = process;
        await using var client = await ProtocolClient.OpenAsync(doomedPort, "on-the-doomed-node", capabilities: Capabilities.Headers);
        await client.SubscribeAsync(1, "feed.k", new StreamPosition(0, ""));
        Assert.Equal("200", (await client.ReadMessageAsync()).Status);
        await client.PingPongAsync(); // its interest is in Redis
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");

        var seen = new List<Frame>();
        Task reading = Task.Run(async () =>
        {
            while (await client.TryReadAsync() is { } frame)
            {
                lock (seen)
                {
                    seen.Add(frame);
                }
            }
        });
        for (int i = 1; i <= Count; i++)
        {
            await publisher.PublishAsync("feed.k", $"m{i}");
            if (i == Count / 2)
            {
                await Until.True(() => { lock (seen) { return seen.Count >= 100; } }, "the doomed node's client is receiving");
                doomed.Kill(); // mid-stream, without a word
            }
        }

        await publisher.PingPongAsync();
        await reading;
        Assert.NotEmpty(seen);
        StreamPosition last = seen[^1].Position!.Value;
        Assert.Equal(Enumerable.Range(1, seen.Count).Select(i => (ulong)i), seen.Select(f => f.Position!.Value.Offset)); // up to the kill: in order, none missing

        await using var back = await ProtocolClient.OpenAsync(cluster[1].Port, "back", capabilities: Capabilities.Headers); // as a load balancer would send it
        await back.SubscribeAsync(1, "feed.k", last);
        Assert.Equal("200", (await back.ReadMessageAsync()).Status);
        var rest = new List<Frame>();
        while (rest.Count < Count - (int)last.Offset)
        {
            rest.Add(await back.ReadMessageAsync());
        }

        Assert.Equal(Enumerable.Range((int)last.Offset + 1, Count - (int)last.Offset).Select(i => $"m{i}"), rest.Select(f => f.Text));
        Assert.Empty(await back.PingPongAsync()); // nothing twice
    }

    [Fact]
    public async Task On_a_Redis_Cluster_a_history_topic_is_positioned_and_resumed_on_another_node()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configure: History("feed.>"), redisCluster: true);
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher", capabilities: Capabilities.Headers);
        await publisher.SubscribeAsync(1, "feed.rc");
        await publisher.PingPongAsync();
        for (int i = 1; i <= 3; i++)
        {
            await publisher.PublishAsync("feed.rc", $"m{i}");
        }

        StreamPosition first = (await publisher.ReadMessageAsync()).Position!.Value; // the script ran on the prefix's slot, with the channel's keys
        await using var back = await ProtocolClient.OpenAsync(cluster[1].Port, "back", capabilities: Capabilities.Headers);
        await back.SubscribeAsync(1, "feed.rc", first);

        Assert.Equal("200", (await back.ReadMessageAsync()).Status);
        Assert.Equal(["m2", "m3"], new[] { (await back.ReadMessageAsync()).Text, (await back.ReadMessageAsync()).Text });
    }

    [Fact]
    public async Task Nodes_with_different_history_rules_are_shown_in_varz()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(
            nodes: 2,
            configure: o =>
            {
                o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(200);
                History("feed.>")(o);
            },
            configureNode: (node, o) =>
            {
                if (node == 1)
                {
                    o.History.Topics[0].MaxMessages = 50; // a typo in one node's configuration
                }
            });

        await Until.True(async () => (await NodesAsync(cluster[0])).Length == 2, "node 0 sees node 1");
        using JsonDocument varz = JsonDocument.Parse(await cluster[0].Monitoring.GetStringAsync("/varz"));
        JsonElement view = varz.RootElement.GetProperty("cluster");

        Assert.False(view.GetProperty("history_rules_match").GetBoolean());
        Assert.Equal(["feed.> 1000 00:05:00 8388608", "feed.> 50 00:05:00 8388608"], view.GetProperty("nodes").EnumerateArray().Select(n => n.GetProperty("history").GetString()).Order());
    }

    [Fact]
    public async Task The_dotnet_client_moved_to_another_node_mid_stream_resumes_there_by_itself_with_nothing_lost_or_twice()
    {
        const int Count = 1000;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3, configure: History("feed.>", maxMessages: Count));
        await using var link = new Herald.Testing.CuttableLink(cluster[1].Port); // the load balancer in front of node 1
        await using var client = new HeraldClient(new HeraldClientOptions
        {
            Url = $"tcp://127.0.0.1:{link.Port}",
            ReconnectDelay = TimeSpan.FromMilliseconds(20),
            MaxReconnectDelay = TimeSpan.FromMilliseconds(200),
        });
        var resumes = new List<HeraldResumeEventArgs>();
        HeraldSubscription feed = await client.SubscribeAsync("feed.lb");
        feed.Resumed += (_, e) => resumes.Add(e);
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");

        var texts = new List<string>();
        for (int i = 1; i <= Count; i++)
        {
            await publisher.PublishAsync("feed.lb", $"m{i}");
            if (i == 300)
            {
                while (texts.Count < 100)
                {
                    texts.Add((await feed.ReadAsync(new CancellationTokenSource(TimeSpan.FromSeconds(30)).Token)).GetString());
                }

                link.Retarget(cluster[2].Port); // node 1 is taken out: the next connection lands on node 2
                link.Cut();
                link.Restore();
            }
        }

        while (texts.Count < Count)
        {
            texts.Add((await feed.ReadAsync(new CancellationTokenSource(TimeSpan.FromSeconds(30)).Token)).GetString());
        }

        Assert.Equal(Enumerable.Range(1, Count).Select(i => $"m{i}"), texts); // in order, none lost, none twice
        HeraldResumeEventArgs resumed = Assert.Single(resumes);
        Assert.True(resumed.Recovered, resumed.Description);
        Assert.Equal((ulong)Count, feed.Position!.Value.Offset);
    }

    [Fact]
    public async Task A_node_cut_off_from_redis_reads_back_the_history_publications_it_missed()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1, configure: History("feed.>"));
        await using var link = new Herald.Testing.CuttableLink(cluster.Redis.Port); // node 1's network to Redis
        await using TestBroker cutOff = await TestBroker.StartAsync(o =>
        {
            o.Cluster.Redis = $"127.0.0.1:{link.Port}";
            History("feed.>")(o);
        });
        await using ProtocolClient subscriber = await ProtocolClient.OpenAsync(cutOff.Port, "subscriber", capabilities: Capabilities.Headers);
        await subscriber.SubscribeAsync(1, "feed.cut");
        await subscriber.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        await publisher.PublishAsync("feed.cut", "m1");
        Assert.Equal(1ul, (await subscriber.ReadMessageAsync()).Position!.Value.Offset);

        link.Cut();
        await Until.True(() => !cutOff.Engine().IsConnected, "node 1 sees Redis gone");
        for (int i = 2; i <= 4; i++)
        {
            await publisher.PublishAsync("feed.cut", $"m{i}"); // into the stream, published to nobody on node 1
        }

        await publisher.PingPongAsync();
        link.Restore();
        await Until.True(() => cutOff.Engine().IsConnected && cutOff.Engine().IsSettled, "node 1 back on Redis");
        var received = new List<Frame> { await ReceivedAgainAsync(publisher, subscriber, "feed.cut") };

        Assert.Equal(["m2", "m3", "m4"], received.Take(1).Concat([await subscriber.ReadMessageAsync(), await subscriber.ReadMessageAsync()]).Select(f => f.Text));
        Assert.True(cutOff.Engine().Metrics!.Repaired >= 3); // read back from the stream, not received live
    }

    /// <summary>
    /// After Redis or the network came back: publishes markers on <paramref name="topic"/> until the subscriber's node
    /// delivers again (its Redis subscription is back), and returns the first frame it got (what it missed may come first).
    /// </summary>
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

    private static Action<Herald.Broker.Hosting.HeraldOptions> History(string pattern, int maxMessages = 1000) =>
        o => o.History.Topics.Add(new Herald.Broker.History.HistoryRule { Pattern = pattern, MaxMessages = maxMessages });

    private static async Task<ProtocolClient> SubscribedAsync(TestBroker node, string name, params string[] patterns)
    {
        ProtocolClient client = await ProtocolClient.OpenAsync(node.Port, name);
        for (int i = 0; i < patterns.Length; i++)
        {
            await client.SubscribeAsync((uint)(i + 1), patterns[i]);
        }

        await client.PingPongAsync();
        return client;
    }

    private static async Task<List<string>> UntilMarkerAsync(ProtocolClient client)
    {
        var seen = new List<string>();
        while (seen.Count == 0 || seen[^1] != "orders.end.eu:end")
        {
            Frame message = await client.ReadMessageAsync();
            seen.Add($"{message.Topic}:{message.Text}");
        }

        return seen;
    }
}
