using Herald.Client.Tests.Infrastructure;
using Herald.Testing;
using Herald.Protocol;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// Reconnecting to the real broker: it is stopped (gracefully: ShuttingDown, or 503 for long-poll) and a
/// new one is started on the same ports; the client comes back, subscribes again and sends what it
/// buffered meanwhile. The events say when: nothing here waits on a clock.
/// </summary>
public class ReconnectTests
{
    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task The_client_reconnects_to_a_new_broker_on_the_same_port_and_its_subscriptions_work_again(HeraldTransport transport)
    {
        int tcpPort = TestBroker.FreePort(), httpPort = TestBroker.FreePort();
        TestBroker first = await TestBroker.StartAsync(tcpPort: tcpPort, httpPort: httpPort);
        await using var client = new HeraldClient(first.Url(transport), Fast());
        var watcher = new StateWatcher(client);
        HeraldSubscription subscription = await client.SubscribeAsync("reconnect.>");
        await client.PublishAsync("reconnect.before", "before");
        Assert.Equal("before", (await subscription.ReadAsync(Wait.Token())).GetString());

        await first.DisposeAsync();
        ConnectionStateChangedEventArgs lost = await watcher.WaitForAsync(ConnectionState.Reconnecting);
        await client.PublishAsync("reconnect.buffered", "published while disconnected", HeraldHeaders.Empty.Add("X-Buffered", "yes"));
        await using TestBroker second = await TestBroker.StartAsync(tcpPort: tcpPort, httpPort: httpPort);
        await watcher.WaitForAsync(ConnectionState.Connected, 2);

        // Subscribed again before the buffered publication was sent, so it comes back to its own subscription.
        HeraldMessage buffered = await subscription.ReadAsync(Wait.Token());
        Assert.Equal("published while disconnected", buffered.GetString());
        Assert.Equal("yes", buffered.Headers.GetFirstValue("X-Buffered")); // kept with its headers through the buffer
        await using var other = new HeraldClient(second.Url(HeraldTransport.Tcp));
        await other.PublishAsync("reconnect.after", "after");
        Assert.Equal("after", (await subscription.ReadAsync(Wait.Token())).GetString());
        Assert.True(subscription.IsActive);
        Assert.Equal([ConnectionState.Connecting, ConnectionState.Connected, ConnectionState.Reconnecting, ConnectionState.Connected], watcher.History);
        Assert.IsAssignableFrom<HeraldException>(lost.Error);
        if (transport != HeraldTransport.LongPoll)
        {
            Assert.Equal(ErrorCode.ShuttingDown, ((HeraldException)lost.Error!).ErrorCode);
        }
    }

    [Fact]
    public async Task Request_reply_works_again_after_a_reconnect()
    {
        int port = TestBroker.FreePort();
        TestBroker first = await TestBroker.StartAsync(tcpPort: port);
        await using var responder = new HeraldClient(first.TcpUrl, Fast());
        await using var requester = new HeraldClient(first.TcpUrl, Fast());
        var responderWatcher = new StateWatcher(responder);
        var requesterWatcher = new StateWatcher(requester);
        await using HeraldSubscription service = await responder.SubscribeAsync("svc.time", async m => await m.RespondAsync("tick"));
        Assert.Equal("tick", (await requester.RequestAsync("svc.time", "?", TimeSpan.FromSeconds(10))).GetString());

        await first.DisposeAsync();
        await using TestBroker second = await TestBroker.StartAsync(tcpPort: port);
        await responderWatcher.WaitForAsync(ConnectionState.Connected, 2);
        await requesterWatcher.WaitForAsync(ConnectionState.Connected, 2);

        Assert.Equal("tick", (await requester.RequestAsync("svc.time", "?", TimeSpan.FromSeconds(10))).GetString());
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task Publishing_past_the_buffer_while_disconnected_throws_HeraldBufferFullException(HeraldTransport transport)
    {
        TestBroker broker = await TestBroker.StartAsync();
        await using var client = new HeraldClient(broker.Url(transport), Fast(o => o.PublishBufferSize = 1024));
        var watcher = new StateWatcher(client);
        await client.ConnectAsync(Wait.Token());

        await broker.DisposeAsync();
        await watcher.WaitForAsync(ConnectionState.Reconnecting);
        byte[] payload = new byte[100];
        int kept = 0;
        HeraldBufferFullException? full = null;
        for (int i = 0; i < 100 && full is null; i++)
        {
            try
            {
                await client.PublishAsync("buffered.topic", payload);
                kept++;
            }
            catch (HeraldBufferFullException e)
            {
                full = e;
            }
        }

        Assert.NotNull(full);
        Assert.Equal(1024, full.BufferSize);
        Assert.InRange(kept, 1, 1024 / 100);
        Assert.Contains("PublishBufferSize", full.Message, StringComparison.Ordinal);
        Assert.Equal(ConnectionState.Reconnecting, client.State);
    }

    [Fact]
    public async Task A_long_poll_client_whose_broker_stops_answering_reconnects_in_seconds_not_after_the_session_timeout()
    {
        // The session's inactivity timeout (60 s by default) outlasts the watcher's hang guard (20 s): only a client
        // that gives up unanswered polls within seconds gets to Reconnecting here.
        await using TestBroker broker = await TestBroker.StartAsync();
        await using var link = new CuttableLink(broker.HttpPort);
        await using var client = new HeraldClient($"http://127.0.0.1:{link.Port}", Fast());
        var watcher = new StateWatcher(client);
        await client.ConnectAsync(Wait.Token());

        link.Cut(); // the held poll is reset and every new poll refused: no answer at all, not even a 503
        ConnectionStateChangedEventArgs lost = await watcher.WaitForAsync(ConnectionState.Reconnecting);
        link.Restore();
        await watcher.WaitForAsync(ConnectionState.Connected, 2);

        Assert.Contains("failed for", lost.Error?.Message, StringComparison.Ordinal);
        await client.PublishAsync("after.cut", "delivered"); // a new session works
    }

    [Fact]
    public async Task A_client_that_runs_out_of_reconnect_attempts_closes_and_says_why()
    {
        TestBroker broker = await TestBroker.StartAsync();
        await using var client = new HeraldClient(broker.TcpUrl, Fast(o => o.MaxReconnectAttempts = 2));
        var watcher = new StateWatcher(client);
        HeraldSubscription subscription = await client.SubscribeAsync("gone.>");

        await broker.DisposeAsync();

        ConnectionStateChangedEventArgs closed = await watcher.WaitForAsync(ConnectionState.Closed);
        Assert.IsType<HeraldConnectionException>(closed.Error);
        Assert.Contains("after 2 attempts", closed.Error!.Message, StringComparison.Ordinal);
        await Assert.ThrowsAsync<HeraldConnectionException>(async () => await client.PublishAsync("gone.x", "late"));
        await Assert.ThrowsAsync<HeraldConnectionException>(async () => await subscription.ReadAsync(Wait.Token()));
    }

    private static HeraldClientOptions Fast(Action<HeraldClientOptions>? configure = null)
    {
        var options = new HeraldClientOptions { ReconnectDelay = TimeSpan.FromMilliseconds(20), MaxReconnectDelay = TimeSpan.FromMilliseconds(200) };
        configure?.Invoke(options);
        return options;
    }
}
