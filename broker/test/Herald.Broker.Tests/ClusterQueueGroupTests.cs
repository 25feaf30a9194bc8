using System.Net.Http.Json;
using System.Text;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>Three real nodes on one real <c>redis-server</c>, token authentication, a history rule: started once for <see cref="ClusterQueueGroupTests"/>.</summary>
public sealed class QueueGroupCluster : IAsyncLifetime
{
    public const string AliceToken = "cluster-queue-alice";
    public const string MalloryToken = "cluster-queue-mallory";

    public TestCluster Cluster { get; private set; } = null!;

    /// <remarks>
    /// Heartbeats of 1 s: a node is dropped by the others after three silent ones. With 200 ms a test host busy for
    /// 600 ms (4 lanes on 2 cores) had a node dropped while it published, and another node, no longer seeing that node's
    /// members, delivered what it had chosen among its own as well (cluster.md §11's window while nodes learn): the same
    /// publication twice. Nothing here waits for a heartbeat; the tests that drop a node start clusters of their own.
    /// </remarks>
    public async Task InitializeAsync() => Cluster = await TestCluster.StartAsync(nodes: 3, o =>
    {
        o.Cluster.HeartbeatInterval = TimeSpan.FromSeconds(1);
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.Zero;
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "mallory", Sha256 = TestTokens.Sha256(MalloryToken), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
        o.History.Topics.Add(new Herald.Broker.History.HistoryRule { Pattern = "kept.>", MaxMessages = 1000 });
    });

    public async Task DisposeAsync() => await Cluster.DisposeAsync();
}

/// <summary>
/// Queue groups across nodes (spec §14, cluster.md §11): with a group's members on several nodes, each publication,
/// on whichever node, reaches exactly one member of the cluster and every plain subscriber. Each member connection
/// also holds a plain subscription to its group's marker topic, under the same Redis subscription of its node: when the
/// markers of every publisher have reached it, nothing those publishers sent before can still come (one publisher,
/// one Redis subscription: in order). Every node is waited for to know the others' members before publishing (polled
/// from its router), so what is counted is the steady state, exactly once; the window while they learn is cluster.md's.
/// </summary>
public sealed class ClusterQueueGroupTests(QueueGroupCluster fixture) : IClassFixture<QueueGroupCluster>
{
    private const Capabilities Queues = Capabilities.QueueGroups;
    private const string AliceToken = QueueGroupCluster.AliceToken;

    private TestCluster Cluster => fixture.Cluster;

    [Fact]
    public async Task Members_on_two_nodes_get_each_publication_of_every_node_once_in_all_and_plain_subscribers_get_all()
    {
        // Two members on node 0, one on node 1, none on node 2 (whose publications all go to another node's member).
        Member[] members = [await Member.JoinAsync(Cluster[0], "two", "w"), await Member.JoinAsync(Cluster[0], "two", "w"), await Member.JoinAsync(Cluster[1], "two", "w")];
        await using ProtocolClient plain = await PlainAsync(Cluster[2], "two.*");
        await UntilEveryNodeSeesAsync("two.job", Key("two", "w"), [2, 1, 0]);

        List<string> sent = await PublishFromEveryNodeAsync("two", count: 60);

        List<string>[] got = await Task.WhenAll(members.Select(m => m.UntilMarkersAsync(3)));
        Assert.Equal(sent.Order(), got.SelectMany(g => g).Order()); // each publication exactly once, in all
        Assert.All(got, g => Assert.NotEmpty(g)); // spread: each of three equal members missed by all 180: (2/3)^180
        Assert.Equal(sent.Order(), (await UntilMarkersAsync(plain, "two", 3)).Order());
        await DisposeAllAsync(members);
    }

