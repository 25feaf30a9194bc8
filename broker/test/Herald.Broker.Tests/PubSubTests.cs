using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

public sealed class PubSubTests
{
    [Fact]
    public async Task Welcome_carries_the_configured_limits()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.ServerName = "herald-test";
            o.Limits.MaxFrameBytes = 4096;
            o.Limits.MaxTopicLength = 100;
        });
        await using var client = await ProtocolClient.ConnectAsync(broker.Port);

        WelcomeFrame welcome = await client.HelloAsync("me");

        Assert.Equal(ProtocolConstants.Version, welcome.Version);
        Assert.Equal("herald-test", welcome.ServerName);
        Assert.Equal(4096ul, welcome.Limits["max_frame"]);
        Assert.Equal(100ul, welcome.Limits["max_topic"]);
        Assert.Equal(4096ul - (2 * 100) - 31, welcome.Limits["max_payload"]);
        Assert.True(welcome.ConnectionId > 0);
    }

    [Fact]
    public async Task A_publication_reaches_another_clients_subscription()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(7, "chat.room1");
        await subscriber.PingPongAsync();

        await publisher.PublishAsync("chat.room1", "hello");

        Frame message = await subscriber.ReadMessageAsync();
        Assert.Equal(7u, message.Sid);
        Assert.Equal("chat.room1", message.Topic);
        Assert.Null(message.ReplyTo);
        Assert.Equal("hello", message.Text);
    }

    [Fact]
    public async Task Client_ping_gets_pong()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var client = await ProtocolClient.OpenAsync(broker.Port);

        await client.SendAsync(FrameWriter.WritePing);

        Assert.Equal(FrameType.Pong, (await client.ReadAsync()).Type);
    }

    [Fact]
    public async Task No_echo_subscription_skips_its_own_connections_publications_but_not_others()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var alice = await ProtocolClient.OpenAsync(broker.Port);
        await using var bob = await ProtocolClient.OpenAsync(broker.Port);
        await alice.SubscribeAsync(1, "room", SubscribeOptions.NoEcho);
        await alice.SubscribeAsync(2, "room.echo");                       // echo on by default
        await bob.SubscribeAsync(1, "room", SubscribeOptions.NoEcho);
        await alice.PingPongAsync();
        await bob.PingPongAsync();

        await alice.PublishAsync("room", "from alice");
        await alice.PublishAsync("room.echo", "echoed");
        await bob.PublishAsync("room", "from bob");

        // Alice gets bob's message and her echo subscription's, never her own "room" message: her
        // publications were routed before her PONG, so anything for her would arrive before it.
        var atAlice = new List<(string, string)>();
        atAlice.Add(Text(await alice.ReadMessageAsync()));
        atAlice.Add(Text(await alice.ReadMessageAsync()));
        atAlice.AddRange((await alice.PingPongAsync()).Select(Text));
        Assert.Equal([("room", "from bob"), ("room.echo", "echoed")], atAlice.Order());

        Assert.Equal(("room", "from alice"), Text(await bob.ReadMessageAsync()));
        Assert.Empty(await bob.PingPongAsync()); // bob's own message never arrives

        static (string, string) Text(Frame f) => (f.Topic, f.Text);
    }

    [Fact]
    public async Task Overlapping_patterns_of_one_connection_each_get_the_message_exactly_once()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "a.b.c");
        await subscriber.SubscribeAsync(2, "a.*.c");
        await subscriber.SubscribeAsync(3, "a.>");
        await subscriber.SubscribeAsync(4, ">");
        await subscriber.SubscribeAsync(5, "a.*");      // does not match a.b.c
        await subscriber.SubscribeAsync(6, "sentinel");
        await subscriber.PingPongAsync();

        await publisher.PublishAsync("a.b.c", "x");
        await publisher.PublishAsync("sentinel", "end");

        // a.b.c is matched by sids 1-4; the sentinel by 6 and by ">" (4). The publisher's two messages
        // are queued in order, so every a.b.c copy comes before any sentinel copy.
        var received = new List<(string Topic, uint Sid)>();
        for (int i = 0; i < 6; i++)
        {
            Frame f = await subscriber.ReadMessageAsync();
            received.Add((f.Topic, f.Sid));
        }

        Assert.Equal([1u, 2u, 3u, 4u], received.Take(4).Select(r => r.Sid).Order());
        Assert.All(received.Take(4), r => Assert.Equal("a.b.c", r.Topic));
        Assert.Equal([("sentinel", 4u), ("sentinel", 6u)], received.Skip(4).Order());
        Assert.Empty(await subscriber.PingPongAsync()); // and nothing more
    }

    [Fact]
    public async Task Unsubscribe_stops_delivery()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "news");
        await subscriber.SubscribeAsync(2, "sentinel");
        await subscriber.PingPongAsync();
        await publisher.PublishAsync("news", "before");
        Assert.Equal("before", (await subscriber.ReadMessageAsync()).Text);

        await subscriber.UnsubscribeAsync(1);
        await subscriber.PingPongAsync(); // the UNSUBSCRIBE has been applied
        await publisher.PublishAsync("news", "after");
        await publisher.PublishAsync("sentinel", "end");

        // The publisher's frames are routed in order, so "after" would have been queued before "end".
        Frame next = await subscriber.ReadMessageAsync();
        Assert.Equal(("sentinel", "end"), (next.Topic, next.Text));
    }

    [Fact]
    public async Task Unsubscribe_of_an_unknown_sid_is_a_warning_and_the_connection_stays()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var client = await ProtocolClient.OpenAsync(broker.Port);

        await client.UnsubscribeAsync(99);

        Frame error = await client.ReadAsync();
        Assert.Equal(ErrorCode.UnknownSubscription, error.Error!.Value.Code);
        Assert.False(error.Error.Value.Fatal);
        await client.SubscribeAsync(1, "still.here");
        await client.PublishAsync("still.here", "yes");
        Assert.Equal("yes", (await client.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task Each_publishers_messages_arrive_in_order_per_topic()
    {
        const int PerPublisher = 2000;
        await using var broker = await TestBroker.StartAsync();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "seq.*");
        await subscriber.PingPongAsync();
        await using var p1 = await ProtocolClient.OpenAsync(broker.Port);
        await using var p2 = await ProtocolClient.OpenAsync(broker.Port);

        Task Publish(ProtocolClient p, string topic) => p.SendAsync(w =>
        {
            for (int i = 0; i < PerPublisher; i++)
            {
                FrameWriter.WritePublish(w, System.Text.Encoding.ASCII.GetBytes(topic), default, PayloadFlags.None, BitConverter.GetBytes(i));
            }
        });
        await Task.WhenAll(Publish(p1, "seq.one"), Publish(p2, "seq.two"));

        var next = new Dictionary<string, int> { ["seq.one"] = 0, ["seq.two"] = 0 };
        for (int n = 0; n < 2 * PerPublisher; n++)
        {
            Frame f = await subscriber.ReadMessageAsync();
            Assert.Equal(next[f.Topic], BitConverter.ToInt32(f.Payload));
            next[f.Topic]++;
        }

        Assert.Equal(PerPublisher, next["seq.one"]);
        Assert.Equal(PerPublisher, next["seq.two"]);
    }

    [Fact]
    public async Task Request_reply_round_trip_through_the_broker()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var responder = await ProtocolClient.OpenAsync(broker.Port);
        await using var requester = await ProtocolClient.OpenAsync(broker.Port);
        await responder.SubscribeAsync(1, "svc.echo");
        await requester.SubscribeAsync(1, "_INBOX.req1.>");
        await responder.PingPongAsync();
        await requester.PingPongAsync();

        for (int i = 0; i < 3; i++)
        {
            await requester.PublishAsync("svc.echo", $"ping {i}", replyTo: $"_INBOX.req1.{i}");
            Frame request = await responder.ReadMessageAsync();
            Assert.Equal($"_INBOX.req1.{i}", request.ReplyTo);
            await responder.PublishAsync(request.ReplyTo!, "pong: " + request.Text);

            Frame reply = await requester.ReadMessageAsync();
            Assert.Equal($"_INBOX.req1.{i}", reply.Topic);
            Assert.Equal($"pong: ping {i}", reply.Text);
        }
    }

    [Fact]
    public async Task A_payload_at_the_payload_limit_is_delivered_intact_within_the_frame_limit()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.MaxFrameBytes = 200_000);
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "big");
        await subscriber.PingPongAsync();
        byte[] payload = new byte[ProtocolConstants.MaxPayload(200_000, 256)];
        new Random(42).NextBytes(payload);

        await publisher.PublishAsync("big", payload);

        Frame message = await subscriber.ReadMessageAsync();
        Assert.Equal(payload, message.Payload);
        Assert.True(message.Body!.Length <= 200_000, $"MESSAGE of {message.Body.Length} bytes, over max_frame");
    }
}
