using System.Globalization;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>One node of the cluster as the others see it (spec cluster.md §5).</summary>
/// <param name="History">The node's history rules (<see cref="ClusterNodes.HistoryRules"/>): every node must have the same (spec cluster.md §9).</param>
/// <param name="Groups">The version of the node's queue groups in Redis at its last heartbeat (spec cluster.md §11).</param>
internal sealed record ClusterNode(string Id, string Name, string Host, DateTimeOffset Started, DateTimeOffset LastSeen, bool Self, string History = "", long Groups = 0);

/// <summary>
/// The cluster's members, kept in Redis by every node (spec cluster.md §5): a sorted set
/// <c>{prefix}nodes</c> of node ids scored by their last heartbeat (Unix ms), and per node a hash
/// <c>{prefix}node:{id}</c> (name, host, start) that expires unless renewed. Every
/// <see cref="ClusterOptions.HeartbeatInterval"/> a node renews its own entry on every shard it reaches, drops the ones
/// silent for three intervals, and reads the rest: the members are the union over the shards that answered (spec
/// cluster.md §13), so a shard down makes no node vanish. <c>/varz</c> shows that list, at most one interval old.
/// Nothing here is on the message path.
/// </summary>
internal sealed class ClusterNodes(ClusterOptions options, string nodeId, string serverName, string historyRules = "")
{
    private readonly HashSet<string> _toldDiffering = [];
    private readonly DateTimeOffset _started = DateTimeOffset.UtcNow;
    private volatile ClusterNode[] _known = [];
    private Task[] _beats = [];
    private List<ClusterNode>?[] _answers = [];
    private volatile Exception? _failed;

    /// <summary>The version of this node's queue groups last written (spec cluster.md §11): its heartbeat shows it to the others.</summary>
    public long GroupsVersion
    {
        get => Interlocked.Read(ref _groupsVersion);
        set => Interlocked.Exchange(ref _groupsVersion, value);
    }

    private long _groupsVersion;

    /// <summary>The ids of the members at the last heartbeat (a new set each time: safe to read from any thread).</summary>
    public HashSet<ulong> MemberIds { get; private set; } = [];

    /// <summary>The nodes seen at the last heartbeat (this one first), or only this one before any.</summary>
    public IReadOnlyList<ClusterNode> Known => _known.Length > 0 ? _known : [Self(DateTimeOffset.UtcNow)];

    private ClusterNode Self(DateTimeOffset now) => new(nodeId, serverName, Environment.MachineName, _started, now, Self: true, historyRules);

    /// <summary>This node's history rules as one line (<c>pattern max-messages max-age max-bytes</c>, <c>;</c> between rules; empty: none).</summary>
    public string HistoryRules => historyRules;

    /// <summary>Whether every member seen at the last heartbeat has this node's history rules (spec cluster.md §9).</summary>
    public bool HistoryRulesMatch => Known.All(n => n.History == historyRules);

    /// <summary>Members whose history rules differ from this node's, each reported once (the caller logs them).</summary>
    public IEnumerable<ClusterNode> NewlyDiffering()
    {
        foreach (ClusterNode node in Known)
        {
            if (node.History != historyRules && _toldDiffering.Add(node.Id))
            {
                yield return node;
            }
        }
    }

    /// <summary>
    /// Renews this node's entry on every shard reachable and reads the others' there: the members are the union of what
    /// the shards hold (a node writes itself on each), the latest heartbeat of each, among those seen within the expiry.
    /// Waits at most one interval: a shard that stalls (paused, slow, its command timeout longer than the expiry) keeps
    /// its beat in flight, is not beaten again until it ends, and is read from its last answer meanwhile, so it delays
    /// no renewal on the other shards and no update of the list. Throws what Redis threw when no shard has ever answered
    /// (the caller retries next beat; the list stays as it was, as it does when none is reachable).
    /// </summary>
    public async Task BeatAsync(IReadOnlyList<ClusterConnection> shards)
    {
        DateTimeOffset now = DateTimeOffset.UtcNow;
        if (_beats.Length != shards.Count)
        {
            _beats = new Task[shards.Count];
            _answers = new List<ClusterNode>?[shards.Count];
        }

        var started = new List<Task>(shards.Count);
        foreach (ClusterConnection shard in shards)
        {
            if (shard.IsConnected && _beats[shard.Index] is not { IsCompleted: false })
            {
                started.Add(_beats[shard.Index] = BeatOnAsync(shard, now));
            }
        }

        try
        {
            await Task.WhenAll(started).WaitAsync(options.HeartbeatInterval).ConfigureAwait(false);
        }
        catch (TimeoutException)
        {
            // A shard stalls: read from its last answer; its beat goes on and is seen at the next.
        }

        DateTimeOffset expired = now - (options.HeartbeatInterval * 3);
        var union = new Dictionary<string, ClusterNode>();
        bool answered = false;
        foreach (List<ClusterNode>? nodes in _answers)
        {
            answered |= nodes is not null;
            foreach (ClusterNode node in nodes ?? [])
            {
                if (node.LastSeen >= expired && (!union.TryGetValue(node.Id, out ClusterNode? seen) || seen.LastSeen < node.LastSeen))
                {
                    union[node.Id] = node;
                }
            }
        }

        if (!answered)
        {
            if (_failed is not null)
            {
                System.Runtime.ExceptionServices.ExceptionDispatchInfo.Throw(_failed);
            }

            return; // no shard reachable: the list stays as it was
        }

        List<ClusterNode> known = [Self(now), .. union.Values.Where(n => n.Id != nodeId).OrderBy(n => n.LastSeen)];
        _known = [.. known];
        MemberIds = [.. known.Select(n => ulong.TryParse(n.Id, NumberStyles.HexNumber, CultureInfo.InvariantCulture, out ulong id) ? id : 0).Where(id => id != 0)];
    }

