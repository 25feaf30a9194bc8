using System.Buffers;
using System.Diagnostics;
using System.Net;
using System.Security.Cryptography;
using System.Threading.Channels;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using Microsoft.Extensions.Logging;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster engine (spec cluster.md): the one seam between this node and the others, beside the router,
/// as Centrifugo keeps its broker beside its hub. Sessions hand it what they published
/// (<see cref="Forward"/>); the router tells it which patterns the node's clients hold
/// (<see cref="IInterestListener"/>); it alone talks to Redis.
/// </summary>
/// <remarks>
/// <para>
/// <b>Out.</b> A publication routed on this node is copied once into an envelope (<see cref="ClusterEnvelope"/>)
/// and queued; one writer task stamps each with this node's next sequence number and PUBLISHes it to
/// <c>{prefix}{topic}</c>, in that order, on one connection, so Redis receives a node's publications in
/// sequence order. The queue is bounded in bytes; past it, or while Redis is unreachable, the publication
/// stays local and is counted.
/// </para>
/// <para>
/// <b>Interest.</b> Patterns gained or lost are queued by the router (under its lock) and applied by one
/// worker task: the <see cref="InterestCover"/> gives a prefix-free set of Redis channels and globs, so Redis
/// sends this node each publication at most once, on one subscription. A change of that set (a glob that
/// now covers an exact channel, or the reverse) is made without a gap or a duplicate: the new
/// subscriptions are confirmed by Redis first, then the old ones unsubscribed and their queues drained,
/// and only then are the new queues read, each skipping what an old queue already delivered (per origin,
/// every sequence number up to the last it delivered, on the topics it covered: the copies Redis sent on
/// both while both were subscribed). <see cref="WhenSettledAsync"/> completes once every change so far is in
/// Redis: a client's PING or long-poll subscribe waits for it, so its subscription is live on every node
/// when it is told so.
/// </para>
/// <para>
/// <b>In.</b> Each Redis subscription is read in order by its own task: an envelope from another node is
/// routed through this node's router as a publication without a publisher (no-echo never applies; reply
/// permissions are granted as for a local request), encoded once per form for every local subscriber,
/// flushed once per batch read. This node's own envelopes, which its globs may bring back, are skipped.
/// </para>
/// <para>
/// <b>Queue groups</b> (spec cluster.md §11). The router holds, beside this node's members, an entry per group and
/// other node weighing its members there (<see cref="ClusterGroups"/> replicates them); it chooses each group's member
/// for this node's publications among all of them, and what it chose on another node travels in the envelope
/// (<see cref="GroupAssignments"/>), which every receiving node follows. No Redis call on a publication's path.
/// </para>
/// </remarks>
internal sealed class ClusterEngine : IInterestListener, IPublicationExchange, ISharedInterest, ISharedHistory, IClusterStatus, IAsyncDisposable
{
    private readonly ClusterOptions _options;
    private readonly TopicRouter _router;
    private readonly MessageEncoder _encoder;
    private readonly BrokerMetrics _brokerMetrics;
    private readonly ILogger _log;
    private readonly int _maxPayloadBytes;
    private readonly int _maxFrameBytes;
    private readonly byte[] _channelPrefix;

    private readonly Channel<InterestChange> _changes = Channel.CreateUnbounded<InterestChange>(new UnboundedChannelOptions { SingleReader = true });
    private readonly Channel<Outbound> _outbound = Channel.CreateUnbounded<Outbound>(new UnboundedChannelOptions { SingleReader = true });
    private readonly CancellationTokenSource _stop = new();
    private readonly SettleCounter _interestSettle = new();

    // Owned by the interest worker.
    private readonly InterestCover _cover = new();
    private readonly Dictionary<CoverKey, Inbound> _inbound = [];

    private ConnectionMultiplexer? _redis;
    private ISubscriber? _subscriber;
    private Task _worker = Task.CompletedTask;
    private Task _writer = Task.CompletedTask;
    private Task _heartbeat = Task.CompletedTask;
    private long _forwardBytes;
    private ulong _sequence; // the writer's
    private IServer? _publishVia; // the writer's
    private readonly EnvelopeSigner? _signer; // the writer's
    private volatile bool _running;
    private volatile Inbound[] _readers = []; // what _inbound holds, for readers on other threads (monitoring)
    private readonly KeptOrigins _keptOrigins = new(); // who published this node's history publications in flight, for no-echo
    private readonly Queue<Outbound> _parked = new(); // history publications waiting for Redis; the writer's
    private long _restores; // connections to Redis restored so far

    public ClusterEngine(ClusterOptions options, string serverName, TopicRouter router, MessageEncoder encoder, BrokerMetrics brokerMetrics, int maxPayloadBytes, int maxFrameBytes, ILogger log, HistoryStore? history = null)
    {
        History = history;
        _maxFrameBytes = maxFrameBytes;
        _options = options;
        _router = router;
        _encoder = encoder;
        _brokerMetrics = brokerMetrics;
        _maxPayloadBytes = maxPayloadBytes;
        _log = log;
        _channelPrefix = System.Text.Encoding.ASCII.GetBytes(options.ChannelPrefix);
        NodeId = BitConverter.ToUInt64(RandomNumberGenerator.GetBytes(8)) | 1; // never 0
        _signer = options.Secret is { } secret ? new EnvelopeSigner(secret) : null;
        Nodes = new ClusterNodes(options, NodeId.ToString("x16", System.Globalization.CultureInfo.InvariantCulture), serverName, RulesOf(history));
        Sessions = new SharedSessions(this);
        Groups = new ClusterGroups(this, router, log);
    }

    /// <summary>The cluster's queue groups, as this node's router holds them (spec cluster.md §11).</summary>
    public ClusterGroups Groups { get; }

    /// <summary>Which node delivers each queue group of a publication (spec cluster.md §11), for one publisher or reader.</summary>
    public GroupAssignments NewAssignments() => new(NodeId);

