using System.Collections.Concurrent;
using Herald.Client;
using Herald.Client.Tests.Infrastructure;
using MessagePack;

namespace Herald.Client.Tests.Integration;

[MessagePackObject]
public sealed class Order
{
    [Key(0)]
    public string Id { get; set; } = "";

    [Key(1)]
    public int Quantity { get; set; }

    [Key(2)]
    public decimal Price { get; set; }

    [Key(3)]
    public List<string> Tags { get; set; } = [];
}

/// <summary>Publish and subscribe against the real broker, over TCP, WebSocket and long-poll, and between them.</summary>
public class PubSubTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    public static TheoryData<HeraldTransport, HeraldTransport> TransportPairs => new()
    {
        { HeraldTransport.Tcp, HeraldTransport.Tcp },
        { HeraldTransport.LongPoll, HeraldTransport.LongPoll },
        { HeraldTransport.Tcp, HeraldTransport.LongPoll },
        { HeraldTransport.LongPoll, HeraldTransport.Tcp },
        { HeraldTransport.WebSocket, HeraldTransport.WebSocket },
        { HeraldTransport.Tcp, HeraldTransport.WebSocket },
        { HeraldTransport.WebSocket, HeraldTransport.LongPoll },
    };

    public static TheoryData<HeraldTransport> Transports => new() { HeraldTransport.Tcp, HeraldTransport.LongPoll, HeraldTransport.WebSocket };

    [Theory]
    [MemberData(nameof(TransportPairs))]
    public async Task A_subscriber_enumerates_what_a_publisher_sends(HeraldTransport publisherTransport, HeraldTransport subscriberTransport)
    {
        string topic = Topics.Unique("chat");
        await using HeraldClient subscriber = fixture.Client(subscriberTransport);
        await using HeraldClient publisher = fixture.Client(publisherTransport);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic + ".>");

        await publisher.PublishAsync(topic + ".room1", "hello");
        await publisher.PublishAsync(topic + ".room2", [1, 2, 3], replyTo: "_INBOX.x.1");

        HeraldMessage first = await subscription.ReadAsync(Wait.Token());
        HeraldMessage second = await subscription.ReadAsync(Wait.Token());
        Assert.Equal(topic + ".room1", first.Topic);
        Assert.Equal("hello", first.GetString());
        Assert.Null(first.ReplyTo);
        Assert.Same(subscription, first.Subscription);
        Assert.Equal(topic + ".room2", second.Topic);
        Assert.Equal(new byte[] { 1, 2, 3 }, second.Payload.ToArray());
        Assert.Equal("_INBOX.x.1", second.ReplyTo);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task Await_foreach_reads_messages_in_order_until_unsubscribed(HeraldTransport transport)
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(transport);
        HeraldSubscription subscription = await client.SubscribeAsync(topic);
        for (int i = 0; i < 50; i++)
        {
            await client.PublishAsync(topic, i.ToString(System.Globalization.CultureInfo.InvariantCulture));
        }

        var received = new List<string>();
        await foreach (HeraldMessage message in subscription.WithCancellation(Wait.Token()))
        {
            received.Add(message.GetString());
            if (received.Count == 50)
            {
                await subscription.DisposeAsync(); // ends the enumeration
            }
        }

        Assert.Equal(Enumerable.Range(0, 50).Select(i => i.ToString(System.Globalization.CultureInfo.InvariantCulture)), received);
        Assert.False(subscription.IsActive);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_handler_gets_every_message_once_in_order(HeraldTransport transport)
    {
        string topic = Topics.Unique();
        await using HeraldClient subscriber = fixture.Client(transport);
        await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp);
        var received = new ConcurrentQueue<int>();
        var all = new TaskCompletionSource();
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic, m =>
        {
            received.Enqueue(m.Deserialize<int>());
            if (received.Count == 200)
            {
                all.TrySetResult();
            }
        });

        for (int i = 0; i < 200; i++)
        {
            await publisher.PublishAsync(topic, i);
        }

        await all.Task.Within();
        Assert.Equal(Enumerable.Range(0, 200), received);
    }

    [Theory]
    [MemberData(nameof(TransportPairs))]
    public async Task A_typed_payload_round_trips_through_MessagePack(HeraldTransport publisherTransport, HeraldTransport subscriberTransport)
    {
        string topic = Topics.Unique("orders");
        await using HeraldClient subscriber = fixture.Client(subscriberTransport);
        await using HeraldClient publisher = fixture.Client(publisherTransport);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic);
        var order = new Order { Id = "A-17", Quantity = 3, Price = 12.5m, Tags = ["rush", "gift"] };

        await publisher.PublishAsync(topic, order);

        Order received = await subscription.ReadAllAsync<Order>(Wait.Token()).FirstAsync();
        Assert.Equal(order.Id, received.Id);
        Assert.Equal(order.Quantity, received.Quantity);
        Assert.Equal(order.Price, received.Price);
        Assert.Equal(order.Tags, received.Tags);
    }

    [Fact]
    public async Task A_payload_that_is_not_the_type_asked_for_is_a_HeraldException()
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription subscription = await client.SubscribeAsync(topic);

        await client.PublishAsync(topic, "not MessagePack for an Order: a bare UTF-8 string");

        HeraldMessage message = await subscription.ReadAsync(Wait.Token());
        var e = Assert.Throws<HeraldException>(() => message.Deserialize<Order>());
        Assert.IsType<MessagePackSerializationException>(e.InnerException);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task Unsubscribing_stops_delivery(HeraldTransport transport)
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(transport);
        await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp);
        var gone = new ConcurrentQueue<string>();
        HeraldSubscription unsubscribed = await client.SubscribeAsync(topic, m => gone.Enqueue(m.GetString()));
        await using HeraldSubscription control = await client.SubscribeAsync(topic);
        await publisher.PublishAsync(topic, "before");
        Assert.Equal("before", (await control.ReadAsync(Wait.Token())).GetString());

        await unsubscribed.DisposeAsync();
        await publisher.PublishAsync(topic, "after 1");
        await publisher.PublishAsync(topic, "after 2");

        // The control subscription on the same connection has both: the unsubscribed one would have had them by now.
        Assert.Equal("after 1", (await control.ReadAsync(Wait.Token())).GetString());
        Assert.Equal("after 2", (await control.ReadAsync(Wait.Token())).GetString());
        await client.FlushAsync(Wait.Token());
        Assert.False(unsubscribed.IsActive);
        Assert.DoesNotContain("after 1", gone);
        Assert.DoesNotContain("after 2", gone);
    }

    [Fact]
    public async Task A_handler_that_throws_is_reported_through_Error_and_keeps_receiving()
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(HeraldTransport.Tcp);
        var reported = new TaskCompletionSource<HeraldException>(TaskCreationOptions.RunContinuationsAsynchronously);
        client.Error += (_, e) => reported.TrySetResult(e.Exception);
        var second = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        await using HeraldSubscription subscription = await client.SubscribeAsync(topic, m =>
        {
            if (m.GetString() == "boom")
            {
                throw new InvalidOperationException("handler bug");
            }

            second.TrySetResult(m.GetString());
        });

        await client.PublishAsync(topic, "boom");
        await client.PublishAsync(topic, "fine");

        HeraldException error = await reported.Task.Within();
        Assert.IsType<InvalidOperationException>(error.InnerException);
        Assert.Contains(topic, error.Message, StringComparison.Ordinal);
        Assert.Equal("fine", await second.Task.Within());
    }

    [Fact]
    public async Task Wildcards_match_as_spec_5_says()
    {
        string root = Topics.Unique("w");
        await using HeraldClient client = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription one = await client.SubscribeAsync(root + ".*");
        await using HeraldSubscription rest = await client.SubscribeAsync(root + ".>");

        await client.PublishAsync(root + ".a.b", "deep");
        await client.PublishAsync(root + ".a", "shallow");

        Assert.Equal("shallow", (await one.ReadAsync(Wait.Token())).GetString());
        Assert.Equal("deep", (await rest.ReadAsync(Wait.Token())).GetString());
        Assert.Equal("shallow", (await rest.ReadAsync(Wait.Token())).GetString());
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task No_echo_skips_what_the_same_client_publishes(HeraldTransport transport)
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(transport);
        await using HeraldClient other = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription subscription = await client.SubscribeAsync(topic, new SubscriptionOptions { NoEcho = true });

        await client.PublishAsync(topic, "mine");
        await client.FlushAsync(Wait.Token());
        await other.PublishAsync(topic, "theirs");

        Assert.Equal("theirs", (await subscription.ReadAsync(Wait.Token())).GetString());
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task The_first_call_connects_lazily(HeraldTransport transport)
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(transport);
        var watcher = new StateWatcher(client);
        Assert.Equal(ConnectionState.Disconnected, client.State);

        await using HeraldSubscription subscription = await client.SubscribeAsync(topic);
        await client.PublishAsync(topic, "lazy");

        Assert.Equal("lazy", (await subscription.ReadAsync(Wait.Token())).GetString());
        Assert.Equal(ConnectionState.Connected, client.State);
        await watcher.WaitForAsync(ConnectionState.Connected);
        Assert.Equal([ConnectionState.Connecting, ConnectionState.Connected], watcher.History);
        Assert.Equal(transport, client.ServerInfo!.Transport);
    }

    [Fact]
    public async Task ConnectAsync_connects_and_reports_what_the_broker_said()
    {
        await using HeraldClient client = fixture.Client(HeraldTransport.Tcp);

        await client.ConnectAsync(Wait.Token());

        HeraldServerInfo info = client.ServerInfo!;
        Assert.Equal(ConnectionState.Connected, client.State);
        Assert.Equal("herald", info.ServerName);
        Assert.Equal(fixture.Broker.TcpPort, info.Port);
        Assert.True(info.Compression);
        Assert.Equal(1024UL * 1024, info.Limits["max_frame"]);
        Assert.NotNull(info.ConnectionId);
    }

    [Fact]
    public async Task A_port_range_address_connects_to_a_port_of_the_range()
    {
        int port = fixture.Broker.TcpPort;
        await using HeraldClient client = new($"tcp://127.0.0.1:{port}-{port}");

        await client.ConnectAsync(Wait.Token());

        Assert.Equal(port, client.ServerInfo!.Port);
    }

    [Fact]
    public async Task Disposing_closes_the_client_ends_enumerations_and_refuses_further_calls()
    {
        string topic = Topics.Unique();
        HeraldClient client = fixture.Client(HeraldTransport.Tcp);
        var watcher = new StateWatcher(client);
        HeraldSubscription subscription = await client.SubscribeAsync(topic);
        Task<bool> reading = subscription.GetAsyncEnumerator().MoveNextAsync().AsTask();

        await client.DisposeAsync();

        Assert.False(await reading.Within());
        Assert.Equal(ConnectionState.Closed, client.State);
        await watcher.WaitForAsync(ConnectionState.Closed);
        await Assert.ThrowsAsync<ObjectDisposedException>(async () => await client.PublishAsync(topic, "late"));
        await Assert.ThrowsAsync<ObjectDisposedException>(() => client.SubscribeAsync(topic));
    }

    [Fact]
    public async Task Connecting_to_a_port_nobody_listens_on_is_a_HeraldConnectionException_and_leaves_the_client_disconnected()
    {
        await using HeraldClient client = new($"tcp://127.0.0.1:{TestBroker.FreePort()}");

        await Assert.ThrowsAsync<HeraldConnectionException>(() => client.ConnectAsync(Wait.Token()));

        Assert.Equal(ConnectionState.Disconnected, client.State);
        await Assert.ThrowsAsync<HeraldConnectionException>(async () => await client.PublishAsync("a", "b"));
    }
}