    /// <summary>One shard's beat: its answer kept for the union (the heartbeat loop's, one at a time per shard).</summary>
    private async Task BeatOnAsync(ClusterConnection shard, DateTimeOffset now)
    {
        try
        {
            Volatile.Write(ref _answers[shard.Index], await BeatAsync(shard, now).ConfigureAwait(false));
        }
        catch (ObjectDisposedException)
        {
            // The node stops while this shard stalled.
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _failed = e; // its last answer stays, and ages out of the union with the members' heartbeats
        }
    }

    /// <summary>Renews this node's entry on <paramref name="shard"/> and reads the members it holds (this node's included).</summary>
    private async Task<List<ClusterNode>> BeatAsync(ClusterConnection shard, DateTimeOffset now)
    {
        IDatabase redis = shard.Database;
        RedisKey members = shard.Prefix + "nodes";
        RedisKey self = shard.Prefix + "node:" + nodeId;
        RedisKey covers = shard.Prefix + "covers";
        TimeSpan expiry = options.HeartbeatInterval * 3;
        await redis.HashSetAsync(self, [new("name", serverName), new("host", Environment.MachineName), new("started", _started.ToUnixTimeMilliseconds()), new("history", historyRules), new("groups", GroupsVersion)]).ConfigureAwait(false);
        await redis.KeyExpireAsync(self, expiry).ConfigureAwait(false);
        await redis.SortedSetAddAsync(members, nodeId, now.ToUnixTimeMilliseconds()).ConfigureAwait(false);
        await redis.SortedSetRemoveRangeByScoreAsync(members, double.NegativeInfinity, (now - expiry).ToUnixTimeMilliseconds()).ConfigureAwait(false);

        var known = new List<ClusterNode> { Self(now) };
        foreach (SortedSetEntry member in await redis.SortedSetRangeByRankWithScoresAsync(members).ConfigureAwait(false))
        {
            string id = member.Element.ToString();
            if (id == nodeId)
            {
                continue;
            }

            HashEntry[] fields = await redis.HashGetAllAsync(shard.Prefix + "node:" + id).ConfigureAwait(false);
            Dictionary<string, string> values = fields.ToDictionary(f => f.Name.ToString(), f => f.Value.ToString());
            DateTimeOffset started = long.TryParse(values.GetValueOrDefault("started"), NumberStyles.None, CultureInfo.InvariantCulture, out long ms) ? DateTimeOffset.FromUnixTimeMilliseconds(ms) : default;
            long groups = long.TryParse(values.GetValueOrDefault("groups"), NumberStyles.None, CultureInfo.InvariantCulture, out long version) ? version : 0;
            known.Add(new ClusterNode(id, values.GetValueOrDefault("name") ?? "", values.GetValueOrDefault("host") ?? "", started, DateTimeOffset.FromUnixTimeMilliseconds((long)member.Score), Self: false, values.GetValueOrDefault("history") ?? "", groups));
        }

        // Covers of nodes no longer members (killed): they would make requests wait instead of failing fast.
        // Dropped before the new list is shown, so a node seen gone has no cover left.
        foreach (RedisValue field in await redis.HashKeysAsync(covers).ConfigureAwait(false))
        {
            if (!known.Any(n => n.Id == field.ToString()))
            {
                await redis.HashDeleteAsync(covers, field).ConfigureAwait(false);
                await redis.KeyDeleteAsync(CoverKeyOf(shard, field.ToString())).ConfigureAwait(false);
            }
        }

        return known;
    }

