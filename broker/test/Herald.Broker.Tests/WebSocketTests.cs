using System.Buffers;
using System.Net;
using System.Net.WebSockets;
using System.Text;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// WebSocket at <c>/ws</c> (spec §1) over real WebSockets: the same protocol session as TCP, the very MESSAGE
/// bytes a TCP subscriber gets, and the upgrade's and the messages' rules enforced with a bystander unharmed.
/// </summary>
public sealed class WebSocketTests
{
    [Fact]
    public async Task A_websocket_client_gets_the_very_message_bytes_a_tcp_subscriber_gets()
    {
        await using var broker = await TestBroker.StartAsync();
        await using ProtocolClient web = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        WelcomeFrame welcome = await web.HelloAsync("web");
        Assert.True(welcome.ConnectionId > 0);
        Assert.Equal("herald.v1", web.WebSocket!.SubProtocol);
        await web.SubscribeAsync(5, "news.>");
        await web.PingPongAsync();
        await using var tcp = await ProtocolClient.OpenAsync(broker.Port);
        await tcp.SubscribeAsync(5, "news.>");
        await tcp.PingPongAsync();

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync("news.eu", "hello", replyTo: "_INBOX.x.1");

        Frame atWeb = await web.ReadMessageAsync();
        Frame atTcp = await tcp.ReadMessageAsync();
        Assert.Equal("hello", atWeb.Text);
        Assert.Equal(atTcp.Body, atWeb.Body); // serialized once: the same bytes on both transports
    }

    [Fact]
    public async Task A_websocket_client_publishes_to_tcp_and_a_frame_may_span_two_messages()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var tcp = await ProtocolClient.OpenAsync(broker.Port);
        await tcp.SubscribeAsync(1, "from.web");
        await tcp.PingPongAsync();
        await using ProtocolClient web = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await web.HelloAsync("web");

        var frame = new ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(frame, "from.web"u8, default, PayloadFlags.None, "split"u8);
        byte[] bytes = frame.WrittenSpan.ToArray();
        await web.SendRawAsync(bytes[..5]);   // one binary message...
        await web.SendRawAsync(bytes[5..]);   // ...and the rest in another
        await web.PublishAsync("from.web", "whole");

        Assert.Equal("split", (await tcp.ReadMessageAsync()).Text);
        Assert.Equal("whole", (await tcp.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task A_text_message_closes_the_websocket_with_invalid_message_type_and_a_bystander_carries_on()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port);
        await bystander.SubscribeAsync(1, "by");
        await bystander.PingPongAsync();

        using var socket = await OpenAsync(broker.HttpPort);
        await socket.SendAsync("[1,1,\"x\",0,null]"u8.ToArray(), WebSocketMessageType.Text, endOfMessage: true, CancellationToken.None);
        Assert.Equal(WebSocketCloseStatus.InvalidMessageType, await ClosedWithAsync(socket));

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync("by", "still here");
        Assert.Equal("still here", (await bystander.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task An_origin_outside_the_allowed_domains_is_refused_and_one_inside_is_let_in()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Policy.AllowedDomains = ["app.example.com"]);
        WebSocketException refused = await Assert.ThrowsAsync<WebSocketException>(() => ProtocolClient.ConnectWebSocketAsync(broker.HttpPort, origin: "https://evil.example.net"));
        Assert.Contains("403", refused.Message, StringComparison.Ordinal);

        await using ProtocolClient allowed = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort, origin: "https://app.example.com");
        Assert.True((await allowed.HelloAsync("ok")).ConnectionId > 0);
    }

    [Fact]
    public async Task The_upgrade_needs_the_subprotocol_and_a_plain_request_is_told_to_upgrade()
    {
        await using var broker = await TestBroker.StartAsync();
        using var noProtocol = new ClientWebSocket();
        WebSocketException refused = await Assert.ThrowsAsync<WebSocketException>(() => noProtocol.ConnectAsync(new Uri($"ws://127.0.0.1:{broker.HttpPort}/ws"), CancellationToken.None));
        Assert.Contains("400", refused.Message, StringComparison.Ordinal);

        using HttpResponseMessage plain = await broker.Http.GetAsync("/ws");
        Assert.Equal(HttpStatusCode.UpgradeRequired, plain.StatusCode);
        Assert.Contains("herald.v1", await plain.Content.ReadAsStringAsync(), StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_protocol_error_over_websocket_is_an_error_frame_then_the_close()
    {
        await using var broker = await TestBroker.StartAsync();
        await using ProtocolClient web = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await web.SubscribeAsync(1, "before.hello"); // any frame but HELLO first (spec §8)
        await web.ExpectClosedWithAsync(ErrorCode.HelloRequired);
        await Until.True(() => web.WebSocket!.State == WebSocketState.CloseReceived, "the broker's close received"); // the broker sent its close
        Assert.Equal(WebSocketCloseStatus.NormalClosure, web.WebSocket!.CloseStatus);
    }

    [Fact]
    public async Task Websocket_connections_count_against_max_connections_with_tcp()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.MaxConnections = 1);
        await using var tcp = await ProtocolClient.OpenAsync(broker.Port);
        await using ProtocolClient web = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await web.ExpectClosedWithAsync(ErrorCode.TooManyConnections);
        await tcp.PingPongAsync(); // the one within the limit carries on
    }

