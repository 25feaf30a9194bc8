using System.Diagnostics;
using System.Diagnostics.Metrics;
using Herald.Broker.Compression;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Telemetry;
using Microsoft.Extensions.Logging;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster engine (spec cluster.md): this node's side of the cluster, over one Redis connection per shard
/// (<see cref="ClusterShards"/>, <see cref="ClusterConnection"/>, spec cluster.md §13), put together from its parts, each an engine of its own: <b>Out</b>
/// (<see cref="ClusterOutbound"/>, the <see cref="IPublicationExchange"/> sessions hand what they published to),
/// <b>Interest</b> (<see cref="ClusterInterest"/>, the <see cref="ISharedInterest"/> a subscription settles through, told
/// by the router which patterns the node's clients hold), <b>In</b> (<see cref="ClusterInbound"/>, the other nodes'
/// publications routed here), the <b>queue groups</b> (<see cref="ClusterGroups"/>), the <b>members</b>
/// (<see cref="ClusterNodes"/>, kept alive by a heartbeat here), the <b>shared history</b>
/// (<see cref="ClusterSharedHistory"/>, an <see cref="ISharedHistory"/>), long-poll's shared sessions
/// (<see cref="ClusterSharedSessions"/>) and presence (<see cref="RedisPresence"/>, an <see cref="IPresence"/>). It starts and stops them in order, and is the <see cref="IClusterStatus"/> monitoring reads.
/// </summary>
internal sealed class ClusterEngine : IClusterStatus, IAsyncDisposable
{
    private readonly ClusterOptions _options;
    private readonly ClusterShards _shards;
    private readonly ClusterConnection _connection;
    private readonly TopicRouter _router;
    private readonly ILogger _log;
    private readonly ClusterOutbound _out;
    private readonly ClusterInbound _in;
    private readonly ClusterInterest _interest;
    private readonly CancellationTokenSource _stop = new();
    private Task _heartbeat = Task.CompletedTask;

    public ClusterEngine(ClusterOptions options, string serverName, TopicRouter router, MessageEncoder encoder, BrokerMetrics brokerMetrics, int maxPayloadBytes, int maxFrameBytes, ILogger log, IMeterFactory meters, HistoryStore? history = null, PresenceOptions? presence = null, Revocations? revocations = null)
    {
        _options = options;
        _shards = new ClusterShards(options);
        _sessionsListening = new int[_shards.Count];
        _connection = _shards.First; // queue groups: shard 0 (cluster.md §13)
        _router = router;
        _log = log;
        Metrics = new ClusterMetrics(meters, this, _shards.Count);
        Nodes = new ClusterNodes(options, NodeId.ToString("x16", System.Globalization.CultureInfo.InvariantCulture), serverName, ClusterSharedHistory.RulesOf(history));
        Sessions = new ClusterSharedSessions(_shards);
        Groups = new ClusterGroups(_connection, Nodes, router, log);
        _out = new ClusterOutbound(_shards, router, Nodes, Metrics);
        SharedHistory = new ClusterSharedHistory(_shards, _out, history);
        Presence = new RedisPresence(_shards, _out, presence ?? new PresenceOptions());
        _in = new ClusterInbound(_shards, router, encoder, brokerMetrics, Metrics, Nodes, _out.KeptOrigins, SharedHistory, maxPayloadBytes, maxFrameBytes, Presence);
        _interest = new ClusterInterest(_shards, Nodes, Groups, _in, log, new ShardLossNotices(_shards, router, history, Metrics), Metrics);
        Control = new ClusterClientControl(_shards, Nodes, revocations ?? new Revocations(new SecurityOptions().MaxRevocations, TimeProvider.System));
    }

    /// <summary>The server API's actions on clients, reaching every node, and the revocations kept in Redis (cluster.md §14).</summary>
    public ClusterClientControl Control { get; }

    /// <summary>This node's connections to the cluster's shards (spec cluster.md §13).</summary>
    internal ClusterShards Shards => _shards;

    /// <summary>Where sessions hand this node's publications (Out).</summary>
    public IPublicationExchange Exchange => _out;

    /// <summary>What a subscription settles through (Interest).</summary>
    public ISharedInterest Interest => _interest;

