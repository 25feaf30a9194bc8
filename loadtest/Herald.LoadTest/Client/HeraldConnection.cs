using System.Buffers;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.CompilerServices;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Client;

/// <summary>
/// One TCP connection to the broker, built for load generation rather than comfort: a raw
/// <see cref="Socket"/> with TCP_NODELAY, one growable receive buffer that <see cref="FrameReader"/>
/// parses in place (no copy, no allocation per frame), and whole-buffer sends so a caller can pipeline
/// hundreds of frames per system call.
/// <para>
/// The frames travel over the socket itself, or over a byte stream layered on it, as the broker's
/// <see cref="BrokerEndpoints"/> say (spec §1): TLS (<see cref="TlsClient"/>), a WebSocket at <c>/ws</c>
/// (<see cref="WebSocketClient"/>; each send one binary message, received messages read as one byte stream
/// since a frame may span them), or a WebSocket over TLS. Everything above the stream is the same code.
/// </para>
/// <para>
/// Reading is pull-based, the canonical loop being
/// <code>
/// while (true)
/// {
///     while (connection.TryReadFrame(out var body)) { ...handle body... }
///     if (!await connection.ReceiveAsync()) break; // the broker closed the connection
/// }
/// </code>
/// A body is a slice of the receive buffer: valid until the next <see cref="ReceiveAsync"/>. Because the
/// buffer is one array, every body is a single segment (<c>body.FirstSpan</c> is the whole body).
/// </para>
/// <para>
/// Optionally behind a simulated link (<see cref="Link"/>, the <c>compression</c> scenario's subscriber):
/// every read from the socket first takes its bytes from a <see cref="TokenBucket"/>, so the connection
/// never reads faster than the link rate and TCP backpressure throttles the broker as a slow link would;
/// the socket's receive buffer is then kept small (<c>receiveWindow</c>) so the kernel does not hide the
/// link behind megabytes of buffering.
/// </para>
/// <para>
/// Threading: one task at a time reads (<see cref="TryReadFrame"/>, <see cref="ReceiveAsync"/>, the
/// handshake helpers). Any task may send; <see cref="SendAsync"/> serialises senders on <c>_sendGate</c>
/// so a PONG from the reading task never interleaves with a batch from a publishing task.
/// </para>
/// </summary>
internal sealed class HeraldConnection : IAsyncDisposable
{
    /// <summary>Default receive buffer: large enough for ~400 MESSAGE frames of a 128-byte payload.</summary>
    public const int DefaultReceiveBufferSize = 64 * 1024;

    private static readonly byte[] PingFrame = [0, 0, 0, 2, 0x91, (byte)FrameType.Ping];
    private static readonly byte[] PongFrame = [0, 0, 0, 2, 0x91, (byte)FrameType.Pong];

    private readonly Socket _socket;
    private readonly TokenBucket? _link;
    private Stream? _stream; // TLS and/or WebSocket over the socket, when the endpoints say so; reads and writes then go through it
    private readonly SemaphoreSlim _sendGate = new(1, 1);
    private readonly ReceiveBuffer _received;
    private int _maxFrameBody = 1024 * 1024; // spec §9 default until WELCOME says otherwise
    private long _bytesSent;
    private int _disposed;

    private HeraldConnection(Socket socket, string name, int receiveBufferSize, TokenBucket? link)
    {
        _socket = socket;
        _link = link;
        Name = name;
        _received = new ReceiveBuffer(receiveBufferSize);
    }

    /// <summary>Client name sent in HELLO; also used in messages about this connection.</summary>
    public string Name { get; }

    public WelcomeFrame Welcome { get; private set; }

    public long BytesReceived => _received.BytesReceived;

    public long BytesSent => Volatile.Read(ref _bytesSent);

    /// <summary>The simulated link every receive goes through, or null for none.</summary>
    public TokenBucket? Link => _link;

