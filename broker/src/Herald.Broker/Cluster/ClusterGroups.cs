using System.Diagnostics;
using System.Globalization;
using System.Text;
using System.Threading.Channels;
using Herald.Broker.Routing;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using Microsoft.Extensions.Logging;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster's queue groups (spec cluster.md §11): which node holds how many members of which group, replicated to
/// every node's router, so that the node a publication comes from chooses one member among all of the cluster's, from
/// memory, and names the node it chose in the envelope.
/// </summary>
/// <remarks>
/// <para>
/// <b>This node's groups.</b> The router tells the engine of every member that comes or goes (under its lock: recorded
/// only). One worker counts them per group and writes what changed into the hash <c>{prefix}g:{id}</c> (field: the
/// group's key <c>pattern queue identity</c>, value: its members here; <c>version</c>: a number raised at every write),
/// with an expiry of three heartbeats renewed at each, and announces the new version on <c>{prefix}.groups</c> with
/// what changed (<c>{id} {version}</c>, then a line <c>{members} {key}</c> per group changed, 0 for one left; the
/// version alone after a rewrite or for a batch over <see cref="MaxDeltaChars"/>): one transaction per batch of
/// changes, off every client's path.
/// </para>
/// <para>
/// <b>The others'.</b> The same worker applies an announcement's changes when it follows the version last seen of that
/// node (a delta: what changed is all it costs), and reads the node's whole hash only when it cannot: the node is new to
/// it, the announcement carries no changes, or versions were skipped (an announcement lost, say across a reconnection:
/// a heartbeat, field <c>groups</c> of the member hash, that still shows a version not seen one heartbeat later). It
/// gives the router one entry per group and node (<see cref="Subscription.Elsewhere"/>) weighing as many members as it
/// holds; a node that left the member list (stopped, or silent for three heartbeats, spec §5) is dropped.
/// </para>
/// <para>Not thread-safe but for the calls marked otherwise: the worker owns the tables.</para>
/// </remarks>
internal sealed class ClusterGroups
{
    private readonly ClusterConnection _connection;
    private readonly ClusterNodes _members;
    private readonly TopicRouter _router;
    private readonly ILogger _log;
    /// <summary>The longest list of changes an announcement carries (characters); a larger batch is announced by its version alone, and read whole.</summary>
    internal const int MaxDeltaChars = 16 * 1024;

    private readonly string _prefix;
    private readonly RedisKey _own;
    private readonly RedisChannel _announcements;
    private readonly Channel<Work> _work = Channel.CreateUnbounded<Work>(new UnboundedChannelOptions { SingleReader = true });
    private readonly SettleCounter _settle = new();
    private long _version;
    private GroupsView _view = GroupsView.Empty;

    // The worker's.
    private readonly Dictionary<string, int> _local = new(StringComparer.Ordinal);
    private readonly HashSet<string> _changed = new(StringComparer.Ordinal);
    private readonly Dictionary<ulong, NodeGroups> _nodes = [];
    private bool _rewrite;

    public ClusterGroups(ClusterConnection connection, ClusterNodes nodes, TopicRouter router, ILogger log)
    {
        _connection = connection;
        _members = nodes;
        _router = router;
        _log = log;
        _prefix = connection.Prefix;
        _own = KeyOf(_prefix, connection.NodeId);
        _announcements = RedisChannel.Literal(AnnouncementsChannel(_prefix));
    }

    /// <summary>The channel a node announces a change of its groups on: no topic starts with '.', so no publication's channel is this one.</summary>
    public static string AnnouncementsChannel(string prefix) => prefix + ".groups";

    /// <summary>The hash of <paramref name="node"/>'s groups.</summary>
    public static RedisKey KeyOf(string prefix, ulong node) => prefix + "g:" + node.ToString("x16", CultureInfo.InvariantCulture);

    /// <summary>The version of this node's groups last written (its heartbeat shows it to the others). Any thread.</summary>
    public long Version => Interlocked.Read(ref _version);

    /// <summary>The groups this node knows, its own and each other node's as last read, after the worker's last pass (monitoring). Any thread.</summary>
    public GroupsView View => Volatile.Read(ref _view);

    /// <summary>Whether every member change recorded so far is in Redis (or failed: Redis unreachable). Any thread.</summary>
    public bool IsSettled => _settle.IsSettled;

    /// <summary>A member of this node joined a group (the router, under its lock: recorded only). Any thread.</summary>
    public void MemberAdded(Subscription member) => Record(member.Group!, +1);