    /// <summary>The cluster's topic histories, in Redis.</summary>
    public ClusterSharedHistory SharedHistory { get; }

    /// <summary>The cluster's presence, in Redis (spec §15.5, cluster.md §12).</summary>
    public RedisPresence Presence { get; }

    /// <summary>The cluster's queue groups, as this node's router holds them (spec cluster.md §11).</summary>
    public ClusterGroups Groups { get; }

    /// <summary>Long-poll sessions any node can serve (spec cluster.md §10).</summary>
    public ClusterSharedSessions Sessions { get; }

    /// <summary>The cluster's members as this node last saw them (<c>/varz</c>).</summary>
    public ClusterNodes Nodes { get; }

    /// <summary>This node's id in the cluster: random at every start, so a restarted node's sequence starts afresh.</summary>
    public ulong NodeId => _connection.NodeId;

    public ClusterMetrics Metrics { get; }

    public ClusterOptions Options => _options;

    /// <summary>Whether every shard is reachable now (<c>/readyz</c> says "redis unreachable" otherwise).</summary>
    public bool IsConnected => _shards.AllConnected;

    bool? IClusterStatus.Connected => IsConnected;

    /// <summary>Whether <paramref name="shard"/> is reachable now.</summary>
    public bool ConnectedTo(int shard) => _shards.All[shard].IsConnected;

    /// <summary>Publications sent to <paramref name="shard"/>.</summary>
    public long SentTo(int shard) => _out.SentTo(shard);

    /// <summary>Publications on <paramref name="shard"/>'s topics that stayed local (unreachable, or the queue full).</summary>
    public long DroppedFor(int shard) => _out.DroppedFor(shard);

    /// <summary>Redis channels and globs this node subscribes to on <paramref name="shard"/>.</summary>
    public long RedisSubscriptionsOn(int shard) => _interest.RedisSubscriptionsOn(shard);

    /// <summary>Publications received from <paramref name="shard"/> and not yet routed here.</summary>
    public long InboundQueuedOn(int shard) => _interest.InboundQueuedOn(shard);

    /// <summary>Redis channels and globs this node subscribes to now.</summary>
    public int RedisSubscriptions => _interest.RedisSubscriptions;

    /// <summary>What this node subscribes to in Redis now, as channel and glob names (monitoring).</summary>
    public IReadOnlyList<string> Covering => _interest.Covering;

    public long ForwardQueueBytes => _out.ForwardQueueBytes;

    /// <summary>
    /// Publications received from Redis and not yet routed here, over every subscription: this node's lag behind the others (monitoring).
    /// </summary>
    public long InboundQueued => _interest.InboundQueued;

    /// <summary>Origins the subscriptions remember the last sequence of, together. Read when quiet (tests).</summary>
    internal int OriginsRemembered => _interest.OriginsRemembered;

    /// <summary>Pattern changes queued and not yet in Redis.</summary>
    public long PendingInterest => _interest.PendingInterest;

    /// <summary>Whether every subscription and queue group member change so far is in Redis.</summary>
    public bool IsSettled => _interest.IsSettled;

    /// <summary>The cluster as this node sees it now, for monitoring (<c>/varz</c>, <c>/statusz</c>).</summary>
    public ClusterSnapshot? Snapshot()
    {
        ClusterMetrics counts = Metrics;
        ClusterGroups.GroupsView groups = Groups.View;
        return new ClusterSnapshot(
            NodeId.ToString("x16", System.Globalization.CultureInfo.InvariantCulture),
            [.. _shards.All.SelectMany(shard => shard.Endpoints)],
            IsConnected,
            _options.ChannelPrefix,
            RedisSubscriptions,
            PendingInterest,
            counts.Sent ,
            counts.Received ,
            counts.Dropped ,
            counts.Duplicates ,
            counts.Invalid ,
            ForwardQueueBytes,
            InboundQueued,
            [.. Nodes.Known.Select(node => MemberOf(node, groups))],
            Nodes.HistoryRulesMatch,
            Sessions.TakenOver,
            Sessions.CommandsSent,
            [.. _shards.All.Select(ShardStatus)],
            new ClusterSessionsKept(Sessions.Owned, Sessions.Entries.Sessions, Sessions.Entries.Appends, Sessions.Entries.Messages, Sessions.Entries.Bytes, Sessions.Kept.Bytes, _options.KeptFrameBytes));
    }

