using System.Text;
using Herald.Broker.Delivery;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using ZstdSharp;

namespace Herald.Broker.Tests.Parity;

/// <summary>
/// Every session-level behaviour, written once and run against every transport through its
/// <see cref="TransportClient"/> adapter: what a client may do, what it is held to, and what it is told.
/// The bystander of each run is a client of another transport (<see cref="TransportClient.BystanderOf"/>); every
/// client ends with no error it was not answered with (<see cref="TransportClient.AssertNoneUnexpected"/>);
/// "nothing arrived" is always proved by a marker on the same path.
/// </summary>
public sealed class TransportParityTests
{
    private const string OwnerToken = "owner-token";
    private const string GuestToken = "guest-token";
    private const string RivalToken = "rival-token";

    [Theory]
    [MemberData(nameof(TransportClient.Transports), MemberType = typeof(TransportClient))]
    public async Task A_subscribe_the_identity_is_not_granted_is_refused_and_the_client_carries_on(string transport)
    {
        await using TestBroker broker = await StartWithIdentitiesAsync();
        await using TransportClient guest = await TransportClient.OpenAsync(transport, broker, GuestToken);
        await using TransportClient owner = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker, OwnerToken);

        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.SubscribeAsync(1, "owner.secret"));
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.SubscribeAsync(2, "owner.>"));
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.SubscribeAsync(3, ">"));
        Assert.Equal(Answer.Ok, await guest.SubscribeAsync(4, "guest.feed"));

        Assert.Equal(Answer.Ok, await owner.PublishAsync("owner.secret", "not for guests"));
        Assert.Equal(Answer.Ok, await owner.PublishAsync("guest.feed", "marker"));
        Assert.Empty(await guest.ReceiveUntilAsync("guest.feed"));
        TransportClient.AssertNoneUnexpected(guest, owner);
    }

    [Theory]
    [MemberData(nameof(TransportClient.Transports), MemberType = typeof(TransportClient))]
    public async Task A_publish_the_identity_is_not_granted_is_refused_and_reaches_no_one(string transport)
    {
        await using TestBroker broker = await StartWithIdentitiesAsync();
        await using TransportClient guest = await TransportClient.OpenAsync(transport, broker, GuestToken);
        await using TransportClient bystander = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker, OwnerToken);
        Assert.Equal(Answer.Ok, await bystander.SubscribeAsync(1, "owner.>"));
        Assert.Equal(Answer.Ok, await bystander.SubscribeAsync(2, "guest.>"));

        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.PublishAsync("owner.orders", "forged"));
        Assert.Equal(Answer.Ok, await guest.PublishAsync("guest.hello", "allowed"));
        Assert.Equal(Answer.Ok, await bystander.PublishAsync("owner.marker", "marker"));

        List<Frame> received = await bystander.ReceiveUntilAsync("owner.marker");
        Assert.Equal(["guest.hello"], received.Select(f => f.Topic));
        TransportClient.AssertNoneUnexpected(guest, bystander);
    }

    [Theory]
    [MemberData(nameof(TransportClient.TwoWayTransports), MemberType = typeof(TransportClient))] // SSE: a refused stream never starts (sse §1), so there is no session for the policy to end
    public async Task With_DisconnectOnPermissionDenied_a_refusal_ends_the_client_and_no_one_else(string transport)
    {
        await using TestBroker broker = await StartWithIdentitiesAsync(o => o.Security.DisconnectOnPermissionDenied = true);
        await using TransportClient guest = await TransportClient.OpenAsync(transport, broker, GuestToken);
        await using TransportClient bystander = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker, OwnerToken);
        Assert.Equal(Answer.Ok, await bystander.SubscribeAsync(1, "owner.>"));

        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: true), await guest.SubscribeAsync(1, "owner.secret"));
        Assert.Equal(ErrorCode.PermissionDenied, await guest.EndedWithAsync());

        Assert.Equal(Answer.Ok, await bystander.PublishAsync("owner.marker", "still here"));
        Assert.Empty(await bystander.ReceiveUntilAsync("owner.marker"));
        TransportClient.AssertNoneUnexpected(guest, bystander);
    }

    [Theory]
    [MemberData(nameof(TransportClient.Transports), MemberType = typeof(TransportClient))]
    public async Task Publishes_are_charged_to_the_rate_limit_per_message_and_none_is_lost(string transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.PublishRatePerSecond = 100;
            o.Limits.PublishBurst = 5;
        });
        await using TransportClient publisher = await TransportClient.OpenAsync(transport, broker);
        await using TransportClient subscriber = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker);
        Assert.Equal(Answer.Ok, await subscriber.SubscribeAsync(1, "rate.>"));

        // Twenty in one batch (one write, one request): fifteen over the burst, so the client is told once.
        byte[][] payloads = Enumerable.Range(0, 20).Select(i => Encoding.UTF8.GetBytes($"m{i}")).ToArray();
        Assert.Equal(Answer.Ok, await publisher.PublishAsync("rate.data", payloads));
        Assert.Equal([ErrorCode.RateLimited], publisher.Notices);

        Assert.Equal(Answer.Ok, await subscriber.PublishAsync("rate.end", "marker"));
        List<Frame> received = await subscriber.ReceiveUntilAsync("rate.end");
        Assert.Equal(payloads.Select(Encoding.UTF8.GetString), received.Select(f => f.Text));
        Assert.Empty(publisher.Unexpected); // its one notice is asserted above
        TransportClient.AssertNoneUnexpected(subscriber);
    }

    [Theory]
    [MemberData(nameof(TransportClient.Transports), MemberType = typeof(TransportClient))]
    public async Task The_subscription_limit_holds_per_client(string transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.Limits.MaxSubscriptionsPerConnection = 2);
        await using TransportClient client = await TransportClient.OpenAsync(transport, broker);
        await using TransportClient other = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker);
        Assert.Equal(Answer.Ok, await client.SubscribeAsync(1, "limit.a"));
        Assert.Equal(Answer.Ok, await client.SubscribeAsync(2, "limit.b"));

        Answer third = await client.SubscribeAsync(3, "limit.c");

        Assert.Equal(new Answer(ErrorCode.TooManySubscriptions, client.FatalErrorEndsSession), third);
        Assert.Equal(Answer.Ok, await other.SubscribeAsync(1, "limit.c")); // the limit is the client's, not the broker's
        if (!client.FatalErrorEndsSession)
        {
            Assert.Equal(Answer.Ok, await other.PublishAsync("limit.c", "not subscribed"));
            Assert.Equal(Answer.Ok, await other.PublishAsync("limit.b", "marker"));
            Assert.Empty(await client.ReceiveUntilAsync("limit.b"));
        }
        TransportClient.AssertNoneUnexpected(client, other);
    }

    [Theory]
    [MemberData(nameof(TransportClient.Transports), MemberType = typeof(TransportClient))]
    public async Task The_brokers_pattern_limit_is_a_refusal_and_the_client_stays(string transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.Limits.MaxTopics = 2);
        await using TransportClient holder = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker);
        await using TransportClient client = await TransportClient.OpenAsync(transport, broker);
        Assert.Equal(Answer.Ok, await holder.SubscribeAsync(1, "topics.a"));
        Assert.Equal(Answer.Ok, await holder.SubscribeAsync(2, "topics.b"));

        Assert.Equal(new Answer(ErrorCode.TooManyTopics, SessionEnded: false), await client.SubscribeAsync(1, "topics.c"));
        Assert.Equal(Answer.Ok, await client.SubscribeAsync(2, "topics.a")); // an existing pattern adds none
        Assert.Equal(Answer.Ok, await client.SubscribeAsync(3, "topics.b"));

        Assert.Equal(Answer.Ok, await holder.PublishAsync("topics.a", "hello"));
        Assert.Equal(Answer.Ok, await holder.PublishAsync("topics.b", "marker"));
        Assert.Equal(["hello"], (await client.ReceiveUntilAsync("topics.b")).Select(f => f.Text));
        TransportClient.AssertNoneUnexpected(holder, client);
    }

    [Theory]
    [MemberData(nameof(TransportClient.TwoWayTransports), MemberType = typeof(TransportClient))] // SSE: a stream publishes nothing of its own (sse §4), so there is no echo to skip
    public async Task NoEcho_skips_the_clients_own_publications_only(string transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        await using TransportClient client = await TransportClient.OpenAsync(transport, broker);
        await using TransportClient other = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker);
        Assert.Equal(Answer.Ok, await client.SubscribeAsync(1, "echo.>", noEcho: true));

        Assert.Equal(Answer.Ok, await client.PublishAsync("echo.t", "mine"));
        Assert.Equal(Answer.Ok, await other.PublishAsync("echo.t", "theirs"));
        Assert.Equal(Answer.Ok, await other.PublishAsync("echo.end", "marker"));

        Assert.Equal(["theirs"], (await client.ReceiveUntilAsync("echo.end")).Select(f => f.Text));
        TransportClient.AssertNoneUnexpected(client, other);
    }

    [Theory]
    [MemberData(nameof(TransportClient.TwoWayTransports), MemberType = typeof(TransportClient))] // SSE: a stream negotiates nothing and the one-shot /poll/publish takes no Zstd (longpoll §1.3)
    public async Task A_Zstd_payload_needs_negotiation_and_is_delivered_plain_to_those_without_it(string transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        await using TransportClient plainPublisher = await TransportClient.OpenAsync(transport, broker);
        await using TransportClient zstdPublisher = await TransportClient.OpenAsync(transport, broker, zstd: true);
        await using TransportClient subscriber = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker);
        Assert.Equal(Answer.Ok, await subscriber.SubscribeAsync(1, "z.>"));
        byte[] text = Encoding.UTF8.GetBytes(string.Concat(Enumerable.Repeat("compressible text ", 100)));
        byte[] compressed = new Compressor(3).Wrap(text).ToArray();

        Assert.Equal(new Answer(ErrorCode.MalformedFrame, plainPublisher.FatalErrorEndsSession), await plainPublisher.PublishAsync("z.data", [compressed], PayloadFlags.Zstd));
        Assert.Equal(Answer.Ok, await zstdPublisher.PublishAsync("z.data", [compressed], PayloadFlags.Zstd));
        Assert.Equal(Answer.Ok, await subscriber.PublishAsync("z.end", "marker"));

        Frame only = Assert.Single(await subscriber.ReceiveUntilAsync("z.end"));
        Assert.Equal(PayloadFlags.None, only.Flags);
        Assert.Equal(text, only.Payload);
        TransportClient.AssertNoneUnexpected(plainPublisher, zstdPublisher, subscriber);
    }

    [Theory]
    [MemberData(nameof(TransportClient.TwoWayTransports), MemberType = typeof(TransportClient))] // SSE: a stream is told no inbox prefix and cannot reply from its session (SseInboxAndQuotaTests covers its inbox reads)
    public async Task Reply_inboxes_follow_the_inbox_rules_for_an_identity_without_grants(string transport)
    {
        await using TestBroker broker = await StartWithIdentitiesAsync();
        await using TransportClient guest = await TransportClient.OpenAsync(transport, broker, GuestToken);

        string own = guest.InboxPrefix + ".abcdefghijklmnop";

        Assert.Equal(Answer.Ok, await guest.SubscribeAsync(1, own + ".>"));
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.SubscribeAsync(2, "_INBOX.abcdefghijklmnop.>")); // a name someone else may use
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.SubscribeAsync(3, "_INBOX.>"));
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.PublishAsync("_INBOX.abcdefghijklmnop.1", "unasked reply"));
        Assert.Equal(Answer.Ok, await guest.PublishAsync(own + ".1", "reply to myself"));
        Assert.Equal(Answer.Ok, await guest.PublishAsync(own + ".end", "marker"));
        Assert.Equal(["reply to myself"], (await guest.ReceiveUntilAsync(own + ".end")).Select(f => f.Text));
        TransportClient.AssertNoneUnexpected(guest);
    }

    [Theory]
    [MemberData(nameof(TransportClient.TwoWayTransports), MemberType = typeof(TransportClient))] // SSE: subscriptions are fixed by the stream's URL (sse §4): there is no UNSUBSCRIBE
    public async Task Unsubscribe_stops_delivery_and_an_unknown_sid_is_a_refusal(string transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        await using TransportClient client = await TransportClient.OpenAsync(transport, broker);
        await using TransportClient other = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker);
        Assert.Equal(Answer.Ok, await client.SubscribeAsync(1, "unsub.gone"));
        Assert.Equal(Answer.Ok, await client.SubscribeAsync(2, "unsub.kept"));

        Assert.Equal(new Answer(ErrorCode.UnknownSubscription, SessionEnded: false), await client.UnsubscribeAsync(7));
        Assert.Equal(Answer.Ok, await client.UnsubscribeAsync(1));
        Assert.Equal(new Answer(ErrorCode.UnknownSubscription, SessionEnded: false), await client.UnsubscribeAsync(1));

        Assert.Equal(Answer.Ok, await other.PublishAsync("unsub.gone", "after unsubscribe"));
        Assert.Equal(Answer.Ok, await other.PublishAsync("unsub.kept", "marker"));
        Assert.Empty(await client.ReceiveUntilAsync("unsub.kept"));
        TransportClient.AssertNoneUnexpected(client, other);
    }

    [Theory]
    [MemberData(nameof(TransportClient.Transports), MemberType = typeof(TransportClient))]
    public async Task A_subscriber_over_its_backlog_is_disconnected_as_a_slow_consumer_and_a_fast_one_gets_everything(string transport)
    {
        await using TestBroker broker = await StartBacklogBrokerAsync(SlowConsumerPolicy.Disconnect);
        await using TransportClient stalled = await TransportClient.OpenAsync(transport, broker, receiveBufferSize: 4096);
        await using TransportClient fast = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker);
        Assert.Equal(Answer.Ok, await stalled.SubscribeAsync(1, "feed.>"));
        Assert.Equal(Answer.Ok, await fast.SubscribeAsync(1, "feed.>"));

        int received = await PublishPacedOnAsync(fast);

        Assert.Equal(Chunks * Chunk, received);
        Assert.Equal(ErrorCode.SlowConsumer, await stalled.EndedWithAsync());
        TransportClient.AssertNoneUnexpected(stalled, fast);
    }

    [Theory]
    [MemberData(nameof(TransportClient.Transports), MemberType = typeof(TransportClient))]
    public async Task A_subscriber_over_its_backlog_loses_its_oldest_messages_and_is_told_exactly_how_many(string transport)
    {
        await using TestBroker broker = await StartBacklogBrokerAsync(SlowConsumerPolicy.DropOldest);
        await using TransportClient stalled = await TransportClient.OpenAsync(transport, broker, receiveBufferSize: 4096);
        await using TransportClient fast = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker);
        Assert.Equal(Answer.Ok, await stalled.SubscribeAsync(1, "feed.>"));
        Assert.Equal(Answer.Ok, await fast.SubscribeAsync(1, "feed.>"));

        Assert.Equal(Chunks * Chunk, await PublishPacedOnAsync(fast));
        Assert.Equal(0, fast.Dropped);
        Assert.Equal(Answer.Ok, await fast.PublishAsync("feed.end", "marker"));

        List<Frame> received = await stalled.ReceiveUntilAsync("feed.end");
        Assert.True(stalled.Dropped > 0, "nothing was dropped: the test did not fill the backlog");
        Assert.Equal((Chunks * Chunk) + Chunks, received.Count + stalled.Dropped); // every message (data and chunk markers) arrived or was counted as dropped
        int[] data = received.Where(f => f.Topic == "feed.data").Select(f => int.Parse(f.Text)).ToArray();
        Assert.Equal(data.Order(), data); // the oldest went, the order stayed
        Assert.Equal((Chunks * Chunk) - 1, data[^1]); // the newest survived
        Assert.Empty(stalled.Unexpected); // its drop notices are asserted above
        TransportClient.AssertNoneUnexpected(fast);
    }

    private const int Chunk = 16;
    private const int Chunks = 160; // 2,560 messages of 4 KiB, 10 MiB: far past socket buffers and the 256 KiB backlog limit

    private static Task<TestBroker> StartBacklogBrokerAsync(SlowConsumerPolicy policy) => TestBroker.StartAsync(o =>
    {
        o.Limits.MaxFrameBytes = 64 * 1024;
        o.Limits.MaxPendingBytes = 256 * 1024;
        o.Limits.SlowConsumerPolicy = policy;
        o.Limits.ErrorFlushTimeout = TimeSpan.FromMinutes(1); // the stalled client reads again only after the whole publishing loop: its ERROR waits for it
        o.LongPoll.MaxPendingMessagesPerSession = 1_000_000; // the byte limit acts, on long-poll too
        o.LongPoll.SlowConsumerPolicy = policy;
        o.LongPoll.MaxMessagesPerPoll = 100_000;
        o.LongPoll.MaxBytesPerPoll = 64 * 1024 * 1024;
    });

    // Publishes Chunks x Chunk numbered 4 KiB messages from the fast client itself, each chunk followed by a
    // marker the fast client reads up to: it paces the publisher, so only the stalled one falls behind.
    // Returns the data messages the fast client received.
    private static async Task<int> PublishPacedOnAsync(TransportClient fast)
    {
        int received = 0;
        for (int c = 0; c < Chunks; c++)
        {
            byte[][] chunk = Enumerable.Range(c * Chunk, Chunk).Select(i => Payload(i)).ToArray();
            Assert.Equal(Answer.Ok, await fast.PublishAsync("feed.data", chunk));
            Assert.Equal(Answer.Ok, await fast.PublishAsync("feed.chunk", $"{c}"));
            received += (await fast.ReceiveUntilAsync("feed.chunk")).Count;
        }

        return received;
    }

    private static byte[] Payload(int i)
    {
        byte[] payload = new byte[4096];
        payload.AsSpan().Fill((byte)' ');
        Encoding.ASCII.GetBytes(i.ToString(System.Globalization.CultureInfo.InvariantCulture)).CopyTo(payload, 0);
        return payload;
    }

    [Theory]
    [MemberData(nameof(TransportClient.TwoWayTransports), MemberType = typeof(TransportClient))] // SSE: a reply is granted to the session a request was delivered to, and a stream cannot publish from its session (sse §4)
    public async Task Reply_inboxes_are_per_identity_and_a_reply_needs_a_delivered_request(string transport)
    {
        await using TestBroker broker = await StartWithIdentitiesAsync(o =>
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "rival", Sha256 = TestTokens.Sha256(RivalToken), Permissions = { Publish = { "rival.>" }, Subscribe = { "rival.>" } } }));
        await using TransportClient guest = await TransportClient.OpenAsync(transport, broker, GuestToken);
        await using TransportClient rival = await TransportClient.OpenAsync(TransportClient.Tcp, broker, RivalToken);
        await using TransportClient owner = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker, OwnerToken);
        Assert.Equal(Identity.InboxPrefixOf("guest"), guest.InboxPrefix);
        string rivalInbox = Identity.InboxPrefixOf("rival");
        string ownerInbox = Identity.InboxPrefixOf("owner");
        Assert.Equal(rivalInbox, rival.InboxPrefix);

        // Only its own part of the inbox space.
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.SubscribeAsync(1, rivalInbox + ".>"));
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.SubscribeAsync(2, "_INBOX.>"));
        Assert.Equal(Answer.Ok, await guest.SubscribeAsync(3, guest.InboxPrefix + ".mine.>"));
        Assert.Equal(Answer.Ok, await rival.SubscribeAsync(1, rivalInbox + ".r.>"));
        Assert.Equal(Answer.Ok, await owner.SubscribeAsync(1, ownerInbox + ".r.>"));

        // A reply nobody asked for is a forgery; naming another's inbox as reply_to is refused too.
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.PublishAsync(rivalInbox + ".r.1", "forged"));
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.PublishAsync("guest.svc", "steal", replyTo: rivalInbox + ".r.2"));

        // A request delivered to the guest grants one reply (the default), to that reply topic only.
        Assert.Equal(Answer.Ok, await guest.SubscribeAsync(4, "guest.svc"));
        Assert.Equal(Answer.Ok, await guest.SubscribeAsync(5, "guest.end"));
        Assert.Equal(Answer.Ok, await owner.PublishAsync("guest.svc", "request", replyTo: ownerInbox + ".r.1"));
        Assert.Equal(Answer.Ok, await owner.PublishAsync("guest.end", "marker"));
        Frame request = Assert.Single(await guest.ReceiveUntilAsync("guest.end"));
        Assert.Equal(ownerInbox + ".r.1", request.ReplyTo);
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.PublishAsync(ownerInbox + ".r.9", "not asked"));
        Assert.Equal(Answer.Ok, await guest.PublishAsync(request.ReplyTo!, "reply"));
        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.PublishAsync(request.ReplyTo!, "second reply"));

        // The owner got the one reply; the rival got nothing forged.
        Assert.Equal(Answer.Ok, await owner.PublishAsync(ownerInbox + ".r.end", "marker"));
        Assert.Equal(["reply"], (await owner.ReceiveUntilAsync(ownerInbox + ".r.end")).Select(f => f.Text));
        Assert.Equal(Answer.Ok, await owner.PublishAsync(rivalInbox + ".r.end", "marker"));
        Assert.Empty(await rival.ReceiveUntilAsync(rivalInbox + ".r.end"));
        TransportClient.AssertNoneUnexpected(guest, rival, owner);
    }

    [Theory]
    [MemberData(nameof(TransportClient.Transports), MemberType = typeof(TransportClient))]
    public async Task A_member_joined_on_any_transport_is_counted_by_every_transports_query_and_a_guest_may_neither_join_nor_read(string transport)
    {
        await using TestBroker broker = await StartWithIdentitiesAsync();
        await using TransportClient member = await TransportClient.OpenAsync(transport, broker, OwnerToken, headers: true);
        await using TransportClient guest = await TransportClient.OpenAsync(transport, broker, GuestToken, headers: true);
        await using TransportClient bystander = await TransportClient.OpenAsync(TransportClient.BystanderOf(transport), broker, OwnerToken, headers: true);

        Assert.Equal(Answer.Ok, await member.JoinAsync(1, "room.parity"));
        Assert.Equal((Answer.Ok, 1L), await member.OccupancyAsync("room.parity"));
        Assert.Equal((Answer.Ok, 1L), await bystander.OccupancyAsync("room.parity"));

        Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await guest.JoinAsync(2, "guest.room")); // may subscribe, not join
        Assert.Equal((new Answer(ErrorCode.PermissionDenied, SessionEnded: false), 0L), await guest.OccupancyAsync("guest.room")); // may subscribe, not read presence
        Assert.Equal((new Answer(ErrorCode.PermissionDenied, SessionEnded: false), 0L), await guest.OccupancyAsync("room.parity"));
        Assert.Equal((Answer.Ok, 1L), await bystander.OccupancyAsync("room.parity"));
        TransportClient.AssertNoneUnexpected(member, guest, bystander);
    }

    private static Task<TestBroker> StartWithIdentitiesAsync(Action<HeraldOptions>? configure = null) => TestBroker.StartAsync(o =>
    {
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.Zero;
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "owner", Sha256 = TestTokens.Sha256(OwnerToken), Permissions = { Publish = { ">" }, Subscribe = { ">" }, Join = { ">" }, Presence = { ">" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "guest", Sha256 = TestTokens.Sha256(GuestToken), Permissions = { Publish = { "guest.>" }, Subscribe = { "guest.>" } } });
        configure?.Invoke(o);
    });
}