    /// <summary>
    /// What a publisher on this node (a session) hands the router, then <see cref="Forward"/>, for
    /// <paramref name="publish"/>: <paramref name="reused"/> (made at the first) to choose each queue group among the
    /// cluster's members. Null, each group chosen among this node's members as on one node, when no group has members
    /// on another node (one test: what a node whose groups are all its own pays), or when the publication cannot reach
    /// the other nodes now (Redis unreachable, no room in the forward queue), so that no group is given to a node it
    /// will not reach.
    /// </summary>
    public GroupAssignments? Assigning(ref GroupAssignments? reused, in PublishFrame publish)
    {
        if (!_router.HasMembersElsewhere)
        {
            return null;
        }

        long most = ClusterEnvelope.HeaderSize + ClusterEnvelope.TagSize + 1 + (GroupAssignments.Max * GroupAssignments.Size) + 2
            + publish.Envelope.Length + publish.Headers.Length + _channelPrefix.Length + publish.Topic.Length;
        if (!_running || _redis is not { IsConnected: true } || Interlocked.Read(ref _forwardBytes) + most > _options.MaxForwardQueueBytes)
        {
            return null;
        }

        return (reused ??= NewAssignments()).Decide();
    }

    /// <summary>Long-poll sessions any node can serve (spec cluster.md §10).</summary>
    public SharedSessions Sessions { get; }

    internal IDatabase Database => _redis!.GetDatabase();

    internal ISubscriber Subscriber => _subscriber!;

    /// <summary>The cluster's members as this node last saw them (<c>/varz</c>).</summary>
    public ClusterNodes Nodes { get; }

    /// <summary>This node's id in the cluster: random at every start, so a restarted node's sequence starts afresh.</summary>
    public ulong NodeId { get; }

    public ClusterMetrics? Metrics { get; set; }

    /// <summary>This node's topic histories: the other nodes' publications go through them too (spec §13).</summary>
    public HistoryStore? History { get; }

    public ClusterOptions Options => _options;

    /// <summary>Topic histories are the cluster's, in Redis (spec cluster.md §9): a history topic's publications go through Redis first, everywhere.</summary>
    public bool SharesHistory => History is { Shared: true };

    public bool IsConnected => _redis?.IsConnected == true;

    /// <summary>Redis channels and globs this node subscribes to now.</summary>
    public int RedisSubscriptions => _readers.Length;

    /// <summary>What this node subscribes to in Redis now, as channel and glob names (monitoring).</summary>
    public IReadOnlyList<string> Covering => [.. _readers.Select(inbound => inbound.Key.RedisName(_options.ChannelPrefix))];

    public long ForwardQueueBytes => Interlocked.Read(ref _forwardBytes);

    /// <summary>
    /// Publications received from Redis and not yet routed here, over every subscription: this node's lag behind
    /// the others (StackExchange.Redis queues what it reads; a node short of CPU shows it here first). Counted
    /// when asked (monitoring), never on the message path.
    /// </summary>
    public long InboundQueued
    {
        get
        {
            long queued = 0;
            foreach (Inbound inbound in _readers)
            {
                if (inbound.Queue.TryGetCount(out int count))
                {
                    queued += count;
                }
            }

            return queued;
        }
    }

    /// <summary>Origins the subscriptions remember the last sequence of, together (bounded: <see cref="MaxOriginsKept"/> each, past that only members). Read when quiet (tests).</summary>
    internal int OriginsRemembered => _inbound.Values.Sum(inbound => inbound.LastDelivered.Count);

    /// <summary>The Redis endpoints of the configuration (never its password or other options).</summary>
    public IReadOnlyList<string> RedisEndpoints => [.. ConfigurationOptions.Parse(_options.Redis!).EndPoints.Select(e => e.ToString() ?? "")];

    bool? IClusterStatus.Connected => IsConnected;

    /// <summary>The cluster as this node sees it now, for monitoring (<c>/varz</c>, <c>/statusz</c>).</summary>
    public ClusterSnapshot? Snapshot()
    {
        ClusterMetrics? counts = Metrics;
        ClusterGroups.GroupsView groups = Groups.View;
        return new ClusterSnapshot(
            NodeId.ToString("x16", System.Globalization.CultureInfo.InvariantCulture),
            RedisEndpoints,
            IsConnected,
            _options.ChannelPrefix,
            RedisSubscriptions,
            PendingInterest,
            counts?.Sent ?? 0,
            counts?.Received ?? 0,
            counts?.Dropped ?? 0,
            counts?.Duplicates ?? 0,
            counts?.Invalid ?? 0,
            ForwardQueueBytes,
            InboundQueued,
            [.. Nodes.Known.Select(node => MemberOf(node, groups))],
            Nodes.HistoryRulesMatch,
            Sessions.TakenOver,
            Sessions.CommandsSent);
    }

    /// <summary>A member of the cluster with the queue groups this node knows it holds (cluster.md §11).</summary>
    private static ClusterMember MemberOf(ClusterNode node, ClusterGroups.GroupsView groups)
    {
        ClusterGroups.NodeGroupsView held = ulong.TryParse(node.Id, System.Globalization.NumberStyles.AllowHexSpecifier, System.Globalization.CultureInfo.InvariantCulture, out ulong id)
            ? groups.Of(id, node.Self)
            : default;
        return new ClusterMember(node.Id, node.Name, node.Host, node.Started, node.LastSeen, node.Self, node.History, held.Groups, held.Members, held.Version);
    }

    /// <summary>Pattern changes queued and not yet in Redis.</summary>
    public long PendingInterest => _interestSettle.Pending;

    public bool IsSettled => _interestSettle.IsSettled && Groups.IsSettled;