    /// <summary>One shard as this node sees it now (<c>/varz</c> <c>cluster.shards</c>, spec cluster.md §13).</summary>
    private ClusterShardStatus ShardStatus(ClusterConnection shard) => new(
        shard.Index,
        shard.Endpoints,
        shard.Prefix,
        shard.IsConnected,
        SentTo(shard.Index),
        Metrics.ReceivedOn(shard.Index),
        DroppedFor(shard.Index),
        RedisSubscriptionsOn(shard.Index),
        InboundQueuedOn(shard.Index),
        Metrics.LossNoticesOn(shard.Index),
        Metrics.SubscribeFailuresOn(shard.Index));

    /// <summary>A member of the cluster with the queue groups this node knows it holds (cluster.md §11).</summary>
    private static ClusterMember MemberOf(ClusterNode node, ClusterGroups.GroupsView groups)
    {
        ClusterGroups.NodeGroupsView held = ulong.TryParse(node.Id, System.Globalization.NumberStyles.AllowHexSpecifier, System.Globalization.CultureInfo.InvariantCulture, out ulong id)
            ? groups.Of(id, node.Self)
            : default;
        return new ClusterMember(node.Id, node.Name, node.Host, node.Started, node.LastSeen, node.Self, node.History, held.Groups, held.Members, held.Version);
    }

    public async Task StartAsync(CancellationToken cancellationToken)
    {
        await Task.WhenAll(_shards.All.Select(shard => shard.ConnectAsync(_log, subscriptions => Restored(shard, subscriptions)))).ConfigureAwait(false);
        await Task.WhenAll(_shards.All.Select(ListenForSessionsAsync)).ConfigureAwait(false);
        await ListenForControlAsync().ConfigureAwait(false);
        await Groups.StartAsync(_connection.Subscriber, _stop.Token).ConfigureAwait(false); // the others' groups, before this node routes anything
        _interest.Start(_stop.Token);
        _router.Listen(_interest); // every pattern subscribed so far, then every change
        _out.Start();
        _heartbeat = Task.WhenAll(Task.Run(HeartbeatLoopAsync, CancellationToken.None), Presence.RunHeartbeatsAsync(_stop.Token)); // presence's: one per shard
        _log.ClusterStarted(NodeId, _options.ChannelPrefix, _connection.IsConnected);
        if (_shards.Count > 1)
        {
            foreach (ClusterConnection shard in _shards.All)
            {
                _log.ClusterShard(shard.Index, _shards.Count, string.Join(",", shard.Endpoints), shard.Prefix, shard.IsConnected);
            }
        }
    }

    /// <summary>
    /// A shard's connection came back: what it lost is made again there, and what waited for it is sent. The one this node's
    /// subscriptions travel on (<paramref name="subscriptions"/>): once they are made again there, the subscribers whose
    /// publications pass through that shard are told they may have lost some (<see cref="ShardLossNotices"/>).
    /// </summary>
    private void Restored(ClusterConnection shard, bool subscriptions)
    {
        Metrics.Reconnected();
        _interest.Resync(shard, tell: subscriptions); // subscriptions that failed meanwhile are made again there, and its cover written whole
        _ = ListenForSessionsAsync(shard);
        _out.Nudge(shard); // its writer sends what waited for it
        Presence.Reconcile(shard); // the shard may have lost this node's members of its topics, or kept some that left meanwhile
        if (shard == _connection)
        {
            Groups.Resync(); // Redis may have restarted empty: this node's queue groups are written again
            _ = ListenForControlAsync();
        }
    }

    /// <summary>The control channel and the revocations (shard 0, cluster.md §14): at start, and again after the shard comes back if that failed.</summary>
    private async Task ListenForControlAsync()
    {
        if (!_connection.IsConnected || Interlocked.CompareExchange(ref _controlListening, 1, 0) != 0)
        {
            return;
        }

        try
        {
            await Control.StartAsync().ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            Volatile.Write(ref _controlListening, 0); // unreachable: tried again when the shard is restored
        }
    }

    private int _controlListening;

