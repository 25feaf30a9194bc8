using System.Buffers;
using System.Collections.Concurrent;

namespace Herald.LoadTest.Targets;

/// <summary>
/// What the tool's own socket clients (Herald TCP, NATS) share; each adds only its wire protocol:
/// how a SUBSCRIBE-with-PING and a PUBLISH are encoded, and how received bytes are parsed.
/// <list type="bullet">
/// <item>Subscriptions: a handler per sid (copy-on-write array), live once the PONG behind the SUBSCRIBE
/// is back (PONGs come back in the order the PINGs were written, so a FIFO of waiters matches them).</item>
/// <item>Publications encoded straight into the <see cref="BatchedWriter"/>; from a handler on the receive
/// loop's thread they are deferred and sent, with PONGs, in one write after the received batch.</item>
/// <item>The receive loop: parse what is buffered (<see cref="DispatchBuffered"/>), kick the writer,
/// receive more, until the connection ends; <see cref="Failure"/> says why when it was not disposed.</item>
/// </list>
/// Threading: <see cref="Publish"/>, <see cref="PublishAsync"/>, <see cref="SubscribeAsync"/> and
/// <see cref="FlushAsync"/> from any thread; <see cref="DispatchBuffered"/> and what it calls only on the
/// receive loop. A derived class calls <see cref="StartReceiving"/> at the end of its constructor.
/// </summary>
internal abstract class SocketPubSubClient : IPubSubClient
{
    private readonly ConcurrentQueue<TaskCompletionSource> _pongWaiters = new();
    private readonly Lock _subscribeGate = new();
    private Task _receiving = Task.CompletedTask;
    private DeliveryHandler?[] _handlers = []; // by sid - 1, copy on write
    private int _dispatchingThread; // the receive loop's thread while it runs handlers, else 0
    private string? _failure;
    private long _errors;
    private volatile bool _disposed;

    protected SocketPubSubClient(Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> send) => Writer = new BatchedWriter(send);

    protected BatchedWriter Writer { get; }

    public string? Failure => Volatile.Read(ref _failure) ?? Writer.Failure;

    public long Errors => Interlocked.Read(ref _errors);

    public virtual long? MaxPendingMessages => null;

    public virtual string InboxPrefix => IPubSubClient.AnonymousInboxPrefix;

    public Task SubscribeAsync(string topic, DeliveryHandler handler, CancellationToken cancellationToken) =>
        SubscribeAsync(topic, queue: null, handler, cancellationToken);

    public Task SubscribeAsync(string topic, string? queue, DeliveryHandler handler, CancellationToken cancellationToken) =>
        SubscribeAsync((buffer, sid) => WriteSubscribeAndPing(buffer, topic, queue, sid), handler, cancellationToken);

    /// <summary>
    /// Gives <paramref name="handler"/> the next sid, appends what <paramref name="writeSubscribeAndPing"/> writes for
    /// it (a SUBSCRIBE and a PING) and completes when that PING's PONG is back: the subscription is then live.
    /// </summary>
    protected async Task SubscribeAsync(Action<IBufferWriter<byte>, uint> writeSubscribeAndPing, DeliveryHandler handler, CancellationToken cancellationToken)
    {
        uint sid;
        lock (_subscribeGate)
        {
            DeliveryHandler?[] handlers = [.. _handlers, handler];
            sid = (uint)handlers.Length;
            Volatile.Write(ref _handlers, handlers);
        }

        var pong = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using (BatchedWriter.AppendScope scope = Writer.BeginAppend())
        {
            writeSubscribeAndPing(scope.Buffer, sid);
            _pongWaiters.Enqueue(pong); // inside the writer's lock: the waiters queue in the order the PINGs are written
        }

        await pong.Task.WaitAsync(cancellationToken);
    }

    public void Publish(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo = default) =>
        Append(topic, payload, replyTo, default, Volatile.Read(ref _dispatchingThread) == Environment.CurrentManagedThreadId ? SendPolicy.Deferred : SendPolicy.Now);

    public ValueTask PublishAsync(string topic, ReadOnlyMemory<byte> payload, ReadOnlyMemory<byte> replyTo = default, ReadOnlyMemory<byte> headers = default, bool sendNow = true, CancellationToken cancellationToken = default)
    {
        Append(topic, payload.Span, replyTo.Span, headers.Span, sendNow ? SendPolicy.Now : SendPolicy.WhenFull);
        return Writer.WaitForRoomAsync(cancellationToken);
    }

