using System.Buffers;
using System.Net;
using System.Net.Sockets;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Client;

/// <summary>
/// A receiving TCP connection to the broker behind a simulated link: every read from the socket first
/// takes its bytes from a <see cref="TokenBucket"/>, so the connection never reads faster than the link
/// rate and TCP backpressure throttles the broker as a slow link would. It also asks for capabilities
/// in HELLO (spec §4.1), which <see cref="HeraldConnection"/> does not. The socket's receive buffer is
/// kept small (<c>receiveWindow</c>) so the kernel does not hide the link behind megabytes of buffering.
/// <para>
/// Reading is pull-based as in <see cref="HeraldConnection"/>: drain <see cref="TryReadFrame"/>, then
/// <see cref="ReceiveAsync"/>. A body is a slice of the receive buffer, valid until the next receive.
/// Threading: one reading task; <see cref="SendAsync"/> (PONG) is only called from that task too.
/// </para>
/// </summary>
internal sealed class CappedConnection : IAsyncDisposable
{
    private static readonly byte[] PingFrame = [0, 0, 0, 2, 0x91, (byte)FrameType.Ping];
    private static readonly byte[] PongFrame = [0, 0, 0, 2, 0x91, (byte)FrameType.Pong];

    private readonly Socket _socket;
    private readonly TokenBucket _link;
    private byte[] _buffer;
    private int _start;
    private int _end;
    private int _maxFrameBody = 1024 * 1024; // spec §9 default until WELCOME says otherwise
    private long _bytesReceived;
    private int _disposed;

    private CappedConnection(Socket socket, string name, TokenBucket link, int receiveBufferSize)
    {
        _socket = socket;
        _link = link;
        Name = name;
        _buffer = GC.AllocateUninitializedArray<byte>(receiveBufferSize);
    }

    public string Name { get; }

    public WelcomeFrame Welcome { get; private set; }

    /// <summary>Bytes read from the socket so far: what crossed the simulated link.</summary>
    public long BytesReceived => Volatile.Read(ref _bytesReceived);

    public TokenBucket Link => _link;

    /// <summary>Connects, sends HELLO with <paramref name="capabilities"/> and waits for WELCOME (through the link).</summary>
    /// <exception cref="SocketException">The broker is unreachable.</exception>
    /// <exception cref="BrokerErrorException">The broker answered HELLO with an ERROR.</exception>
    public static async Task<CappedConnection> ConnectAsync(IPEndPoint endPoint, string clientName, Capabilities capabilities, TokenBucket link, int receiveWindow, CancellationToken cancellationToken, int receiveBufferSize = 512 * 1024)
    {
        var socket = new Socket(endPoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        if (receiveWindow > 0)
        {
            socket.ReceiveBufferSize = receiveWindow; // before connect, so the window scale is chosen for it
        }

        var connection = new CappedConnection(socket, clientName, link, receiveBufferSize);
        try
        {
            await socket.ConnectAsync(endPoint, cancellationToken);
            var hello = new ArrayBufferWriter<byte>(64 + clientName.Length);
            FrameWriter.WriteHello(hello, clientName, capabilities);
            await connection.SendAsync(hello.WrittenMemory, cancellationToken);
            await connection.ReadWelcomeAsync(cancellationToken);
            return connection;
        }
        catch
        {
            await connection.DisposeAsync();
            throw;
        }
    }

    /// <summary>Hands out the next whole buffered frame; <c>false</c> when more bytes must be received first.</summary>
    /// <exception cref="ProtocolException">A frame over the WELCOME max frame, or of length 0.</exception>
    public bool TryReadFrame(out ReadOnlySequence<byte> body)
    {
        var buffered = new ReadOnlySequence<byte>(_buffer, _start, _end - _start);
        if (!FrameReader.TryReadFrame(ref buffered, _maxFrameBody, out body))
        {
            return false;
        }

        _start = _end - (int)buffered.Length;
        return true;
    }

    /// <summary>Waits for link tokens, then receives at most that many bytes. <c>false</c>: the broker closed the connection.</summary>
    public async ValueTask<bool> ReceiveAsync(CancellationToken cancellationToken = default)
    {
        int pending = _end - _start;
        if (_start > 0)
        {
            if (pending > 0)
            {
                Buffer.BlockCopy(_buffer, _start, _buffer, 0, pending); // at most one partial frame
            }

            _start = 0;
            _end = pending;
        }

        if (_end == _buffer.Length)
        {
            byte[] larger = GC.AllocateUninitializedArray<byte>(Math.Min(_buffer.Length * 2, _maxFrameBody + ProtocolConstants.LengthPrefixSize));
            Buffer.BlockCopy(_buffer, 0, larger, 0, _end);
            _buffer = larger;
        }

        int grant = await _link.AcquireAsync(_buffer.Length - _end, cancellationToken);
        int received;
        try
        {
            received = await _socket.ReceiveAsync(_buffer.AsMemory(_end, grant), SocketFlags.None, cancellationToken);
        }
        catch
        {
            _link.Refund(grant);
            throw;
        }

        _link.Refund(grant - received);
        if (received == 0)
        {
            return false;
        }

        _end += received;
        Volatile.Write(ref _bytesReceived, _bytesReceived + received);
        return true;
    }

    public async ValueTask SendAsync(ReadOnlyMemory<byte> frames, CancellationToken cancellationToken = default)
    {
        while (!frames.IsEmpty)
        {
            int sent = await _socket.SendAsync(frames, SocketFlags.None, cancellationToken);
            frames = frames[sent..];
        }
    }

    public ValueTask SendPongAsync() => SendAsync(PongFrame);

    /// <summary>Subscribes behind a PING barrier (see <see cref="HeraldConnection.SubscribeAsync"/>). Call before the reading loop.</summary>
    public async Task SubscribeAsync(uint sid, string pattern, CancellationToken cancellationToken)
    {
        var frames = new ArrayBufferWriter<byte>(64 + pattern.Length);
        FrameWriter.WriteSubscribe(frames, sid, Topic.EncodePattern(pattern));
        frames.Write(PingFrame);
        await SendAsync(frames.WrittenMemory, cancellationToken);
        while (true)
        {
            while (TryReadFrame(out ReadOnlySequence<byte> body))
            {
                var reader = new MessagePackReader(body);
                switch (FrameDecoder.ReadHeader(ref reader, out int elements))
                {
                    case FrameType.Pong:
                        return;
                    case FrameType.Ping:
                        await SendPongAsync();
                        break;
                    case FrameType.Error:
                        ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                        if (error.Fatal)
                        {
                            throw new BrokerErrorException(error);
                        }

                        break;
                }
            }

            if (!await ReceiveAsync(cancellationToken))
            {
                throw new IOException($"{Name}: the broker closed the connection while subscribing to '{pattern}'.");
            }
        }
    }

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

        _socket.Dispose();
    }

    public ValueTask DisposeAsync()
    {
        Close();
        return ValueTask.CompletedTask;
    }

    private async Task ReadWelcomeAsync(CancellationToken cancellationToken)
    {
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
