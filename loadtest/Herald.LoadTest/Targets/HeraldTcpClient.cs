using System.Buffers;
using System.Collections.Concurrent;
using System.Net;
using System.Text;
using Herald.LoadTest.Client;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Targets;

/// <summary>
/// <see cref="IPubSubClient"/> over one Herald TCP connection (<see cref="HeraldConnection"/>): SUBSCRIBE
/// with a PING/PONG barrier (spec §4.7), PUBLISH frames encoded straight into the <see cref="BatchedWriter"/>,
/// and a receive loop that parses MESSAGE frames in place and calls the subscription's handler by sid.
/// </summary>
internal sealed class HeraldTcpClient : IPubSubClient
{
    private static readonly byte[] Ping = [0, 0, 0, 2, 0x91, (byte)FrameType.Ping];
    private static readonly byte[] Pong = [0, 0, 0, 2, 0x91, (byte)FrameType.Pong];

    private readonly HeraldConnection _connection;
    private readonly BatchedWriter _writer;
    private readonly ConcurrentQueue<TaskCompletionSource> _pongWaiters = new();
    private readonly TopicCache _topics = new();
    private readonly Task _receiving;
    private DeliveryHandler?[] _handlers = []; // by sid - 1, copy on write
    private readonly Lock _subscribeGate = new();
    private bool _dispatching;
    private string? _failure;
    private long _errors;
    private volatile bool _disposed;

    private HeraldTcpClient(HeraldConnection connection)
    {
        _connection = connection;
        _writer = new BatchedWriter(connection.SendAsync);
        _receiving = Task.Run(ReceiveLoopAsync);
    }

    public string? Failure => Volatile.Read(ref _failure) ?? _writer.Failure;

    public long Errors => Interlocked.Read(ref _errors);

    public long? MaxPendingMessages => _connection.Welcome.Limits.TryGetValue("max_pending_msgs", out ulong limit) && limit > 0 ? (long)Math.Min(limit, long.MaxValue) : null;

    /// <summary>The broker's WELCOME (limits, capabilities).</summary>
    public WelcomeFrame Welcome => _connection.Welcome;

    public static async Task<HeraldTcpClient> ConnectAsync(IPEndPoint endPoint, string name, CancellationToken cancellationToken, int receiveBufferSize = HeraldConnection.DefaultReceiveBufferSize, IPAddress? localAddress = null)
    {
        HeraldConnection connection = await HeraldConnection.ConnectAsync(endPoint, name, cancellationToken, receiveBufferSize, localAddress);
        return new HeraldTcpClient(connection);
    }

    public async Task SubscribeAsync(string topic, DeliveryHandler handler, CancellationToken cancellationToken)
    {
        uint sid;
        lock (_subscribeGate)
        {
            DeliveryHandler?[] handlers = [.. _handlers, handler];
            sid = (uint)handlers.Length;
            Volatile.Write(ref _handlers, handlers);
        }

        var pong = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using (BatchedWriter.AppendScope scope = _writer.BeginAppend())
        {
            FrameWriter.WriteSubscribe(scope.Buffer, sid, Topic.EncodePattern(topic));
            scope.Buffer.Write(Ping);
            _pongWaiters.Enqueue(pong); // inside the lock: PONGs come back in the order the PINGs were written
        }

        await pong.Task.WaitAsync(cancellationToken);
    }

    public void Publish(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo = default) =>
        Append(topic, payload, replyTo, _dispatching ? SendPolicy.Deferred : SendPolicy.Now);

    public ValueTask PublishAsync(string topic, ReadOnlyMemory<byte> payload, ReadOnlyMemory<byte> replyTo = default, bool sendNow = true, CancellationToken cancellationToken = default)
    {
        Append(topic, payload.Span, replyTo.Span, sendNow ? SendPolicy.Now : SendPolicy.WhenFull);
        return _writer.WaitForRoomAsync(cancellationToken);
    }

    public ValueTask FlushAsync(CancellationToken cancellationToken) => _writer.FlushAsync(cancellationToken);

    public async ValueTask DisposeAsync()
    {
        _disposed = true;
        _connection.Close();
        try
        {
            await _receiving;
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            // the loop ends with the socket; how it ended does not matter now
        }

        while (_pongWaiters.TryDequeue(out TaskCompletionSource? waiter))
        {
            waiter.TrySetException(new IOException("The client was disposed."));
        }
    }

    private void Append(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, SendPolicy policy)
    {
        byte[] encoded = _topics.Get(topic);
        using BatchedWriter.AppendScope scope = _writer.BeginAppend(policy);
        FrameWriter.WritePublish(scope.Buffer, encoded, replyTo, PayloadFlags.None, payload);
    }

    private async Task ReceiveLoopAsync()
    {
        try
        {
            while (true)
            {
                _dispatching = true;
                try
                {
                    while (_connection.TryReadFrame(out ReadOnlySequence<byte> body))
                    {
                        Dispatch(body);
                    }
                }
                finally
                {
                    _dispatching = false;
                }

                _writer.Kick(); // replies and PONGs appended while dispatching: one send
                if (!await _connection.ReceiveAsync())
                {
                    Fail("the broker closed the connection");
                    return;
                }
            }
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Fail(e is BrokerErrorException or ProtocolException ? e.Message : $"{e.GetType().Name}: {e.Message}");
        }
    }

    private void Dispatch(ReadOnlySequence<byte> body)
    {
        ReadOnlySpan<byte> span = body.FirstSpan; // one array: every body is a single segment
        if (FramePeek.TryReadMessage(span, out uint sid, out ReadOnlySpan<byte> replyTo, out ReadOnlySpan<byte> payload))
        {
            Deliver(sid, payload, replyTo);
            return;
        }

        var reader = new MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
        switch (type)
        {
            case FrameType.Message:
                PublishFrame message = FrameDecoder.ReadMessage(ref reader, elements);
                Deliver(message.Sid, message.Payload.FirstSpan, message.ReplyTo is { } r ? r.FirstSpan : default);
                break;
            case FrameType.Ping:
                using (BatchedWriter.AppendScope scope = _writer.BeginAppend(SendPolicy.Deferred))
                {
                    scope.Buffer.Write(Pong);
                }

                break;
            case FrameType.Pong:
                if (_pongWaiters.TryDequeue(out TaskCompletionSource? waiter))
                {
                    waiter.TrySetResult();
                }

                break;
            case FrameType.Error:
                ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                if (error.Fatal)
                {
                    throw new BrokerErrorException(error);
                }

                Interlocked.Increment(ref _errors);
                break;
        }
    }

    private void Deliver(uint sid, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo)
    {
        DeliveryHandler?[] handlers = Volatile.Read(ref _handlers);
        if (sid - 1 < (uint)handlers.Length && handlers[sid - 1] is { } handler)
        {
            handler(payload, replyTo);
        }
    }

    private void Fail(string why)
    {
        if (!_disposed)
        {
            Interlocked.CompareExchange(ref _failure, why, null);
        }

        while (_pongWaiters.TryDequeue(out TaskCompletionSource? waiter))
        {
            waiter.TrySetException(new IOException(why));
        }
    }
}

/// <summary>Topic strings encoded once (a scenario uses a handful of topics, each many times). Thread-safe.</summary>
internal sealed class TopicCache
{
    private readonly ConcurrentDictionary<string, byte[]> _encoded = new(StringComparer.Ordinal);

    public byte[] Get(string topic) => _encoded.TryGetValue(topic, out byte[]? bytes) ? bytes : _encoded.GetOrAdd(topic, Encoding.UTF8.GetBytes);
}
