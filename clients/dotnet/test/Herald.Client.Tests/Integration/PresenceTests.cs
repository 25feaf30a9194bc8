using System.Buffers;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Client.Protocol;
using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;
using Herald.Testing;
using Xunit.Abstractions;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// Presence (spec §15, CLIENTS.md step 13) through the SDK against the real broker, over TCP, WebSocket and long-poll: a join seen
/// by another client's query and events, pages over more members than one page holds, events in their turn among the
/// messages, a leave on dispose, a join again after a network cut, and the refusals: an identity without the rights,
/// a topic full, a client info over the broker's bound, a broker without presence.
/// </summary>
/// <remarks>
/// Nothing here waits on a clock: what must arrive is read (bounded by <see cref="Wait"/>), and what the broker holds is
/// read from its own <c>/varz</c> (this test's broker only).
/// </remarks>
public class PresenceTests(ITestOutputHelper output)
{
    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    private static Task<TestBroker> StartAsync(Action<HeraldOptions>? also = null) => TestBroker.StartAsync(o =>
    {
        o.Monitoring.Port = 0; // /varz: the broker's own presence counts
        also?.Invoke(o);
    });

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_join_is_seen_by_another_clients_query_and_occupancy_and_the_member_leaves_when_it_unsubscribes(HeraldTransport transport)
    {
        await using TestBroker broker = await StartAsync();
        string topic = Topics.Unique("room");
        await using var member = new HeraldClient(broker.Url(transport), new HeraldClientOptions { Info = """{"name":"Ada"}""" });
        await using var reader = new HeraldClient(broker.Url(transport));

        HeraldSubscription joined = await member.SubscribeAsync(topic, new SubscriptionOptions { Join = true });

        Assert.True(member.ServerInfo!.Presence);
        Assert.True(joined.Joins);
        HeraldPresencePage page = await reader.PresenceAsync(topic);
        HeraldPresenceMember only = Assert.Single(page.Members);
        Assert.Equal(("", """{"name":"Ada"}"""), (only.Identity, only.Info));
        Assert.Null(page.Next);
        Assert.Equal((1L, 1L), (page.Occupancy.Members, page.Occupancy.Identities));
        HeraldOccupancy occupancy = await reader.OccupancyAsync(topic);
        Assert.Equal((1L, 1L), (occupancy.Members, occupancy.Identities));

        await joined.UnsubscribeAsync();
        await member.FlushAsync(Wait.Token()); // the broker has the UNSUBSCRIBE: the member left

        Assert.Equal(0L, (await reader.OccupancyAsync(topic)).Members);
        Assert.Empty((await reader.PresenceAsync(topic)).Members);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task Events_take_their_turn_among_the_messages_and_never_arrive_as_messages(HeraldTransport transport)
    {
        await using TestBroker broker = await StartAsync();
        string topic = Topics.Unique("room");
        await using var watcher = new HeraldClient(broker.Url(transport));
        await using var member = new HeraldClient(broker.Url(transport), new HeraldClientOptions { Info = "Grace" });
        var seen = new List<string>();
        var all = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        void Saw(string what)
        {
            lock (seen)
            {
                seen.Add(what);
                if (seen.Count == 4)
                {
                    all.TrySetResult();
                }
            }
        }

        await watcher.SubscribeAsync(topic, m => Saw("message " + m.GetString()), new SubscriptionOptions
        {
            OnPresence = e => Saw($"{e.Kind} {e.Info ?? e.Reason} {e.Occupancy}"),
        });

        HeraldSubscription joined = await member.SubscribeAsync(topic, new SubscriptionOptions { Join = true });
        await member.PublishAsync(topic, "hi");
        await member.PublishAsync(topic, "bye");
        await member.FlushAsync(Wait.Token()); // long-poll: the publications' POST answered before the DELETE goes (TCP: in order anyway)
        await joined.UnsubscribeAsync();
        await all.Task.Within();

        // The join before what the member published after joining, the leave after what it published before leaving (spec §15.2).
        Assert.Equal(["Join Grace 1", "message hi", "message bye", "Leave unsubscribe 0"], seen);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task An_enumerated_subscription_reads_typed_events_and_a_member_that_disposes_leaves_with_reason_disconnect(HeraldTransport transport)
    {
        await using TestBroker broker = await StartAsync();
        string topic = Topics.Unique("room");
        await using var watcher = new HeraldClient(broker.Url(transport));
        var member = new HeraldClient(broker.Url(transport), new HeraldClientOptions { Info = "Linus" });
        HeraldSubscription watching = await watcher.SubscribeAsync(topic, new SubscriptionOptions { PresenceEvents = true });

        await member.SubscribeAsync(topic, new SubscriptionOptions { Join = true });
        HeraldPresenceEvent join = await watching.ReadPresenceEventAsync(Wait.Token());
        HeraldPresenceMember listed = Assert.Single((await watcher.PresenceAsync(topic)).Members);
        await member.DisposeAsync();
        HeraldPresenceEvent leave = await watching.ReadPresenceEventAsync(Wait.Token());

        Assert.Equal((HeraldPresenceEventKind.Join, topic, "", "Linus", (string?)null, 1L), (join.Kind, join.Topic, join.Identity, join.Info, join.Reason, join.Occupancy));
        Assert.Same(watching, join.Subscription);
        Assert.Equal(listed.Client, join.Client);
        Assert.Equal((HeraldPresenceEventKind.Leave, listed.Client, "disconnect", (string?)null, 0L), (leave.Kind, leave.Client, leave.Reason, leave.Info, leave.Occupancy));
        await watcher.PublishAsync(topic, "marker"); // the events never reached the message buffer: the marker is the first message
        Assert.Equal("marker", (await watching.ReadAsync(Wait.Token())).GetString());
        Assert.Equal(0, watching.DroppedPresenceEvents);
        HeraldSubscription plain = await watcher.SubscribeAsync(Topics.Unique("plain"));
        await Assert.ThrowsAsync<InvalidOperationException>(async () => await plain.ReadPresenceEventAsync());
    }

    [Fact]
    public async Task Pages_list_every_one_of_2500_members_once_in_client_order_with_the_occupancy_on_every_page()
    {
        const int Members = 2_500;
        await using TestBroker broker = await StartAsync(o => o.Presence.MaxPerIdentity = Members); // one anonymous identity
        string topic = Topics.Unique("hall");
        List<Socket> sockets = await JoinRawAsync(broker.TcpPort, topic, Members);
        try
        {
            await using var reader = new HeraldClient(broker.TcpUrl);
            await UntilAsync(async () => (await reader.OccupancyAsync(topic)).Members == Members, "every raw member joined");

            var pageSizes = new List<int>();
            string? cursor = null;
            var listed = new List<string>();
            do
            {
                HeraldPresencePage page = await reader.PresenceAsync(topic, limit: 1_000, cursor);
                Assert.Equal(Members, page.Occupancy.Members);
                Assert.Equal(1, page.Occupancy.Identities);
                pageSizes.Add(page.Members.Count);
                listed.AddRange(page.Members.Select(m => m.Client));
                cursor = page.Next;
            }
            while (cursor is not null);

            Assert.Equal([1_000, 1_000, 500], pageSizes);
            Assert.Equal(Members, listed.Distinct(StringComparer.Ordinal).Count());
            Assert.Equal(listed.Order(StringComparer.Ordinal), listed); // bytewise: client ids are ASCII
            var enumerated = new List<string>();
            await foreach (HeraldPresenceMember m in reader.PresenceMembersAsync(topic, pageSize: 300, Wait.Token()))
            {
                enumerated.Add(m.Client);
            }

            Assert.Equal(listed, enumerated);
            Assert.Single((await reader.PresenceAsync(topic, limit: 1)).Members);
            HeraldPresencePage occupancyOnly = await reader.PresenceAsync(topic, limit: 0);
            Assert.Equal((Members, 0), (occupancyOnly.Occupancy.Members, occupancyOnly.Members.Count));
            output.WriteLine($"{Members} members read in pages of {string.Join(", ", pageSizes)}; broker varz members {await VarzMembersAsync(broker)}");
        }
        finally
        {
            sockets.ForEach(s => s.Dispose());
        }
    }

    [Fact]
    public async Task After_a_network_cut_the_subscription_joins_again_as_a_new_member()
    {
        await using TestBroker broker = await StartAsync();
        await using var link = new CuttableLink(broker.TcpPort);
        string topic = Topics.Unique("room");
        await using var watcher = new HeraldClient(broker.TcpUrl);
        HeraldSubscription watching = await watcher.SubscribeAsync(topic, new SubscriptionOptions { PresenceEvents = true });
        await using var member = new HeraldClient($"tcp://127.0.0.1:{link.Port}", new HeraldClientOptions
        {
            Info = "Barbara",
            ReconnectDelay = TimeSpan.FromMilliseconds(20),
            MaxReconnectDelay = TimeSpan.FromMilliseconds(200),
        });
        var state = new StateWatcher(member);
        HeraldSubscription joined = await member.SubscribeAsync(topic, new SubscriptionOptions { Join = true });
        HeraldPresenceEvent first = await watching.ReadPresenceEventAsync(Wait.Token());

        link.Cut();
        HeraldPresenceEvent left = await watching.ReadPresenceEventAsync(Wait.Token());
        link.Restore();
        await state.WaitForAsync(ConnectionState.Connected, 2);
        HeraldPresenceEvent again = await watching.ReadPresenceEventAsync(Wait.Token());

        Assert.Equal((HeraldPresenceEventKind.Leave, first.Client, "disconnect"), (left.Kind, left.Client, left.Reason));
        Assert.Equal((HeraldPresenceEventKind.Join, "Barbara", 1L), (again.Kind, again.Info, again.Occupancy));
        Assert.NotEqual(first.Client, again.Client); // a new connection is a new member (spec §15.1)
        Assert.True(joined.IsActive);
        HeraldPresenceMember now = Assert.Single((await watcher.PresenceAsync(topic)).Members);
        Assert.Equal(again.Client, now.Client);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_join_past_the_topics_limit_throws_PresenceFull_ends_only_that_subscription_and_the_connection_stays(HeraldTransport transport)
    {
        await using TestBroker broker = await StartAsync(o => o.Presence.MaxMembersPerTopic = 1);
        string topic = Topics.Unique("small");
        await using var first = new HeraldClient(broker.TcpUrl);
        await using var second = new HeraldClient(broker.Url(transport));
        await first.SubscribeAsync(topic, new SubscriptionOptions { Join = true });
        HeraldSubscription plain = await second.SubscribeAsync(topic);

        var e = await Assert.ThrowsAsync<HeraldException>(() => second.SubscribeAsync(topic, new SubscriptionOptions { Join = true }));

        Assert.Equal((ErrorCode.PresenceFull, false), (e.ErrorCode, e.IsFatal));
        Assert.Equal(1L, (await second.OccupancyAsync(topic)).Members);
        await second.PublishAsync(topic, "still here");
        Assert.Equal("still here", (await plain.ReadAsync(Wait.Token())).GetString());
        Assert.Equal(ConnectionState.Connected, second.State);
    }

    [Fact]
    public async Task A_client_info_over_the_brokers_bound_is_refused_when_connecting_and_one_at_the_bound_is_shown()
    {
        await using TestBroker broker = await StartAsync();
        string topic = Topics.Unique("room");
        string atBound = new('i', ProtocolConstants.DefaultMaxPresenceInfoBytes);
        await using var over = new HeraldClient(broker.TcpUrl, new HeraldClientOptions { Info = atBound + "x", MaxReconnectAttempts = 0 });
        await using var at = new HeraldClient(broker.TcpUrl, new HeraldClientOptions { Info = atBound });

        var e = await Assert.ThrowsAsync<HeraldException>(() => over.ConnectAsync());
        await at.SubscribeAsync(topic, new SubscriptionOptions { Join = true });

        Assert.Equal((ErrorCode.MalformedFrame, true), (e.ErrorCode, e.IsFatal));
        Assert.Contains("max_presence_info", e.Message, StringComparison.Ordinal);
        Assert.Equal(atBound, Assert.Single((await at.PresenceAsync(topic)).Members).Info);
        Assert.Throws<ArgumentException>(() => new HeraldClient(broker.TcpUrl, new HeraldClientOptions { Info = new string('é', 40_000) }));
    }

    [Fact]
    public async Task A_broker_without_presence_is_told_before_anything_is_sent_and_the_connection_stays()
    {
        await using TestBroker broker = await StartAsync(o => o.Presence.Enabled = false);
        string topic = Topics.Unique("room");
        await using var client = new HeraldClient(broker.TcpUrl);
        HeraldSubscription plain = await client.SubscribeAsync(topic);

        var join = await Assert.ThrowsAsync<HeraldException>(() => client.SubscribeAsync(topic, new SubscriptionOptions { Join = true }));
        var query = await Assert.ThrowsAsync<HeraldException>(() => client.PresenceAsync(topic));
        await client.PublishAsync(topic, "still connected");

        Assert.False(client.ServerInfo!.Presence);
        Assert.Equal(ErrorCode.MalformedFrame, join.ErrorCode);
        Assert.Equal(ErrorCode.UnexpectedFrame, query.ErrorCode);
        Assert.Equal("still connected", (await plain.ReadAsync(Wait.Token())).GetString());
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task Wildcards_are_refused_locally_and_nothing_is_sent_that_would_close_the_connection(HeraldTransport transport)
    {
        await using TestBroker broker = await StartAsync();
        await using var client = new HeraldClient(broker.Url(transport));
        await client.ConnectAsync();

        await Assert.ThrowsAsync<ArgumentException>(() => client.SubscribeAsync("room.*", new SubscriptionOptions { Join = true }));
        await Assert.ThrowsAsync<ArgumentException>(() => client.SubscribeAsync("room.>", new SubscriptionOptions { OnPresence = _ => { } }));
        Assert.Equal(ErrorCode.InvalidTopic, (await Assert.ThrowsAsync<HeraldException>(() => client.PresenceAsync("room.*"))).ErrorCode);
        Assert.Equal(ConnectionState.Connected, client.State);
        Assert.True(client.ServerInfo!.Presence);
    }

    [Fact]
    public async Task Over_long_poll_a_client_info_over_the_brokers_bound_is_refused_when_the_session_is_created_and_not_retried()
    {
        await using TestBroker broker = await StartAsync();
        await using var over = new HeraldClient(broker.HttpUrl, new HeraldClientOptions { Info = new string('i', ProtocolConstants.DefaultMaxPresenceInfoBytes + 1) });

        var e = await Assert.ThrowsAsync<HeraldException>(() => over.ConnectAsync());

        Assert.Equal((400, "MalformedRequest"), (e.HttpStatus, e.ProblemCode));
    }

    /// <summary>
    /// Opens <paramref name="count"/> bare TCP connections that each say HELLO (headers and presence) and SUBSCRIBE with
    /// join, and read nothing back: a member is a connection (spec §15.1), and a socket is far cheaper than a client.
    /// </summary>
    private static async Task<List<Socket>> JoinRawAsync(int port, string topic, int count)
    {
        var frames = new ArrayBufferWriter<byte>();
        ClientFrames.Hello(frames, "raw-member", Capabilities.Headers | Capabilities.Presence);
        ClientFrames.Subscribe(frames, 1, Encoding.UTF8.GetBytes(topic), SubscribeOptions.Join);
        byte[] bytes = frames.WrittenSpan.ToArray();
        var sockets = new List<Socket>(count);
        for (int i = 0; i < count; i++)
        {
            var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            sockets.Add(socket);
            await socket.ConnectAsync(System.Net.IPAddress.Loopback, port);
            await socket.SendAsync(bytes);
        }

        return sockets;
    }

    private static async Task UntilAsync(Func<Task<bool>> condition, string what)
    {
        CancellationToken deadline = Wait.Token();
        while (!await condition())
        {
            Assert.False(deadline.IsCancellationRequested, $"Timed out waiting until {what}.");
            await Task.Delay(20, CancellationToken.None);
        }
    }

    /// <summary>The broker's own count of presence entries (<c>/varz</c> <c>presence.members</c>).</summary>
    internal static async Task<long> VarzMembersAsync(TestBroker broker)
    {
        using var http = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{broker.MonitoringPort}") };
        using JsonDocument varz = JsonDocument.Parse(await http.GetStringAsync("/varz"));
        return varz.RootElement.GetProperty("presence").GetProperty("members").GetInt64();
    }
}

/// <summary>
/// Presence's permissions (spec §10) through the SDK: alice may join and read <c>room.&gt;</c>; eve may subscribe and
/// publish there but has neither presence right. The broker's own count (<c>/varz</c>) shows what eve's attempts made it hold.
/// </summary>
public class PresencePermissionTests(ITestOutputHelper output)
{
    private const string Alice = "alice-presence-token-0123456789";
    private const string Eve = "eve-presence-token-0123456789";

    [Theory]
    [MemberData(nameof(PresenceTests.Transports), MemberType = typeof(PresenceTests))]
    public async Task An_identity_without_the_presence_rights_is_refused_learns_nothing_and_a_bystander_carries_on(HeraldTransport transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Monitoring.Port = 0;
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.FailureDelay = TimeSpan.FromMilliseconds(10);
            o.Security.Auth.Tokens.Add(new TokenOptions
            {
                Name = "alice",
                Sha256 = Sha256(Alice),
                Permissions = { Publish = { "room.>" }, Subscribe = { "room.>" }, Join = { "room.>" }, Presence = { "room.>" } },
            });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "eve", Sha256 = Sha256(Eve), Permissions = { Publish = { "room.>" }, Subscribe = { "room.>" } } });
        });
        string topic = "room." + Guid.NewGuid().ToString("N");
        await using var alice = new HeraldClient(broker.TcpUrl, new HeraldClientOptions { Credential = Alice, Info = "alice's info" });
        await using var eve = new HeraldClient(broker.Url(transport), new HeraldClientOptions { Credential = Eve });
        HeraldSubscription aliceIn = await alice.SubscribeAsync(topic, new SubscriptionOptions { Join = true });
        long before = await PresenceTests.VarzMembersAsync(broker);

        var read = await Assert.ThrowsAsync<HeraldException>(() => eve.PresenceAsync(topic));
        var count = await Assert.ThrowsAsync<HeraldException>(() => eve.OccupancyAsync(topic));
        var join = await Assert.ThrowsAsync<HeraldException>(() => eve.SubscribeAsync(topic, new SubscriptionOptions { Join = true }));
        var events = await Assert.ThrowsAsync<HeraldException>(() => eve.SubscribeAsync(topic, new SubscriptionOptions { PresenceEvents = true }));
        await eve.PublishAsync(topic, "eve is still connected");
        await eve.FlushAsync(Wait.Token());
        long after = await PresenceTests.VarzMembersAsync(broker);

        Assert.Equal([ErrorCode.PermissionDenied, ErrorCode.PermissionDenied, ErrorCode.PermissionDenied, ErrorCode.PermissionDenied], new[] { read, count, join, events }.Select(e => e.ErrorCode));
        Assert.Equal("eve is still connected", (await aliceIn.ReadAsync(Wait.Token())).GetString()); // the bystander's traffic flows
        HeraldPresenceMember only = Assert.Single((await alice.PresenceAsync(topic)).Members);
        Assert.Equal(("alice", "alice's info"), (only.Identity, only.Info));
        Assert.Equal((1L, 1L), (before, after)); // eve's refused join made the broker hold nothing
        Assert.Equal(ConnectionState.Connected, eve.State);
        output.WriteLine($"{transport}: broker presence entries before eve: {before}, after eve's 4 refused calls: {after}");
    }

    private static string Sha256(string token) => Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(token)));
}
