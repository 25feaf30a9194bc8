using Herald.Broker.Cluster;
using Herald.Broker.Hosting;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>
/// N real Herald nodes on loopback, each its own broker with its own ports, all on one real Redis: a single
/// <c>redis-server</c> (<see cref="Redis"/>), or a Redis Cluster of three masters (<see cref="RedisCluster"/>); or on
/// several shards, each a <c>redis-server</c> of its own (<see cref="Shards"/>, cluster.md §13).
/// </summary>
public sealed class TestCluster : IAsyncDisposable
{
    /// <summary>The <c>Herald:Cluster:Secret</c> of the tests that sign what the nodes write to Redis.</summary>
    public const string Secret = "the-cluster-secret-0123456789";

    /// <summary>The counter of long-poll session commands and backlog entries a node refused, by <c>reason</c> (cluster.md §10).</summary>
    public const string SessionsRefused = "herald.cluster.sessions.refused";

    private readonly IAsyncDisposable _backplane;

    private TestCluster(IAsyncDisposable backplane, TestBroker[] nodes)
    {
        _backplane = backplane;
        Nodes = nodes;
    }

    /// <summary>The single Redis (null on a Redis Cluster).</summary>
    public RedisServer Redis => _backplane as RedisServer ?? throw new InvalidOperationException("This cluster runs on a Redis Cluster.");

    public RedisClusterServers RedisCluster => _backplane as RedisClusterServers ?? throw new InvalidOperationException("This cluster runs on a single Redis.");

    /// <summary>The shards' Redis, in <c>Herald:Cluster:Shards</c> order (<see cref="StartShardedAsync"/>).</summary>
    public RedisServer[] Shards => (_backplane as ShardServers)?.Servers ?? throw new InvalidOperationException("This cluster runs on one Redis.");

    /// <summary>
    /// <paramref name="nodes"/> nodes on <paramref name="shards"/> shards (cluster.md §13), each shard a <c>redis-server</c> of its own.
    /// </summary>
    /// <param name="persistent">The shard (index) started with an append-only file in <paramref name="directory"/>: its keys survive a kill.</param>
    /// <param name="existing">Shards already running (the first ones, in order), which the test owns and disposes itself.</param>
    public static async Task<TestCluster> StartShardedAsync(int shards, int nodes = 2, Action<HeraldOptions>? configure = null, int persistent = -1, string? directory = null, RedisServer[]? existing = null)
    {
        existing ??= [];
        var servers = new List<RedisServer>(existing);
        var started = new List<TestBroker>();
        try
        {
            servers.AddRange(await Task.WhenAll(Enumerable.Range(existing.Length, shards - existing.Length).Select(i =>
                i == persistent ? RedisServer.StartAsync(["--appendonly", "yes", "--appendfsync", "always"], directory) : RedisServer.StartAsync(null, null))));
            for (int i = 0; i < nodes; i++)
            {
                started.Add(await TestBroker.StartAsync(o =>
                {
                    o.Cluster.Shards = [.. servers.Select(server => new ClusterShardOptions { Redis = server.Configuration })];
                    configure?.Invoke(o);
                }));
            }
        }
        catch
        {
            foreach (TestBroker node in started)
            {
                await node.DisposeAsync();
            }

            await new ShardServers([.. servers], existing.Length).DisposeAsync();
            throw;
        }

        return new TestCluster(new ShardServers([.. servers], existing.Length), [.. started]);
    }

    /// <summary>The test's own connection to shard <paramref name="shard"/>'s Redis (closed with the cluster).</summary>
    public StackExchange.Redis.IDatabase Database(int shard) => ((ShardServers)_backplane).Database(shard);

    /// <summary>
    /// <paramref name="nodes"/> nodes whose shards are the three masters of one Redis Cluster (cluster.md §13): three
    /// prefixes whose hash tags the cluster places on three different masters (<see cref="ShardPrefixes"/>).
    /// </summary>
    public static async Task<TestCluster> StartOnRedisClusterShardsAsync(int nodes = 2, Action<HeraldOptions>? configure = null)
    {
        RedisClusterServers servers = await RedisClusterServers.StartAsync();
        var started = new List<TestBroker>();
        try
        {
            string[] prefixes = await ShardPrefixesAsync(servers.Configuration, servers.Masters.Length);
            for (int i = 0; i < nodes; i++)
            {
                started.Add(await TestBroker.StartAsync(o =>
                {
                    o.Cluster.Shards = [.. prefixes.Select(prefix => new ClusterShardOptions { Redis = servers.Configuration, ChannelPrefix = prefix })];
                    configure?.Invoke(o);
                }));
            }

            return new TestCluster(servers, [.. started]) { ShardPrefixes = prefixes };
        }
        catch
        {
            foreach (TestBroker node in started)
            {
                await node.DisposeAsync();
            }

            await servers.DisposeAsync();
            throw;
        }
    }

    /// <summary>On a Redis Cluster's shards (<see cref="StartOnRedisClusterShardsAsync"/>): each shard's prefix, in order.</summary>
    public string[] ShardPrefixes { get; private init; } = [];