    [Fact]
    public async Task Members_on_three_nodes_over_tcp_and_long_poll_get_each_publication_once_in_all()
    {
        Member tcp0 = await Member.JoinAsync(Cluster[0], "three", "w");
        Member tcp1 = await Member.JoinAsync(Cluster[1], "three", "w");
        using HttpClient http = TestTokens.HttpClientFor(Cluster[2], AliceToken);
        LongPollClient polling = await LongPollClient.CreateAsync(http);
        using (HttpResponseMessage joined = await http.PostAsJsonAsync($"{polling.Base}/subscriptions", new { sid = 1, pattern = "three.*", queue = "w" }))
        {
            Assert.Equal(System.Net.HttpStatusCode.NoContent, joined.StatusCode);
        }

        await polling.SubscribeAsync(2, "three.end");
        await UntilEveryNodeSeesAsync("three.job", Key("three", "w"), [1, 1, 1]);

        List<string> sent = await PublishFromEveryNodeAsync("three", count: 60);

        List<string> atPolling = [];
        int markers = 0;
        for (long ack = 0; markers < 3;)
        {
            PollResult poll = await polling.PollAsync(ack);
            foreach (Frame message in poll.Messages)
            {
                markers += message.Sid == 2 ? 1 : 0;
                if (message.Sid == 1 && !message.Text.StartsWith("end", StringComparison.Ordinal))
                {
                    atPolling.Add(message.Text);
                }
            }

            ack = poll.Count > 0 ? poll.LastSequence : ack;
        }

        List<string>[] got = [await tcp0.UntilMarkersAsync(3), await tcp1.UntilMarkersAsync(3), atPolling];
        Assert.Equal(sent.Order(), got.SelectMany(g => g).Order());
        Assert.All(got, g => Assert.NotEmpty(g));
        await DisposeAllAsync([tcp0, tcp1]);
    }

    [Fact]
    public async Task On_a_history_topic_each_publication_reaches_one_member_in_all_after_its_round_trip_through_redis()
    {
        Member[] members = [await Member.JoinAsync(Cluster[0], "kept", "w"), await Member.JoinAsync(Cluster[2], "kept", "w")];
        await UntilEveryNodeSeesAsync("kept.job", Key("kept", "w"), [1, 0, 1]);

        List<string> sent = await PublishFromEveryNodeAsync("kept", count: 40);

        List<string>[] got = await Task.WhenAll(members.Select(m => m.UntilMarkersAsync(3)));
        Assert.Equal(sent.Order(), got.SelectMany(g => g).Order());
        Assert.All(got, g => Assert.NotEmpty(g));
        await DisposeAllAsync(members);
    }

    [Fact]
    public async Task A_member_that_leaves_its_node_is_no_longer_chosen_there_and_the_rest_get_everything()
    {
        Member staying = await Member.JoinAsync(Cluster[1], "leave", "w");
        Member leaving = await Member.JoinAsync(Cluster[2], "leave", "w");
        await UntilEveryNodeSeesAsync("leave.job", Key("leave", "w"), [0, 1, 1]);

        await leaving.Client.UnsubscribeAsync(1);
        Assert.Empty(await leaving.Client.PingPongAsync()); // its node has written and announced the change
        await UntilEveryNodeSeesAsync("leave.job", Key("leave", "w"), [0, 1, 0]);
        List<string> sent = await PublishFromEveryNodeAsync("leave", count: 30);

        Assert.Equal(sent.Order(), (await staying.UntilMarkersAsync(3)).Order());
        Assert.Empty(await leaving.UntilMarkersAsync(3)); // its markers came, and nothing of the group before them
        await DisposeAllAsync([staying, leaving]);
    }