    /// <summary>A member of this node left a group (the router, under its lock: recorded only). Any thread.</summary>
    public void MemberRemoved(Subscription member) => Record(member.Group!, -1);

    private void Record(string group, int change)
    {
        _settle.Requested();
        _work.Writer.TryWrite(new Work(WorkKind.Member, group, change, 0, 0, null, 0, null));
    }

    /// <summary>Listens for the others' announcements, reads their groups as they are now, and starts the worker.</summary>
    public async Task StartAsync(ISubscriber subscriber, CancellationToken stop)
    {
        _subscriber = subscriber;
        try
        {
            await ListenAsync().ConfigureAwait(false);
            RedisValue[] members = await _connection.Database.SortedSetRangeByRankAsync(_prefix + "nodes").ConfigureAwait(false);
            long takenAt = Stopwatch.GetTimestamp();
            foreach (RedisValue member in members)
            {
                if (ulong.TryParse(member.ToString(), NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out ulong node) && node != _connection.NodeId)
                {
                    await ReadAsync(node, takenAt).ConfigureAwait(false);
                }
            }
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _log.ClusterSubscribeFailed(AnnouncementsChannel(_prefix), e.Message); // made up for when Redis is back (the heartbeats)
        }

        _worker = Task.Run(() => WorkAsync(stop), CancellationToken.None);
    }

    private Task _worker = Task.CompletedTask;
    private ISubscriber? _subscriber;
    private int _listening;

    /// <summary>Subscribes to the announcements, unless subscribed (StackExchange.Redis makes it again after a reconnection) or being subscribed.</summary>
    private async Task ListenAsync()
    {
        if (Interlocked.CompareExchange(ref _listening, 1, 0) != 0)
        {
            return;
        }

        try
        {
            await _subscriber!.SubscribeAsync(_announcements, (_, message) => Announced(message)).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _subscriber!.Unsubscribe(_announcements, handler: null, CommandFlags.FireAndForget); // forgotten here too: made again when Redis is back
            Volatile.Write(ref _listening, 0);
            throw;
        }
    }

    /// <summary>At a graceful stop, once the sessions are gone: the last changes written, then this node's groups removed and announced.</summary>
    public async Task LeaveAsync()
    {
        _work.Writer.TryComplete();
        await _worker.ConfigureAwait(false);
        IDatabase db = _connection.Database;
        ITransaction leave = db.CreateTransaction();
        _ = leave.KeyDeleteAsync(_own);
        _ = leave.PublishAsync(_announcements, Announcement(Interlocked.Increment(ref _version)));
        await leave.ExecuteAsync().ConfigureAwait(false);
    }

    /// <summary>
    /// At each heartbeat, with the member list it read: renews this node's hash (written again if Redis lost it), and
    /// has the worker read the nodes whose groups changed unannounced and drop the nodes that left. Caller: the heartbeat.
    /// </summary>
    public async Task BeatAsync(IDatabase db, IReadOnlyList<ClusterNode> known, long takenAt)
    {
        if (!await db.KeyExpireAsync(_own, 3 * _connection.Options.HeartbeatInterval).ConfigureAwait(false) && Version > 0)
        {
            _work.Writer.TryWrite(new Work(WorkKind.Lost, null, 0, 0, 0, null, 0, null));
        }

        _work.Writer.TryWrite(new Work(WorkKind.Members, null, 0, 0, 0, known, takenAt, null));
    }

    /// <summary>Redis is reachable again: this node's groups are written anew (Redis may have restarted empty). Any thread.</summary>
    public void Resync()
    {
        _work.Writer.TryWrite(new Work(WorkKind.Lost, null, 0, 0, 0, null, 0, null));
        _ = ListenAgainAsync();
    }

    private async Task ListenAgainAsync()
    {
        if (_subscriber is null)
        {
            return; // not started: the start listens
        }

        try
        {
            await ListenAsync().ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _log.ClusterSubscribeFailed(AnnouncementsChannel(_prefix), e.Message); // tried again at the next reconnection
        }
    }

    /// <summary>Completes when every member change recorded before this call is in Redis (or failed: Redis unreachable).</summary>
    public Task WhenSettledAsync() => _settle.WhenSettledAsync();

    /// <summary>Lets every waiter go (stopping).</summary>
    public void ReleaseWaiters() => _settle.ReleaseAll();

