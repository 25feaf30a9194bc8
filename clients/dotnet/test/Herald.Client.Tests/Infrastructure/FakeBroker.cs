using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Net.WebSockets;
using Herald.Protocol;
using MessagePack;

namespace Herald.Client.Tests.Infrastructure;

/// <summary>
/// A scripted broker on a real loopback socket, for what the real one will not do on demand: stay silent
/// to PINGs, send a PING or a non-fatal ERROR now, refuse a HELLO. It speaks through the shared codec.
/// </summary>
public sealed class FakeBroker : IDisposable
{
    private readonly TcpListener _listener;

    /// <summary>A fake broker on <paramref name="port"/> (0: an ephemeral one; a reconnect test puts it where a real broker was).</summary>
    public FakeBroker(int port = 0)
    {
        _listener = new(IPAddress.Loopback, port);
        _listener.Start();
    }

    public int Port => ((IPEndPoint)_listener.LocalEndpoint).Port;

    public string Url => $"tcp://127.0.0.1:{Port}";

    public async Task<FakeConnection> AcceptAsync() => new(await _listener.AcceptSocketAsync().WaitAsync(Wait.Limit));

    /// <summary>Connects <paramref name="client"/>: accepts it and goes through the handshake (<see cref="FakeConnection.HandshakeAsync"/>) until it is connected.</summary>
    public async Task<FakeConnection> ConnectAsync(HeraldClient client)
    {
        Task connecting = client.ConnectAsync(Wait.Token());
        FakeConnection connection = await AcceptAsync();
        await connection.HandshakeAsync();
        await connecting.Within();
        return connection;
    }

    public void Dispose() => _listener.Stop();
}

/// <summary>One client connection to a <see cref="FakeBroker"/> (a socket) or a <see cref="FakeWebSocketBroker"/> (a WebSocket's stream).</summary>
public sealed class FakeConnection : IAsyncDisposable
{
    private readonly Stream _stream;
    private readonly PipeReader _reader;
    private readonly TaskCompletionSource _disposed = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public FakeConnection(Socket socket)
        : this(new NetworkStream(socket, ownsSocket: true))
    {
    }

    public FakeConnection(Stream stream)
    {
        _stream = stream;
        _reader = PipeReader.Create(_stream);
    }

    /// <summary>The WebSocket under the stream, for a <see cref="FakeWebSocketBroker"/>'s connection.</summary>
    public WebSocket? WebSocket { get; init; }

    /// <summary>Completes when the test is done with the connection.</summary>
    public Task Disposed => _disposed.Task;

    /// <summary>The client's HELLO, once <see cref="HandshakeAsync"/> read it.</summary>
    public HelloFrame Hello { get; private set; }

    /// <summary>Reads HELLO, answers WELCOME (granting nothing, as a broker before any capability), then answers the client's first PING (its subscriptions flush) with PONG.</summary>
    public async Task<HelloFrame> HandshakeAsync()
    {
        HelloFrame hello = default;
        Assert.Equal(FrameType.Hello, await ReadAsync(body =>
        {
            var reader = new MessagePackReader(body);
            FrameDecoder.ReadHeader(ref reader, out int count);
            hello = FrameDecoder.ReadHello(ref reader, count);
        }));
        await SendAsync(w => FrameWriter.WriteWelcome(w, "fake", 1, Capabilities.None, [new("max_frame", 65536), new("max_topic", 256)]));
        await ExpectAsync(FrameType.Ping);
        await SendAsync(FrameWriter.WritePong);
        Hello = hello;
        return hello;
    }

    /// <summary>Reads frames until one of <paramref name="type"/>, skipping others.</summary>
    public async Task ExpectAsync(FrameType type)
    {
        while (await ReadAsync() != type)
        {
        }
    }

    /// <summary>The type of the next frame the client sends; <paramref name="inspect"/> sees its body.</summary>
    public async Task<FrameType> ReadAsync(Action<ReadOnlySequence<byte>>? inspect = null)
    {
        using var timeout = new CancellationTokenSource(Wait.Limit);
        while (true)
        {
            ReadResult result = await _reader.ReadAsync(timeout.Token);
            ReadOnlySequence<byte> buffer = result.Buffer;
            if (FrameReader.TryReadFrame(ref buffer, int.MaxValue, out ReadOnlySequence<byte> body))
            {
                var reader = new MessagePackReader(body);
                FrameType type = FrameDecoder.ReadHeader(ref reader, out _);
                inspect?.Invoke(body);
                _reader.AdvanceTo(buffer.Start);
                return type;
            }

            Assert.False(result.IsCompleted, "The client closed the connection.");
            _reader.AdvanceTo(buffer.Start, buffer.End);
        }
    }

    /// <summary>Reads (and skips) frames until the client ends its side of the stream.</summary>
    public async Task ExpectEndAsync()
    {
        using var timeout = new CancellationTokenSource(Wait.Limit);
        while (true)
        {
            ReadResult result = await _reader.ReadAsync(timeout.Token);
            _reader.AdvanceTo(result.Buffer.End);
            if (result.IsCompleted)
            {
                return;
            }
        }
    }

    public async Task SendAsync(Action<IBufferWriter<byte>> write)
    {
        var output = new ArrayBufferWriter<byte>();
        write(output);
        await _stream.WriteAsync(output.WrittenMemory);
    }

    public async ValueTask DisposeAsync()
    {
        await _reader.CompleteAsync();
        await _stream.DisposeAsync();
        _disposed.TrySetResult();
    }
}