    [Fact]
    public async Task Another_identity_naming_the_same_group_on_other_nodes_draws_nothing_from_it()
    {
        Member[] alices = [await Member.JoinAsync(Cluster[0], "own", "w"), await Member.JoinAsync(Cluster[1], "own", "w")];
        Member[] mallorys = [await Member.JoinAsync(Cluster[1], "own", "w", QueueGroupCluster.MalloryToken), await Member.JoinAsync(Cluster[2], "own", "w", QueueGroupCluster.MalloryToken), await Member.JoinAsync(Cluster[2], "own", "w", QueueGroupCluster.MalloryToken)];
        await UntilEveryNodeSeesAsync("own.job", Key("own", "w"), [1, 1, 0]);
        await UntilEveryNodeSeesAsync("own.job", Key("own", "w", "mallory"), [0, 1, 2]);

        List<string> sent = await PublishFromEveryNodeAsync("own", count: 40);

        List<string>[] atAlice = await Task.WhenAll(alices.Select(m => m.UntilMarkersAsync(3)));
        List<string>[] atMallory = await Task.WhenAll(mallorys.Select(m => m.UntilMarkersAsync(3)));
        Assert.Equal(sent.Order(), atAlice.SelectMany(g => g).Order()); // alice's group lost nothing to mallory's, on any node
        Assert.Equal(sent.Order(), atMallory.SelectMany(g => g).Order()); // who may read own.* anyway: her group gets each once too
        await DisposeAllAsync([.. alices, .. mallorys]);
    }

    [Fact]
    public async Task A_request_to_a_group_of_responders_on_other_nodes_is_answered_once()
    {
        // Responders on nodes 1 and 2, each also a plain subscriber of svc.sum for the end marker; the caller on node 0.
        Member[] responders = [await Member.JoinAsync(Cluster[1], "sum", "r"), await Member.JoinAsync(Cluster[2], "sum", "r")];
        await UntilEveryNodeSeesAsync("sum.add", Key("sum", "r"), [0, 1, 1]);
        await using ProtocolClient caller = await ProtocolClient.OpenAsync(Cluster[0].Port, "caller", auth: AliceToken);
        string inbox = Identity.InboxPrefixOf("alice") + ".calls";
        await caller.SubscribeAsync(1, inbox + ".>");
        await caller.PingPongAsync();

        const int Calls = 40;
        for (int i = 0; i < Calls; i++)
        {
            await caller.PublishAsync("sum.add", $"call {i}", replyTo: $"{inbox}.{i}");
        }

        await caller.PublishAsync("sum.end", "end0");
        int[] answered = await Task.WhenAll(responders.Select(async responder =>
        {
            int count = 0;
            for (bool ended = false; !ended;)
            {
                Frame frame = await responder.Client.ReadMessageAsync();
                ended = frame.Sid == 2;
                if (frame.Sid == 1 && frame.ReplyTo is { } replyTo)
                {
                    await responder.Client.PublishAsync(replyTo, "re: " + frame.Text);
                    count++;
                }
            }

            await responder.Client.PublishAsync(inbox + ".done", "done"); // after its answers, on their path
            return count;
        }));

        var replies = new List<string>();
        for (int done = 0; done < responders.Length;)
        {
            Frame reply = await caller.ReadMessageAsync();
            if (reply.Text == "done")
            {
                done++;
            }
            else
            {
                replies.Add(reply.Text);
            }
        }

        Assert.Equal(Calls, answered.Sum()); // each request reached one responder
        Assert.All(answered, count => Assert.True(count > 0, "a responder got none of 40: (1/2)^40"));
        Assert.Equal(Enumerable.Range(0, Calls).Select(i => $"re: call {i}").Order(), replies.Order()); // one answer each, and no second
        await DisposeAllAsync(responders);
    }

