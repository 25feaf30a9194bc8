using System.Net;
using System.Security.Cryptography;
using Herald.Broker.Telemetry;
using Microsoft.Extensions.Logging;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// This node's connection to one shard of the cluster (spec cluster.md §13; the only one, without
/// <c>Herald:Cluster:Shards</c>), and what names the node and the shard on it: the parts of the cluster engine
/// (out, interest, in, queue groups, members, shared history and sessions) find it through <see cref="ClusterShards"/>.
/// It connects (<see cref="ConnectAsync"/>), says whether the shard is reachable, and finds the one server this node
/// publishes through there.
/// </summary>
internal sealed class ClusterConnection : IAsyncDisposable
{
    private ConnectionMultiplexer? _redis;
    private ISubscriber? _subscriber;
    private IServer? _publishVia;
    private long _restores;

    public ClusterConnection(ClusterOptions options, int index, ClusterShardOptions shard, ulong nodeId)
    {
        Options = options;
        Index = index;
        Redis = shard.Redis!;
        Prefix = shard.ChannelPrefix ?? options.ChannelPrefix;
        ChannelPrefix = System.Text.Encoding.ASCII.GetBytes(Prefix);
        NodeId = nodeId;
    }

    /// <summary>A connection to the one Redis of <paramref name="options"/> (<c>Herald:Cluster:Redis</c>), as shard 0 (tests).</summary>
    public ClusterConnection(ClusterOptions options)
        : this(options, 0, options.ShardList[0], NewNodeId())
    {
    }

    /// <summary>A node id: 64 random bits, never 0, new at every start (spec cluster.md §1).</summary>
    public static ulong NewNodeId() => BitConverter.ToUInt64(RandomNumberGenerator.GetBytes(8)) | 1;

    public ClusterOptions Options { get; }

    /// <summary>This shard's place in <c>Herald:Cluster:Shards</c> (0 for the one <c>Herald:Cluster:Redis</c>).</summary>
    public int Index { get; }

    /// <summary>This shard's StackExchange.Redis configuration string.</summary>
    public string Redis { get; }

    /// <summary>What this shard's channels and keys start with (its own, or <see cref="ClusterOptions.ChannelPrefix"/>).</summary>
    public string Prefix { get; }

    /// <summary>This node's id in the cluster: random at every start, so a restarted node's sequence starts afresh.</summary>
    public ulong NodeId { get; }

    /// <summary><see cref="Prefix"/> in ASCII, which every channel of this shard starts with.</summary>
    public byte[] ChannelPrefix { get; }

    public IDatabase Database => _redis!.GetDatabase();

    public ISubscriber Subscriber => _subscriber!;

    public bool IsConnected => _redis?.IsConnected == true;

    /// <summary>Connections to Redis restored so far (history topics: a gap from then on may be the outage's, repaired from the streams).</summary>
    public long Restores => Interlocked.Read(ref _restores);

    /// <summary>The Redis endpoints of the configuration (never its password or other options).</summary>
    public IReadOnlyList<string> Endpoints => [.. ConfigurationOptions.Parse(Redis).EndPoints.Select(e => e.ToString() ?? "")];

    /// <summary>
    /// Connects, without waiting for Redis to be reachable (local traffic is served meanwhile, and the connection keeps
    /// trying): a loss is logged, and <paramref name="restored"/> runs each time a connection comes back, told whether it
    /// is the one this node's subscriptions there travel on (whose outage cost its subscribers what was published meanwhile).
    /// </summary>
    public async Task ConnectAsync(ILogger log, Action<bool> restored)
    {
        ConfigurationOptions config = ConfigurationOptions.Parse(Redis);
        config.AbortOnConnectFail = false; // start without Redis and keep trying: local traffic is served meanwhile
        config.BacklogPolicy = BacklogPolicy.FailFast; // unreachable: fail now (counted), never queue behind a dead link
        config.ConnectTimeout = (int)Options.ConnectTimeout.TotalMilliseconds;
        config.ClientName ??= $"herald-{NodeId:x16}-{Index}";
        ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(config).ConfigureAwait(false);
        _redis = redis;
        redis.ConnectionFailed += (_, e) =>
        {
            if (e.ConnectionType == ConnectionType.Subscription || !redis.IsConnected)
            {
                log.ClusterRedisLost(e.EndPoint?.ToString(), e.FailureType.ToString(), e.Exception?.Message);
            }
        };
        redis.ConnectionRestored += (_, e) =>
        {
            log.ClusterRedisRestored(e.EndPoint?.ToString());
            restored(e.ConnectionType == ConnectionType.Subscription);
            Interlocked.Increment(ref _restores);
        };
        redis.ConfigurationChanged += (_, _) => _publishVia = null; // a failover or resharding: find the slot's master again
        _subscriber = redis.GetSubscriber();
        if (!redis.IsConnected)
        {
            log.ClusterRedisLost(string.Join(",", Endpoints), "NotConnectedAtStart", null);
        }
    }

    /// <summary>
    /// The one server this node PUBLISHes through, in order (spec cluster.md §1): on Redis Cluster the master of
    /// the prefix's hash slot, which carries the publications to every shard in the order sent; on one Redis,
    /// that Redis. Found again after a failure or a topology change; null while unreachable.
    /// </summary>
    public IServer? PublishServer()
    {
        if (_publishVia is { IsConnected: true } server)
        {
            return server;
        }

        if (!_redis!.IsConnected)
        {
            return null; // unreachable: no lookup (and no exception) per publication while it lasts
        }

        try
        {
            EndPoint? endpoint = _redis.GetDatabase().IdentifyEndpoint(Prefix, CommandFlags.DemandMaster);
            _publishVia = endpoint is null ? null : _redis.GetServer(endpoint);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _publishVia = null;
        }

        return _publishVia is { IsConnected: true } found ? found : null;
    }

    public async ValueTask DisposeAsync()
    {
        if (_redis is not null)
        {
            await _redis.CloseAsync(allowCommandsToComplete: false).ConfigureAwait(false);
            _redis.Dispose();
        }
    }
}
