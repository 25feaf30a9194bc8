using System.Collections.Concurrent;
using System.Text;
using Herald.LoadTest.Peers.SignalR;
using Microsoft.AspNetCore.Http.Connections;
using Microsoft.AspNetCore.SignalR.Client;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.LoadTest.Targets;

/// <summary>
/// <see cref="IPubSubClient"/> over one SignalR <see cref="HubConnection"/> (WebSockets or long polling,
/// MessagePack hub protocol) to <see cref="PubSubHub"/>. Subscribing invokes <c>Subscribe(topic)</c> and
/// waits for its completion (the hub has added the connection to the group by then). Deliveries arrive as
/// <c>m(topic, payload, replyTo)</c> on the connection's receive loop and go to the topic's handler.
/// <para>
/// Sending: <see cref="HubConnection.SendCoreAsync"/> is asynchronous and serializes one message per call,
/// so <see cref="Publish"/> copies the publication into a queue (under <c>_gate</c>) and one send loop at a
/// time empties it, calling <c>SendCoreAsync("Publish", ...)</c> (no completion comes back) in order. The
/// loop is started by the publisher when none runs and runs inline until a send does not complete at once,
/// as <see cref="BatchedWriter"/> does; the transport underneath coalesces what accumulates meanwhile.
/// </para>
/// </summary>
internal sealed class SignalRPubSubClient : IPubSubClient
{
    /// <summary>Queued (unsent) payload bytes above which <see cref="PublishAsync"/> waits.</summary>
    public const int HighWaterBytes = 1024 * 1024;

    private readonly HubConnection _connection;
    private readonly ConcurrentDictionary<string, DeliveryHandler> _handlers = new(StringComparer.Ordinal);
    private readonly Lock _gate = new();
    private readonly Queue<Publication> _queue = new(); // caller holds _gate
    private long _queuedBytes;                           // caller holds _gate
    private long _appended;                              // publications queued so far; caller holds _gate
    private long _sent;                                  // publications sent so far; caller holds _gate
    private bool _sending;                               // a send loop runs; caller holds _gate
    private TaskCompletionSource? _progress;             // completed after each send; created by whoever waits
    private bool _stopped;                               // nothing more will be sent; caller holds _gate
    private string? _failure;
    private volatile bool _disposed;

    private SignalRPubSubClient(HubConnection connection)
    {
        _connection = connection;
        _connection.On<string, byte[], string?>(PubSubHub.DeliveryMethod, Deliver);
        _connection.Closed += OnClosedAsync;
    }

    public string? Failure => Volatile.Read(ref _failure);

    /// <summary>Always 0: a hub method called with <c>SendAsync</c> reports no error back.</summary>
    public long Errors => 0;

    public static async Task<SignalRPubSubClient> ConnectAsync(Uri hubUrl, HttpTransportType transport, CancellationToken cancellationToken)
    {
        HubConnection connection = new HubConnectionBuilder()
            .WithUrl(hubUrl, transport, http => http.SkipNegotiation = transport == HttpTransportType.WebSockets)
            .AddMessagePackProtocol()
            .Build();
        var client = new SignalRPubSubClient(connection);
        try
        {
            await connection.StartAsync(cancellationToken);
        }
        catch
        {
            await client.DisposeAsync();
            throw;
        }

        return client;
    }

    public async Task SubscribeAsync(string topic, DeliveryHandler handler, CancellationToken cancellationToken)
    {
        _handlers[topic] = handler;
        await _connection.InvokeAsync(nameof(PubSubHub.Subscribe), topic, cancellationToken);
    }

    public void Publish(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo = default) =>
        Enqueue(new Publication(topic, payload.ToArray(), replyTo.IsEmpty ? null : Encoding.UTF8.GetString(replyTo)));

    public ValueTask PublishAsync(string topic, ReadOnlyMemory<byte> payload, ReadOnlyMemory<byte> replyTo = default, ReadOnlyMemory<byte> headers = default, bool sendNow = true, CancellationToken cancellationToken = default)
    {
        if (!headers.IsEmpty)
        {
            throw new NotSupportedException("This target carries no message headers in the load tool (ITarget.EncodeHeaders refuses them).");
        }
        Publish(topic, payload.Span, replyTo.Span);
        lock (_gate)
        {
            if (_queuedBytes <= HighWaterBytes || _stopped)
            {
                return ValueTask.CompletedTask;
            }
        }

        return new ValueTask(WaitUntilAsync(() => _queuedBytes <= HighWaterBytes, cancellationToken));
    }