    /// <summary>
    /// The shared sessions' channels (wakes, commands, replies: this node's own, §2) on <paramref name="shard"/>: every
    /// shard is listened to (a session's messages travel through its token's shard, §13), at start, and again after the
    /// shard comes back if that failed.
    /// </summary>
    private async Task ListenForSessionsAsync(ClusterConnection shard)
    {
        if (!shard.IsConnected || Interlocked.CompareExchange(ref _sessionsListening[shard.Index], 1, 0) != 0)
        {
            return; // listening (StackExchange.Redis makes its subscriptions again after a reconnect), or being made
        }

        try
        {
            await Sessions.StartAsync([shard]).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            Sessions.StopListening([shard]); // those made, so that the next try makes each once
            Volatile.Write(ref _sessionsListening[shard.Index], 0); // unreachable: tried again when the shard is restored
        }
    }

    private readonly int[] _sessionsListening;

    public async Task StopAsync(CancellationToken cancellationToken)
    {
        // After the sessions' drain (registered before them, stopped after): what they published is sent first.
        _out.Close();
        _interest.Close();
        await _out.DrainAsync().ConfigureAwait(false);
        try
        {
            await Groups.LeaveAsync().WaitAsync(TimeSpan.FromSeconds(2), CancellationToken.None).ConfigureAwait(false); // no publication is given to this node's groups any more
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Unreachable: the others drop this node's groups with the node, after three silent intervals.
        }

        _stop.Cancel();
        await Task.WhenAny(Task.WhenAll(_interest.Worker, _heartbeat), Task.Delay(TimeSpan.FromSeconds(5), CancellationToken.None)).ConfigureAwait(false);
        await Task.WhenAll(_shards.All.Select(LeaveAsync)).ConfigureAwait(false);
        try
        {
            await Presence.LeaveAsync().WaitAsync(TimeSpan.FromSeconds(2), CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Unreachable: the others drop this node after three silent intervals.
        }

        _interest.ReleaseAll();
        Groups.ReleaseWaiters();
    }

    /// <summary>Leaves the member list of <paramref name="shard"/> (a graceful stop); unreachable, the others drop this node after three silent intervals.</summary>
    private async Task LeaveAsync(ClusterConnection shard)
    {
        try
        {
            await Nodes.LeaveAsync(shard).WaitAsync(TimeSpan.FromSeconds(2), CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Unreachable.
        }
    }

    public async ValueTask DisposeAsync()
    {
        _stop.Cancel();
        await _shards.DisposeAsync().ConfigureAwait(false);
        _out.Dispose();
        _stop.Dispose();
    }

    private async Task HeartbeatLoopAsync()
    {
        using var timer = new PeriodicTimer(_options.HeartbeatInterval);
        try
        {
            await BeatsAsync(timer).ConfigureAwait(false);
        }
        catch (OperationCanceledException)
        {
            // Stopping.
        }
    }

    private async Task BeatsAsync(PeriodicTimer timer)
    {
        Task groups = Task.CompletedTask;
        do
        {
            if (_shards.AnyConnected)
            {
                try
                {
                    long takenAt = Stopwatch.GetTimestamp();
                    await Nodes.BeatAsync(_shards.All).ConfigureAwait(false); // on every shard: the members are the union
                    foreach (ClusterNode other in Nodes.NewlyDiffering())
                    {
                        _log.ClusterHistoryRulesDiffer(other.Id, other.Name, other.History, Nodes.HistoryRules);
                    }

                    if (_connection.IsConnected && groups.IsCompleted)
                    {
                        groups = BeatGroupsAsync(takenAt); // queue groups: shard 0's; a stall there holds no other shard's beat
                        await Control.RefreshAsync().ConfigureAwait(false); // revocations another node changed while this one did not hear it
                    }
                }
                catch (Exception e) when (e is RedisException or TimeoutException)
                {
                    // Unreachable now: the next beat tries again (the loss itself is logged by the connection events).
                }
            }
        }
        while (await timer.WaitForNextTickAsync(_stop.Token).ConfigureAwait(false));
    }

    private async Task BeatGroupsAsync(long takenAt)
    {
        try
        {
            await Groups.BeatAsync(_connection.Database, Nodes.Known, takenAt).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Unreachable now: the next beat tries again.
        }
    }
}