    public async Task StartAsync(CancellationToken cancellationToken)
    {
        ConfigurationOptions config = ConfigurationOptions.Parse(_options.Redis!);
        config.AbortOnConnectFail = false; // start without Redis and keep trying: local traffic is served meanwhile
        config.BacklogPolicy = BacklogPolicy.FailFast; // unreachable: fail now (counted), never queue behind a dead link
        config.ConnectTimeout = (int)_options.ConnectTimeout.TotalMilliseconds;
        config.ClientName ??= $"herald-{NodeId:x16}";
        _redis = await ConnectionMultiplexer.ConnectAsync(config).ConfigureAwait(false);
        _redis.ConnectionFailed += (_, e) =>
        {
            if (e.ConnectionType == ConnectionType.Subscription || !_redis.IsConnected)
            {
                _log.ClusterRedisLost(e.EndPoint?.ToString(), e.FailureType.ToString(), e.Exception?.Message);
            }
        };
        _redis.ConnectionRestored += (_, e) =>
        {
            Metrics?.Reconnected();
            _log.ClusterRedisRestored(e.EndPoint?.ToString());
            _changes.Writer.TryWrite(InterestChange.Resync); // subscriptions that failed meanwhile are made again
            Groups.Resync(); // Redis may have restarted empty: this node's queue groups are written again
            _ = ListenForSessionsAsync();
            _outbound.Writer.TryWrite(new Outbound([], [], 0, null, null)); // the writer sends what waited for Redis
            Interlocked.Increment(ref _restores); // history topics: a gap from now on may be the outage's, repaired from the streams
        };
        _redis.ConfigurationChanged += (_, _) => _publishVia = null; // a failover or resharding: find the slot's master again
        _subscriber = _redis.GetSubscriber();
        if (!_redis.IsConnected)
        {
            _log.ClusterRedisLost(_options.Redis, "NotConnectedAtStart", null);
        }

        await ListenForSessionsAsync().ConfigureAwait(false);
        await Groups.StartAsync(_subscriber, _stop.Token).ConfigureAwait(false); // the others' groups, before this node routes anything
        _running = true;
        _router.Listen(this); // every pattern subscribed so far, then every change
        _worker = Task.Run(InterestLoopAsync, CancellationToken.None);
        _writer = Task.Run(WriteLoopAsync, CancellationToken.None);
        _heartbeat = Task.Run(HeartbeatLoopAsync, CancellationToken.None);
        _log.ClusterStarted(NodeId, _options.ChannelPrefix, _redis.IsConnected);
    }

    /// <summary>The shared sessions' channels (wakes, commands, replies): at start, and again after Redis comes back if that failed.</summary>
    private async Task ListenForSessionsAsync()
    {
        if (!_redis!.IsConnected || Interlocked.CompareExchange(ref _sessionsListening, 1, 0) != 0)
        {
            return; // listening (StackExchange.Redis makes its subscriptions again after a reconnect), or being made
        }

        try
        {
            await Sessions.StartAsync(_subscriber!).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            Sessions.StopListening(_subscriber!); // those made, so that the next try makes each once
            Volatile.Write(ref _sessionsListening, 0); // unreachable: tried again when the connection is restored
        }
    }

    private int _sessionsListening;