    public ValueTask FlushAsync(CancellationToken cancellationToken)
    {
        long target;
        lock (_gate)
        {
            target = _appended;
            if (_sent >= target || _stopped)
            {
                return ValueTask.CompletedTask;
            }
        }

        return new ValueTask(WaitUntilAsync(() => _sent >= target, cancellationToken));
    }

    public async ValueTask DisposeAsync()
    {
        _disposed = true;
        await _connection.DisposeAsync();
        ReleaseWaiters("the client was disposed");
    }

    private void Enqueue(Publication publication)
    {
        lock (_gate)
        {
            if (_stopped)
            {
                return; // the connection is gone: dropped, as a socket client drops what it cannot send
            }

            _queue.Enqueue(publication);
            _queuedBytes += publication.Payload.Length;
            _appended++;
            if (_sending)
            {
                return;
            }

            _sending = true;
        }

        _ = SendLoopAsync(); // runs inline until the first send that does not complete at once
    }

    private async Task SendLoopAsync()
    {
        while (true)
        {
            Publication next;
            lock (_gate)
            {
                if (!_queue.TryDequeue(out next))
                {
                    _sending = false;
                    return;
                }
            }

            try
            {
                await _connection.SendCoreAsync(nameof(PubSubHub.Publish), [next.Topic, next.Payload, next.ReplyTo], CancellationToken.None);
            }
            catch (Exception e) when (e is not OutOfMemoryException)
            {
                lock (_gate)
                {
                    _sending = false;
                }

                ReleaseWaiters(_disposed ? "the client was disposed" : $"send failed: {e.Message}");
                return;
            }

            TaskCompletionSource? progress;
            lock (_gate)
            {
                _sent++;
                _queuedBytes -= next.Payload.Length;
                progress = _progress;
                _progress = null;
            }

            progress?.TrySetResult();
        }
    }

    private async Task WaitUntilAsync(Func<bool> done, CancellationToken cancellationToken)
    {
        while (true)
        {
            Task progress;
            lock (_gate)
            {
                if (done() || _stopped)
                {
                    return;
                }

                _progress ??= new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
                progress = _progress.Task;
            }

            await progress.WaitAsync(cancellationToken);
        }
    }

    /// <summary>Runs on the connection's receive loop, one delivery at a time, in order.</summary>
    private void Deliver(string topic, byte[] payload, string? replyTo)
    {
        if (!_handlers.TryGetValue(topic, out DeliveryHandler? handler))
        {
            return;
        }

        if (string.IsNullOrEmpty(replyTo))
        {
            handler(payload, default, default);
            return;
        }

        int max = Encoding.UTF8.GetMaxByteCount(replyTo.Length);
        Span<byte> buffer = max <= 512 ? stackalloc byte[512] : new byte[max];
        int length = Encoding.UTF8.GetBytes(replyTo, buffer);
        handler(payload, buffer[..length], default);
    }

    private Task OnClosedAsync(Exception? error)
    {
        ReleaseWaiters(_disposed ? "the client was disposed" : error is null ? "the server closed the connection" : $"{error.GetType().Name}: {error.Message}");
        return Task.CompletedTask;
    }

    /// <summary>Records why sending stopped (only when not disposed: a disposal is no failure) and wakes every waiter.</summary>
    private void ReleaseWaiters(string why)
    {
        TaskCompletionSource? progress;
        lock (_gate)
        {
            if (!_disposed)
            {
                _failure ??= why;
            }

            _stopped = true;
            _queue.Clear();
            _queuedBytes = 0;
            _sent = _appended; // nothing more will be sent: flushing waits for nothing
            progress = _progress;
            _progress = null;
        }

        progress?.TrySetResult();
    }

    private readonly record struct Publication(string Topic, byte[] Payload, string? ReplyTo);
}
