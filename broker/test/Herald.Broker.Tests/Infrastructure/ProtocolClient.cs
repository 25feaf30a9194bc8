using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Text;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>A frame received from the broker, copied out of the socket buffer.</summary>
public sealed record Frame(FrameType Type, uint Sid = 0, string Topic = "", string? ReplyTo = null, byte[]? Payload = null, ErrorFrame? Error = null, WelcomeFrame? Welcome = null)
{
    /// <summary>The frame body exactly as received (MessagePack, without the length prefix).</summary>
    public byte[]? Body { get; init; }

    public PayloadFlags Flags { get; init; }

    /// <summary>PRESENCE_REPLY (spec §15.3).</summary>
    public PresenceReplyFrame? Reply { get; init; }

    /// <summary>The MESSAGE's header block (spec §4.9), keys in encoded order; null when it has none.</summary>
    public List<KeyValuePair<string, string[]>>? Headers { get; init; }

    /// <summary>The values of header <paramref name="key"/> (exact spelling); none when it is absent.</summary>
    public string[] Header(string key) => Headers?.FirstOrDefault(h => h.Key == key).Value ?? [];

    public string Text => Encoding.UTF8.GetString(Payload ?? []);

    /// <summary>The history position the broker stamped in (spec §13), or null.</summary>
    public StreamPosition? Position => Headers is not null && Header(StreamPosition.OffsetHeader) is [string offset] && Header(StreamPosition.EpochHeader) is [string epoch]
        ? new StreamPosition(ulong.Parse(offset, System.Globalization.CultureInfo.InvariantCulture), epoch)
        : null;

    /// <summary>A broker status MESSAGE's code (<c>Herald-Status</c>), or null for a message that is not one.</summary>
    public string? Status => Header(StreamPosition.StatusHeader) is [string status] ? status : null;

    public override string ToString() => Type switch
    {
        FrameType.Message => $"MESSAGE sid={Sid} topic={Topic} payload={Text}",
        FrameType.Error => $"ERROR {Error}",
        FrameType.PresenceReply => $"PRESENCE_REPLY {Reply!.Value.RequestId} code={Reply.Value.Code} members={Reply.Value.Members} entries={Reply.Value.Entries.Count}",
        _ => Type.ToString(),
    };
}

/// <summary>
/// A raw protocol client over a real socket, for tests: it can speak the protocol properly and also send
/// anything at all. Reads go through the same <see cref="FrameReader"/> and <see cref="FrameDecoder"/>
/// the broker uses.
/// </summary>
public sealed class ProtocolClient : IAsyncDisposable
{
    public static readonly TimeSpan DefaultTimeout = TimeSpan.FromSeconds(15);

    private readonly Socket? _socket;
    private readonly Stream _stream;
    private readonly PipeReader _reader;
    private readonly ArrayBufferWriter<byte> _out = new();

    private ProtocolClient(Socket socket)
        : this(new NetworkStream(socket, ownsSocket: true)) => _socket = socket;

    private ProtocolClient(Stream stream)
    {
        _stream = stream;
        _reader = PipeReader.Create(_stream, new StreamPipeReaderOptions(bufferSize: 64 * 1024));
    }

    /// <summary>The WebSocket under a client made by <see cref="ConnectWebSocketAsync"/> (its close status), else null.</summary>
    public System.Net.WebSockets.ClientWebSocket? WebSocket { get; private init; }

    /// <summary>
    /// A client over WebSocket at <c>/ws</c> on the HTTP port (subprotocol herald.v1): the frames are the same,
    /// sent as binary messages (each write one message) and read as one byte stream.
    /// </summary>
    public static async Task<ProtocolClient> ConnectWebSocketAsync(int httpPort, string? origin = null)
    {
        var socket = new System.Net.WebSockets.ClientWebSocket();
        socket.Options.AddSubProtocol("herald.v1");
        if (origin is not null)
        {
            socket.Options.SetRequestHeader("Origin", origin);
        }

        await socket.ConnectAsync(new Uri($"ws://127.0.0.1:{httpPort}/ws"), CancellationToken.None);
        return new ProtocolClient(System.Net.WebSockets.WebSocketStream.Create(socket, System.Net.WebSockets.WebSocketMessageType.Binary, ownsWebSocket: true)) { WebSocket = socket };
    }

