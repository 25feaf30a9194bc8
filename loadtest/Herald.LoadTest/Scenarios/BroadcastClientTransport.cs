using System.Buffers.Binary;
using System.Diagnostics;
using System.Globalization;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>broadcast</c> against any target through its <see cref="IPubSubClient"/> (NATS, Redis, SignalR; the
/// same method as the tuned Herald transports): subscriber <c>i</c> is <c>target.ConnectAsync(i)</c>
/// subscribed to the topic; the publisher is client number M and sends each burst with
/// <see cref="IPubSubClient.Publish"/> and <see cref="IPubSubClient.FlushAsync"/>. Each subscriber checks
/// what it receives like the Herald ones (first payload in full, then length and burst order).
/// <para>
/// The generic clients keep the receive buffers the other scenarios use (tens of KiB each), so this needs
/// more memory per subscriber than the tuned Herald transports.
/// </para>
/// </summary>
internal sealed class BroadcastClientTransport(ITarget target, BroadcastMessage message, RunLog log) : IBroadcastTransport
{
    private static readonly TimeSpan PublishTimeout = TimeSpan.FromSeconds(10);

    private ClientSubscriber?[] _subscribers = [];
    private IPubSubClient? _publisher;
    private int _established;
    private volatile string? _publisherFailure;
    private string _describe = target.Label;
    private byte[] _payload = [];
    private bool _closed;

    public string Describe => _describe;

    public int Established => Volatile.Read(ref _established);

    public int Lost => _subscribers.Count(s => s?.Client.Failure is not null);

    public string? PublisherFailure => _publisherFailure ?? _publisher?.Failure;

    public async Task SetupAsync(int subscribers, BurstTracker tracker, Pacer pacer, CancellationToken cancellationToken)
    {
        _describe = string.Create(CultureInfo.InvariantCulture, $"{target.Label}: {subscribers:N0} subscribers and 1 publisher through the target's client ({target.ServerDescription})");
        _payload = message.PayloadFor(0);
        _subscribers = new ClientSubscriber?[subscribers];
        await pacer.ForEachAsync(subscribers, async (i, token) =>
        {
            IPubSubClient client = await target.ConnectAsync(i, token);
            var subscriber = new ClientSubscriber(client, i, message, tracker, log);
            _subscribers[i] = subscriber; // closed at the end even if subscribing fails
            await client.SubscribeAsync(message.Topic, subscriber.OnMessage, token);
            Interlocked.Increment(ref _established);
        }, cancellationToken);

        _publisher = await target.ConnectAsync(subscribers, cancellationToken);
    }

    public async Task PublishAsync(int burst, CancellationToken cancellationToken)
    {
        IPubSubClient publisher = _publisher!;
        BinaryPrimitives.WriteInt64LittleEndian(_payload, burst); // as BroadcastMessage.PayloadFor, without a copy per burst

        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        timeout.CancelAfter(PublishTimeout);
        try
        {
            publisher.Publish(message.Topic, _payload); // copied into the client's send buffer
            await publisher.FlushAsync(timeout.Token);
        }
        catch (Exception e) when (e is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
        {
            _publisherFailure ??= e is OperationCanceledException ? $"publish not sent within {PublishTimeout.TotalSeconds:F0} s" : $"publish failed: {e.Message}";
            throw new IOException(_publisherFailure, e);
        }

        if (publisher.Failure is { } failure)
        {
            _publisherFailure ??= failure;
            throw new IOException(failure);
        }
    }

    public BroadcastChecks Checks()
    {
        BroadcastChecks checks = BroadcastSubscriber.Sum(_subscribers);
        ClientSubscriber[] subscribers = [.. _subscribers.OfType<ClientSubscriber>()];
        checks.Add("disconnected", subscribers.Count(s => s.LostReason is not null || s.Client.Failure is not null));
        checks.Add("errorFrames", (_publisher?.Errors ?? 0) + subscribers.Sum(s => s.Client.Errors)); // error replies that did not end the connection (Herald ERROR, NATS -ERR)
        return checks;
    }

    /// <summary>Disposes every client, at most 64 at once, within <paramref name="timeout"/>; the rest are left to the server.</summary>
    public async Task CloseAsync(TimeSpan timeout)
    {
        if (_closed)
        {
            return;
        }

        _closed = true;
        foreach (ClientSubscriber? s in _subscribers)
        {
            if (s is not null && s.Client.Failure is { } failure)
            {
                log.Report(s.Name, $"disconnected: {failure}");
            }
        }

        IPubSubClient[] clients = [.. _subscribers.Where(s => s is not null).Select(s => s!.Client), .. _publisher is null ? Array.Empty<IPubSubClient>() : [_publisher]];
        using var closing = new CancellationTokenSource(timeout);
        long start = Stopwatch.GetTimestamp();
        try
        {
            var parallel = new ParallelOptions { MaxDegreeOfParallelism = 64, CancellationToken = closing.Token };
            await Parallel.ForEachAsync(clients, parallel, async (client, _) =>
            {
                try
                {
                    await client.DisposeAsync();
                }
                catch (Exception e) when (RunState.IsConnectionEnd(e))
                {
                    // already gone: nothing left to close
                }
            });
        }
        catch (OperationCanceledException)
        {
            log.Report(target.Label, string.Create(CultureInfo.InvariantCulture, $"not every client closed within {Stopwatch.GetElapsedTime(start).TotalSeconds:F0} s"));
        }
    }

    public async ValueTask DisposeAsync() => await CloseAsync(TimeSpan.FromSeconds(5));

    /// <summary>One subscriber client; <see cref="OnMessage"/> runs on that client's receive loop, one message at a time.</summary>
    private sealed class ClientSubscriber(IPubSubClient client, int index, BroadcastMessage message, BurstTracker tracker, RunLog log)
        : BroadcastSubscriber($"subscriber-{index.ToString(CultureInfo.InvariantCulture)}", message, tracker, log)
    {
        public IPubSubClient Client => client;

        public void OnMessage(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers) => HandlePayload(payload, Stopwatch.GetTimestamp());
    }
}
