using System.Buffers;
using System.Diagnostics;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>broadcast --transport tcp</c>, <c>tls</c> or <c>websocket</c>: M subscriber <see cref="HeraldConnection"/>s,
/// each over the byte stream the target's <see cref="BrokerEndpoints"/> name (TCP, TLS, or a WebSocket at the HTTP
/// port's <c>/ws</c>: the same frames, read by the same code), spread round-robin over the broker's port range
/// (connection <c>i</c> to port <c>first + i % ports</c>; WebSocket has the one HTTP port) and over source
/// addresses (<see cref="SourceAddresses"/>; connection <c>i</c> from address <c>(i / ports) % sources</c>), so
/// each (source, destination) pair carries about M / (ports x sources) connections. Each one does
/// HELLO/WELCOME, SUBSCRIBE and a PING/PONG barrier (the subscription is live), then reads. One publisher
/// connection on the first port sends one PUBLISH per burst.
/// <para>
/// Memory per subscriber is kept small for hundreds of thousands of them: a receive buffer of a few
/// MESSAGEs (it grows if a bigger frame comes) instead of the 64 KiB the other scenarios use.
/// </para>
/// </summary>
internal sealed class BroadcastConnectionTransport(BroadcastOptions options, HeraldTarget target, BroadcastMessage message, RunLog log) : IBroadcastTransport
{
    private readonly RunState _state = new();
    private readonly byte[] _publish = (byte[])message.PublishFrame.Clone();
    private ConnectionSubscriber?[] _subscribers = [];
    private Task[] _readers = [];
    private HeraldConnection? _publisher;
    private ConnectionHealth? _publisherHealth;
    private Task? _publisherReader;
    private int _established;
    private string _describe = target.Transport;

    public string Describe => _describe;

    public int Established => Volatile.Read(ref _established);

    public int Lost => _subscribers.Count(s => s is { LostReason: not null });

    public string? PublisherFailure => _publisherHealth?.Failure;

    public async Task SetupAsync(int subscribers, BurstTracker tracker, Pacer pacer, CancellationToken cancellationToken)
    {
        BrokerEndpoints endpoints = target.Endpoints;
        SourceAddresses sources = SourceAddresses.Plan(endpoints.Address, subscribers + 1L, endpoints.PortCount, options.Sources);
        _describe = $"{target.Transport}: {subscribers:N0} subscribers on {endpoints.Display} from {sources.Display}, publisher on {endpoints.Host}:{endpoints.FirstPort}";
        int receiveBuffer = Math.Clamp(4 * message.MessageFrameLength, 1024, HeraldConnection.DefaultReceiveBufferSize);

        _subscribers = new ConnectionSubscriber?[subscribers];
        _readers = new Task[subscribers];
        Array.Fill(_readers, Task.CompletedTask);
        await pacer.ForEachAsync(subscribers, async (i, token) =>
        {
            HeraldConnection connection = await HeraldConnection.ConnectAsync(
                endpoints.For(i), $"loadtest-broadcast-{i}", token, receiveBuffer, sources.For(i / endpoints.PortCount), via: endpoints);
            var subscriber = new ConnectionSubscriber(connection, message, tracker, log, _state);
            _subscribers[i] = subscriber;
            await connection.SubscribeAsync(BroadcastMessage.Sid, message.Topic, token);
            _readers[i] = subscriber.RunAsync(); // reads (and answers the broker's PINGs) from now on
            Interlocked.Increment(ref _established);
        }, cancellationToken);

        _publisher = await HeraldConnection.ConnectAsync(endpoints.At(endpoints.FirstPort), "loadtest-broadcast-pub", cancellationToken, localAddress: sources.For(0), via: endpoints);
        _publisherHealth = new ConnectionHealth(_publisher.Name, log, () => _state.Stopping);
        _publisherReader = _publisher.ReadUntilClosedAsync(null, _publisherHealth); // answers the broker's PINGs, reports its ERRORs
    }

    public async Task PublishAsync(int burst, CancellationToken cancellationToken)
    {
        message.StampPublish(_publish, burst);
        try
        {
            await _publisher!.SendAsync(_publish, CancellationToken.None); // never cancelled midway: a half-sent frame breaks the stream
        }
        catch (Exception e) when (RunState.IsConnectionEnd(e))
        {
            _publisherHealth?.Fail($"send failed: {e.Message}");
            throw;
        }
    }

    public BroadcastChecks Checks()
    {
        BroadcastChecks checks = BroadcastSubscriber.Sum(_subscribers);
        ConnectionSubscriber[] subscribers = [.. _subscribers.OfType<ConnectionSubscriber>()];
        checks.Add("subscriberBytesReceived", subscribers.Sum(s => s.BytesReceived));
        checks.Add("disconnected", subscribers.Count(s => s.LostReason is not null));
        checks.Add("errorFrames", subscribers.Sum(s => s.Health.ErrorFrames) + (_publisherHealth?.ErrorFrames ?? 0));
        checks.Add("unexpectedFrames", subscribers.Sum(s => s.Health.UnexpectedFrames) + (_publisherHealth?.UnexpectedFrames ?? 0));
        return checks;
    }

    public async Task CloseAsync(TimeSpan timeout)
    {
        _state.BeginStopping();
        foreach (ConnectionSubscriber? s in _subscribers)
        {
            s?.Connection.Close();
        }

        _publisher?.Close();
        await RunState.WaitQuietlyAsync(Task.WhenAll([.. _readers, _publisherReader ?? Task.CompletedTask]), timeout);
    }

    public async ValueTask DisposeAsync() => await CloseAsync(TimeSpan.FromSeconds(2));

    /// <summary>One subscriber connection and its reading task (the only writer of its counters).</summary>
    private sealed class ConnectionSubscriber(HeraldConnection connection, BroadcastMessage message, BurstTracker tracker, RunLog log, RunState state)
        : BroadcastSubscriber(connection.Name, message, tracker, log)
    {
        public HeraldConnection Connection => connection;

        /// <summary>The broker's ERRORs, frames nobody expected and why the connection ended.</summary>
        public ConnectionHealth Health { get; } = new(connection.Name, log, () => state.Stopping);

        public override string? LostReason => Health.Failure;

        public long BytesReceived => connection.BytesReceived;

        public async Task RunAsync()
        {
            await Task.Yield(); // return to the setup loop at once; read from here on
            await connection.ReadUntilClosedAsync(TryHandleMessage, Health);
        }
    }
}
