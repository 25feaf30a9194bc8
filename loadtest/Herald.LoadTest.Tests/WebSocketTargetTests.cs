using System.Buffers;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Net.WebSockets;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Scenarios;
using Herald.LoadTest.Targets;
using Herald.Protocol;
using Herald.Testing;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>--transport websocket</c> beyond the shared contract (<see cref="TargetContractTests"/> runs it): the
/// tool's clients really are WebSocket sessions at the HTTP port's <c>/ws</c>, a refused upgrade says so, and
/// the frames ride the messages as spec §1 says: each send one binary message, and a frame the server split
/// over messages read whole. The broker always sends whole frames per message, so the split can only come
/// from a peer of the test's own: a real WebSocket server (System.Net.WebSockets) on a real socket.
/// </summary>
public class WebSocketTargetTests
{
    [Fact]
    public async Task A_started_herald_takes_the_clients_as_websocket_sessions_on_its_http_port()
    {
        await using ITarget server = await TargetContractTests.StartAsync("herald", "websocket");
        var herald = (HeraldTarget)server;
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        await using IPubSubClient a = await server.ConnectAsync(0, timeout.Token);
        await using IPubSubClient b = await server.ConnectAsync(1, timeout.Token);

        Assert.Equal("websocket", server.Transport);
        Assert.Equal(herald.HttpPort, herald.Endpoints.For(1).Port);
        Assert.Equal($"ws://127.0.0.1:{herald.HttpPort}/ws", herald.Endpoints.Display);

        // the readiness probe's session may still be ending: wait for exactly our two, then check there is no TCP one
        using var http = new HttpClient();
        string connz = $"http://127.0.0.1:{herald.MonitoringPort}/connz?transport=";
        async Task<int> CountAsync(string transport)
        {
            using JsonDocument page = JsonDocument.Parse(await http.GetStringAsync(new Uri(connz + transport), timeout.Token));
            return page.RootElement.GetProperty("total").GetInt32();
        }

        await Until.True(async () => await CountAsync("websocket") == 2, "/connz shows exactly the two WebSocket clients");

        Assert.Equal(0, await CountAsync("tcp"));
        Assert.Null(a.Failure);
        Assert.Null(b.Failure);
    }

    [Fact]
    public async Task An_upgrade_the_server_refuses_is_an_io_error_with_its_status()
    {
        await using ITarget server = await TargetContractTests.StartAsync("herald", "websocket");
        var herald = (HeraldTarget)server;
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(20));

        // The monitoring listener is HTTP without /ws: the upgrade is answered 404, and the client says so.
        IOException refused = await Assert.ThrowsAsync<IOException>(() => HeraldConnection.ConnectAsync(
            new IPEndPoint(IPAddress.Loopback, herald.MonitoringPort), "refused", timeout.Token, via: herald.Endpoints));
        Assert.Contains("404", refused.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Each_send_is_one_binary_message_and_a_frame_split_over_messages_is_read_whole()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        BrokerEndpoints endpoints = await ListenAsync(listener);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(20));

        Task<HeraldTcpClient> connecting = HeraldTcpClient.ConnectAsync(endpoints.For(0), "ws-peer-test", timeout.Token, via: endpoints);
        byte[] welcome = Encode(w => FrameWriter.WriteWelcome(w, "peer", 1, Capabilities.None, [new("max_frame", 1024 * 1024)]));
        using WebSocket peer = await AcceptAsync(listener, timeout.Token, firstMessage: welcome[..3]); // in the same write as the 101

        // HELLO: one message, one frame. WELCOME cut inside its length prefix, over two messages, the first
        // of them sent with the upgrade's answer (read past the head: it must stay for the WebSocket).
        List<(FrameType Type, byte[] Body)> hello = Frames(await ReceiveMessageAsync(peer, timeout.Token));
        Assert.Equal(FrameType.Hello, Assert.Single(hello).Type);
        await peer.SendAsync(welcome.AsMemory(3), WebSocketMessageType.Binary, endOfMessage: true, timeout.Token);
        await using HeraldTcpClient client = await connecting;