    public async Task StopAsync(CancellationToken cancellationToken)
    {
        // After the sessions' drain (registered before them, stopped after): what they published is sent first.
        _running = false;
        _outbound.Writer.TryComplete();
        _changes.Writer.TryComplete();
        await Task.WhenAny(_writer, Task.Delay(TimeSpan.FromSeconds(5), CancellationToken.None)).ConfigureAwait(false);
        try
        {
            await Groups.LeaveAsync().WaitAsync(TimeSpan.FromSeconds(2), CancellationToken.None).ConfigureAwait(false); // no publication is given to this node's groups any more
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Unreachable: the others drop this node's groups with the node, after three silent intervals.
        }

        _stop.Cancel();
        await Task.WhenAny(Task.WhenAll(_worker, _heartbeat), Task.Delay(TimeSpan.FromSeconds(5), CancellationToken.None)).ConfigureAwait(false);
        try
        {
            await Nodes.LeaveAsync(_redis!.GetDatabase()).WaitAsync(TimeSpan.FromSeconds(2), CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Unreachable: the others drop this node after three silent intervals.
        }
        _interestSettle.ReleaseAll();
        Groups.ReleaseWaiters();
    }

    public async ValueTask DisposeAsync()
    {
        _stop.Cancel();
        if (_redis is not null)
        {
            await _redis.CloseAsync(allowCommandsToComplete: false).ConfigureAwait(false);
            _redis.Dispose();
        }

        _signer?.Dispose();
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
        do
        {
            if (_redis!.IsConnected)
            {
                try
                {
                    long takenAt = Stopwatch.GetTimestamp();
                    await Nodes.BeatAsync(_redis.GetDatabase()).ConfigureAwait(false);
                    await Groups.BeatAsync(_redis.GetDatabase(), Nodes.Known, takenAt).ConfigureAwait(false);
                    foreach (ClusterNode other in Nodes.NewlyDiffering())
                    {
                        _log.ClusterHistoryRulesDiffer(other.Id, other.Name, other.History, Nodes.HistoryRules);
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

    // ---- Interest (called by the router under its write lock: record only) ----

    public void PatternAdded(string pattern)
    {
        _interestSettle.Requested();
        _changes.Writer.TryWrite(new InterestChange(pattern, Added: true));
    }

    public void PatternRemoved(string pattern)
    {
        _interestSettle.Requested();
        _changes.Writer.TryWrite(new InterestChange(pattern, Added: false));
    }

    public void MemberAdded(Subscription member) => Groups.MemberAdded(member);

    public void MemberRemoved(Subscription member) => Groups.MemberRemoved(member);

    /// <summary>
    /// Completes when every pattern change queued before this call is in Redis (or failed and was logged: Redis
    /// unreachable), and every queue group member change is written and announced (spec cluster.md §11).
    /// </summary>
    public Task WhenSettledAsync()
    {
        Task groups = _running ? Groups.WhenSettledAsync() : Task.CompletedTask;
        Task interest = WhenInterestSettledAsync();
        return groups.IsCompleted ? interest : interest.IsCompleted ? groups : Task.WhenAll(interest, groups);
    }

    private Task WhenInterestSettledAsync() => _running ? _interestSettle.WhenSettledAsync() : Task.CompletedTask;

    private async Task InterestLoopAsync()
    {
        ChannelReader<InterestChange> changes = _changes.Reader;
        try
        {
            while (await changes.WaitToReadAsync(_stop.Token).ConfigureAwait(false))
            {
                long taken = 0;
                while (changes.TryRead(out InterestChange change))
                {
                    if (change.Pattern is null)
                    {
                        continue; // resync: the pass below makes what is missing
                    }

                    taken++;
                    if (change.Added)
                    {
                        _cover.Add(change.Pattern);
                    }
                    else
                    {
                        _cover.Remove(change.Pattern);
                    }
                }

                try
                {
                    await ApplyAsync(_options.ReceiveAll ? _cover.All() : _cover.Compute()).ConfigureAwait(false);
                }
                catch (Exception e) when (e is not OperationCanceledException)
                {
                    _log.ClusterInterestFailed(e);
                }

                _interestSettle.Applied(taken);
            }
        }
        catch (OperationCanceledException)
        {
            // Stopping.
        }
    }

    /// <summary>Makes Redis hold exactly <paramref name="cover"/>, without a gap or a duplicate (see the remarks). Caller: the interest worker.</summary>
    private async Task ApplyAsync(HashSet<CoverKey> cover)
    {
        List<CoverKey> added = [.. cover.Where(key => !_inbound.ContainsKey(key))];
        List<CoverKey> removed = [.. _inbound.Keys.Where(key => !cover.Contains(key))];
        if (added.Count == 0 && removed.Count == 0)
        {
            return;
        }

        // 1. The new subscriptions, confirmed by Redis; not read yet. (All at once: one round trip, not one each.)
        ChannelMessageQueue?[] queues = await Task.WhenAll(added.Select(SubscribeAsync)).ConfigureAwait(false);
        var fresh = new List<Inbound>(added.Count);
        for (int i = 0; i < added.Count; i++)
        {
            if (queues[i] is { } queue)
            {
                fresh.Add(new Inbound(added[i], queue) { Signer = _options.Secret is { } secret ? new EnvelopeSigner(secret) : null, Groups = NewAssignments() });
            }
        }

        // 2. The old ones unsubscribed and drained: what each delivered is known to the last sequence number.
        var old = new List<Inbound>(removed.Count);
        foreach (CoverKey key in removed)
        {
            old.Add(_inbound[key]);
            _inbound.Remove(key);
        }

        await Task.WhenAll(old.Select(EndAsync)).ConfigureAwait(false);
        List<Inbound> delivered = [.. old.Where(inbound => inbound.LastDelivered.Count > 0)];

        // 3. The new ones read, skipping the copies an old one delivered.
        foreach (Inbound inbound in fresh)
        {
            List<Handover>? handover = null;
            foreach (Inbound done in delivered)
            {
                if (done.Key.Covers(inbound.Key) || inbound.Key.Covers(done.Key))
                {
                    (handover ??= []).Add(new Handover(done.Key, new Dictionary<ulong, ulong>(done.LastDelivered)));
                }
            }

            inbound.Skip = handover;
            _inbound[inbound.Key] = inbound;
            inbound.Reader = Task.Run(() => ReadLoopAsync(inbound));
        }

        _readers = [.. _inbound.Values];
        try
        {
            await Nodes.PublishCoverAsync(_redis!.GetDatabase(), [.. _inbound.Keys]).ConfigureAwait(false); // before the change is confirmed to anyone
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _log.ClusterSubscribeFailed(_options.ChannelPrefix + "covers", e.Message);
        }
    }

    /// <summary>Unsubscribes one subscription and waits until its reader has routed everything its queue held.</summary>
    private async Task EndAsync(Inbound inbound)
    {
        try
        {
            await inbound.Queue.UnsubscribeAsync().ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _log.ClusterSubscribeFailed(inbound.Key.RedisName(_options.ChannelPrefix), e.Message); // gone locally; Redis drops it with the connection
        }

        if (await Task.WhenAny(inbound.Reader, Task.Delay(TimeSpan.FromSeconds(5), _stop.Token)).ConfigureAwait(false) != inbound.Reader)
        {
            inbound.Stop.Cancel(); // its queue was not completed (the unsubscribe failed): end the reader here
            await inbound.Reader.ConfigureAwait(false);
        }

        inbound.Stop.Dispose();
        inbound.Signer?.Dispose();
    }

    private async Task<ChannelMessageQueue?> SubscribeAsync(CoverKey key)
    {
        string name = key.RedisName(_options.ChannelPrefix);
        RedisChannel channel = key.IsPrefix ? RedisChannel.Pattern(name) : RedisChannel.Literal(name);
        try
        {
            return await _subscriber!.SubscribeAsync(channel).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Not made (Redis unreachable): forget whatever the client registered, and make it again at the next resync.
            _log.ClusterSubscribeFailed(name, e.Message);
            try
            {
                await _subscriber!.UnsubscribeAsync(channel, handler: null, CommandFlags.FireAndForget).ConfigureAwait(false);
            }
            catch (Exception again) when (again is RedisException or TimeoutException)
            {
                // Unreachable still: it is gone locally all the same.
            }

            return null;
        }
    }

    // ---- In: other nodes' publications ----

    private async Task ReadLoopAsync(Inbound inbound)
    {
        var toFlush = new List<IMessageSink>();
        using var stop = CancellationTokenSource.CreateLinkedTokenSource(_stop.Token, inbound.Stop.Token);
        try
        {
            while (true)
            {
                if (!inbound.Queue.TryRead(out ChannelMessage message))
                {
                    Flush(toFlush); // once per batch read, never per message
                    message = await inbound.Queue.ReadAsync(stop.Token).ConfigureAwait(false);
                }

                if (Deliver(inbound, message.Message, toFlush) is { } gap)
                {
                    await RepairAsync(inbound, gap, toFlush).ConfigureAwait(false); // rare: only after a Redis outage
                }
            }
        }
        catch (Exception e) when (e is ChannelClosedException or OperationCanceledException)
        {
            // Unsubscribed (and drained), or stopping.
        }
        finally
        {
            Flush(toFlush);
        }
    }

    /// <returns>Null, or a history publication held back for the gap before it (<see cref="RepairAsync"/>).</returns>
    private Gap? Deliver(Inbound inbound, ReadOnlyMemory<byte> bytes, List<IMessageSink> toFlush)
    {
        bool positioned = ClusterHistory.TryReadPositioned(bytes, out ulong offset, out string epoch, out ReadOnlyMemory<byte> envelope);
        if (!ClusterEnvelope.TryRead(positioned ? envelope : bytes, inbound.Signer, out ulong origin, out ulong sequence, out ReadOnlyMemory<byte> assignments, out ReadOnlyMemory<byte> body))
        {
            Metrics?.InvalidOne();
            return null;
        }

        IMessageSink? publisher = null;
        if (origin == NodeId)
        {
            if (!positioned)
            {
                return null; // our own, back through a glob: delivered here already
            }

            publisher = _keptOrigins.Take(sequence); // our own history publication, back from Redis: delivered here now, no-echo kept
        }

        try
        {
            PublishFrame publish = ClusterEnvelope.ReadPublish(body);
            if (inbound.Skip is { } skip && SkipCopy(inbound, skip, origin, sequence, publish.Topic))
            {
                Metrics?.Duplicate();
                return null;
            }

            inbound.LastDelivered[origin] = sequence;
            if (inbound.LastDelivered.Count > MaxOriginsKept)
            {
                ForgetGoneOrigins(inbound.LastDelivered);
            }

            // This node's own route span (issue 20.3 across nodes), only for a sampled traceparent while something
            // listens: a sibling of the origin's, both children of the publisher's span.
            Activity? span = publish.HasHeaders && BrokerTracing.Source.HasListeners() ? StartSpan(inbound, publish, origin) : null;
            ulong gapAfter = 0;
            GroupAssignments groups = inbound.Groups.Apply(origin, assignments);
            int deliveries = positioned && History is { } histories
                ? RoutePositioned(histories, publish, offset, epoch, publisher, toFlush, span is null ? null : inbound.Tally, repaired: false, groups, out gapAfter)
                : Route(publish, toFlush, span is null ? null : inbound.Tally, groups);
            if (deliveries == -2)
            {
                span?.Dispose();
                return new Gap(publish, offset, epoch, publisher, gapAfter, origin, assignments);
            }

            if (span is not null)
            {
                inbound.Tally!.WriteTo(span);
                span.Dispose();
            }

            Metrics?.ReceivedOne();
            _brokerMetrics.Delivered(deliveries, ProtocolConstants.MessageHeaderSize + (int)(publish.Envelope.Length + publish.Headers.Length));
        }
        catch (ProtocolException)
        {
            Metrics?.InvalidOne(); // not a PUBLISH, or a Zstd payload that does not decompress within max_payload
        }

        return null;
    }

    /// <summary>Origins a subscription remembers before it forgets the ones no longer members (restarted nodes come back with new ids).</summary>
    private const int MaxOriginsKept = 64;

    /// <summary>
    /// Keeps the table of last sequences bounded: the entries of nodes that left the member list go (they send
    /// nothing more, so no copy of theirs can come); then, if still over, all but the current members'.
    /// Caller: the subscription's reader.
    /// </summary>
    private void ForgetGoneOrigins(Dictionary<ulong, ulong> lastDelivered)
    {
        HashSet<ulong> members = Nodes.MemberIds;
        foreach (ulong origin in lastDelivered.Keys)
        {
            if (!members.Contains(origin))
            {
                lastDelivered.Remove(origin);
            }
        }
    }

    private static Activity? StartSpan(Inbound inbound, in PublishFrame publish, ulong origin)
    {
        Activity? span = BrokerTracing.StartRoute(publish, receivedAt: 0);
        if (span is null)
        {
            return null;
        }

        if (span.IsAllDataRequested)
        {
            span.SetTag("herald.transport", "cluster");
            span.SetTag("herald.cluster.origin", origin.ToString("x16", System.Globalization.CultureInfo.InvariantCulture));
        }

        inbound.Tally ??= new FanoutTally();
        return span;
    }

    /// <summary>Routes another node's publication here: the same router, forms and flushes as a local one, without a publisher, its queue groups where its origin gave them.</summary>
    private int Route(in PublishFrame publish, List<IMessageSink> toFlush, FanoutTally? tally, GroupAssignments groups)
    {
        if ((publish.Flags & PayloadFlags.Zstd) == 0)
        {
            return RouteHere(publish, toFlush, default, tally, groups);
        }

        int length = Zstd.Decompress(publish.Payload, _maxPayloadBytes - (int)publish.Headers.Length, out byte[] plain);
        try
        {
            return RouteHere(publish, toFlush, plain.AsSpan(0, length), tally, groups);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(plain);
        }
    }

    /// <summary>
    /// After Redis came back (spec cluster.md §9): a history topic's publication whose offset jumped past the last one
    /// routed here, across the outage (<see cref="TopicHistory.PublishAt"/> said -2), waits while what this node missed
    /// is read from the topic's stream and routed, in order; then it is routed itself. Its subscribers lose nothing
    /// Redis kept. (A jump without an outage between, when this node's interest in the topic began anew, starts
    /// afresh instead: its subscribers asked for nothing older.) Caller: the reader.
    /// </summary>
    private async Task RepairAsync(Inbound inbound, Gap gap, List<IMessageSink> toFlush)
    {
        try
        {
            if (History!.FindExisting(gap.Publish.TopicString) is { } history)
            {
                SharedRead read = await ReadAsync(history, new Herald.Protocol.StreamPosition(gap.After, gap.Epoch)).ConfigureAwait(false);
                if (read.Epoch == gap.Epoch)
                {
                    foreach ((ulong missed, _, byte[] kept) in read.Entries)
                    {
                        if (missed < gap.Offset && DecodeKept(kept, inbound.Groups) is { } publish)
                        {
                            Metrics?.RepairedOne();
                            RoutePositioned(History!, publish, missed, gap.Epoch, publisher: null, toFlush, tally: null, repaired: true, inbound.Groups, out _);
                        }
                    }
                }
            }
        }
        catch (ClusterUnavailableException)
        {
            // Redis is gone again: the gap stays, and the publication goes on without it.
        }

        int deliveries = RoutePositioned(History!, gap.Publish, gap.Offset, gap.Epoch, gap.Publisher, toFlush, tally: null, repaired: true, inbound.Groups.Apply(gap.Origin, gap.Assignments), out _);
        Metrics?.ReceivedOne();
        _brokerMetrics.Delivered(deliveries, ProtocolConstants.MessageHeaderSize + (int)(gap.Publish.Envelope.Length + gap.Publish.Headers.Length));
    }

    /// <summary>A positioned publication held back until the gap before it is read back (<see cref="RepairAsync"/>).</summary>
    private sealed record Gap(PublishFrame Publish, ulong Offset, string Epoch, IMessageSink? Publisher, ulong After, ulong Origin, ReadOnlyMemory<byte> Assignments);

    /// <summary>A publication Redis positioned (spec cluster.md §9): through its topic's history here, stamped with Redis's offset and epoch.</summary>
    private int RoutePositioned(HistoryStore histories, in PublishFrame publish, ulong offset, string epoch, IMessageSink? publisher, List<IMessageSink> toFlush, FanoutTally? tally, bool repaired, GroupAssignments groups, out ulong gapAfter)
    {
        if ((publish.Flags & PayloadFlags.Zstd) == 0)
        {
            return histories.PublishAt(_router, publish, offset, epoch, publisher, toFlush, _encoder, default, tally, _maxFrameBytes, Interlocked.Read(ref _restores), repaired, groups, out gapAfter);
        }

        int length = Zstd.Decompress(publish.Payload, _maxPayloadBytes - (int)publish.Headers.Length, out byte[] plain);
        try
        {
            return histories.PublishAt(_router, publish, offset, epoch, publisher, toFlush, _encoder, plain.AsSpan(0, length), tally, _maxFrameBytes, Interlocked.Read(ref _restores), repaired, groups, out gapAfter);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(plain);
        }
    }

    /// <summary>Through this node's topic histories when it keeps any (so they hold the other nodes' publications too), else the router.</summary>
    private int RouteHere(in PublishFrame publish, List<IMessageSink> toFlush, ReadOnlySpan<byte> plainPayload, FanoutTally? tally, GroupAssignments groups) =>
        History is { Shared: false } history
            ? history.Publish(_router, publish, origin: null, toFlush, _encoder, plainPayload, receivedAt: 0, tally, _maxFrameBytes, groups)
            : _router.Publish(publish, origin: null, toFlush, _encoder, plainPayload, tally: tally, groups: groups);

    /// <summary>
    /// A copy an old subscription already delivered: from <paramref name="origin"/>, at or below the last
    /// sequence number it delivered from there, on a topic it covered. A later number from an origin means
    /// every copy from it is past: its entry goes, and the table with its last entry.
    /// </summary>
    private static bool SkipCopy(Inbound inbound, List<Handover> skip, ulong origin, ulong sequence, in ReadOnlySequence<byte> topic)
    {
        ReadOnlySpan<byte> name = topic.IsSingleSegment ? topic.FirstSpan : topic.ToArray();
        bool copy = false;
        for (int i = skip.Count - 1; i >= 0; i--)
        {
            Handover entry = skip[i];
            if (!entry.LastDelivered.TryGetValue(origin, out ulong last))
            {
                continue;
            }

            if (sequence > last)
            {
                entry.LastDelivered.Remove(origin);
                if (entry.LastDelivered.Count == 0)
                {
                    skip.RemoveAt(i);
                }
            }
            else if (entry.Key.Matches(name))
            {
                copy = true;
            }
        }

        if (skip.Count == 0)
        {
            inbound.Skip = null;
        }

        return copy;
    }

    private static void Flush(List<IMessageSink> toFlush)
    {
        int count = toFlush.Count;
        if (count == 1)
        {
            toFlush[0].Flush();
        }
        else
        {
            for (int i = 0; i < count; i++)
            {
                toFlush[i].ScheduleFlush();
            }
        }

        toFlush.Clear();
    }

    // ---- Out: this node's publications ----

    /// <summary>
    /// Sends a publication routed on this node to the other nodes (one copy into the queue; the caller's bytes
    /// are not kept). With <paramref name="request"/>, a request that reached nobody here: it is told if no
    /// other node received it either. <paramref name="groups"/>: the queue groups the router gave to other nodes
    /// while routing it here (spec cluster.md §11), carried in the envelope.
    /// </summary>
    /// <returns>True: the cluster answers <paramref name="request"/> (or drops it with the publication while stopping).</returns>
    public bool Forward(in PublishFrame publish, INoResponders? request, GroupAssignments? groups)
    {
        if (!_running)
        {
            return true;
        }

        CountOverflow(groups);
        byte[] envelope = ClusterEnvelope.Write(publish, NodeId, signed: _options.Secret is not null, groups);
        long size = envelope.Length + _channelPrefix.Length + publish.Topic.Length;
        if (!TryReserve(size))
        {
            Metrics?.DroppedQueueFull();
            request?.NoResponders(publish.ReplyTo!.Value.ToArray()); // nothing will reach the other nodes
            return true;
        }

        byte[] channel = new byte[_channelPrefix.Length + publish.Topic.Length];
        _channelPrefix.CopyTo(channel, 0);
        publish.Topic.CopyTo(channel.AsSpan(_channelPrefix.Length));
        byte[]? replyTo = request is null ? null : publish.ReplyTo!.Value.ToArray();
        if (!_outbound.Writer.TryWrite(new Outbound(channel, envelope, size, request, replyTo)))
        {
            Interlocked.Add(ref _forwardBytes, -size); // stopping
        }

        return true;
    }

    /// <summary>
    /// A publication on a topic that keeps a history, in a cluster (spec cluster.md §9): not routed here first, but
    /// sent to Redis, whose script gives it its offset, keeps it in the topic's stream and publishes it to every
    /// node interested, this one included, so that every node delivers the topic in the same order with the same
    /// positions. <paramref name="publisher"/> is remembered (by sequence number) for its no-echo subscriptions.
    /// False when it could not be queued (the queue is full, or the node is stopping): nobody gets it; counted.
    /// </summary>
    /// <param name="groups">Where the queue groups are chosen (spec cluster.md §11), made at the first: a group chosen here is delivered here when the publication comes back.</param>
    public bool ForwardKept(in PublishFrame publish, TopicHistory history, IMessageSink publisher, ref GroupAssignments? groups)
    {
        if (!_running)
        {
            return false;
        }

        GroupAssignments chosen = groups ??= NewAssignments();

        _router.ChooseGroups(publish.Topic, publisher, chosen);
        CountOverflow(chosen);
        byte[] envelope = ClusterEnvelope.Write(publish, NodeId, signed: _options.Secret is not null, chosen);
        long size = envelope.Length + (2 * (_channelPrefix.Length + publish.Topic.Length + 2)) + _channelPrefix.Length + publish.Topic.Length;
        if (!TryReserve(size))
        {
            Metrics?.DroppedQueueFull();
            return false;
        }

        byte[] topic = publish.Topic.ToArray();
        byte[] channel = new byte[_channelPrefix.Length + topic.Length];
        _channelPrefix.CopyTo(channel, 0);
        topic.CopyTo(channel, _channelPrefix.Length);
        var kept = new KeptPublication(ClusterHistory.HashKey(_options.ChannelPrefix, topic), ClusterHistory.StreamKey(_options.ChannelPrefix, topic), history.Rule.MaxMessages, ClusterHistory.TimeToLiveMs(history.Rule), publisher);
        if (!_outbound.Writer.TryWrite(new Outbound(channel, envelope, size, null, null, kept)))
        {
            Interlocked.Add(ref _forwardBytes, -size); // stopping
            return false;
        }

        return true;
    }

    /// <summary>Counts the queue groups past what one envelope carries (spec cluster.md §11): chosen here instead.</summary>
    private void CountOverflow(GroupAssignments? groups)
    {
        if (groups is { Overflowed: > 0 } over)
        {
            Metrics?.GroupsOverflowed(over.Overflowed);
        }
    }

    /// <summary>
    /// What Redis holds of <paramref name="history"/>'s topic after <paramref name="since"/>, for a resume on this node
    /// (spec cluster.md §9): read in one script through the server this node publishes through.
    /// </summary>
    /// <exception cref="ClusterUnavailableException">Redis is unreachable or did not answer in time.</exception>
    public async Task<SharedRead> ReadAsync(TopicHistory history, Herald.Protocol.StreamPosition since)
    {
        IServer server = PublishServer() ?? throw new ClusterUnavailableException("Redis is unreachable.");
        byte[] topic = System.Text.Encoding.ASCII.GetBytes(history.Topic);
        try
        {
            RedisResult result = await server.ExecuteAsync(
                "EVAL",
                [ClusterHistory.ReadScript, 2, ClusterHistory.HashKey(_options.ChannelPrefix, topic), ClusterHistory.StreamKey(_options.ChannelPrefix, topic),
                 since.IsNone ? 0ul : since.Offset, history.Rule.MaxMessages, NewEpoch(), ClusterHistory.TimeToLiveMs(history.Rule)]).ConfigureAwait(false);
            return ClusterHistory.Parse(result);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            throw new ClusterUnavailableException(e.Message, e);
        }
    }

    /// <summary>A stream entry's envelope as its PUBLISH, checked as one from Redis's channels is (its signature with a secret); null when it is not one.</summary>
    public PublishFrame? DecodeKept(byte[] envelope) => DecodeKept(envelope, groups: null);

    /// <summary>As <see cref="DecodeKept(byte[])"/>, and loads <paramref name="groups"/> with where its origin gave its queue groups.</summary>
    private PublishFrame? DecodeKept(byte[] envelope, GroupAssignments? groups)
    {
        EnvelopeSigner? signer = _options.Secret is { } secret ? new EnvelopeSigner(secret) : null;
        try
        {
            if (!ClusterEnvelope.TryRead(envelope, signer, out ulong origin, out _, out ReadOnlyMemory<byte> assignments, out ReadOnlyMemory<byte> body))
            {
                return null;
            }

            groups?.Apply(origin, assignments);
            return ClusterEnvelope.ReadPublish(body);
        }
        catch (ProtocolException)
        {
            return null;
        }
        finally
        {
            signer?.Dispose();
        }
    }

    /// <summary>The history rules as one line, the same on every node that has the same rules (spec cluster.md §9).</summary>
    private static string RulesOf(HistoryStore? history) => history is null ? "" : string.Join(';', history.Options.Topics.Select(r =>
        string.Create(System.Globalization.CultureInfo.InvariantCulture, $"{r.Pattern} {r.MaxMessages} {r.MaxAge:c}")));

    /// <summary>A fresh epoch for a topic Redis has none for: 16 lowercase hex digits, random.</summary>
    private static string NewEpoch() => Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(8));

    /// <summary>
    /// Counts <paramref name="size"/> bytes into the forward queue unless that would pass the limit: the count
    /// never goes over it, not even for a moment (an add-then-undo would show a reader more than is held).
    /// </summary>
    private bool TryReserve(long size)
    {
        long limit = _options.MaxForwardQueueBytes;
        long held = Interlocked.Read(ref _forwardBytes);
        while (held + size <= limit)
        {
            long seen = Interlocked.CompareExchange(ref _forwardBytes, held + size, held);
            if (seen == held)
            {
                return true;
            }

            held = seen;
        }

        return false;
    }

    private async Task WriteLoopAsync()
    {
        ChannelReader<Outbound> outbound = _outbound.Reader;
        while (await outbound.WaitToReadAsync().ConfigureAwait(false))
        {
            while (outbound.TryRead(out Outbound item))
            {
                SendParked();
                if (item.Envelope.Length == 0)
                {
                    continue; // the nudge of a restored connection: the parked ones went above
                }

                if (item.Kept is not null && (_parked.Count > 0 || PublishServer() is null))
                {
                    _parked.Enqueue(item); // a history topic's publication waits for Redis, in order, still counted in the queue's bytes
                    continue;
                }

                Interlocked.Add(ref _forwardBytes, -item.Size);
                Send(item);
            }
        }

        while (_parked.TryDequeue(out Outbound left))
        {
            Interlocked.Add(ref _forwardBytes, -left.Size); // stopping: what never reached Redis is gone with the node
            Metrics?.DroppedDisconnected();
        }
    }

    /// <summary>
    /// Sends the history publications that waited for Redis (spec cluster.md §9: recoverable, unlike the others, which
    /// are delivered here only), oldest first, while it is reachable. Caller: the writer.
    /// </summary>
    private void SendParked()
    {
        while (_parked.Count > 0 && PublishServer() is not null)
        {
            Outbound item = _parked.Dequeue();
            Interlocked.Add(ref _forwardBytes, -item.Size);
            Send(item);
        }
    }

    // Caller: the writer, one at a time, in queue order: the sequence numbers go to Redis in order.
    private void Send(Outbound item)
    {
        if (PublishServer() is not { } server)
        {
            Metrics?.DroppedDisconnected();
            item.Request?.NoResponders(item.ReplyTo!);
            return;
        }

        ClusterEnvelope.Stamp(item.Envelope, ++_sequence);
        _signer?.Sign(item.Envelope);
        try
        {
            if (item.Kept is { } kept)
            {
                _keptOrigins.Put(_sequence, kept.Publisher);
                server.Execute("EVAL", [ClusterHistory.PublishScript, 2, kept.Hash, kept.Stream, item.Channel, item.Envelope, NewEpoch(), kept.MaxMessages, kept.TimeToLiveMs], CommandFlags.FireAndForget);
                Metrics?.SentOne();
                return;
            }

            server.Execute("PUBLISH", [item.Channel, item.Envelope], CommandFlags.FireAndForget);
            Metrics?.SentOne();
            if (item.Request is not null)
            {
                _ = AnswerAsync(item); // a request nobody here took: does another node's interest cover it?
            }
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            Metrics?.DroppedDisconnected();
            item.Request?.NoResponders(item.ReplyTo!);
        }
    }

    /// <summary>
    /// The one server this node PUBLISHes through, in order (spec cluster.md §1): on Redis Cluster the master of
    /// the prefix's hash slot, which carries the publications to every shard in the order sent; on one Redis,
    /// that Redis. Found again after a failure or a topology change; null while unreachable. Caller: the writer.
    /// </summary>
    private IServer? PublishServer()
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
            EndPoint? endpoint = _redis.GetDatabase().IdentifyEndpoint(_options.ChannelPrefix, CommandFlags.DemandMaster);
            _publishVia = endpoint is null ? null : _redis.GetServer(endpoint);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _publishVia = null;
        }

        return _publishVia is { IsConnected: true } found ? found : null;
    }

    /// <summary>
    /// Tells the requester "no responders" unless another node's Redis subscriptions cover the topic (the covers
    /// every node keeps in Redis before it confirms a subscription, spec cluster.md §4). PUBLISH's receiver count
    /// cannot say it: on Redis Cluster it counts one shard's subscribers only.
    /// </summary>
    private async Task AnswerAsync(Outbound item)
    {
        bool covered;
        try
        {
            covered = await Nodes.OthersCoverAsync(_redis!.GetDatabase(), item.Channel.AsMemory(_channelPrefix.Length)).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            covered = false; // unreachable: the publication did not reach anyone either
        }

        if (!covered)
        {
            item.Request!.NoResponders(item.ReplyTo!);
        }
    }

    private readonly record struct InterestChange(string? Pattern, bool Added)
    {
        public static InterestChange Resync => new(null, false);
    }

    private readonly record struct Outbound(byte[] Channel, byte[] Envelope, long Size, INoResponders? Request, byte[]? ReplyTo, KeptPublication? Kept = null);

    /// <summary>A history topic's publication (spec cluster.md §9): its keys in Redis, its rule's bounds, and who published it (no-echo).</summary>
    private sealed record KeptPublication(RedisKey Hash, RedisKey Stream, int MaxMessages, long TimeToLiveMs, IMessageSink Publisher);

    private sealed record Handover(CoverKey Key, Dictionary<ulong, ulong> LastDelivered);

    /// <summary>One Redis subscription of this node and its reader.</summary>
    private sealed class Inbound(CoverKey key, ChannelMessageQueue queue)
    {
        public CoverKey Key { get; } = key;

        public ChannelMessageQueue Queue { get; } = queue;

        public Task Reader { get; set; } = Task.CompletedTask;

        public CancellationTokenSource Stop { get; } = new();

        /// <summary>Per origin, the last sequence number this subscription delivered. The reader's; read by the worker once the reader ended.</summary>
        public Dictionary<ulong, ulong> LastDelivered { get; } = [];

        /// <summary>Checks envelopes' tags when the cluster has a secret. The reader's.</summary>
        public EnvelopeSigner? Signer { get; init; }

        /// <summary>Where each envelope's origin gave its queue groups (spec cluster.md §11). The reader's.</summary>
        public required GroupAssignments Groups { get; init; }

        /// <summary>What routing a traced publication did, for its span (made at the first). The reader's.</summary>
        public FanoutTally? Tally { get; set; }

        /// <summary>Copies to skip after a change of subscriptions; null once none is left. The reader's.</summary>
        public List<Handover>? Skip { get; set; }
    }
}

/// <summary>
/// Who published this node's last history publications, by sequence number (spec cluster.md §9): they come back from
/// Redis to be delivered here too, and a publisher's no-echo subscriptions must skip them. A fixed ring: an entry is
/// overwritten 4,096 publications later, so a publication that comes back that late (or not at all: no subscriber
/// here) costs nothing but a no-echo that no longer knows its publisher.
/// </summary>
internal sealed class KeptOrigins
{
    private const int Size = 4096;
    private readonly (ulong Sequence, IMessageSink? Sink)[] _ring = new (ulong, IMessageSink?)[Size];
    private readonly Lock _gate = new();

    public void Put(ulong sequence, IMessageSink sink)
    {
        lock (_gate)
        {
            _ring[(int)(sequence % Size)] = (sequence, sink);
        }
    }

    public IMessageSink? Take(ulong sequence)
    {
        lock (_gate)
        {
            ref (ulong Sequence, IMessageSink? Sink) slot = ref _ring[(int)(sequence % Size)];
            if (slot.Sequence != sequence)
            {
                return null;
            }

            IMessageSink? sink = slot.Sink;
            slot = default;
            return sink;
        }
    }
}