    /// <summary>Another node's announcement (Redis's thread): its changes applied, or its groups read again, if this node has not seen that version.</summary>
    private void Announced(RedisValue message)
    {
        string text = message.ToString();
        int space = text.IndexOf(' ', StringComparison.Ordinal);
        int line = text.IndexOf('\n', StringComparison.Ordinal);
        int end = line < 0 ? text.Length : line;
        if (space > 0 && space < end
            && ulong.TryParse(text.AsSpan(0, space), NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out ulong node)
            && long.TryParse(text.AsSpan(space + 1, end - space - 1), NumberStyles.None, CultureInfo.InvariantCulture, out long version)
            && node != _connection.NodeId)
        {
            _work.Writer.TryWrite(new Work(WorkKind.Announced, null, 0, node, version, null, Stopwatch.GetTimestamp(), line < 0 ? null : text[(line + 1)..]));
        }
    }

    private string Announcement(long version, string? delta = null) =>
        delta is null ? string.Create(CultureInfo.InvariantCulture, $"{_connection.NodeId:x16} {version}") : string.Create(CultureInfo.InvariantCulture, $"{_connection.NodeId:x16} {version}\n{delta}");

    private async Task WorkAsync(CancellationToken stop)
    {
        ChannelReader<Work> work = _work.Reader;
        var toRead = new Dictionary<ulong, long>();
        try
        {
            while (await work.WaitToReadAsync(stop).ConfigureAwait(false))
            {
                long taken = 0;
                Work? members = null;
                while (work.TryRead(out Work item))
                {
                    switch (item.Kind)
                    {
                        case WorkKind.Member:
                            taken++;
                            int count = _local.GetValueOrDefault(item.Group!) + item.Change;
                            if (count > 0)
                            {
                                _local[item.Group!] = count;
                            }
                            else
                            {
                                _local.Remove(item.Group!);
                            }

                            _changed.Add(item.Group!);
                            break;
                        case WorkKind.Lost:
                            _rewrite = true;
                            break;
                        case WorkKind.Announced:
                            if (_nodes.TryGetValue(item.Node, out NodeGroups? seen) && seen.Version >= item.Version)
                            {
                                break; // read already
                            }

                            if (seen is not null && seen.Version == item.Version - 1 && item.Delta is { } delta && !toRead.ContainsKey(item.Node) && ApplyDelta(item.Node, seen, delta, item.Version))
                            {
                                seen.ReadAt = Math.Max(seen.ReadAt, item.TakenAt);
                                break; // what changed, and nothing more
                            }

                            toRead[item.Node] = Stopwatch.GetTimestamp(); // new to this node, a version skipped, or no changes carried: read whole
                            break;
                        case WorkKind.Members:
                            members = item;
                            break;
                    }
                }

                if (_changed.Count > 0 || _rewrite)
                {
                    await WriteAsync().ConfigureAwait(false);
                }

                _settle.Applied(taken);
                if (members is { } list)
                {
                    Follow(list.Known!, list.TakenAt, toRead);
                }

                foreach ((ulong node, long takenAt) in toRead)
                {
                    await ReadAsync(node, takenAt).ConfigureAwait(false);
                }

                toRead.Clear();
                PublishView();
            }
        }
        catch (OperationCanceledException)
        {
            // Stopping.
        }
    }

    /// <summary>What the worker's tables hold now, for <see cref="View"/>: counts per node, never the groups themselves (bounded). Caller: the worker.</summary>
    private void PublishView()
    {
        var others = new Dictionary<ulong, NodeGroupsView>(_nodes.Count);
        foreach ((ulong node, NodeGroups groups) in _nodes)
        {
            others[node] = new NodeGroupsView(groups.Version, groups.Entries.Count, groups.Entries.Values.Sum(entry => entry.Members));
        }

        Volatile.Write(ref _view, new GroupsView(new NodeGroupsView(Interlocked.Read(ref _version), _local.Count, _local.Values.Sum()), others));
    }

