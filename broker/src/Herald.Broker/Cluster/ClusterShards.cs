using System.Buffers;
using System.IO.Hashing;
using System.Text;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster's shards (spec cluster.md §13): one <see cref="ClusterConnection"/> per Redis of
/// <c>Herald:Cluster:Shards</c> (or the one of <c>Herald:Cluster:Redis</c>), all under this node's one id. Each topic
/// lives on one shard, <see cref="For(ReadOnlySpan{byte})"/>: a jump consistent hash of its XxHash64, so adding a shard
/// moves about 1/N of the topics and every node, given the same list, places a topic alike. Long-poll sessions are placed
/// the same way by their token. The parts of the cluster engine ask this where a topic or a session lives, never
/// for "the" connection.
/// </summary>
internal sealed class ClusterShards : IAsyncDisposable
{
    private readonly ClusterConnection[] _shards;

    public ClusterShards(ClusterOptions options)
    {
        NodeId = ClusterConnection.NewNodeId();
        IReadOnlyList<ClusterShardOptions> list = options.ShardList;
        _shards = new ClusterConnection[list.Count];
        for (int i = 0; i < _shards.Length; i++)
        {
            _shards[i] = new ClusterConnection(options, i, list[i], NodeId);
        }
    }

    /// <summary>This node's id in the cluster, the same on every shard.</summary>
    public ulong NodeId { get; }

    /// <summary>Every shard, in the configured order (index = <see cref="ClusterConnection.Index"/>).</summary>
    public IReadOnlyList<ClusterConnection> All => _shards;

    public int Count => _shards.Length;

    /// <summary>Shard 0: the one without <c>Herald:Cluster:Shards</c>.</summary>
    public ClusterConnection First => _shards[0];

    /// <summary>The shard that holds <paramref name="topic"/> (UTF-8): its channel, history and presence.</summary>
    public ClusterConnection For(ReadOnlySpan<byte> topic) => _shards.Length == 1 ? _shards[0] : _shards[ShardOf(topic, _shards.Length)];

    /// <summary>The shard that holds <paramref name="topic"/> (a frame's slice): no copy unless it spans segments.</summary>
    public ClusterConnection For(in ReadOnlySequence<byte> topic)
    {
        if (_shards.Length == 1)
        {
            return _shards[0];
        }

        if (topic.IsSingleSegment)
        {
            return For(topic.FirstSpan);
        }

        Span<byte> bytes = topic.Length <= 256 ? stackalloc byte[(int)topic.Length] : new byte[topic.Length];
        topic.CopyTo(bytes);
        return For(bytes);
    }

    /// <summary>The shard that holds <paramref name="name"/> (a topic, or a long-poll session's token).</summary>
    public ClusterConnection For(string name)
    {
        if (_shards.Length == 1)
        {
            return _shards[0];
        }

        Span<byte> utf8 = name.Length <= 256 ? stackalloc byte[Encoding.UTF8.GetMaxByteCount(name.Length)] : new byte[Encoding.UTF8.GetMaxByteCount(name.Length)];
        int length = Encoding.UTF8.GetBytes(name, utf8);
        return _shards[ShardOf(utf8[..length], _shards.Length)];
    }

    /// <summary>Whether any shard is reachable now.</summary>
    public bool AnyConnected => _shards.Any(shard => shard.IsConnected);

    /// <summary>Whether every shard is reachable now.</summary>
    public bool AllConnected => _shards.All(shard => shard.IsConnected);

    /// <summary>
    /// The shard of <paramref name="key"/> among <paramref name="count"/> (spec cluster.md §13, vectors <c>shards</c>):
    /// Lamping and Veach's jump consistent hash of XxHash64 (seed 0) of its bytes.
    /// </summary>
    public static int ShardOf(ReadOnlySpan<byte> key, int count)
    {
        ulong hash = XxHash64.HashToUInt64(key);
        long bucket = -1;
        long next = 0;
        while (next < count)
        {
            bucket = next;
            hash = unchecked((hash * 2862933555777941757UL) + 1);
            next = (long)((bucket + 1) * ((double)(1L << 31) / ((hash >> 33) + 1)));
        }

        return (int)bucket;
    }

    public async ValueTask DisposeAsync()
    {
        foreach (ClusterConnection shard in _shards)
        {
            await shard.DisposeAsync().ConfigureAwait(false);
        }
    }
}