    /// <summary>
    /// <paramref name="count"/> prefixes <c>{herald-N}:</c> whose hash tags the Redis Cluster at <paramref name="configuration"/>
    /// places on as many different masters (asked of the cluster itself: the slot's master).
    /// </summary>
    private static async Task<string[]> ShardPrefixesAsync(string configuration, int count)
    {
        await using StackExchange.Redis.ConnectionMultiplexer redis = await StackExchange.Redis.ConnectionMultiplexer.ConnectAsync(configuration);
        var byMaster = new Dictionary<string, string>();

        // A cluster whose masters all said cluster_state:ok may still answer CLUSTERDOWN for a moment while its nodes'
        // views converge: asked again until it answers (the test needs it up anyway).
        await Until.True(async () =>
        {
            try
            {
                for (int i = 0; byMaster.Count < count; i++)
                {
                    string prefix = $"{{herald-{i}}}:";
                    System.Net.EndPoint? master = await redis.GetDatabase().IdentifyEndpointAsync(prefix, StackExchange.Redis.CommandFlags.DemandMaster);
                    byMaster.TryAdd(master!.ToString()!, prefix);
                }

                return true;
            }
            catch (StackExchange.Redis.RedisServerException e) when (e.Message.StartsWith("CLUSTERDOWN", StringComparison.Ordinal))
            {
                byMaster.Clear();
                return false;
            }
        }, "the Redis Cluster places the shard prefixes' hash tags (not CLUSTERDOWN)");

        return [.. byMaster.Values];
    }

    /// <summary>The shards' <c>redis-server</c>s, disposed together (but the first <paramref name="owned"/>, the test's), and the test's connections to them.</summary>
    private sealed class ShardServers(RedisServer[] servers, int owned = 0) : IAsyncDisposable
    {
        private readonly List<StackExchange.Redis.ConnectionMultiplexer> _connections = [];

        public RedisServer[] Servers { get; } = servers;

        public StackExchange.Redis.IDatabase Database(int shard)
        {
            var redis = StackExchange.Redis.ConnectionMultiplexer.Connect(Servers[shard].Configuration + ",abortConnect=false");
            _connections.Add(redis);
            return redis.GetDatabase();
        }

        public async ValueTask DisposeAsync()
        {
            foreach (StackExchange.Redis.ConnectionMultiplexer redis in _connections)
            {
                await redis.DisposeAsync();
            }

            foreach (RedisServer server in Servers.Skip(owned))
            {
                await server.DisposeAsync();
            }
        }
    }

    public TestBroker[] Nodes { get; }

    public TestBroker this[int node] => Nodes[node];

    /// <summary>
    /// <paramref name="nodes"/> nodes that sign what they write to Redis (<see cref="Secret"/>), with long polls held at most
    /// 500 ms: the shared long-poll sessions' tests of entries and commands written by another hand.
    /// </summary>
    public static Task<TestCluster> StartSignedAsync(int nodes) => StartAsync(nodes, o =>
    {
        o.Cluster.Secret = Secret;
        o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
    });

    /// <param name="configureNode">Called after <paramref name="configure"/> with each node's index (0 first).</param>
    /// <param name="redisArguments">More <c>redis-server</c> arguments for a single Redis (<c>--appendonly yes</c>...), run in a directory of its own.</param>
    /// <param name="time">Every node's clock instead of the system's (a <c>FakeTimeProvider</c> the test moves; Redis keeps its own).</param>
    public static async Task<TestCluster> StartAsync(int nodes = 3, Action<HeraldOptions>? configure = null, bool redisCluster = false, Action<int, HeraldOptions>? configureNode = null, string[]? redisArguments = null, TimeProvider? time = null)
    {
        string? directory = redisArguments is null ? null : Directory.CreateTempSubdirectory("herald-redis-").FullName;
        IAsyncDisposable backplane = redisCluster ? await RedisClusterServers.StartAsync() : await RedisServer.StartAsync(redisArguments, directory);
        string configuration = backplane is RedisServer single ? single.Configuration : ((RedisClusterServers)backplane).Configuration;
        var started = new List<TestBroker>();
        try
        {
            for (int i = 0; i < nodes; i++)
            {
                int node = i;
                started.Add(await TestBroker.StartAsync(o =>
                {
                    o.Cluster.Redis = configuration;
                    configure?.Invoke(o);
                    configureNode?.Invoke(node, o);
                }, time: time));
            }
        }
        catch
        {
            foreach (TestBroker node in started)
            {
                await node.DisposeAsync();
            }

            await backplane.DisposeAsync();
            throw;
        }

        return new TestCluster(backplane, [.. started]);
    }

    /// <summary>
    /// One more node of this cluster as a real broker process (TCP only, JSON logs, joined to this Redis), for a test
    /// that kills it with SIGKILL; with its first TCP port, once it listens.
    /// </summary>
    public async Task<(BrokerProcess Process, int Port)> StartProcessNodeAsync(params string[] more)
    {
        BrokerProcess process = BrokerProcess.StartTcpOnly("json", [$"--Herald:Cluster:Redis={Redis.Configuration}", .. more]);
        try
        {
            return (process, (await process.WaitForEventAsync(1001)).GetProperty("First").GetInt32());
        }
        catch
        {
            await process.DisposeAsync();
            throw;
        }
    }

    public async ValueTask DisposeAsync()
    {
        foreach (TestBroker node in Nodes)
        {
            await node.DisposeAsync();
        }

        await _backplane.DisposeAsync();
    }
}

public static class ClusterNodeExtensions
{
    /// <summary>A node's cluster engine (the test's own node: its counters are this node's only).</summary>
    internal static ClusterEngine Engine(this TestBroker node) => node.Services.GetRequiredService<ClusterSlot>().Engine!;
}
