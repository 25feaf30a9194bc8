using System.Collections.Concurrent;
using System.Net;
using StackExchange.Redis;

namespace Herald.LoadTest.Targets;

/// <summary>
/// <see cref="IPubSubClient"/> over StackExchange.Redis: one <see cref="ConnectionMultiplexer"/> per client,
/// which holds two TCP connections to redis-server (RESP2): an interactive one (PUBLISH, PING) and a
/// subscription one (SUBSCRIBE and the messages). SE.Redis pipelines and batches its writes itself, so
/// publications go out as <c>PUBLISH</c> with <see cref="CommandFlags.FireAndForget"/>.
/// <para>
/// Reply-to: Redis pub/sub carries only a channel and a payload, so this adapter prepends a small envelope
/// to every payload it publishes, <c>[1 byte: reply length n][n bytes: reply subject][payload]</c> (n is 0
/// without a reply), and strips it on receive. A message without the envelope (published by someone else)
/// counts in <see cref="Errors"/> and is not delivered.
/// </para>
/// <para>
/// Ordering and threading: each subscription is an SE.Redis <see cref="ChannelMessageQueue"/>, handled in
/// arrival order; the handlers of all subscriptions of one client run one at a time (under
/// <c>_deliveryGate</c>), as on the socket clients' receive loop. Publish, Subscribe and Flush are thread-safe.
/// </para>
/// </summary>
internal sealed class RedisPubSubClient : IPubSubClient
{
    /// <summary>Published bytes after which <see cref="PublishAsync"/> waits for a PING round trip (flow control).</summary>
    private const long FlowControlBytes = 1024 * 1024;

    private readonly ConnectionMultiplexer _multiplexer;
    private readonly ISubscriber _subscriber;
    private readonly IDatabase _database;
    private readonly ConcurrentDictionary<string, RedisChannel> _channels = new(StringComparer.Ordinal);
    private readonly Lock _deliveryGate = new();
    private long _unconfirmedBytes;
    private string? _failure;
    private long _errors;
    private volatile bool _disposed;

    private RedisPubSubClient(ConnectionMultiplexer multiplexer)
    {
        _multiplexer = multiplexer;
        _subscriber = multiplexer.GetSubscriber();
        _database = multiplexer.GetDatabase();
        multiplexer.ConnectionFailed += OnConnectionFailed;
        multiplexer.ErrorMessage += OnErrorMessage;
    }

    public string? Failure => Volatile.Read(ref _failure);

    public long Errors => Interlocked.Read(ref _errors);

    /// <summary>Connects both connections (the multiplexer's handshake); fails rather than retrying in the background.</summary>
    public static async Task<RedisPubSubClient> ConnectAsync(EndPoint endPoint, string name, TimeSpan timeout, CancellationToken cancellationToken)
    {
        var configuration = new ConfigurationOptions
        {
            ClientName = name,
            Protocol = RedisProtocol.Resp2, // interactive + subscription connection, as most deployments run it
            AbortOnConnectFail = true,
            ConnectRetry = 1,
            ConnectTimeout = (int)Math.Min(timeout.TotalMilliseconds, int.MaxValue),
        };
        configuration.EndPoints.Add(endPoint);
        ConnectionMultiplexer multiplexer = await ConnectionMultiplexer.ConnectAsync(configuration).WaitAsync(cancellationToken);
        return new RedisPubSubClient(multiplexer);
    }

    /// <summary>The server's version as it reports it (<c>INFO server</c>), e.g. <c>7.0.15</c>.</summary>
    public async Task<string> ServerVersionAsync()
    {
        IServer server = _multiplexer.GetServer(_multiplexer.GetEndPoints()[0]);
        IGrouping<string, KeyValuePair<string, string>>[] info = await server.InfoAsync("server");
        return info.SelectMany(group => group).FirstOrDefault(pair => pair.Key == "redis_version").Value ?? server.Version.ToString();
    }

    public async Task SubscribeAsync(string topic, DeliveryHandler handler, CancellationToken cancellationToken)
    {
        // Completes when the server has answered SUBSCRIBE: from then on every PUBLISH to the channel reaches it.
        ChannelMessageQueue queue = await _subscriber.SubscribeAsync(Channel(topic)).WaitAsync(cancellationToken);
        queue.OnMessage(message => Deliver(handler, message.Message));
    }