    [Fact]
    public async Task A_node_killed_with_its_members_stops_being_chosen_once_the_others_drop_it_and_then_nothing_is_lost()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(200));
        (BrokerProcess process, int doomedPort) = await cluster.StartProcessNodeAsync("--Herald:Cluster:HeartbeatInterval=00:00:00.200");
        await using BrokerProcess doomed = process;
        Member surviving = await Member.JoinAsync(cluster[1], "dies", "w", token: null);
        Member onDoomed = await Member.JoinAsync(doomedPort, "dies", "w");
        string key = Key("dies", "w", "anonymous");
        await Until.True(() => Elsewhere(cluster[0], "dies.job", key).Values.Order().SequenceEqual([1, 1]) && Elsewhere(cluster[1], "dies.job", key).Count == 1, "both nodes know the doomed node's member");
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        const int Count = 60;
        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync("dies.job", $"before {i}");
        }

        await publisher.PublishAsync("dies.end", "end");
        List<string>[] before = await Task.WhenAll(surviving.UntilMarkersAsync(1), onDoomed.UntilMarkersAsync(1));
        Assert.Equal(Count, before[0].Count + before[1].Count);
        Assert.NotEmpty(before[1]); // the other process's member was chosen too: (1/2)^60 that it was not

        doomed.Kill();
        await Until.True(() => Elsewhere(cluster[0], "dies.job", key).Count == 1 && Elsewhere(cluster[1], "dies.job", key).Count == 0, "both nodes drop the killed node's member (three silent heartbeats)");
        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync("dies.job", $"after {i}");
        }

        await publisher.PublishAsync("dies.end", "end");
        Assert.Equal(Enumerable.Range(0, Count).Select(i => $"after {i}"), await surviving.UntilMarkersAsync(1)); // none lost to the dead node
        await DisposeAllAsync([surviving]);
    }

    [Fact]
    public async Task Varz_shows_how_many_groups_and_members_each_node_holds_as_every_node_knows_it()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(200));
        var members = new List<ProtocolClient>();
        foreach ((int node, string group) in new[] { (0, "a"), (0, "a"), (0, "b"), (1, "a") })
        {
            ProtocolClient member = await ProtocolClient.OpenAsync(cluster[node].Port, $"member-{group}", capabilities: Queues);
            await member.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "view.job"u8, queue: Encoding.UTF8.GetBytes(group)));
            Assert.Empty(await member.PingPongAsync()); // its node has written and announced it
            members.Add(member);
        }

        // Node 0 holds groups a (2 members) and b (1); node 1 holds a (1). Each node says so of itself and of the other.
        await UntilVarzAsync(cluster, [(2, 3), (1, 1)], "every node shows both nodes' groups");

        foreach (ProtocolClient member in members.Take(3))
        {
            await member.DisposeAsync(); // node 0's members leave
        }

        await UntilVarzAsync(cluster, [(0, 0), (1, 1)], "every node shows node 0 without groups");
        await members[3].DisposeAsync();
    }

    /// <summary>Waits until every node's <c>/varz</c> shows, for each node in turn, <c>(groups, group_members)</c> as <paramref name="expected"/>.</summary>
    private static async Task UntilVarzAsync(TestCluster cluster, (int Groups, int Members)[] expected, string what)
    {
        string[] ids = [.. cluster.Nodes.Select(node => node.Engine().NodeId.ToString("x16", System.Globalization.CultureInfo.InvariantCulture))];
        string wanted = string.Join(", ", cluster.Nodes.SelectMany(_ => expected.Select((e, i) => $"{i}:{e.Groups}/{e.Members}")).Order());
        await Until.Value(
            async () =>
            {
                var seen = new List<string>();
                foreach (TestBroker node in cluster.Nodes)
                {
                    using var varz = System.Text.Json.JsonDocument.Parse(await node.Monitoring.GetStringAsync("/varz"));
                    foreach (System.Text.Json.JsonElement member in varz.RootElement.GetProperty("cluster").GetProperty("nodes").EnumerateArray())
                    {
                        int index = Array.IndexOf(ids, member.GetProperty("id").GetString());
                        seen.Add($"{index}:{member.GetProperty("groups").GetInt32()}/{member.GetProperty("group_members").GetInt32()}");
                    }
                }

                return string.Join(", ", seen.Order());
            },
            seen => seen == wanted,
            what);
    }

    /// <summary>Publishes <paramref name="count"/> publications on <c>{name}.job</c> from a client of every node, then each its marker; returns what was sent.</summary>
    private async Task<List<string>> PublishFromEveryNodeAsync(string name, int count)
    {
        var sent = new List<string>();
        for (int node = 0; node < Cluster.Nodes.Length; node++)
        {
            await using ProtocolClient publisher = await ProtocolClient.OpenAsync(Cluster[node].Port, $"publisher-{node}", auth: AliceToken);
            for (int i = 0; i < count; i++)
            {
                string text = $"{node}:{i}";
                await publisher.PublishAsync($"{name}.job", text);
                sent.Add(text);
            }

            await publisher.PublishAsync($"{name}.end", $"end{node}");
            Assert.Empty(await publisher.PingPongAsync()); // taken (and sent on) before the connection goes
        }

        return sent;
    }

    /// <summary>
    /// Waits until every node's router holds, for the group <paramref name="key"/>, the members each other node has
    /// (<paramref name="membersPerNode"/>, by node index): what it chooses among.
    /// </summary>
    private async Task UntilEveryNodeSeesAsync(string topic, string key, int[] membersPerNode)
    {
        ulong[] ids = [.. Cluster.Nodes.Select(n => n.Engine().NodeId)];
        await Until.True(
            () =>
            {
                bool all = true;
                for (int node = 0; node < Cluster.Nodes.Length && all; node++)
                {
                    Dictionary<ulong, int> seen = Elsewhere(Cluster[node], topic, key);
                    Dictionary<ulong, int> expected = Enumerable.Range(0, ids.Length).Where(i => i != node && membersPerNode[i] > 0).ToDictionary(i => ids[i], i => membersPerNode[i]);
                    all = seen.Count == expected.Count && expected.All(e => seen.GetValueOrDefault(e.Key) == e.Value);
                }

                return all;
            },
            $"the nodes all learn the members of '{key}'");
    }

    internal static Dictionary<ulong, int> Elsewhere(TestBroker node, string topic, string key) =>
        node.Services.GetRequiredService<TopicRouter>().Match(topic.AsSpan())
            .Where(s => s.Node != 0 && s.Group == key)
            .ToDictionary(s => s.Node, s => s.Members);

    internal static string Key(string name, string queue, string identity = "alice") => Subscription.GroupKey(identity, name + ".*", queue);

    private static async Task<ProtocolClient> PlainAsync(TestBroker node, string pattern)
    {
        ProtocolClient client = await ProtocolClient.OpenAsync(node.Port, "plain", auth: AliceToken);
        await client.SubscribeAsync(1, pattern);
        await client.PingPongAsync();
        return client;
    }

    private static async Task<List<string>> UntilMarkersAsync(ProtocolClient client, string name, int publishers)
    {
        var got = new List<string>();
        for (int markers = 0; markers < publishers;)
        {
            Frame message = await client.ReadMessageAsync();
            if (message.Topic == $"{name}.end")
            {
                markers++;
            }
            else
            {
                got.Add(message.Text);
            }
        }

        return got;
    }

    private static async Task DisposeAllAsync(IEnumerable<Member> members)
    {
        foreach (Member member in members)
        {
            await member.Client.DisposeAsync();
        }
    }

    /// <summary>A connection with one member of group <c>queue</c> on <c>{name}.*</c> (sid 1) and a plain subscription to <c>{name}.end</c> (sid 2).</summary>
    internal sealed record Member(ProtocolClient Client, string Name)
    {
        public static Task<Member> JoinAsync(TestBroker node, string name, string queue, string? token = AliceToken) => JoinAsync(node.Port, name, queue, token);

        public static async Task<Member> JoinAsync(int port, string name, string queue, string? token = null)
        {
            ProtocolClient client = await ProtocolClient.OpenAsync(port, $"{name}-member", capabilities: Queues, auth: token);
            await client.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, Encoding.UTF8.GetBytes(name + ".*"), queue: Encoding.UTF8.GetBytes(queue)));
            await client.SubscribeAsync(2, name + ".end");
            Assert.Empty(await client.PingPongAsync()); // live on every node, and its group written and announced
            return new Member(client, name);
        }

        /// <summary>What the group delivered to this member until the end markers of <paramref name="publishers"/> publishers came (its plain subscription).</summary>
        public async Task<List<string>> UntilMarkersAsync(int publishers)
        {
            var got = new List<string>();
            for (int markers = 0; markers < publishers;)
            {
                Frame message = await Client.ReadMessageAsync();
                if (message.Sid == 2)
                {
                    markers++;
                }
                else if (message.Topic != $"{Name}.end")
                {
                    got.Add(message.Text);
                }
            }

            return got;
        }
    }
}