        // SUBSCRIBE and its PING: one append, one send, one message.
        var received = new List<string>();
        var all = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        Task subscribing = client.SubscribeAsync("ws.split", (payload, _, _) =>
        {
            received.Add(Encoding.UTF8.GetString(payload));
            if (received.Count == 50)
            {
                all.TrySetResult();
            }
        }, timeout.Token);
        Assert.Equal([FrameType.Subscribe, FrameType.Ping], Frames(await ReceiveMessageAsync(peer, timeout.Token)).Select(f => f.Type));
        await peer.SendAsync(Encode(FrameWriter.WritePong), WebSocketMessageType.Binary, endOfMessage: true, timeout.Token);
        await subscribing;

        // 50 MESSAGEs cut every 7 bytes, each piece its own WebSocket message: delivered whole and in order.
        byte[] messages = Encode(w =>
        {
            for (int i = 0; i < 50; i++)
            {
                FrameWriter.WriteMessage(w, 1, "ws.split"u8, default, PayloadFlags.None, Encoding.UTF8.GetBytes($"m{i}"));
            }
        });
        for (int at = 0; at < messages.Length; at += 7)
        {
            await peer.SendAsync(messages.AsMemory(at, Math.Min(7, messages.Length - at)), WebSocketMessageType.Binary, endOfMessage: true, timeout.Token);
        }

        await all.Task.WaitAsync(timeout.Token);
        Assert.Equal(Enumerable.Range(0, 50).Select(i => $"m{i}"), received);

        // Batched publications: every message whole frames (a send is never cut), all 200 there in order.
        for (int i = 0; i < 200; i++)
        {
            await client.PublishAsync("ws.out", Encoding.UTF8.GetBytes($"p{i}"), sendNow: false, cancellationToken: timeout.Token);
        }

        await client.FlushAsync(timeout.Token);
        var published = new List<string>();
        while (published.Count < 200)
        {
            foreach ((FrameType type, byte[] body) in Frames(await ReceiveMessageAsync(peer, timeout.Token)))
            {
                Assert.Equal(FrameType.Publish, type);
                var reader = new MessagePack.MessagePackReader(body);
                FrameDecoder.ReadHeader(ref reader, out int elements);
                published.Add(Encoding.UTF8.GetString(FrameDecoder.ReadPublish(ref reader, elements).Payload.FirstSpan));
            }
        }