    /// <summary>
    /// A client over WebSocket at <c>/ws</c> whose upgrade the test writes by hand on a raw socket, so that the
    /// socket's receive buffer is the test's (a subscriber that stops reading fills it quickly); <paramref name="webSocket"/>
    /// is the WebSocket under it, for a Close sent without reading.
    /// </summary>
    public static async Task<(ProtocolClient Client, System.Net.WebSockets.WebSocket WebSocket)> ConnectRawWebSocketAsync(int httpPort, int receiveBufferSize)
    {
        NetworkStream stream = await UpgradeAsync(httpPort, receiveBufferSize);
        var webSocket = System.Net.WebSockets.WebSocket.CreateFromStream(stream, new System.Net.WebSockets.WebSocketCreationOptions { IsServer = false, SubProtocol = "herald.v1", KeepAliveInterval = TimeSpan.Zero });
        return (new ProtocolClient(System.Net.WebSockets.WebSocketStream.Create(webSocket, System.Net.WebSockets.WebSocketMessageType.Binary, ownsWebSocket: true)), webSocket);
    }

    /// <summary>A raw socket upgraded to WebSocket at <c>/ws</c> by a handshake written by hand (subprotocol herald.v1): the 101 read, the stream left at the first frame.</summary>
    public static async Task<NetworkStream> UpgradeAsync(int httpPort, int? receiveBufferSize = null)
    {
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        if (receiveBufferSize is { } size)
        {
            socket.ReceiveBufferSize = size;
        }

        await socket.ConnectAsync(new IPEndPoint(IPAddress.Loopback, httpPort));
        var stream = new NetworkStream(socket, ownsSocket: true);
        string key = Convert.ToBase64String(System.Security.Cryptography.RandomNumberGenerator.GetBytes(16));
        await stream.WriteAsync(Encoding.ASCII.GetBytes(
            $"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{httpPort}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: herald.v1\r\n\r\n"));
        var head = new StringBuilder();
        byte[] one = new byte[1];
        while (!head.ToString().EndsWith("\r\n\r\n", StringComparison.Ordinal))
        {
            Assert.True(await stream.ReadAsync(one) == 1, $"The broker closed during the upgrade: {head}");
            head.Append((char)one[0]);
        }

        Assert.StartsWith("HTTP/1.1 101", head.ToString(), StringComparison.Ordinal);
        return stream;
    }