    public ValueTask FlushAsync(CancellationToken cancellationToken) => Writer.FlushAsync(cancellationToken);

    public async ValueTask DisposeAsync()
    {
        _disposed = true;
        CloseConnection();
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

    /// <summary>Starts the receive loop; the last line of a derived constructor.</summary>
    protected void StartReceiving() => _receiving = Task.Run(ReceiveLoopAsync);

    /// <summary>Encodes a subscription to <paramref name="topic"/> as <paramref name="sid"/>, followed by a PING.</summary>
    /// <summary>SUBSCRIBE (in <paramref name="queue"/> when not null) and a PING whose PONG says it is in place.</summary>
    protected abstract void WriteSubscribeAndPing(IBufferWriter<byte> buffer, string topic, string? queue, uint sid);

    /// <summary>Encodes one publication; <paramref name="headers"/> is its header block in the wire's encoding, or empty.</summary>
    protected abstract void WritePublish(IBufferWriter<byte> buffer, string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers);

    /// <summary>Handles every whole frame or line buffered (calling <see cref="Deliver"/>, <see cref="PongReceived"/>, ...); receive loop only.</summary>
    protected abstract void DispatchBuffered();

    /// <summary>Receives more bytes; false when the server closed the connection.</summary>
    protected abstract ValueTask<bool> ReceiveMoreAsync();

    /// <summary>Closes the socket, which ends the receive loop.</summary>
    protected abstract void CloseConnection();

    /// <summary>The failure when the server closes the connection (e.g. "the broker closed the connection").</summary>
    protected abstract string ClosedByServer { get; }

    /// <summary>The failure for an exception that ended the receive loop.</summary>
    protected virtual string Describe(Exception e) => $"{e.GetType().Name}: {e.Message}";

    /// <summary>Adds detail to a failure (NATS: its last -ERR line).</summary>
    protected virtual string Explain(string why) => why;

    /// <summary>Calls the handler of <paramref name="sid"/>, if it has one.</summary>
    protected void Deliver(uint sid, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
    {
        DeliveryHandler?[] handlers = Volatile.Read(ref _handlers);
        if (sid - 1 < (uint)handlers.Length && handlers[sid - 1] is { } handler)
        {
            handler(payload, replyTo, headers);
        }
    }

    /// <summary>Answers the server's PING: sent with the other replies of this received batch.</summary>
    protected void Reply(ReadOnlySpan<byte> pong)
    {
        using BatchedWriter.AppendScope scope = Writer.BeginAppend(SendPolicy.Deferred);
        scope.Buffer.Write(pong);
    }

    /// <summary>A PONG came back: the oldest subscription waiting on one is live.</summary>
    protected void PongReceived()
    {
        if (_pongWaiters.TryDequeue(out TaskCompletionSource? waiter))
        {
            waiter.TrySetResult();
        }
    }

    /// <summary>The server reported an error that did not end the connection.</summary>
    protected void CountError() => Interlocked.Increment(ref _errors);

    private void Append(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers, SendPolicy policy)
    {
        using BatchedWriter.AppendScope scope = Writer.BeginAppend(policy);
        WritePublish(scope.Buffer, topic, payload, replyTo, headers);
    }

    private async Task ReceiveLoopAsync()
    {
        try
        {
            while (true)
            {
                Volatile.Write(ref _dispatchingThread, Environment.CurrentManagedThreadId);
                try
                {
                    DispatchBuffered();
                }
                finally
                {
                    Volatile.Write(ref _dispatchingThread, 0);
                }

                Writer.Kick(); // replies and PONGs appended while dispatching: one send
                if (!await ReceiveMoreAsync())
                {
                    Fail(ClosedByServer);
                    return;
                }
            }
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Fail(Describe(e));
        }
    }

    private void Fail(string why)
    {
        if (!_disposed)
        {
            Interlocked.CompareExchange(ref _failure, Explain(why), null);
        }

        while (_pongWaiters.TryDequeue(out TaskCompletionSource? waiter))
        {
            waiter.TrySetException(new IOException(why));
        }

        Failed(why);
    }

    /// <summary>The connection ended (<paramref name="why"/>): a derived client fails what it still waits for.</summary>
    protected virtual void Failed(string why)
    {
    }
}
