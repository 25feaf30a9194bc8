using System.IdentityModel.Tokens.Jwt;
using System.Security.Claims;
using System.Text;
using Herald.Broker.Engines;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.IdentityModel.Tokens;
using Xunit.Abstractions;

namespace Herald.Broker.Tests.Presence;

/// <summary>
/// Presence over real sockets (spec §15): join and leave with their events in order with the member's publications,
/// the leave of each way a subscription ends, PRESENCE's pages and occupancy, the suppression of a large topic's
/// events, the permissions and limits an adversary meets, and a join/leave storm a bystander does not feel.
/// </summary>
public sealed class PresenceTests(ITestOutputHelper output)
{
    private const Capabilities Caps = Capabilities.Headers | Capabilities.Presence;
    private const string Secret = "a-test-secret-of-at-least-thirty-two-bytes!";

    public static TheoryData<string> Transports => ["tcp", "websocket"];

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_join_arrives_before_the_members_publications_and_its_leave_after_them(string transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        await using ProtocolClient watcher = await ConnectAsync(broker, transport);
        WelcomeFrame welcome = await watcher.HelloAsync("watcher", Caps);
        Assert.True((welcome.Capabilities & Capabilities.Presence) != 0, "presence granted with headers");
        await watcher.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
        await watcher.BarrierAsync();

        await using ProtocolClient member = await ConnectAsync(broker, transport);
        await member.SendAsync(w => FrameWriter.WriteHello(w, "member", Caps, info: "Alice"));
        Assert.Equal(FrameType.Welcome, (await member.ReadAsync()).Type);
        await member.SubscribeAsync(7, "room.1", SubscribeOptions.Join);
        await member.PublishAsync("room.1", "hello");
        await member.PublishAsync("room.1", "bye");
        await member.UnsubscribeAsync(7);
        await member.BarrierAsync();

        Frame join = await watcher.ReadMessageAsync();
        Assert.Equal(["join"], join.Header("Herald-Presence"));
        Assert.Equal(1u, join.Sid);
        Assert.Equal("Alice", join.Text);
        Assert.Equal(["1"], join.Header("Herald-Occupancy"));
        Assert.Equal([""], join.Header("Herald-Identity")); // authentication off
        string client = Assert.Single(join.Header("Herald-Client"));
        Assert.Equal("hello", (await watcher.ReadMessageAsync()).Text);
        Assert.Equal("bye", (await watcher.ReadMessageAsync()).Text);
        Frame leave = await watcher.ReadMessageAsync();
        Assert.Equal(["leave"], leave.Header("Herald-Presence"));
        Assert.Equal([client], leave.Header("Herald-Client"));
        Assert.Equal(["unsubscribe"], leave.Header("Herald-Reason"));
        Assert.Equal(["0"], leave.Header("Herald-Occupancy"));
        Assert.Empty(await watcher.BarrierAsync());
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_disconnect_is_a_leave_and_a_connection_joined_twice_is_one_member(string transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(broker.Port, "watcher", capabilities: Caps);
        await watcher.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
        await watcher.BarrierAsync();

        ProtocolClient member = await ConnectAsync(broker, transport);
        await member.HelloAsync("member", Caps);
        await member.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        await member.SubscribeAsync(2, "room.1", SubscribeOptions.Join);
        await member.UnsubscribeAsync(1); // still a member through sid 2
        await member.BarrierAsync();
        Frame join = await watcher.ReadMessageAsync();
        Assert.Equal(["join"], join.Header("Herald-Presence"));
        PresenceReplyFrame during = await watcher.PresenceAsync(1, "room.1", 10);
        Assert.Equal(1ul, during.Members);
        await member.DisposeAsync();

        Frame leave = await watcher.ReadMessageAsync();
        Assert.Equal(["leave"], leave.Header("Herald-Presence"));
        Assert.Equal(["disconnect"], leave.Header("Herald-Reason"));
        Assert.Equal(0ul, (await watcher.PresenceAsync(2, "room.1", 10)).Members);
    }

    [Fact]
    public async Task A_member_closed_as_a_slow_consumer_leaves()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => (o.Limits.MaxPendingBytes, o.Limits.MaxFrameBytes, o.Tcp.SendBufferBytes) = (256 * 1024, 64 * 1024, 4096));
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(broker.Port, "watcher", capabilities: Caps);
        await watcher.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
        await watcher.BarrierAsync();
        await using ProtocolClient stalled = await ProtocolClient.OpenAsync(broker.Port, "stalled", receiveBufferSize: 4096, capabilities: Caps);
        await stalled.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        await stalled.SubscribeAsync(2, "flood");
        await stalled.BarrierAsync(); // joined; from now on it reads nothing
        Assert.Equal(["join"], (await watcher.ReadMessageAsync()).Header("Herald-Presence"));

        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
        List<Frame> seen = await Until.Value(
            async () =>
            {
                await publisher.PublishAsync("flood", new byte[32 * 1024]);
                await publisher.BarrierAsync();
                return await watcher.BarrierAsync();
            },
            frames => frames.Count > 0,
            "the stalled member's leave");
        Frame leave = Assert.Single(seen);
        Assert.Equal(["leave"], leave.Header("Herald-Presence"));
        Assert.Equal(["disconnect"], leave.Header("Herald-Reason"));
    }

    [Fact]
    public async Task Presence_is_read_in_pages_ordered_by_client_and_the_occupancy_alone_for_limit_0()
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        var members = new List<ProtocolClient>();
        try
        {
            for (int i = 0; i < 5; i++)
            {
                ProtocolClient m = await ProtocolClient.ConnectAsync(broker.Port);
                members.Add(m);
                await m.SendAsync(w => FrameWriter.WriteHello(w, "m", Caps, info: $"member {i}"));
                await m.ReadAsync();
                await m.SubscribeAsync(1, "doc.42", SubscribeOptions.Join);
                await m.BarrierAsync();
            }

            await using ProtocolClient reader = await ProtocolClient.OpenAsync(broker.Port, "reader", capabilities: Caps);
            PresenceReplyFrame occupancy = await reader.PresenceAsync(1, "doc.42", 0);
            Assert.Equal((5ul, 1ul, 0, (string?)null), (occupancy.Members, occupancy.Identities, occupancy.Entries.Count, occupancy.Next));

            var seen = new List<string>();
            string? cursor = null;
            uint request = 2;
            do
            {
                PresenceReplyFrame page = await reader.PresenceAsync(request++, "doc.42", 2, cursor);
                Assert.True(page.Entries.Count <= 2);
                seen.AddRange(page.Entries.Select(e => e.Client));
                Assert.All(page.Entries, e => Assert.StartsWith("member ", e.Info, StringComparison.Ordinal));
                cursor = page.Next;
            }
            while (cursor is not null);

            Assert.Equal(5, seen.Count);
            Assert.Equal(seen.Order(StringComparer.Ordinal), seen);
            Assert.Equal(seen.Count, seen.Distinct().Count());
            Assert.Equal(ErrorCode.InvalidTopic, (await reader.PresenceAsync(99, "doc.*", 10)).Code);
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
    public async Task Above_MaxEventsMembers_one_suppressed_event_then_none_until_resumed_at_half()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.Presence.MaxEventsMembers = 4);
        IPresence presence = broker.Services.GetRequiredService<IPresence>();
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(broker.Port, "watcher", capabilities: Caps);
        await watcher.SubscribeAsync(1, "hall", SubscribeOptions.PresenceEvents);
        await watcher.BarrierAsync();
        var members = new List<ProtocolClient>();
        for (int i = 0; i < 6; i++)
        {
            ProtocolClient m = await ProtocolClient.OpenAsync(broker.Port, "m", capabilities: Caps);
            members.Add(m);
            await m.SubscribeAsync(1, "hall", SubscribeOptions.Join);
            await m.BarrierAsync();
        }

        for (int i = 0; i < 4; i++)
        {
            await members[i].UnsubscribeAsync(1);
            await members[i].BarrierAsync();
        }

        List<Frame> events = await watcher.BarrierAsync();
        string[] kinds = [.. events.Select(e => e.Header("Herald-Presence").Single() + "@" + e.Header("Herald-Occupancy").Single())];
        output.WriteLine(string.Join(", ", kinds));
        // Joins to 4 sent; the 5th says suppressed; the 6th join and the leaves down to 3 are not sent; at 2 (half of 4): resumed.
        Assert.Equal(["join@1", "join@2", "join@3", "join@4", "suppressed@5", "resumed@2"], kinds);
        PresenceCounts counts = presence.Counts;
        output.WriteLine($"events {counts.Events}, suppressed {counts.Suppressed}");
        Assert.Equal(6, counts.Events);
        Assert.Equal(6, counts.Suppressed); // not sent as themselves: the joins to 5 and 6, the leaves to 5, 4, 3 and 2
        foreach (ProtocolClient m in members)
        {
            await m.DisposeAsync();
        }
    }

    [Fact]
    public async Task An_identity_without_presence_rights_is_refused_and_learns_nothing_not_even_the_count()
    {
        await using TestBroker broker = await PresenceIdentities.StartBrokerAsync();
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(broker.Port, "alice", capabilities: Caps, auth: "alice-token");
        await alice.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        await alice.BarrierAsync();
        await using ProtocolClient eve = await ProtocolClient.OpenAsync(broker.Port, "eve", capabilities: Caps, auth: "eve-token");

        PresenceReplyFrame read = await eve.PresenceAsync(5, "room.1", 100);
        Assert.Equal((ErrorCode.PermissionDenied, 0ul, 0ul, 0, (string?)null), (read.Code, read.Members, read.Identities, read.Entries.Count, read.Next));
        PresenceReplyFrame count = await eve.PresenceAsync(6, "room.1", 0);
        Assert.Equal((ErrorCode.PermissionDenied, 0ul), (count.Code, count.Members));

        await eve.SubscribeAsync(8, "room.1", SubscribeOptions.Join);
        await eve.SubscribeAsync(9, "room.1", SubscribeOptions.PresenceEvents);
        List<Frame> refusals = await eve.BarrierAsync();
        Assert.Equal([(ErrorCode.PermissionDenied, 8u), (ErrorCode.PermissionDenied, 9u)], refusals.Select(f => (f.Error!.Value.Code, f.Error.Value.Sid)));
        Assert.Equal(1ul, (await alice.PresenceAsync(1, "room.1", 100)).Members); // eve is not there
        await eve.PublishAsync("room.1", "still connected");
        await eve.BarrierAsync();
    }

    [Fact]
    public async Task An_identity_at_MaxPerIdentity_gets_PresenceFull_while_another_identity_still_joins()
    {
        await using TestBroker broker = await PresenceIdentities.StartBrokerAsync(o => o.Presence.MaxPerIdentity = 3);
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(broker.Port, "alice", capabilities: Caps, auth: "alice-token");
        await using ProtocolClient alice2 = await ProtocolClient.OpenAsync(broker.Port, "alice", capabilities: Caps, auth: "alice-token");
        await alice.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        await alice.SubscribeAsync(2, "room.2", SubscribeOptions.Join);
        Assert.Empty(await alice.BarrierAsync()); // both joined before the other connection goes on (connections run concurrently)
        await alice2.SubscribeAsync(3, "room.3", SubscribeOptions.Join);

        await alice2.SubscribeAsync(4, "room.4", SubscribeOptions.Join); // the identity's 4th entry, on its other connection
        Frame full = Assert.Single(await alice2.BarrierAsync());
        Assert.Equal((ErrorCode.PresenceFull, false, 4u), (full.Error!.Value.Code, full.Error.Value.Fatal, full.Error.Value.Sid));
        Assert.Contains("MaxPerIdentity", full.Error.Value.Message, StringComparison.Ordinal);
        Assert.Empty(await alice.BarrierAsync());

        await using ProtocolClient bob = await ProtocolClient.OpenAsync(broker.Port, "bob", capabilities: Caps, auth: "bob-token");
        await bob.SubscribeAsync(1, "room.4", SubscribeOptions.Join);
        Assert.Empty(await bob.BarrierAsync());
        PresenceReplyFrame room4 = await bob.PresenceAsync(1, "room.4", 10);
        Assert.Equal(["bob"], room4.Entries.Select(e => e.Identity));
        Assert.Equal(4, broker.Services.GetRequiredService<IPresence>().Counts.Entries);
    }

    [Fact]
    public async Task The_herald_info_claim_replaces_HELLOs_info_and_a_refresh_without_join_is_a_revoked_leave()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Auth.Mode = AuthMode.Jwt;
            o.Security.Auth.FailureDelay = TimeSpan.Zero;
            o.Security.Auth.Jwt.HmacSecret = Secret;
        });
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(broker.Port, "w", capabilities: Caps, auth: Jwt("watcher", join: false, info: null));
        await watcher.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
        await watcher.BarrierAsync();
        await using ProtocolClient member = await ProtocolClient.ConnectAsync(broker.Port);
        await member.SendAsync(w => FrameWriter.WriteHello(w, "m", Caps, Jwt("alice", join: true, info: "Alice (verified)"), info: "I am Bob"));
        Assert.Equal(FrameType.Welcome, (await member.ReadAsync()).Type);
        await member.SubscribeAsync(3, "room.1", SubscribeOptions.Join);
        await member.BarrierAsync();

        await member.SendAsync(w => FrameWriter.WriteHello(w, "m", Caps, Jwt("alice", join: false, info: null)));
        List<Frame> answers = await member.BarrierAsync();
        Assert.Contains(answers, f => f.Type == FrameType.Error && f.Error!.Value.Code == ErrorCode.PermissionDenied && f.Error.Value.Sid == 3);

        Frame join = await watcher.ReadMessageAsync();
        Assert.Equal(("Alice (verified)", "alice"), (join.Text, join.Header("Herald-Identity").Single()));
        Frame leave = await watcher.ReadMessageAsync();
        Assert.Equal(["revoked"], leave.Header("Herald-Reason"));
    }

    [Fact]
    public async Task A_join_leave_storm_of_10000_leaves_a_bystanders_messages_flowing_and_no_entry_behind()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.Limits.SubscriptionRatePerSecond = 0);
        IPresence presence = broker.Services.GetRequiredService<IPresence>();
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(broker.Port, "watcher", capabilities: Caps);
        await watcher.SubscribeAsync(1, "storm", SubscribeOptions.PresenceEvents);
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander");
        await bystander.SubscribeAsync(1, "news");
        await bystander.BarrierAsync();
        await watcher.BarrierAsync();

        const int Connections = 4;
        const int Rounds = 2_500; // 4 x 2,500 = 10,000 joins and as many leaves
        var stormers = new ProtocolClient[Connections];
        for (int c = 0; c < Connections; c++)
        {
            stormers[c] = await ProtocolClient.OpenAsync(broker.Port, "stormer", capabilities: Caps);
        }

        Task[] storm = [.. stormers.Select(s => Task.Run(async () =>
        {
            for (uint r = 1; r <= Rounds; r++)
            {
                await s.SubscribeAsync(r, "storm", SubscribeOptions.Join);
                await s.UnsubscribeAsync(r);
            }

            await s.BarrierAsync();
        }))];
        int delivered = 0;
        for (int i = 0; i < 50; i++)
        {
            await bystander.PublishAsync("news", $"n{i}");
            delivered += (await bystander.BarrierAsync()).Count(f => f.Type == FrameType.Message);
        }

        await Task.WhenAll(storm);
        List<Frame> events = [];
        await Until.True(async () =>
        {
            events.AddRange(await watcher.BarrierAsync());
            return events.Count == 2 * Connections * Rounds;
        }, "every join and leave reached the events subscriber");

        PresenceCounts counts = presence.Counts;
        output.WriteLine($"bystander got {delivered}/50; events {events.Count}; entries after {counts.Entries}, topics {counts.Topics}");
        Assert.Equal(50, delivered);
        Assert.Equal(Connections * Rounds, events.Count(e => e.Header("Herald-Presence").Single() == "join"));
        Assert.Equal(0, counts.Entries);
        Assert.Equal(1, counts.Topics); // the watcher's topic; no member left behind
        Assert.Equal(0ul, (await watcher.PresenceAsync(1, "storm", 0)).Members);
        foreach (ProtocolClient s in stormers)
        {
            await s.DisposeAsync();
        }
    }

    [Fact]
    public async Task Join_without_the_capability_or_on_a_wildcard_is_fatal_and_a_cluster_setting_withholds_nothing_here()
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        await using ProtocolClient plain = await ProtocolClient.OpenAsync(broker.Port, "plain", capabilities: Capabilities.Headers);
        await plain.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        await plain.ExpectClosedWithAsync(ErrorCode.MalformedFrame);

        await using ProtocolClient wild = await ProtocolClient.OpenAsync(broker.Port, "wild", capabilities: Caps);
        await wild.SubscribeAsync(1, "room.*", SubscribeOptions.PresenceEvents);
        await wild.ExpectClosedWithAsync(ErrorCode.MalformedFrame);

        await using ProtocolClient noHeaders = await ProtocolClient.ConnectAsync(broker.Port);
        WelcomeFrame welcome = await noHeaders.HelloAsync("nh", Capabilities.Presence);
        Assert.Equal(Capabilities.None, welcome.Capabilities & Capabilities.Presence); // only with headers
    }

    private static Task<ProtocolClient> ConnectAsync(TestBroker broker, string transport) =>
        transport == "websocket" ? ProtocolClient.ConnectWebSocketAsync(broker.HttpPort) : ProtocolClient.ConnectAsync(broker.Port);

    private static string Jwt(string subject, bool join, string? info)
    {
        var claims = new List<Claim> { new("sub", subject), new("herald_sub", "room.>"), new("herald_pub", "room.>"), new("herald_presence", "room.>") };
        if (join)
        {
            claims.Add(new Claim("herald_join", "room.>"));
        }

        if (info is not null)
        {
            claims.Add(new Claim("herald_info", info));
        }

        DateTime now = DateTime.UtcNow;
        var token = new JwtSecurityToken(null, null, claims, now.AddMinutes(-1), now.AddHours(1),
            new SigningCredentials(new SymmetricSecurityKey(Encoding.UTF8.GetBytes(Secret)), SecurityAlgorithms.HmacSha256));
        return new JwtSecurityTokenHandler().WriteToken(token);
    }
}