    /// <param name="localAddress">The source address to connect from (any 127.x.y.z on Linux loopback): another client address for the broker.</param>
    public static async Task<ProtocolClient> ConnectAsync(int port, int? receiveBufferSize = null, IPAddress? localAddress = null)
    {
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        if (receiveBufferSize is { } size)
        {
            socket.ReceiveBufferSize = size;
        }

        if (localAddress is not null)
        {
            socket.Bind(new IPEndPoint(localAddress, 0));
        }

        await socket.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port));
        return new ProtocolClient(socket);
    }

    /// <summary>Connects and completes the handshake (with <paramref name="auth"/>, HELLO's credential, when given).</summary>
    public static async Task<ProtocolClient> OpenAsync(int port, string name = "test", int? receiveBufferSize = null, Capabilities capabilities = Capabilities.None, string? auth = null)
    {
        ProtocolClient client = await ConnectAsync(port, receiveBufferSize);
        await client.HelloAsync(name, capabilities, auth);
        return client;
    }

    public async Task<WelcomeFrame> HelloAsync(string name = "test", Capabilities capabilities = Capabilities.None, string? auth = null)
    {
        await SendAsync(w => FrameWriter.WriteHello(w, name, capabilities, auth));
        Frame welcome = await ReadAsync();
        Assert.True(welcome.Type == FrameType.Welcome, $"Expected WELCOME, got {welcome}");
        return welcome.Welcome!.Value;
    }

    public Task SubscribeAsync(uint sid, string pattern, SubscribeOptions options = SubscribeOptions.None) =>
        SendAsync(w => FrameWriter.WriteSubscribe(w, sid, Encoding.UTF8.GetBytes(pattern), options));

    /// <summary>SUBSCRIBE resuming the topic's history after <paramref name="since"/> (spec §13).</summary>
    public Task SubscribeAsync(uint sid, string pattern, StreamPosition since, SubscribeOptions options = SubscribeOptions.None) =>
        SendAsync(w => FrameWriter.WriteSubscribe(w, sid, Encoding.UTF8.GetBytes(pattern), options, since));

    public Task UnsubscribeAsync(uint sid) => SendAsync(w => FrameWriter.WriteUnsubscribe(w, sid));

    public Task PublishAsync(string topic, string payload, string? replyTo = null) => PublishAsync(topic, Encoding.UTF8.GetBytes(payload), replyTo);

    public Task PublishAsync(string topic, byte[] payload, string? replyTo = null) =>
        SendAsync(w => FrameWriter.WritePublish(w, Encoding.UTF8.GetBytes(topic), replyTo is null ? default : Encoding.UTF8.GetBytes(replyTo), PayloadFlags.None, payload));

    /// <summary>PUBLISH with a header block (spec §4.9), encoded from <paramref name="headers"/> in order.</summary>
    public Task PublishAsync(string topic, string payload, IEnumerable<KeyValuePair<string, string[]>> headers, string? replyTo = null)
    {
        byte[] block = HeaderBlock.Encode(headers);
        return SendAsync(w => FrameWriter.WritePublish(w, Encoding.UTF8.GetBytes(topic), replyTo is null ? default : Encoding.UTF8.GetBytes(replyTo), PayloadFlags.None, Encoding.UTF8.GetBytes(payload), block));
    }

    /// <summary>
    /// Sends PING and waits for PONG: every frame sent before it has been processed by the broker, and
    /// whatever those frames queued to this connection has arrived. Returns the messages read on the way.
    /// </summary>
    public async Task<List<Frame>> PingPongAsync()
    {
        await SendAsync(FrameWriter.WritePing);
        var before = new List<Frame>();
        while (true)
        {
            Frame frame = await ReadAsync();
            if (frame.Type == FrameType.Pong)
            {
                return before;
            }

            Assert.True(frame.Type is FrameType.Message or FrameType.Ping, $"Expected PONG, got {frame}");
            if (frame.Type == FrameType.Message)
            {
                before.Add(frame);
            }
        }
    }

    /// <summary>
    /// PING, then every frame up to its PONG but PINGs (ERRORs included, where <see cref="PingPongAsync"/> expects only
    /// messages): all the frames sent before it were handled (spec §4.7), and this is what they answered.
    /// </summary>
    public async Task<List<Frame>> BarrierAsync()
    {
        await SendAsync(FrameWriter.WritePing);
        var frames = new List<Frame>();
        for (Frame frame = await ReadAsync(); frame.Type != FrameType.Pong; frame = await ReadAsync())
        {
            if (frame.Type != FrameType.Ping)
            {
                frames.Add(frame);
            }
        }

        return frames;
    }

    /// <summary>PRESENCE (spec §15.3), then the PRESENCE_REPLY with its request id (other frames read on the way are dropped).</summary>
    public async Task<PresenceReplyFrame> PresenceAsync(uint request, string topic, ulong limit, string? cursor = null)
    {
        await SendAsync(w => FrameWriter.WritePresence(w, request, Encoding.UTF8.GetBytes(topic), limit, cursor));
        while (true)
        {
            Frame frame = await ReadAsync();
            if (frame.Type == FrameType.PresenceReply && frame.Reply!.Value.RequestId == request)
            {
                return frame.Reply.Value;
            }
        }
    }

    /// <summary>Encodes frames into one buffer and sends them with one write.</summary>
    public async Task SendAsync(Action<IBufferWriter<byte>> write)
    {
        _out.ResetWrittenCount();
        write(_out);
        await _stream.WriteAsync(_out.WrittenMemory);
    }

    public async Task SendRawAsync(byte[] bytes, CancellationToken cancellationToken = default) => await _stream.WriteAsync(bytes, cancellationToken);

    /// <summary>Closes the sending side only (the broker sees end of stream).</summary>
    public void ShutdownSend() => (_socket ?? throw new InvalidOperationException("not a TCP client")).Shutdown(SocketShutdown.Send);

    /// <summary>Closes with a TCP reset (RST, linger 0) instead of a FIN: the peer sees the connection torn.</summary>
    public void Reset()
    {
        Socket socket = _socket ?? throw new InvalidOperationException("not a TCP client");
        socket.LingerState = new LingerOption(enable: true, seconds: 0);
        socket.Close();
    }

    /// <summary>Reads the next frame; fails if the connection closes or nothing comes in time.</summary>
    public async Task<Frame> ReadAsync(TimeSpan? timeout = null) =>
        await TryReadAsync(timeout) ?? throw new Xunit.Sdk.XunitException("The broker closed the connection.");

    public async Task<Frame> ReadMessageAsync(TimeSpan? timeout = null)
    {
        Frame frame = await ReadAsync(timeout);
        Assert.True(frame.Type == FrameType.Message, $"Expected MESSAGE, got {frame}");
        return frame;
    }

    /// <summary>Reads the next frame, or null at end of stream.</summary>
    public async Task<Frame?> TryReadAsync(TimeSpan? timeout = null)
    {
        using var cts = new CancellationTokenSource(timeout ?? DefaultTimeout);
        while (true)
        {
            ReadResult result;
            try
            {
                result = await _reader.ReadAsync(cts.Token);
            }
            catch (IOException)
            {
                return null; // reset by the broker
            }

            ReadOnlySequence<byte> buffer = result.Buffer;
            if (FrameReader.TryReadFrame(ref buffer, int.MaxValue, out ReadOnlySequence<byte> body))
            {
                Frame frame = Decode(body);
                _reader.AdvanceTo(buffer.Start);
                return frame;
            }

            if (result.IsCompleted)
            {
                Assert.True(buffer.IsEmpty, $"The connection closed with {buffer.Length} bytes of a partial frame.");
                _reader.AdvanceTo(buffer.End);
                return null;
            }

            _reader.AdvanceTo(buffer.Start, buffer.End);
        }
    }

    /// <summary>Reads frames until the broker closes the connection; returns them.</summary>
    public async Task<List<Frame>> ReadUntilClosedAsync(TimeSpan? timeout = null)
    {
        var frames = new List<Frame>();
        while (await TryReadAsync(timeout) is { } frame)
        {
            frames.Add(frame);
        }

        return frames;
    }

    /// <summary>Expects a fatal ERROR with <paramref name="code"/> (possibly after other frames) and then the end of the connection.</summary>
    public async Task<ErrorFrame> ExpectClosedWithAsync(ErrorCode code)
    {
        List<Frame> frames = await ReadUntilClosedAsync();
        Assert.NotEmpty(frames);
        Frame last = frames[^1];
        Assert.True(last.Type == FrameType.Error, $"Expected a final ERROR {code}, got {string.Join(", ", frames.TakeLast(3))}");
        Assert.Equal(code, last.Error!.Value.Code);
        Assert.True(last.Error.Value.Fatal);
        return last.Error.Value;
    }

    private static Frame Decode(ReadOnlySequence<byte> body)
    {
        var reader = new MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
        switch (type)
        {
            case FrameType.Message:
                PublishFrame m = FrameDecoder.ReadMessage(ref reader, count);
                return new Frame(type, m.Sid, m.TopicString, m.ReplyToString, m.Payload.ToArray()) { Body = body.ToArray(), Flags = m.Flags, Headers = m.HasHeaders ? HeaderBlock.Read(m.Headers) : null };
            case FrameType.Error:
                return new Frame(type, Error: FrameDecoder.ReadError(ref reader, count));
            case FrameType.Welcome:
                return new Frame(type, Welcome: FrameDecoder.ReadWelcome(ref reader, count));
            case FrameType.Ping or FrameType.Pong:
                FrameDecoder.ReadEmpty(ref reader, count);
                return new Frame(type);
            case FrameType.PresenceReply:
                return new Frame(type) { Reply = FrameDecoder.ReadPresenceReply(ref reader, count) };
            case FrameType.Subscribed:
                SubscribedFrame b = FrameDecoder.ReadSubscribed(ref reader, count);
                return new Frame(type, b.Sid, b.Pattern);
            default:
                throw new Xunit.Sdk.XunitException($"The broker sent a {type} frame.");
        }
    }

    public async ValueTask DisposeAsync()
    {
        await _reader.CompleteAsync();
        await _stream.DisposeAsync();
    }
}