    /// <summary>
    /// Opens a TCP connection (speaking TLS, WebSocket or both over it as <paramref name="via"/> says; plain
    /// frames without it) and completes the HELLO/WELCOME handshake (spec §6.1), asking for
    /// <paramref name="capabilities"/> in HELLO (spec §4.1). With <paramref name="localAddress"/> the socket
    /// is bound to that source address first (<see cref="SourceAddresses.Bind"/>), to spread many
    /// connections over several source addresses. With <paramref name="link"/> every receive, the WELCOME's
    /// included, goes through that simulated link, and a <paramref name="receiveWindow"/> above 0 sets the
    /// socket's receive buffer before connecting. <paramref name="auth"/> is HELLO's credential (spec §4.1), for a
    /// broker with authentication on; the WELCOME then names this identity's <see cref="WelcomeFrame.InboxPrefix"/>.
    /// </summary>
    /// <exception cref="SocketException">The broker is unreachable.</exception>
    /// <exception cref="IOException">The broker refused the WebSocket upgrade, or closed the connection.</exception>
    /// <exception cref="BrokerErrorException">The broker answered HELLO with an ERROR.</exception>
    public static async Task<HeraldConnection> ConnectAsync(
        IPEndPoint endPoint,
        string clientName,
        CancellationToken cancellationToken,
        int receiveBufferSize = DefaultReceiveBufferSize,
        IPAddress? localAddress = null,
        BrokerEndpoints? via = null,
        Capabilities capabilities = Capabilities.None,
        TokenBucket? link = null,
        int receiveWindow = 0,
        string? auth = null)
    {
        var socket = new Socket(endPoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        if (receiveWindow > 0)
        {
            socket.ReceiveBufferSize = receiveWindow; // before connect, so the window scale is chosen for it
        }

        var connection = new HeraldConnection(socket, clientName, receiveBufferSize, link);
        try
        {
            SourceAddresses.Bind(socket, localAddress);
            await socket.ConnectAsync(endPoint, cancellationToken);
            if (via is { Tls: true })
            {
                connection._stream = await TlsClient.AuthenticateAsync(socket, via.Host, via.TlsThumbprint, cancellationToken);
            }

            if (via is { WebSocket: true })
            {
                Stream under = connection._stream ?? new NetworkStream(socket, ownsSocket: false);
                connection._stream = await WebSocketClient.ConnectAsync(under, via.Host, endPoint.Port, receiveBufferSize, cancellationToken);
            }

            await connection.HandshakeAsync(capabilities, auth, cancellationToken);
            return connection;
        }
        catch
        {
            await connection.DisposeAsync();
            throw;
        }
    }

    /// <summary>
    /// Opens <paramref name="count"/> connections (connection <c>i</c> to <c>endpoints.For(i)</c>, named
    /// <c>name(i)</c>), a bounded number at a time so the broker's accept backlog is not overrun, and runs
    /// <paramref name="prepare"/> (e.g. subscribe) on each. All or nothing: on any failure every opened
    /// connection is closed and the first failure is thrown. <paramref name="receiveBufferSize"/> and
    /// <paramref name="receiveWindow"/> are <see cref="ConnectAsync"/>'s (a stalled subscriber's small socket buffer), and
    /// so are the <paramref name="capabilities"/> HELLO asks for.
    /// </summary>
    public static async Task<HeraldConnection[]> ConnectManyAsync(
        BrokerEndpoints endpoints,
        int count,
        Func<int, string> name,
        Func<HeraldConnection, int, CancellationToken, Task>? prepare,
        CancellationToken cancellationToken,
        int receiveBufferSize = DefaultReceiveBufferSize,
        int receiveWindow = 0,
        Capabilities capabilities = Capabilities.None)
    {
        var connections = new HeraldConnection?[count];
        try
        {
            var parallel = new ParallelOptions { MaxDegreeOfParallelism = 32, CancellationToken = cancellationToken };
            await Parallel.ForEachAsync(Enumerable.Range(0, count), parallel, async (i, token) =>
            {
                HeraldConnection connection = await ConnectAsync(endpoints.For(i), name(i), token, receiveBufferSize, via: endpoints, capabilities: capabilities, receiveWindow: receiveWindow);
                connections[i] = connection;
                if (prepare is not null)
                {
                    await prepare(connection, i, token);
                }
            });
        }
        catch
        {
            foreach (HeraldConnection? connection in connections)
            {
                connection?.Close();
            }

            throw;
        }

        return connections!;
    }

    /// <summary>
    /// Hands out the next whole frame already buffered, advancing past it; <c>false</c> when more bytes
    /// must be received first.
    /// </summary>
    /// <exception cref="ProtocolException">The broker sent a frame over the WELCOME max frame, or of length 0.</exception>
    public bool TryReadFrame(out ReadOnlySequence<byte> body)
    {
        ReadOnlySequence<byte> buffered = _received.BufferedSequence;
        long before = buffered.Length;
        if (!FrameReader.TryReadFrame(ref buffered, _maxFrameBody, out body))
        {
            return false;
        }

        _received.Consume((int)(before - buffered.Length));
        return true;
    }

    /// <summary>
    /// Receives more bytes (at least one) after the buffered frames were consumed. Returns <c>false</c>
    /// when the broker closed the connection. Invalidates every body handed out so far.
    /// </summary>
    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder<>))] // no allocation per receive
    public async ValueTask<bool> ReceiveAsync(CancellationToken cancellationToken = default)
    {
        // A frame larger than the buffer grows it (FrameReader already checked it against max_frame).
        Memory<byte> free = _received.PrepareReceive(_maxFrameBody + ProtocolConstants.LengthPrefixSize);
        int received;
        if (_link is null)
        {
            received = await ReadAsync(free, cancellationToken);
        }
        else
        {
            // Waits for link tokens, then receives at most that many bytes; what was not used goes back.
            int grant = await _link.AcquireAsync(free.Length, cancellationToken);
            try
            {
                received = await ReadAsync(free[..grant], cancellationToken);
            }
            catch
            {
                _link.Refund(grant);
                throw;
            }

            _link.Refund(grant - received);
        }

        return _received.Commit(received);
    }

    /// <summary>Sends all of <paramref name="frames"/> (any number of whole frames) in as few writes as the kernel allows.</summary>
    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    public async ValueTask SendAsync(ReadOnlyMemory<byte> frames, CancellationToken cancellationToken = default)
    {
        await _sendGate.WaitAsync(cancellationToken);
        try
        {
            if (_stream is not null)
            {
                await _stream.WriteAsync(frames, cancellationToken); // WebSocket: one binary message (WebSocketFrameStream)
                Volatile.Write(ref _bytesSent, _bytesSent + frames.Length);
                return;
            }

            while (!frames.IsEmpty)
            {
                int sent = await _socket.SendAsync(frames, SocketFlags.None, cancellationToken);
                frames = frames[sent..];
                Volatile.Write(ref _bytesSent, _bytesSent + sent);
            }
        }
        finally
        {
            _sendGate.Release();
        }
    }

    public ValueTask SendPongAsync() => SendAsync(PongFrame);

    /// <summary>
    /// Subscribes and waits until the broker has read the SUBSCRIBE, using a PING as a barrier: the
    /// broker applies a SUBSCRIBE before it reads the next frame (spec §4.3), so once the PONG is back
    /// every later PUBLISH, from any connection, reaches the subscription. Call before the reading loop
    /// starts: frames other than PONG, PING and ERROR received meanwhile are dropped. <paramref name="options"/>
    /// are SUBSCRIBE's option bits (spec §4.3).
    /// </summary>
    public async Task SubscribeAsync(uint sid, string pattern, CancellationToken cancellationToken, SubscribeOptions options = SubscribeOptions.None)
    {
        var frames = new ArrayBufferWriter<byte>(64 + pattern.Length);
        FrameWriter.WriteSubscribe(frames, sid, Topic.EncodePattern(pattern), options);
        await UntilPongAsync(frames.WrittenMemory, cancellationToken, $"subscribing to '{pattern}'");
    }

    /// <summary>
    /// Sends <paramref name="frames"/> and a PING, and reads until the PONG: the broker has read every frame before
    /// it. PINGs are answered, a fatal ERROR throws; every other frame (a MESSAGE, a non-fatal ERROR) is handed to
    /// <paramref name="onFrame"/> as it comes, or dropped without one. Returns how many non-fatal ERRORs came.
    /// </summary>
    /// <exception cref="BrokerErrorException">The broker sent a fatal ERROR.</exception>
    /// <exception cref="IOException">The broker closed the connection first.</exception>
    public async Task<int> UntilPongAsync(ReadOnlyMemory<byte> frames, CancellationToken cancellationToken, string doing = "waiting for a PONG", Action<FrameType>? onFrame = null)
    {
        var sent = new ArrayBufferWriter<byte>(frames.Length + PingFrame.Length);
        sent.Write(frames.Span);
        sent.Write(PingFrame);
        await SendAsync(sent.WrittenMemory, cancellationToken);
        int errors = 0;
        while (true)
        {
            while (TryReadFrame(out ReadOnlySequence<byte> body))
            {
                var reader = new MessagePackReader(body);
                FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
                switch (type)
                {
                    case FrameType.Pong:
                        return errors;
                    case FrameType.Ping:
                        await SendPongAsync();
                        break;
                    case FrameType.Error:
                        ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                        if (error.Fatal)
                        {
                            throw new BrokerErrorException(error);
                        }

                        errors++;
                        onFrame?.Invoke(type);
                        break;
                    default:
                        onFrame?.Invoke(type);
                        break;
                }
            }

            if (!await ReceiveAsync(cancellationToken))
            {
                throw new IOException($"{Name}: the broker closed the connection while {doing}.");
            }
        }
    }

    /// <summary>Over a WebSocket: sends its Close (the closing handshake's first half) and reads nothing; false on any other transport.</summary>
    public async Task<bool> SendWebSocketCloseAsync(CancellationToken cancellationToken)
    {
        if (_stream is not WebSocketFrameStream webSocket)
        {
            return false;
        }

        await webSocket.SendCloseAsync(cancellationToken);
        return true;
    }

    /// <summary>
    /// The read loop of a connection that only receives (a subscriber) or only publishes: until the
    /// connection ends, hands every buffered frame to <paramref name="onMessage"/> first (with the time
    /// the batch was first looked at), then handles what it declined: PINGs answered with one PONG per
    /// batch, PONGs ignored, ERRORs and any other frame recorded in <paramref name="health"/>, as is the
    /// end (the broker closed the connection, or it failed under the reader). Never throws for those.
    /// </summary>
    public async Task ReadUntilClosedAsync(MessageSink? onMessage, ConnectionHealth health)
    {
        try
        {
            while (true)
            {
                bool pongDue = false;
                long receivedAt = 0;
                while (TryReadFrame(out ReadOnlySequence<byte> body))
                {
                    if (onMessage is not null)
                    {
                        if (receivedAt == 0)
                        {
                            receivedAt = Stopwatch.GetTimestamp();
                        }

                        if (onMessage(body, receivedAt))
                        {
                            continue;
                        }
                    }

                    var reader = new MessagePackReader(body);
                    switch (FrameDecoder.ReadHeader(ref reader, out int elements))
                    {
                        case FrameType.Ping:
                            pongDue = true;
                            break;
                        case FrameType.Pong:
                            break;
                        case FrameType.Error:
                            health.OnError(FrameDecoder.ReadError(ref reader, elements));
                            break;
                        case FrameType type:
                            health.OnUnexpected(type);
                            break;
                    }
                }

                if (pongDue)
                {
                    await SendPongAsync();
                }

                if (!await ReceiveAsync())
                {
                    health.OnEnd("the broker closed the connection");
                    return;
                }
            }
        }
        catch (Exception e) when (e is SocketException or ObjectDisposedException or IOException or OperationCanceledException or ProtocolException)
        {
            health.OnEnd(e.Message);
        }
    }

    /// <summary>Shuts the socket down; a pending <see cref="ReceiveAsync"/> then fails or returns <c>false</c>.</summary>
    public void Close()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        try
        {
            _socket.Shutdown(SocketShutdown.Both);
        }
        catch (SocketException)
        {
            // already reset by the peer
        }

        _stream?.Dispose();
        _socket.Dispose();
    }

    public ValueTask DisposeAsync()
    {
        Close();
        return ValueTask.CompletedTask;
    }

    /// <summary>One read from the socket, or from the stream over it.</summary>
    private ValueTask<int> ReadAsync(Memory<byte> free, CancellationToken cancellationToken) =>
        _stream is null ? _socket.ReceiveAsync(free, SocketFlags.None, cancellationToken) : _stream.ReadAsync(free, cancellationToken);

    private async Task HandshakeAsync(Capabilities capabilities, string? auth, CancellationToken cancellationToken)
    {
        var hello = new ArrayBufferWriter<byte>(64 + Name.Length + (auth?.Length ?? 0));
        FrameWriter.WriteHello(hello, Name, capabilities, auth);
        await SendAsync(hello.WrittenMemory, cancellationToken);
        while (true)
        {
            while (TryReadFrame(out ReadOnlySequence<byte> body))
            {
                var reader = new MessagePackReader(body);
                FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
                switch (type)
                {
                    case FrameType.Welcome:
                        Welcome = FrameDecoder.ReadWelcome(ref reader, elements);
                        if (Welcome.Limits.TryGetValue("max_frame", out ulong maxFrame) && maxFrame is > 0 and <= int.MaxValue - ProtocolConstants.LengthPrefixSize)
                        {
                            _maxFrameBody = (int)maxFrame;
                        }

                        return;
                    case FrameType.Error:
                        throw new BrokerErrorException(FrameDecoder.ReadError(ref reader, elements));
                    default:
                        throw new ProtocolException(ErrorCode.UnexpectedFrame, $"{Name}: expected WELCOME, got {type}.");
                }
            }

            if (!await ReceiveAsync(cancellationToken))
            {
                throw new IOException($"{Name}: the broker closed the connection during the handshake.");
            }
        }
    }
}

/// <summary>
/// Takes one received frame body if it is a MESSAGE the reader wants (<c>true</c>); <c>false</c> hands it
/// back to <see cref="HeraldConnection.ReadUntilClosedAsync"/>. The body is valid only during the call.
/// </summary>
internal delegate bool MessageSink(ReadOnlySequence<byte> body, long receivedAt);
