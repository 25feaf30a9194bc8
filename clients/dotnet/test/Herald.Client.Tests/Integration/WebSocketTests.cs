using System.Net.WebSockets;
using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;
using Herald.Testing;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// <c>ws://</c> (spec §1): the frames of TCP in binary WebSocket messages, on the broker's HTTP port, through the same
/// protocol core. What every transport does is in the transport-parametrised tests (they run over WebSocket too);
/// here is what is WebSocket's own: the default path, a burst cut into messages the broker takes, refused upgrades and
/// closes that say why, and the close the client sends when it leaves. The client sends no Origin: every test here
/// is also the broker letting such a client in.
/// </summary>
public class WebSocketTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    [Fact]
    public async Task A_ws_address_without_a_path_reaches_the_brokers_endpoint_and_pub_sub_and_request_reply_work_over_it()
    {
        string topic = Topics.Unique("ws");
        await using var client = new HeraldClient($"ws://127.0.0.1:{fixture.Broker.HttpPort}");
        await using HeraldClient responder = fixture.Client(HeraldTransport.WebSocket);
        await using HeraldClient tcp = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription subscription = await client.SubscribeAsync(topic + ".news.>");
        await using HeraldSubscription service = await responder.SubscribeAsync(topic + ".svc", async m => await m.RespondAsync("re: " + m.GetString()));

        await tcp.PublishAsync(topic + ".news.tcp", "from TCP");
        Assert.Equal((topic + ".news.tcp", "from TCP"), Read(await subscription.ReadAsync(Wait.Token())));
        await responder.PublishAsync(topic + ".news.ws", "from WebSocket", HeraldHeaders.Empty.Add("X-Via", "ws"));
        HeraldMessage fromWs = await subscription.ReadAsync(Wait.Token());
        Assert.Equal((topic + ".news.ws", "from WebSocket"), Read(fromWs));
        Assert.Equal("ws", fromWs.Headers.GetFirstValue("X-Via"));
        Assert.Equal("re: ping", (await client.RequestAsync(topic + ".svc", "ping", TimeSpan.FromSeconds(10))).GetString());

        Assert.Equal($"ws://127.0.0.1:{fixture.Broker.HttpPort}/ws", client.Url);
        Assert.Equal(HeraldTransport.WebSocket, client.Transport);
        HeraldServerInfo info = client.ServerInfo!;
        Assert.Equal((HeraldTransport.WebSocket, fixture.Broker.HttpPort), (info.Transport, info.Port));
        Assert.NotNull(info.ConnectionId); // from WELCOME: the TCP handshake ran
        Assert.True(info.Headers && info.QueueGroups);
    }

    [Fact]
    public async Task A_burst_larger_than_one_message_may_carry_goes_in_messages_of_whole_frames_the_broker_takes()
    {
        const int MaxFrame = 4096;
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = MaxFrame;
            o.LongPoll.MaxBodyBytes = MaxFrame;
        });
        await using var link = new CuttableLink(broker.HttpPort);
        await using var publisher = new HeraldClient($"ws://127.0.0.1:{link.Port}/ws", Fast());
        await using var subscriber = new HeraldClient(broker.TcpUrl);
        var watcher = new StateWatcher(publisher);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync("bulk");
        await publisher.ConnectAsync(Wait.Token());
        Assert.Equal((ulong)MaxFrame, publisher.ServerInfo!.Limits["max_frame"]);

        // Published while the link is cut, they go to the next connection as one batch of some 41 KB: ten times what
        // one message may carry (max_frame + 4; the broker closes with 1009 past it, and the batch would be lost).
        link.Cut();
        await watcher.WaitForAsync(ConnectionState.Reconnecting);
        for (int i = 0; i < 40; i++)
        {
            await publisher.PublishAsync("bulk", Enumerable.Repeat((byte)i, 1000).ToArray());
        }

        link.Restore();
        await watcher.WaitForAsync(ConnectionState.Connected, 2);
        await publisher.FlushAsync(Wait.Token());

        for (int i = 0; i < 40; i++)
        {
            HeraldMessage message = await subscription.ReadAsync(Wait.Token());
            Assert.Equal(1000, message.Payload.Length);
            Assert.All(message.Payload.ToArray(), b => Assert.Equal((byte)i, b));
        }

        Assert.Equal([ConnectionState.Connecting, ConnectionState.Connected, ConnectionState.Reconnecting, ConnectionState.Connected], watcher.History);
    }

    [Fact]
    public async Task An_upgrade_refused_at_a_wrong_path_fails_ConnectAsync_naming_the_status_and_the_brokers_path()
    {
        await using var client = new HeraldClient($"ws://127.0.0.1:{fixture.Broker.HttpPort}/herald");

        var e = await Assert.ThrowsAsync<HeraldConnectionException>(() => client.ConnectAsync(Wait.Token()));

#if HERALD_CLIENT_NETSTANDARD
        // netstandard2.0's ClientWebSocket does not report the status of a refused upgrade.
        Assert.Null(e.HttpStatus);
        Assert.Contains("Could not open a WebSocket to ws://", e.Message, StringComparison.Ordinal);
#else
        Assert.Equal(404, e.HttpStatus);
        Assert.Contains("HTTP 404", e.Message, StringComparison.Ordinal);
        Assert.Contains("nothing serves WebSocket at /herald (the broker's endpoint is /ws)", e.Message, StringComparison.Ordinal);
#endif
        Assert.Equal(ConnectionState.Disconnected, client.State);
    }

    [Theory]
    [InlineData(403, "Origin")]
    [InlineData(426, "Upgrade header")]
    [InlineData(400, "subprotocol herald.v1")]
    public async Task Each_refused_upgrade_names_its_likely_cause(int status, string cause)
    {
        await using FakeWebSocketBroker broker = await FakeWebSocketBroker.StartAsync(refuseWith: status);
        await using var client = new HeraldClient(broker.Url);

        var e = await Assert.ThrowsAsync<HeraldConnectionException>(() => client.ConnectAsync(Wait.Token()));

#if HERALD_CLIENT_NETSTANDARD
        // netstandard2.0's ClientWebSocket does not report the status of a refused upgrade: no cause to name.
        Assert.Null(e.HttpStatus);
        Assert.Contains("Could not open a WebSocket to ws://", e.Message, StringComparison.Ordinal);
        Assert.NotEmpty(cause);
#else
        Assert.Equal(status, e.HttpStatus);
        Assert.Contains($"refused with HTTP {status}", e.Message, StringComparison.Ordinal);
        Assert.Contains(cause, e.Message, StringComparison.Ordinal);
#endif
    }

    [Theory]
    [InlineData(null)]
    [InlineData("mqtt")]
    public async Task An_endpoint_that_does_not_agree_to_herald_v1_is_refused_before_HELLO(string? subProtocol)
    {
        await using FakeWebSocketBroker broker = await FakeWebSocketBroker.StartAsync(subProtocol);
        await using var client = new HeraldClient(broker.Url);

        var e = await Assert.ThrowsAsync<HeraldConnectionException>(() => client.ConnectAsync(Wait.Token()));

        Assert.Contains("subprotocol", e.Message, StringComparison.Ordinal);
        Assert.Contains("herald.v1", e.Message, StringComparison.Ordinal);
        Assert.Contains("not a Herald broker's WebSocket endpoint", e.Message, StringComparison.Ordinal);
        Assert.Null(e.HttpStatus);
        Assert.Equal(ConnectionState.Disconnected, client.State);
    }

    [Theory]
    [InlineData(WebSocketCloseStatus.InvalidMessageType, "text refused", "1003 (unsupported data: the broker takes Herald frames in binary messages only)")]
    [InlineData(WebSocketCloseStatus.MessageTooBig, "too big", "1009 (message too big: the broker takes messages of at most max_frame + 4 bytes)")]
    public async Task A_close_with_a_status_is_a_lost_connection_that_names_it_and_the_client_reconnects(WebSocketCloseStatus status, string description, string named)
    {
        await using FakeWebSocketBroker broker = await FakeWebSocketBroker.StartAsync();
        await using var client = new HeraldClient(broker.Url, Fast());
        var watcher = new StateWatcher(client);
        FakeConnection first = await broker.ConnectAsync(client);

        await first.WebSocket!.CloseOutputAsync(status, description, CancellationToken.None);

        ConnectionStateChangedEventArgs lost = await watcher.WaitForAsync(ConnectionState.Reconnecting);
        Assert.Equal($"The broker closed the connection. WebSocket close {named}: {description}.", Assert.IsType<HeraldConnectionException>(lost.Error).Message);
        FakeConnection second = await broker.AcceptAsync();
        await second.HandshakeAsync();
        await watcher.WaitForAsync(ConnectionState.Connected, 2);
    }

    [Fact]
    public async Task Disposing_the_client_flushes_then_closes_the_WebSocket_with_a_normal_closure()
    {
        await using FakeWebSocketBroker broker = await FakeWebSocketBroker.StartAsync();
        var client = new HeraldClient(broker.Url);
        FakeConnection connection = await broker.ConnectAsync(client);

        Task disposing = client.DisposeAsync().AsTask();
        await connection.ExpectAsync(FrameType.Ping); // the flush
        await connection.SendAsync(FrameWriter.WritePong);
        await connection.ExpectEndAsync(); // a close message; an abort would throw here
        await disposing.Within();

        Assert.Equal(WebSocketCloseStatus.NormalClosure, connection.WebSocket!.CloseStatus);
    }

    private static (string Topic, string Text) Read(HeraldMessage message) => (message.Topic, message.GetString());

    private static HeraldClientOptions Fast() => new() { ReconnectDelay = TimeSpan.FromMilliseconds(20), MaxReconnectDelay = TimeSpan.FromMilliseconds(200) };
}
