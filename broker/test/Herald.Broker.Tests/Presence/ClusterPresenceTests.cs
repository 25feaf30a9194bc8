using System.Net;
using System.Net.Http.Json;
using System.Text;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests.Presence;

/// <summary>
/// The cluster's presence on real redis-server nodes (spec §15.5, cluster.md §12): the same members and pages on every
/// node, events in order with the member's publications on another node, a killed node's members gone with one
/// <c>node</c> leave each, Redis unreachable told as PresenceUnavailable, the cluster-wide topic limit, and what an
/// adversary learns or makes Redis hold.
/// </summary>
public sealed class ClusterPresenceTests(ITestOutputHelper output)
{
    private const Capabilities Caps = Capabilities.Headers | Capabilities.Presence;

    [Fact]
    public async Task A_member_on_one_node_is_seen_by_every_node_with_the_same_pages_and_client_ids_unique_in_the_cluster()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3);
        var members = new List<ProtocolClient>();
        try
        {
            for (int i = 0; i < 5; i++)
            {
                ProtocolClient m = await ProtocolClient.ConnectAsync(cluster[i % 2].Port); // nodes 0 and 1, each numbering its sessions from 1
                members.Add(m);
                await m.SendAsync(w => FrameWriter.WriteHello(w, "m", Caps, info: $"member {i}"));
                WelcomeFrame welcome = (await m.ReadAsync()).Welcome!.Value;
                Assert.True((welcome.Capabilities & Capabilities.Presence) != 0, "a cluster node grants presence");
                await m.SubscribeAsync(1, "doc.42", SubscribeOptions.Join);
                Assert.Empty(await m.BarrierAsync());
            }

            var pages = new List<string>();
            for (int node = 0; node < 3; node++)
            {
                await using ProtocolClient reader = await ProtocolClient.OpenAsync(cluster[node].Port, "reader", capabilities: Caps);
                PresenceReplyFrame occupancy = await reader.PresenceAsync(1, "doc.42", 0);
                Assert.Equal((ErrorCode.None, 5ul, 1ul, 0), (occupancy.Code, occupancy.Members, occupancy.Identities, occupancy.Entries.Count));
                var seen = new List<string>();
                string? cursor = null;
                uint request = 2;
                do
                {
                    PresenceReplyFrame page = await reader.PresenceAsync(request++, "doc.42", 2, cursor);
                    Assert.True(page.Entries.Count <= 2);
                    seen.AddRange(page.Entries.Select(e => $"{e.Client}={e.Info}"));
                    cursor = page.Next;
                }
                while (cursor is not null);

                Assert.Equal(5, seen.Count);
                Assert.Equal(seen.Order(StringComparer.Ordinal), seen);
                Assert.Equal(5, seen.Select(s => s.Split('=')[0]).Distinct().Count()); // unique, though two nodes each have a session 1
                pages.Add(string.Join(",", seen));
            }

            output.WriteLine(pages[0]);
            Assert.Single(pages.Distinct());

            await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
            IDatabase db = redis.GetDatabase();
            long bytes = 0;
            foreach (string key in new[] { "{herald}:pm:doc.42", "{herald}:pe:doc.42", "{herald}:pi:doc.42" })
            {
                bytes += (long)await db.ExecuteAsync("MEMORY", "USAGE", key);
            }

            output.WriteLine($"Redis bytes for 5 members of one topic (pm + pe + pi, 8-byte info): {bytes}, {bytes / 5} per member");
        }
        finally
        {
            foreach (ProtocolClient m in members)
            {
                await m.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task On_a_Redis_Cluster_every_node_answers_the_same_and_events_cross_with_the_messages()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, redisCluster: true);
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(cluster[1].Port, "watcher", capabilities: Caps);
        await watcher.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
        await watcher.BarrierAsync();
        await using ProtocolClient member = await ProtocolClient.OpenAsync(cluster[0].Port, "member", capabilities: Caps);
        await member.SubscribeAsync(7, "room.1", SubscribeOptions.Join);
        await member.PublishAsync("room.1", "hello");
        Assert.DoesNotContain(await member.BarrierAsync(), f => f.Type == FrameType.Error); // joined: its own "hello" only

        Assert.Equal(["join"], (await watcher.ReadMessageAsync()).Header("Herald-Presence"));
        Assert.Equal("hello", (await watcher.ReadMessageAsync()).Text);
        await using ProtocolClient reader = await ProtocolClient.OpenAsync(cluster[1].Port, "reader", capabilities: Caps);
        Assert.Equal((ErrorCode.None, 1ul), ((await reader.PresenceAsync(1, "room.1", 10)) is var page ? (page.Code, page.Members) : default));
        await member.UnsubscribeAsync(7);
        await member.BarrierAsync();
        Assert.Equal(["leave"], (await watcher.ReadMessageAsync()).Header("Herald-Presence"));
    }

    [Fact]
    public async Task Events_reach_another_node_in_order_with_the_members_publications()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2);
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(cluster[1].Port, "watcher", capabilities: Caps);
        await watcher.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
        await watcher.BarrierAsync();

        await using ProtocolClient member = await ProtocolClient.ConnectAsync(cluster[0].Port);
        await member.SendAsync(w => FrameWriter.WriteHello(w, "member", Caps, info: "Alice"));
        Assert.Equal(FrameType.Welcome, (await member.ReadAsync()).Type);
        await member.SubscribeAsync(7, "room.1", SubscribeOptions.Join);
        await member.PublishAsync("room.1", "hello");
        await member.PublishAsync("room.1", "bye");
        await member.UnsubscribeAsync(7);
        await member.BarrierAsync();

        Frame join = await watcher.ReadMessageAsync();
        Assert.Equal(["join"], join.Header("Herald-Presence"));
        Assert.Equal((1u, "Alice"), (join.Sid, join.Text));
        Assert.Equal(["1"], join.Header("Herald-Occupancy"));
        string client = Assert.Single(join.Header("Herald-Client"));
        Assert.Equal(cluster[0].Engine().Presence.ClientPrefix, client[..16]);
        Assert.Equal("hello", (await watcher.ReadMessageAsync()).Text);
        Assert.Equal("bye", (await watcher.ReadMessageAsync()).Text);
        Frame leave = await watcher.ReadMessageAsync();
        Assert.Equal(["leave"], leave.Header("Herald-Presence"));
        Assert.Equal([client], leave.Header("Herald-Client"));
        Assert.Equal(["unsubscribe"], leave.Header("Herald-Reason"));
        Assert.Equal(["0"], leave.Header("Herald-Occupancy"));
        Assert.Empty(await watcher.BarrierAsync());
    }

    [Fact]
    public async Task Events_are_suppressed_above_MaxEventsMembers_by_the_clusters_occupancy_and_resumed_at_half()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Presence.MaxEventsMembers = 2);
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(cluster[1].Port, "watcher", capabilities: Caps);
        await watcher.SubscribeAsync(1, "hall", SubscribeOptions.PresenceEvents);
        await watcher.BarrierAsync();
        var members = new List<ProtocolClient>();
        try
        {
            string[] expected = ["join@1", "join@2", "suppressed@3", ""];
            for (int i = 0; i < 4; i++)
            {
                ProtocolClient m = await ProtocolClient.OpenAsync(cluster[i % 2].Port, "m", capabilities: Caps); // alternately on each node
                members.Add(m);
                await m.SubscribeAsync(1, "hall", SubscribeOptions.Join);
                Assert.Empty(await m.BarrierAsync());
                if (expected[i].Length > 0)
                {
                    Frame e = await watcher.ReadMessageAsync(); // each event before the next join: the two nodes' events take different paths here
                    Assert.Equal(expected[i], $"{e.Header("Herald-Presence").Single()}@{e.Header("Herald-Occupancy").Single()}");
                }
            }

            for (int i = 0; i < 3; i++)
            {
                await members[i].UnsubscribeAsync(1);
                await members[i].BarrierAsync();
            }

            Frame resumed = await watcher.ReadMessageAsync();
            Assert.Equal("resumed@1", $"{resumed.Header("Herald-Presence").Single()}@{resumed.Header("Herald-Occupancy").Single()}");
            Assert.Empty(await watcher.BarrierAsync()); // the 4th join and the leaves to 3 and 2 were not sent
            output.WriteLine($"suppressed on node 1: {cluster[1].Engine().Presence.Counts.Suppressed}");
        }
        finally
        {
            foreach (ProtocolClient m in members)
            {
                await m.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task A_killed_nodes_members_are_gone_from_every_answer_and_each_leave_is_sent_once()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(200));
        (BrokerProcess process, int doomedPort) = await cluster.StartProcessNodeAsync("--Herald:Cluster:HeartbeatInterval=00:00:00.200");
        await using BrokerProcess doomed = process;
        var watchers = new List<ProtocolClient>();
        foreach (TestBroker node in cluster.Nodes)
        {
            ProtocolClient w = await ProtocolClient.OpenAsync(node.Port, "watcher", capabilities: Caps);
            watchers.Add(w);
            await w.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
            await w.BarrierAsync();
        }

        try
        {
            await using ProtocolClient member = await ProtocolClient.OpenAsync(doomedPort, "doomed-member", capabilities: Caps);
            await member.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
            Assert.Empty(await member.BarrierAsync());
            foreach (ProtocolClient w in watchers)
            {
                Assert.Equal(["join"], (await w.ReadMessageAsync()).Header("Herald-Presence"));
            }

            await using ProtocolClient survivor = await ProtocolClient.OpenAsync(cluster[1].Port, "survivor", capabilities: Caps);
            await survivor.SubscribeAsync(2, "room.1", SubscribeOptions.Join);
            Assert.Empty(await survivor.BarrierAsync());
            await using ProtocolClient reader0 = await ProtocolClient.OpenAsync(cluster[0].Port, "reader", capabilities: Caps);
            await using ProtocolClient reader1 = await ProtocolClient.OpenAsync(cluster[1].Port, "reader", capabilities: Caps);
            Assert.Equal(2ul, (await reader0.PresenceAsync(1, "room.1", 10)).Members);

            doomed.Kill();
            uint request = 10;
            await Until.True(async () => (await reader0.PresenceAsync(request++, "room.1", 10)).Members == 1, "node 0 no longer lists the dead node's member");
            PresenceReplyFrame left = await reader1.PresenceAsync(request++, "room.1", 10);
            Assert.Equal(1ul, left.Members);
            Assert.StartsWith(cluster[1].Engine().Presence.ClientPrefix, Assert.Single(left.Entries).Client, StringComparison.Ordinal);

            foreach (ProtocolClient w in watchers)
            {
                List<Frame> events = [.. (await w.BarrierAsync()).Where(f => f.Type == FrameType.Message)];
                List<string> kinds = [.. events.Select(e => $"{e.Header("Herald-Presence").Single()}:{string.Join("", e.Header("Herald-Reason"))}")];
                output.WriteLine(string.Join(", ", kinds));
                Assert.Equal(["join:", "leave:node"], kinds); // the survivor's join, then the dead member's one leave
            }

            output.WriteLine($"swept by node 0: {cluster[0].Engine().Presence.Swept}, by node 1: {cluster[1].Engine().Presence.Swept}");
            Assert.Equal(1, cluster[0].Engine().Presence.Swept + cluster[1].Engine().Presence.Swept);
        }
        finally
        {
            foreach (ProtocolClient w in watchers)
            {
                await w.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task Redis_unreachable_refuses_joins_and_queries_with_PresenceUnavailable_and_presence_returns_with_it()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(500));
        await using ProtocolClient member = await ProtocolClient.OpenAsync(cluster[0].Port, "member", capabilities: Caps);
        await member.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        Assert.Empty(await member.BarrierAsync());
        await using ProtocolClient other = await ProtocolClient.OpenAsync(cluster[1].Port, "other", capabilities: Caps);
        Assert.Equal(1ul, (await other.PresenceAsync(1, "room.1", 10)).Members);

        cluster.Redis.Kill();
        await Until.True(() => !cluster[1].Engine().IsConnected, "node 1 sees Redis gone");
        PresenceReplyFrame during = await other.PresenceAsync(2, "room.1", 10);
        Assert.Equal((ErrorCode.PresenceUnavailable, 0ul, 0), (during.Code, during.Members, during.Entries.Count));
        await other.SubscribeAsync(5, "room.1", SubscribeOptions.Join);
        Frame refused = Assert.Single(await other.BarrierAsync());
        Assert.Equal((ErrorCode.PresenceUnavailable, 5u), (refused.Error!.Value.Code, refused.Error.Value.Sid));

        await cluster.Redis.RestartAsync(); // empty: node 0 writes its member again
        await Until.True(() => cluster[0].Engine().IsConnected && cluster[1].Engine().IsConnected, "both nodes back on Redis");
        uint request = 10;
        PresenceReplyFrame after = await Until.Value(() => other.PresenceAsync(request++, "room.1", 10), r => r.Code == ErrorCode.None && r.Members == 1, "node 0's member back in Redis");
        Assert.StartsWith(cluster[0].Engine().Presence.ClientPrefix, Assert.Single(after.Entries).Client, StringComparison.Ordinal);
        await other.SubscribeAsync(6, "room.1", SubscribeOptions.Join);
        List<Frame> late = await other.BarrierAsync(); // the join is not refused; at most the outage's loss notice (cluster.md §13) for sid 5, kept meanwhile, comes here
        Assert.All(late, f => Assert.Equal((ErrorCode.MessagesDropped, 0UL, new uint[] { 5 }), (f.Error!.Value.Code, f.Error.Value.Count, f.Error.Value.Sids)));
        Assert.Equal(2ul, (await other.PresenceAsync(99, "room.1", 0)).Members);
    }

    [Fact]
    public async Task The_topic_limit_is_the_clusters_and_a_join_past_it_is_told_with_the_subscription_kept()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3, o => o.Presence.MaxMembersPerTopic = 2);
        await using ProtocolClient first = await ProtocolClient.OpenAsync(cluster[0].Port, "first", capabilities: Caps);
        await first.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        Assert.Empty(await first.BarrierAsync());
        await using ProtocolClient second = await ProtocolClient.OpenAsync(cluster[1].Port, "second", capabilities: Caps);
        await second.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        Assert.Empty(await second.BarrierAsync());

        await using ProtocolClient third = await ProtocolClient.OpenAsync(cluster[2].Port, "third", capabilities: Caps);
        await third.SubscribeAsync(4, "room.1", SubscribeOptions.Join);
        Frame full = Assert.Single(await third.BarrierAsync());
        Assert.Equal((ErrorCode.PresenceFull, 4u), (full.Error!.Value.Code, full.Error.Value.Sid));
        output.WriteLine(full.Error.Value.Message);
        Assert.Equal(2ul, (await third.PresenceAsync(1, "room.1", 10)).Members);

        await first.PublishAsync("room.1", "still subscribed");
        Assert.Equal("still subscribed", (await third.ReadMessageAsync()).Text); // the subscription stays, without its join
        await third.UnsubscribeAsync(4);
        await third.BarrierAsync();
        Assert.Equal(2ul, (await first.PresenceAsync(2, "room.1", 0)).Members); // no leave for a join that never was
    }

    [Fact]
    public async Task A_long_poll_or_sse_join_past_the_clusters_topic_limit_is_409_with_nothing_subscribed()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Presence.MaxMembersPerTopic = 1);
        await using ProtocolClient first = await ProtocolClient.OpenAsync(cluster[0].Port, "first", capabilities: Caps);
        await first.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        Assert.Empty(await first.BarrierAsync());

        LongPollClient poller = await LongPollClient.CreateAsync(cluster[1].Http, new { headers = true });
        using (HttpResponseMessage refused = await poller.Http.PostAsJsonAsync($"{poller.Base}/subscriptions", new { sid = 1, pattern = "room.1", join = true }))
        {
            string body = await refused.Content.ReadAsStringAsync();
            output.WriteLine($"long-poll: {(int)refused.StatusCode} {body}");
            Assert.Equal(HttpStatusCode.Conflict, refused.StatusCode);
            Assert.Contains("PresenceFull", body, StringComparison.Ordinal);
        }

        using (HttpResponseMessage again = await poller.Http.PostAsJsonAsync($"{poller.Base}/subscriptions", new { sid = 1, pattern = "room.1" }))
        {
            Assert.Equal(HttpStatusCode.NoContent, again.StatusCode); // sid 1 is free: nothing was subscribed
        }

        (SseClient? stream, HttpStatusCode status, System.Text.Json.JsonElement problem) = await SseClient.TryOpenAsync(cluster[1].HttpPort, "topic=room.1&join=room.1");
        Assert.Null(stream);
        output.WriteLine($"sse: {(int)status} {problem}");
        Assert.Equal(HttpStatusCode.Conflict, status);
        Assert.Equal(1ul, (await first.PresenceAsync(1, "room.1", 0)).Members);
    }

    [Fact]
    public async Task A_long_poll_member_whose_node_stops_is_a_member_again_with_its_info_once_another_node_takes_the_session_over()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3, o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500));
        LongPollClient on0 = await LongPollClient.CreateAsync(cluster[0].Http, new { headers = true, info = "Polly" });
        using (HttpResponseMessage joined = await on0.Http.PostAsJsonAsync($"{on0.Base}/subscriptions", new { sid = 1, pattern = "room.1", join = true, presence = true }))
        {
            Assert.Equal(HttpStatusCode.NoContent, joined.StatusCode);
        }

        await using ProtocolClient reader = await ProtocolClient.OpenAsync(cluster[2].Port, "reader", capabilities: Caps);
        PresenceReplyFrame before = await reader.PresenceAsync(1, "room.1", 10);
        Assert.Equal((1ul, "Polly"), (before.Members, Assert.Single(before.Entries).Info));
        Assert.StartsWith(cluster[0].Engine().Presence.ClientPrefix, before.Entries[0].Client, StringComparison.Ordinal);

        await cluster[0].StopAsync(); // as SIGTERM: the session's lease is given up, its member leaves with its node's connections

        // The next request, on node 1, takes the session over: its subscription is made again with its join (and its
        // events) and the session's info, so the session is a member again, now of node 1.
        LongPollClient on1 = on0.Via(cluster[1].Http);
        _ = await on1.PollAsync(0);
        uint request = 2;
        PresenceReplyFrame after = default!;
        await Until.True(async () => (after = await reader.PresenceAsync(request++, "room.1", 10)).Members == 1
            && after.Entries[0].Client.StartsWith(cluster[1].Engine().Presence.ClientPrefix, StringComparison.Ordinal), "the session is a member again, through node 1");
        output.WriteLine($"before: {before.Entries[0].Client}, after the takeover: {after.Entries[0].Client}");
        Assert.Equal("Polly", Assert.Single(after.Entries).Info);

        // and it still gets the topic's events: another member's join reaches the taken-over session
        await using ProtocolClient other = await ProtocolClient.OpenAsync(cluster[2].Port, "other", capabilities: Caps);
        await other.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        Assert.Empty(await other.BarrierAsync());
        string node2 = cluster[2].Engine().Presence.ClientPrefix;
        long ack = 0;
        await Until.True(async () =>
        {
            PollResult polled = await on1.PollAsync(ack);
            ack = Math.Max(ack, polled.LastSequence);
            return polled.Messages.Any(m => m.Header("Herald-Presence").SequenceEqual(["join"]) && m.Header("Herald-Client").Single().StartsWith(node2, StringComparison.Ordinal));
        }, "the taken-over session polls the other member's join");
    }

    [Fact]
    public async Task An_identity_without_presence_rights_on_another_node_learns_nothing_not_even_the_count()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, PresenceIdentities.Configure);
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(cluster[0].Port, "alice", capabilities: Caps, auth: "alice-token");
        await alice.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        Assert.Empty(await alice.BarrierAsync());
        await using ProtocolClient eve = await ProtocolClient.OpenAsync(cluster[1].Port, "eve", capabilities: Caps, auth: "eve-token");

        PresenceReplyFrame read = await eve.PresenceAsync(5, "room.1", 100);
        Assert.Equal((ErrorCode.PermissionDenied, 0ul, 0ul, 0, (string?)null), (read.Code, read.Members, read.Identities, read.Entries.Count, read.Next));
        PresenceReplyFrame count = await eve.PresenceAsync(6, "room.1", 0);
        Assert.Equal((ErrorCode.PermissionDenied, 0ul), (count.Code, count.Members));
        await eve.SubscribeAsync(9, "room.1", SubscribeOptions.PresenceEvents);
        Assert.Equal([(ErrorCode.PermissionDenied, 9u)], (await eve.BarrierAsync()).Select(f => (f.Error!.Value.Code, f.Error.Value.Sid)));

        await using ProtocolClient bob = await ProtocolClient.OpenAsync(cluster[1].Port, "bob", capabilities: Caps, auth: "bob-token");
        PresenceReplyFrame bystander = await bob.PresenceAsync(1, "room.1", 100);
        Assert.Equal((ErrorCode.None, 1ul, "alice"), (bystander.Code, bystander.Members, Assert.Single(bystander.Entries).Identity));
    }

    [Fact]
    public async Task A_client_flooding_joins_cannot_pass_its_limits_nor_grow_Redis_past_them_while_a_bystander_joins()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            PresenceIdentities.Configure(o);
            o.Presence.MaxPerIdentity = 3;
        });
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        IDatabase db = redis.GetDatabase();
        const int Topics = 40;
        var floods = new List<ProtocolClient>();
        try
        {
            int refused = 0;
            foreach (TestBroker node in cluster.Nodes)
            {
                ProtocolClient mallory = await ProtocolClient.OpenAsync(node.Port, "mallory", capabilities: Caps, auth: "alice-token");
                floods.Add(mallory);
                for (int i = 0; i < Topics; i++)
                {
                    await mallory.SubscribeAsync((uint)(i + 1), $"room.{i}", SubscribeOptions.Join);
                }

                refused += (await mallory.BarrierAsync()).Count(f => f.Error?.Code == ErrorCode.PresenceFull);
            }

            await using ProtocolClient bob = await ProtocolClient.OpenAsync(cluster[1].Port, "bob", capabilities: Caps, auth: "bob-token");
            await bob.SubscribeAsync(1, "room.0", SubscribeOptions.Join);
            Assert.Empty(await bob.BarrierAsync()); // the bystander joins

            long members = 0;
            long bytes = 0;
            for (int i = 0; i < Topics; i++)
            {
                members += await db.SortedSetLengthAsync($"{{herald}}:pm:room.{i}");
                foreach (string kind in new[] { "pm", "pe", "pi" })
                {
                    RedisResult usage = await db.ExecuteAsync("MEMORY", "USAGE", $"{{herald}}:{kind}:room.{i}");
                    bytes += usage.IsNull ? 0 : (long)usage;
                }
            }

            output.WriteLine($"{2 * Topics} joins flooded, {refused} refused PresenceFull; Redis holds {members} members in {bytes} bytes of topic keys");
            Assert.Equal((2 * Topics) - 6, refused); // 3 per identity on each node
            Assert.Equal(7, members); // mallory's 3 on each node, and bob
            Assert.True(bytes < 7 * 400, $"{bytes} bytes for 7 members");
            Assert.Equal(3ul, (await bob.PresenceAsync(2, "room.0", 10)).Members); // mallory from each node, and bob
        }
        finally
        {
            foreach (ProtocolClient m in floods)
            {
                await m.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task A_client_sending_100_PRESENCE_without_reading_gets_every_answer_and_the_broker_holds_at_most_16()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1);
        await using ProtocolClient member = await ProtocolClient.OpenAsync(cluster[0].Port, "member", capabilities: Caps);
        await member.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        Assert.Empty(await member.BarrierAsync());
        await using ProtocolClient asker = await ProtocolClient.OpenAsync(cluster[0].Port, "asker", capabilities: Caps);
        const int Count = 100;
        await asker.SendAsync(w =>
        {
            for (uint i = 1; i <= Count; i++)
            {
                FrameWriter.WritePresence(w, i, Encoding.UTF8.GetBytes("room.1"), 10, null);
            }
        });
        var answered = new HashSet<uint>();
        while (answered.Count < Count)
        {
            Frame frame = await asker.ReadAsync();
            if (frame.Type == FrameType.PresenceReply)
            {
                Assert.Equal((ErrorCode.None, 1ul), (frame.Reply!.Value.Code, frame.Reply.Value.Members));
                Assert.True(answered.Add(frame.Reply.Value.RequestId));
            }
        }

        ProtocolSession session = cluster[0].Services.GetRequiredService<SessionRegistry>().Sessions.Single(s => s.ClientName == "asker");
        output.WriteLine($"most PRESENCE unanswered at once: {session.PresenceUnansweredMost}");
        Assert.InRange(session.PresenceUnansweredMost, 1, ProtocolSession.MaxPresenceUnanswered);
    }
}