    [Fact]
    public async Task A_websocket_subscriber_that_stops_reading_is_a_slow_consumer_and_a_tcp_subscriber_gets_everything()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 64 * 1024;
            o.Limits.MaxPendingBytes = 256 * 1024;
            o.Limits.SlowConsumerPolicy = Herald.Broker.Delivery.SlowConsumerPolicy.Disconnect;
            o.Limits.ErrorFlushTimeout = TimeSpan.FromMinutes(1); // it reads again only after the whole publishing loop, however long a busy machine takes: its ERROR waits for it
        });
        await using ProtocolClient stalled = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await stalled.HelloAsync("stalled");
        await stalled.SubscribeAsync(1, "feed");
        await stalled.PingPongAsync();
        await using var fast = await ProtocolClient.OpenAsync(broker.Port, "fast");
        await fast.SubscribeAsync(1, "feed");
        await fast.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");

        const int count = 400; // 400 x 16 KiB: far past the stalled one's pending limit and its socket buffers
        byte[] payload = new byte[16 * 1024];
        for (int i = 0; i < count; i++)
        {
            await publisher.PublishAsync("feed", payload);
            await fast.ReadMessageAsync(); // paced by the fast subscriber, who reads everything
        }

        List<Frame> frames = await stalled.ReadUntilClosedAsync(); // it reads again: what was buffered, the ERROR, the end
        Assert.Equal(ErrorCode.SlowConsumer, frames[^1].Error!.Value.Code);
        Assert.True(frames.Count - 1 < count);
        await publisher.PingPongAsync();
    }

    private static async Task<ClientWebSocket> OpenAsync(int httpPort)
    {
        var socket = new ClientWebSocket();
        socket.Options.AddSubProtocol("herald.v1");
        await socket.ConnectAsync(new Uri($"ws://127.0.0.1:{httpPort}/ws"), CancellationToken.None);
        return socket;
    }

    /// <summary>Reads until the broker's close arrives; its status.</summary>
    private static async Task<WebSocketCloseStatus?> ClosedWithAsync(ClientWebSocket socket)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(15));
        byte[] buffer = new byte[4096];
        while (true)
        {
            WebSocketReceiveResult received = await socket.ReceiveAsync(buffer, timeout.Token);
            if (received.MessageType == WebSocketMessageType.Close)
            {
                return received.CloseStatus;
            }
        }
    }

    [Fact]
    public async Task A_frame_dripped_over_websocket_meets_the_frame_timeout_while_a_bystander_carries_on()
    {
        await using var broker = await TestBroker.StartAsync(o => (o.Limits.FrameGracePeriod, o.Limits.MinFrameDataRate) = (TimeSpan.FromMilliseconds(500), 1000));
        await using ProtocolClient dripper = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await dripper.HelloAsync("dripper");
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander");
        await bystander.SubscribeAsync(1, "news");
        await bystander.PingPongAsync();

        // A PUBLISH frame of some 100 bytes (due within 0.5 s + 0.1 s at 1000 bytes/s), of which a few bytes come,
        // each in a WebSocket message of its own, then nothing.
        var frame = new System.Buffers.ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(frame, "news"u8, default, PayloadFlags.None, new byte[100]);
        for (int i = 0; i < 8; i++)
        {
            await dripper.WebSocket!.SendAsync(frame.WrittenMemory.Slice(i, 1), WebSocketMessageType.Binary, endOfMessage: true, CancellationToken.None);
        }

        await dripper.ExpectClosedWithAsync(ErrorCode.FrameTimeout);
        await bystander.PublishAsync("news", "still here");
        Assert.Equal("still here", (await bystander.ReadMessageAsync()).Text);
    }

}