    /// <summary>
    /// Writes the change of this node's Redis subscriptions (spec cluster.md §4): its cover is the hash
    /// <c>{prefix}cover:{id}</c>, one field per key (<c>=</c> and the topic of an exact key, <c>*</c> and the literal
    /// of a prefix key), listed in <c>{prefix}covers</c> (field: node id; value: its number of keys), for the other
    /// nodes' fail-fast requests. Only what changed is sent; <paramref name="whole"/> (the first write, or after Redis
    /// came back, maybe empty) writes the cover afresh. One transaction: a reader sees the cover before or after.
    /// Caller: the interest worker, before it confirms a change.
    /// </summary>
    public async Task PublishCoverAsync(ClusterConnection shard, IReadOnlyCollection<CoverKey> cover, IEnumerable<CoverKey> added, IEnumerable<CoverKey> removed, bool whole)
    {
        ITransaction write = shard.Database.CreateTransaction();
        RedisKey own = CoverKeyOf(shard, nodeId);
        if (whole)
        {
            _ = write.KeyDeleteAsync(own);
            added = cover;
        }
        else
        {
            RedisValue[] gone = [.. removed.Select(FieldOf)];
            if (gone.Length > 0)
            {
                _ = write.HashDeleteAsync(own, gone);
            }
        }

        HashEntry[] fields = [.. added.Select(key => new HashEntry(FieldOf(key), ""))];
        if (fields.Length > 0)
        {
            _ = write.HashSetAsync(own, fields);
        }

        _ = write.HashSetAsync(shard.Prefix + "covers", nodeId, cover.Count);

        // A member from now on, if its first heartbeat is still to come: a heartbeat drops the covers of non-members.
        _ = write.SortedSetAddAsync(shard.Prefix + "nodes", nodeId, DateTimeOffset.UtcNow.ToUnixTimeMilliseconds());
        await write.ExecuteAsync().ConfigureAwait(false);
    }

    /// <summary>
    /// Whether another node's Redis subscriptions cover <paramref name="topic"/> (ASCII), read from Redis now: the
    /// list of nodes with a cover, then from each only the fields that could match the topic (its exact key, and the
    /// prefix key of each of its token boundaries). What Redis sends is bounded by the number of nodes and the
    /// topic's tokens, never by the size of the covers. <paramref name="shard"/> is the topic's: every node keeps there
    /// the keys that bring it the topic's publications (spec cluster.md §13).
    /// </summary>
    public async Task<bool> OthersCoverAsync(ClusterConnection shard, ReadOnlyMemory<byte> topic)
    {
        IDatabase redis = shard.Database;
        RedisValue[] nodes = await redis.HashKeysAsync(shard.Prefix + "covers").ConfigureAwait(false);
        if (nodes.Length == 0 || (nodes.Length == 1 && nodes[0] == nodeId))
        {
            return false;
        }

        RedisValue[] candidates = CandidatesOf(topic.Span);
        Task<RedisValue[]>[] reads = [.. nodes.Where(node => node != nodeId).Select(node => redis.HashGetAsync(CoverKeyOf(shard, node.ToString()), candidates))];
        foreach (RedisValue[] found in await Task.WhenAll(reads).ConfigureAwait(false))
        {
            if (found.Any(value => !value.IsNull))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>The cover fields that match <paramref name="topic"/> if present: <c>=topic</c>, <c>*</c>, and <c>*</c> and each prefix ending in <c>.</c>.</summary>
    private static RedisValue[] CandidatesOf(ReadOnlySpan<byte> topic)
    {
        var fields = new List<RedisValue>(8) { Field((byte)'=', topic), Field((byte)'*', []) };
        for (int i = 0; i < topic.Length; i++)
        {
            if (topic[i] == (byte)'.')
            {
                fields.Add(Field((byte)'*', topic[..(i + 1)]));
            }
        }

        return [.. fields];

        static RedisValue Field(byte kind, ReadOnlySpan<byte> literal)
        {
            byte[] field = new byte[literal.Length + 1];
            field[0] = kind;
            literal.CopyTo(field.AsSpan(1));
            return field;
        }
    }

    private static RedisValue FieldOf(CoverKey key) => (key.IsPrefix ? "*" : "=") + key.Literal;

    private static RedisKey CoverKeyOf(ClusterConnection shard, string node) => shard.Prefix + "cover:" + node;

    /// <summary>At a graceful stop: this node leaves the list of <paramref name="shard"/> at once instead of after three silent intervals.</summary>
    public async Task LeaveAsync(ClusterConnection shard)
    {
        IDatabase redis = shard.Database;
        await redis.SortedSetRemoveAsync(shard.Prefix + "nodes", nodeId).ConfigureAwait(false);
        await redis.KeyDeleteAsync(shard.Prefix + "node:" + nodeId).ConfigureAwait(false);
        await redis.HashDeleteAsync(shard.Prefix + "covers", nodeId).ConfigureAwait(false);
        await redis.KeyDeleteAsync(CoverKeyOf(shard, nodeId)).ConfigureAwait(false);
    }
}