    public void Publish(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo = default)
    {
        byte[] enveloped = Envelope(payload, replyTo);
        Interlocked.Add(ref _unconfirmedBytes, enveloped.Length);
        try
        {
            _ = _subscriber.PublishAsync(Channel(topic), enveloped, CommandFlags.FireAndForget);
        }
        catch (RedisException e)
        {
            // no connection to queue it on (the multiplexer is reconnecting): lost, as the contract allows after a failure
            Interlocked.CompareExchange(ref _failure, $"publish failed: {e.Message}", null);
        }
    }

    /// <summary>
    /// As <see cref="Publish"/> (SE.Redis decides when to write; <paramref name="sendNow"/> changes nothing);
    /// after every <see cref="FlowControlBytes"/> published it waits for a PING round trip, so a producer
    /// never runs more than that ahead of the server (SE.Redis itself would queue without bound).
    /// </summary>
    public ValueTask PublishAsync(string topic, ReadOnlyMemory<byte> payload, ReadOnlyMemory<byte> replyTo = default, ReadOnlyMemory<byte> headers = default, bool sendNow = true, CancellationToken cancellationToken = default)
    {
        if (!headers.IsEmpty)
        {
            throw new NotSupportedException("This target carries no message headers in the load tool (ITarget.EncodeHeaders refuses them).");
        }
        Publish(topic, payload.Span, replyTo.Span);
        return Interlocked.Read(ref _unconfirmedBytes) > FlowControlBytes ? FlushAsync(cancellationToken) : ValueTask.CompletedTask;
    }

    /// <summary>A PING round trip on the interactive connection: everything published before it has reached the server.</summary>
    public async ValueTask FlushAsync(CancellationToken cancellationToken)
    {
        long published = Interlocked.Exchange(ref _unconfirmedBytes, 0);
        try
        {
            await _database.PingAsync().WaitAsync(cancellationToken);
        }
        catch (RedisException) when (Failure is not null)
        {
            // the failure is reported through Failure
        }
        catch (OperationCanceledException)
        {
            Interlocked.Add(ref _unconfirmedBytes, published);
            throw;
        }
    }

    public async ValueTask DisposeAsync()
    {
        _disposed = true;
        _multiplexer.ConnectionFailed -= OnConnectionFailed;
        _multiplexer.ErrorMessage -= OnErrorMessage;
        await _multiplexer.CloseAsync(allowCommandsToComplete: false);
        await _multiplexer.DisposeAsync();
    }

    private static byte[] Envelope(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo)
    {
        if (replyTo.Length > byte.MaxValue)
        {
            throw new ArgumentException($"The Redis target carries reply subjects of at most {byte.MaxValue} bytes.", nameof(replyTo));
        }

        byte[] enveloped = GC.AllocateUninitializedArray<byte>(1 + replyTo.Length + payload.Length);
        enveloped[0] = (byte)replyTo.Length;
        replyTo.CopyTo(enveloped.AsSpan(1));
        payload.CopyTo(enveloped.AsSpan(1 + replyTo.Length));
        return enveloped;
    }

    private RedisChannel Channel(string topic) =>
        _channels.TryGetValue(topic, out RedisChannel channel) ? channel : _channels.GetOrAdd(topic, RedisChannel.Literal);

    private void Deliver(DeliveryHandler handler, RedisValue message)
    {
        ReadOnlySpan<byte> enveloped = ((ReadOnlyMemory<byte>)message).Span;
        if (enveloped.IsEmpty || enveloped[0] >= enveloped.Length)
        {
            Interlocked.Increment(ref _errors); // not published through this adapter
            return;
        }

        int replyLength = enveloped[0];
        lock (_deliveryGate)
        {
            handler(enveloped[(1 + replyLength)..], enveloped.Slice(1, replyLength), default);
        }
    }

    private void OnConnectionFailed(object? sender, ConnectionFailedEventArgs e)
    {
        if (!_disposed)
        {
            Interlocked.CompareExchange(ref _failure, $"{e.ConnectionType} connection failed ({e.FailureType}): {e.Exception?.Message}", null);
        }
    }

    private void OnErrorMessage(object? sender, RedisErrorEventArgs e) => Interlocked.Increment(ref _errors);
}