        Assert.Equal(Enumerable.Range(0, 200).Select(i => $"p{i}"), published);
        Assert.Null(client.Failure);
    }

    [Theory]
    [InlineData("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {0}\r\n\r\n", "subprotocol")]
    [InlineData("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x{0}\r\nSec-WebSocket-Protocol: herald.v1\r\n\r\n", "Accept")]
    [InlineData("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "400")]
    public async Task An_upgrade_answer_that_is_not_herald_v1_accepting_our_key_is_refused(string answer, string named)
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        BrokerEndpoints endpoints = await ListenAsync(listener);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(20));

        Task<HeraldConnection> connecting = HeraldConnection.ConnectAsync(endpoints.For(0), "ws-refused", timeout.Token, via: endpoints);
        using WebSocket peer = await AcceptAsync(listener, timeout.Token, answer);

        IOException refused = await Assert.ThrowsAsync<IOException>(() => connecting);
        Assert.Contains(named, refused.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("herald/websocket")]
    [InlineData("herald/websockets")]
    public void Compare_names_herald_over_websocket_herald_slash_websocket(string text)
    {
        TargetSpec spec = TargetSpec.Parse(text);
        Assert.Equal(("herald", "websocket", "herald/websocket"), (spec.Target, spec.Transport, spec.Label));
    }

    /// <summary>Starts <paramref name="listener"/>; the endpoints a WebSocket client reaches it by.</summary>
    private static async Task<BrokerEndpoints> ListenAsync(TcpListener listener)
    {
        listener.Start();
        int port = ((IPEndPoint)listener.LocalEndpoint).Port;
        BrokerEndpoints endpoints = await BrokerEndpoints.ResolveAsync("127.0.0.1", port, port, CancellationToken.None);
        endpoints.WebSocket = true;
        return endpoints;
    }

    /// <summary>
    /// The server side of RFC 6455's opening handshake, agreeing to <c>herald.v1</c> (or answering
    /// <paramref name="answer"/>, <c>{0}</c> the right accept value); then a server WebSocket. With
    /// <paramref name="firstMessage"/> (under 126 bytes) its binary message follows the answer in the same write.
    /// </summary>
    private static async Task<WebSocket> AcceptAsync(TcpListener listener, CancellationToken cancellationToken, string answer = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {0}\r\nSec-WebSocket-Protocol: herald.v1\r\n\r\n", byte[]? firstMessage = null)
    {
        Socket socket = await listener.AcceptSocketAsync(cancellationToken);
        var stream = new NetworkStream(socket, ownsSocket: true);
        byte[] buffer = new byte[4096];
        int length = 0;
        while (buffer.AsSpan(0, length).IndexOf("\r\n\r\n"u8) < 0)
        {
            length += await stream.ReadAsync(buffer.AsMemory(length), cancellationToken);
        }

        string[] lines = Encoding.ASCII.GetString(buffer, 0, length).Split("\r\n");
        Assert.StartsWith("GET /ws HTTP/1.1", lines[0], StringComparison.Ordinal);
        Assert.Contains("Sec-WebSocket-Protocol: herald.v1", lines);
        string key = lines.Single(l => l.StartsWith("Sec-WebSocket-Key: ", StringComparison.Ordinal))["Sec-WebSocket-Key: ".Length..];
#pragma warning disable CA5350 // RFC 6455's accept value is SHA-1 by definition
        string accept = Convert.ToBase64String(SHA1.HashData(Encoding.ASCII.GetBytes(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")));
#pragma warning restore CA5350
        byte[] head = Encoding.ASCII.GetBytes(string.Format(CultureInfo.InvariantCulture, answer, accept));
        byte[] message = firstMessage is null ? [] : [0x82, (byte)firstMessage.Length, .. firstMessage]; // FIN, binary; a server's frame is unmasked
        await stream.WriteAsync((byte[])[.. head, .. message], cancellationToken);
        return WebSocket.CreateFromStream(stream, new WebSocketCreationOptions { IsServer = true, SubProtocol = "herald.v1" });
    }

    /// <summary>The bytes of the next whole binary message, however many reads it takes.</summary>
    private static async Task<byte[]> ReceiveMessageAsync(WebSocket peer, CancellationToken cancellationToken)
    {
        var message = new ArrayBufferWriter<byte>();
        while (true)
        {
            ValueWebSocketReceiveResult result = await peer.ReceiveAsync(message.GetMemory(4096), cancellationToken);
            Assert.Equal(WebSocketMessageType.Binary, result.MessageType);
            message.Advance(result.Count);
            if (result.EndOfMessage)
            {
                return message.WrittenSpan.ToArray();
            }
        }
    }

    /// <summary>The frames of one message, which must hold whole frames only.</summary>
    private static List<(FrameType Type, byte[] Body)> Frames(byte[] message)
    {
        var frames = new List<(FrameType, byte[])>();
        var buffer = new ReadOnlySequence<byte>(message);
        while (FrameReader.TryReadFrame(ref buffer, 1024 * 1024, out ReadOnlySequence<byte> body))
        {
            var reader = new MessagePack.MessagePackReader(body);
            frames.Add((FrameDecoder.ReadHeader(ref reader, out _), body.ToArray()));
        }

        Assert.True(buffer.IsEmpty, string.Create(CultureInfo.InvariantCulture, $"{buffer.Length} bytes of a frame cut at the message's end"));
        return frames;
    }

    private static byte[] Encode(Action<IBufferWriter<byte>> write)
    {
        var buffer = new ArrayBufferWriter<byte>();
        write(buffer);
        return buffer.WrittenSpan.ToArray();
    }
}