    /// <summary>Writes what changed of this node's groups (all of them after a loss) and announces the new version. Caller: the worker.</summary>
    private async Task WriteAsync()
    {
        long version = Interlocked.Read(ref _version) + 1;
        var set = new List<HashEntry> { new("version", version) };
        var removed = new List<RedisValue>();
        StringBuilder? delta = _rewrite ? null : new StringBuilder();
        foreach (string group in _rewrite ? (IEnumerable<string>)_local.Keys : _changed)
        {
            if (_local.TryGetValue(group, out int count))
            {
                set.Add(new HashEntry(group, count));
            }
            else
            {
                removed.Add(group);
            }

            if (delta is not null)
            {
                delta.Append(delta.Length == 0 ? "" : "\n").Append(count.ToString(CultureInfo.InvariantCulture)).Append(' ').Append(group);
                delta = delta.Length > MaxDeltaChars ? null : delta; // too many changes at once: the others read the record
            }
        }

        try
        {
            ITransaction write = _connection.Database.CreateTransaction();
            if (_rewrite)
            {
                _ = write.KeyDeleteAsync(_own);
            }

            if (removed.Count > 0)
            {
                _ = write.HashDeleteAsync(_own, [.. removed]);
            }

            _ = write.HashSetAsync(_own, [.. set]);
            _ = write.KeyExpireAsync(_own, 3 * _connection.Options.HeartbeatInterval);
            _ = write.PublishAsync(_announcements, Announcement(version, delta?.ToString()));
            if (await write.ExecuteAsync().ConfigureAwait(false))
            {
                Interlocked.Exchange(ref _version, version);
                _members.GroupsVersion = version;
                _changed.Clear();
                _rewrite = false;
                return;
            }
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _log.ClusterSubscribeFailed(_own.ToString(), e.Message);
        }

        _rewrite = true; // all of it again with the next change, heartbeat or reconnection
        _changed.Clear();
    }

    /// <summary>The heartbeat's member list: nodes gone are dropped, nodes whose groups changed unannounced read. Caller: the worker.</summary>
    private void Follow(IReadOnlyList<ClusterNode> known, long takenAt, Dictionary<ulong, long> toRead)
    {
        var live = new HashSet<ulong>();
        foreach (ClusterNode node in known)
        {
            if (node.Self || !ulong.TryParse(node.Id, NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out ulong id))
            {
                continue;
            }

            live.Add(id);
            if (!_nodes.TryGetValue(id, out NodeGroups? seen))
            {
                if (node.Groups > 0)
                {
                    toRead.TryAdd(id, takenAt); // new to this node
                }
            }
            else
            {
                if (seen.Version < seen.Shown)
                {
                    toRead.TryAdd(id, takenAt); // a version the previous heartbeat showed, still not announced: one was lost
                }

                seen.Shown = Math.Max(seen.Shown, node.Groups); // the announcement of a newer one may be on its way: given until the next heartbeat
            }
        }

        foreach ((ulong id, NodeGroups groups) in _nodes.ToArray())
        {
            if (!live.Contains(id) && groups.ReadAt < takenAt && !toRead.ContainsKey(id))
            {
                Apply(id, groups, new Dictionary<string, int>(), groups.Version); // it left (or died): none of its members is chosen any more
                _nodes.Remove(id);
            }
        }
    }

    /// <summary>Reads <paramref name="node"/>'s groups and gives the router what changed. Caller: the worker (or the start, before it).</summary>
    private async Task ReadAsync(ulong node, long takenAt)
    {
        HashEntry[] fields;
        try
        {
            fields = await _connection.Database.HashGetAllAsync(KeyOf(_prefix, node)).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            return; // read again at the next announcement or heartbeat
        }

        long version = 0;
        var members = new Dictionary<string, int>(fields.Length, StringComparer.Ordinal);
        foreach (HashEntry field in fields)
        {
            string name = field.Name.ToString();
            if (name == "version")
            {
                _ = long.TryParse(field.Value.ToString(), NumberStyles.None, CultureInfo.InvariantCulture, out version);
            }
            else if (field.Value.TryParse(out int count) && count > 0 && IsGroupKey(name))
            {
                members[name] = count;
            }
        }

        if (!_nodes.TryGetValue(node, out NodeGroups? groups))
        {
            groups = _nodes[node] = new NodeGroups();
        }

        groups.ReadAt = Math.Max(groups.ReadAt, takenAt);
        Apply(node, groups, members, Math.Max(version, groups.Version));
    }

    /// <summary>
    /// Applies an announcement's changes (<c>{members} {key}</c> a line, 0 for a group left) to what the router holds for
    /// <paramref name="node"/>; false, with nothing applied, when a line is not one (the record is read whole instead).
    /// </summary>
    private bool ApplyDelta(ulong node, NodeGroups groups, string delta, long version)
    {
        var changes = new List<(string Key, int Members)>();
        foreach (string line in delta.Split('\n'))
        {
            int space = line.IndexOf(' ', StringComparison.Ordinal);
            if (space <= 0 || !int.TryParse(line.AsSpan(0, space), NumberStyles.None, CultureInfo.InvariantCulture, out int count) || !IsGroupKey(line[(space + 1)..]))
            {
                return false;
            }

            changes.Add((line[(space + 1)..], count));
        }

        groups.Version = version;
        foreach ((string key, int count) in changes)
        {
            if (groups.Entries.TryGetValue(key, out Subscription? entry))
            {
                if (count > 0)
                {
                    entry.Members = count; // a weight: no cached match changes
                }
                else
                {
                    _router.RemoveElsewhere(entry);
                    groups.Entries.Remove(key);
                }
            }
            else if (count > 0)
            {
                (string pattern, string queue, string identity) = Parse(key);
                entry = Subscription.Elsewhere(node, pattern, queue, identity, count);
                _router.AddElsewhere(entry);
                groups.Entries[key] = entry;
            }
        }

        return true;
    }

    /// <summary>Makes the router hold exactly <paramref name="members"/> for <paramref name="node"/>.</summary>
    private void Apply(ulong node, NodeGroups groups, Dictionary<string, int> members, long version)
    {
        groups.Version = version;
        foreach ((string key, Subscription entry) in groups.Entries.ToArray())
        {
            if (!members.ContainsKey(key))
            {
                _router.RemoveElsewhere(entry);
                groups.Entries.Remove(key);
            }
        }

        foreach ((string key, int count) in members)
        {
            if (groups.Entries.TryGetValue(key, out Subscription? entry))
            {
                entry.Members = count; // a weight: no cached match changes
            }
            else
            {
                (string pattern, string queue, string identity) = Parse(key);
                entry = Subscription.Elsewhere(node, pattern, queue, identity, count);
                _router.AddElsewhere(entry);
                groups.Entries[key] = entry;
            }
        }
    }

    /// <summary>Whether <paramref name="key"/> is <c>pattern queue identity</c> with a valid pattern and queue name (what Redis holds is checked before the router takes it).</summary>
    private static bool IsGroupKey(string key)
    {
        int first = key.IndexOf(' ', StringComparison.Ordinal);
        int second = first < 0 ? -1 : key.IndexOf(' ', first + 1);
        return second > 0
            && Topic.ValidatePattern(Encoding.UTF8.GetBytes(key[..first]), int.MaxValue) == ErrorCode.None
            && Topic.IsQueueName(key.AsSpan(first + 1, second - first - 1));
    }

    private static (string Pattern, string Queue, string Identity) Parse(string key)
    {
        int first = key.IndexOf(' ', StringComparison.Ordinal);
        int second = key.IndexOf(' ', first + 1);
        return (key[..first], key[(first + 1)..second], key[(second + 1)..]);
    }

    /// <summary>A node's queue groups: how many groups have members there, how many members in all, and the version of its record.</summary>
    internal readonly record struct NodeGroupsView(long Version, int Groups, int Members);

    /// <summary>This node's groups and the others', as the worker last saw them.</summary>
    internal sealed record GroupsView(NodeGroupsView Own, IReadOnlyDictionary<ulong, NodeGroupsView> Others)
    {
        public static readonly GroupsView Empty = new(default, new Dictionary<ulong, NodeGroupsView>());

        /// <summary>What is known of <paramref name="node"/>'s groups (this node's own when it is <paramref name="self"/>).</summary>
        public NodeGroupsView Of(ulong node, bool self) => self ? Own : Others.GetValueOrDefault(node);
    }

    private enum WorkKind
    {
        Member,
        Announced,
        Members,
        Lost,
    }

    /// <param name="Delta">An announcement's changes, a line each (<see cref="ApplyDelta"/>); null when it carries none.</param>
    private readonly record struct Work(WorkKind Kind, string? Group, int Change, ulong Node, long Version, IReadOnlyList<ClusterNode>? Known, long TakenAt, string? Delta);

    /// <summary>One other node's groups as last read: the router's entries for them.</summary>
    private sealed class NodeGroups
    {
        public long Version { get; set; }

        /// <summary>When the member list or announcement that asked for the last read was taken (a list older than it cannot drop the node).</summary>
        public long ReadAt { get; set; }

        /// <summary>The version the last heartbeat showed: still unseen at the next one, the record is read whole.</summary>
        public long Shown { get; set; }

        public Dictionary<string, Subscription> Entries { get; } = new(StringComparer.Ordinal);
    }
}
