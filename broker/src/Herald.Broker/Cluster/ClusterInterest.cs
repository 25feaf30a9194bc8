using System.Threading.Channels;
using Herald.Broker.Engines;
using Herald.Broker.Routing;
using Herald.Broker.Telemetry;
using Microsoft.Extensions.Logging;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// <b>Interest</b> (spec cluster.md §2, §4): which Redis channels and globs this node subscribes to, from the patterns its
/// clients hold. Patterns gained or lost are queued by the router (under its lock) and applied by one worker task: the
/// <see cref="InterestCover"/> gives a prefix-free set of Redis channels and globs, so Redis sends this node each
/// publication at most once, on one subscription. A change of that set (a glob that now covers an exact channel, or
/// the reverse) is made without a gap or a duplicate: the new subscriptions are confirmed by Redis first, then the old
/// ones unsubscribed and their queues drained, and only then are the new queues read (by <see cref="ClusterInbound"/>),
/// each skipping what an old queue already delivered (per origin, every sequence number up to the last it delivered, on
/// the topics it covered: the copies Redis sent on both while both were subscribed). <see cref="WhenSettledAsync"/>
/// completes once every change so far is in Redis, and every queue group member change is written and announced: a
/// client's PING or long-poll subscribe waits for it, so its subscription is live on every node when it is told so.
/// With several shards (spec cluster.md §13) the cover is split: an exact key is subscribed on its topic's shard only, a
/// prefix key on every shard (what is left on each is prefix-free too); each shard's change is made as above, all at
/// once, and a change is settled once every shard has made it (or failed: a shard unreachable fails fast, and is made
/// again when it is back).
/// </summary>
internal sealed class ClusterInterest : ISharedInterest, IInterestListener
{
    private readonly ClusterShards _shards;
    private readonly ClusterOptions _options;
    private readonly ClusterNodes _nodes;
    private readonly ClusterGroups _groups;
    private readonly ClusterInbound _in;
    private readonly ILogger _log;
    private readonly ShardLossNotices _losses;
    private readonly ClusterMetrics _metrics;
    private readonly Channel<InterestChange> _changes = Channel.CreateUnbounded<InterestChange>(new UnboundedChannelOptions { SingleReader = true });
    private readonly SettleCounter _settle = new();

    // Owned by the worker.
    private readonly InterestCover _cover;
    private readonly ShardSubscriptions[] _perShard;

    private volatile bool _running;
    private Task _worker = Task.CompletedTask;
    private CancellationToken _stop;

    public ClusterInterest(ClusterShards shards, ClusterNodes nodes, ClusterGroups groups, ClusterInbound inbound, ILogger log, ShardLossNotices losses, ClusterMetrics metrics)
    {
        _losses = losses;
        _metrics = metrics;
        _shards = shards;
        _options = shards.First.Options;
        _perShard = [.. shards.All.Select(shard => new ShardSubscriptions(shard))];
        _nodes = nodes;
        _groups = groups;
        _in = inbound;
        _log = log;
        _cover = new InterestCover(_options.MaxRedisSubscriptionsPerInbox);
    }

    /// <summary>Redis channels and globs this node subscribes to now, on every shard.</summary>
    public int RedisSubscriptions => _perShard.Sum(shard => shard.Readers.Length);

    /// <summary>Redis channels and globs this node subscribes to now on <paramref name="shard"/>.</summary>
    public int RedisSubscriptionsOn(int shard) => _perShard[shard].Readers.Length;

    /// <summary>What this node subscribes to in Redis now, as channel and glob names, shard after shard (monitoring).</summary>
    public IReadOnlyList<string> Covering => [.. _perShard.SelectMany(shard => shard.Readers.Select(inbound => inbound.Key.RedisName(shard.Shard.Prefix)))];

    /// <summary>
    /// Publications received from Redis and not yet routed here, over every subscription: this node's lag behind
    /// the others (StackExchange.Redis queues what it reads; a node short of CPU shows it here first). Counted
    /// when asked (monitoring), never on the message path.
    /// </summary>
    public long InboundQueued => _perShard.Sum(shard => InboundQueuedOn(shard.Shard.Index));

    /// <summary>Publications received from <paramref name="shard"/> and not yet routed here: this node's lag on that shard (monitoring).</summary>
    public long InboundQueuedOn(int shard)
    {
        long queued = 0;
        foreach (RedisSubscription inbound in _perShard[shard].Readers)
        {
            if (inbound.Queue.TryGetCount(out int count))
            {
                queued += count;
            }

            queued += inbound.AheadCount;
        }

        return queued;
    }

    /// <summary>
    /// Origins the subscriptions remember the last sequence of, together (bounded: <see cref="ClusterInbound.MaxOriginsKept"/> each, past that only
    /// members). Read when quiet (tests).
    /// </summary>
    internal int OriginsRemembered => _perShard.Sum(shard => shard.Inbound.Values.Sum(inbound => inbound.LastDelivered.Count));

    /// <summary>Pattern changes queued and not yet in Redis.</summary>
    public long PendingInterest => _settle.Pending;

    public bool IsSettled => _settle.IsSettled && _groups.IsSettled;

    /// <summary>
    /// Starts the worker (the router's patterns so far are queued by <see cref="TopicRouter.Listen"/> next); it ends with <paramref name="stop"/>.
    /// </summary>
    public void Start(CancellationToken stop)
    {
        _stop = stop;
        _running = true;
        _worker = Task.Run(InterestLoopAsync, CancellationToken.None);
    }

    /// <summary>
    /// <paramref name="shard"/> is back: subscriptions that failed meanwhile are made again there; with <paramref name="tell"/>
    /// (its subscription connection was lost), the subscribers it carries are then told they may have lost messages.
    /// </summary>
    public void Resync(ClusterConnection shard, bool tell) => _changes.Writer.TryWrite(InterestChange.Resync(shard.Index, tell));

    /// <summary>Takes no more changes; the worker ends when the node's stop token is cancelled.</summary>
    public void Close()
    {
        _running = false;
        _changes.Writer.TryComplete();
    }

    public Task Worker => _worker;

    /// <summary>Lets every waiter go (stopping: nothing will settle any more).</summary>
    public void ReleaseAll() => _settle.ReleaseAll();

    // ---- Called by the router under its write lock: record only ----

    public void PatternAdded(string pattern)
    {
        _settle.Requested();
        _changes.Writer.TryWrite(new InterestChange(pattern, Added: true));
    }

    public void PatternRemoved(string pattern)
    {
        _settle.Requested();
        _changes.Writer.TryWrite(new InterestChange(pattern, Added: false));
    }

    public void MemberAdded(Subscription member) => _groups.MemberAdded(member);

    public void MemberRemoved(Subscription member) => _groups.MemberRemoved(member);

    /// <summary>
    /// Completes when every pattern change queued before this call is in Redis (or failed and was logged: Redis
    /// unreachable), and every queue group member change is written and announced (spec cluster.md §11).
    /// </summary>
    public Task WhenSettledAsync()
    {
        Task groups = _running ? _groups.WhenSettledAsync() : Task.CompletedTask;
        Task interest = WhenInterestSettledAsync();
        return groups.IsCompleted ? interest : interest.IsCompleted ? groups : Task.WhenAll(interest, groups);
    }

    private Task WhenInterestSettledAsync() => _running ? _settle.WhenSettledAsync() : Task.CompletedTask;

    private async Task InterestLoopAsync()
    {
        ChannelReader<InterestChange> changes = _changes.Reader;
        try
        {
            var tell = new List<ShardSubscriptions>();
            while (await changes.WaitToReadAsync(_stop).ConfigureAwait(false))
            {
                long taken = 0;
                while (changes.TryRead(out InterestChange change))
                {
                    if (change.Pattern is null)
                    {
                        _perShard[change.Shard].CoverWritten = false; // resync: the pass below makes what is missing, and writes the cover whole (Redis may be empty)
                        if (change.Added && !tell.Contains(_perShard[change.Shard]))
                        {
                            tell.Add(_perShard[change.Shard]);
                        }

                        continue;
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

                HashSet<CoverKey> cover = _options.ReceiveAll ? _cover.All() : _cover.Compute();
                await Task.WhenAll(_perShard.Select(shard => ApplyOnAsync(shard, cover))).ConfigureAwait(false);
                _settle.Applied(taken);
                foreach (ShardSubscriptions shard in tell)
                {
                    _losses.Tell(shard.Shard); // its subscriptions made again (or failed: it is gone again, and told again when back)
                }

                tell.Clear();
            }
        }
        catch (OperationCanceledException)
        {
            // Stopping.
        }
    }

    /// <summary>
    /// The part of the node's <paramref name="cover"/> that <paramref name="shard"/> holds (spec cluster.md §13): the exact
    /// keys of the topics that live there, and every prefix key, made there (<see cref="ApplyAsync"/>). A failure is
    /// logged, never thrown: the other shards' changes go on. Caller: the interest worker.
    /// </summary>
    private async Task ApplyOnAsync(ShardSubscriptions shard, HashSet<CoverKey> cover)
    {
        try
        {
            await ApplyAsync(shard, _shards.Count == 1 ? cover : [.. cover.Where(key => key.IsPrefix || _shards.For(key.Literal) == shard.Shard)]).ConfigureAwait(false);
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            _log.ClusterInterestFailed(e);
        }
    }

    /// <summary>
    /// Makes <paramref name="shard"/> hold exactly <paramref name="cover"/>, without a gap or a duplicate (see the remarks). Caller: the interest worker.
    /// </summary>
    private async Task ApplyAsync(ShardSubscriptions shard, HashSet<CoverKey> cover)
    {
        Dictionary<CoverKey, RedisSubscription> current = shard.Inbound;
        List<CoverKey> added = [.. cover.Where(key => !current.ContainsKey(key))];
        List<CoverKey> removed = [.. current.Keys.Where(key => !cover.Contains(key))];
        if (added.Count == 0 && removed.Count == 0 && shard.CoverWritten)
        {
            return;
        }

        // 1. The new subscriptions, confirmed by Redis; not read yet. (All at once: one round trip, not one each.)
        ChannelMessageQueue?[] queues = await Task.WhenAll(added.Select(key => SubscribeAsync(shard.Shard, key))).ConfigureAwait(false);
        var fresh = new List<RedisSubscription>(added.Count);
        for (int i = 0; i < added.Count; i++)
        {
            if (queues[i] is { } queue)
            {
                fresh.Add(new RedisSubscription(added[i], queue)
                {
                    Shard = shard.Shard,
                    Signer = _options.Secret is { } secret ? new EnvelopeSigner(secret) : null,
                    Groups = new GroupAssignments(_shards.NodeId),
                });
            }
        }

        // 2. The old ones unsubscribed and drained: what each delivered is known to the last sequence number.
        var old = new List<RedisSubscription>(removed.Count);
        foreach (CoverKey key in removed)
        {
            old.Add(current[key]);
            current.Remove(key);
        }

        await Task.WhenAll(old.Select(EndAsync)).ConfigureAwait(false);
        List<RedisSubscription> delivered = [.. old.Where(inbound => inbound.LastDelivered.Count > 0)];

        // 3. The new ones read, skipping the copies an old one delivered.
        foreach (RedisSubscription inbound in fresh)
        {
            List<Handover>? handover = null;
            foreach (RedisSubscription done in delivered)
            {
                if (done.Key.Covers(inbound.Key) || inbound.Key.Covers(done.Key))
                {
                    (handover ??= []).Add(new Handover(done.Key, new Dictionary<ulong, ulong>(done.LastDelivered)));
                }
            }

            inbound.Skip = handover;
            current[inbound.Key] = inbound;
            inbound.Reader = Task.Run(() => _in.ReadLoopAsync(inbound, _stop));
        }

        shard.Readers = [.. current.Values];
        try
        {
            // Before the change is confirmed to anyone. What was not subscribed (Redis unreachable) is left out, and
            // written at the resync that makes it.
            await _nodes.PublishCoverAsync(shard.Shard, current.Keys, fresh.Select(inbound => inbound.Key), removed, whole: !shard.CoverWritten).ConfigureAwait(false);
            shard.CoverWritten = true;
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            shard.CoverWritten = false; // what Redis holds of it is unknown: written whole next time
            _log.ClusterSubscribeFailed(shard.Shard.Prefix + "covers", e.Message);
        }
    }

    /// <summary>Unsubscribes one subscription and waits until its reader has routed everything its queue held.</summary>
    private async Task EndAsync(RedisSubscription inbound)
    {
        try
        {
            await inbound.Queue.UnsubscribeAsync().ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _log.ClusterSubscribeFailed(inbound.Key.RedisName(inbound.Shard.Prefix), e.Message); // gone locally; Redis drops it with the connection
        }

        if (await Task.WhenAny(inbound.Reader, Task.Delay(TimeSpan.FromSeconds(5), _stop)).ConfigureAwait(false) != inbound.Reader)
        {
            inbound.Stop.Cancel(); // its queue was not completed (the unsubscribe failed): end the reader here
            await inbound.Reader.ConfigureAwait(false);
        }

        inbound.Stop.Dispose();
        inbound.Signer?.Dispose();
    }

    private async Task<ChannelMessageQueue?> SubscribeAsync(ClusterConnection shard, CoverKey key)
    {
        string name = key.RedisName(shard.Prefix);
        RedisChannel channel = key.IsPrefix ? RedisChannel.Pattern(name) : RedisChannel.Literal(name);
        try
        {
            return await shard.Subscriber.SubscribeAsync(channel).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Not made (Redis unreachable): forget whatever the client registered, and make it again at the next resync.
            _log.ClusterSubscribeFailed(name, e.Message);
            _metrics.SubscribeFailed(shard.Index);
            try
            {
                await shard.Subscriber.UnsubscribeAsync(channel, handler: null, CommandFlags.FireAndForget).ConfigureAwait(false);
            }
            catch (Exception again) when (again is RedisException or TimeoutException)
            {
                // Unreachable still: it is gone locally all the same.
            }

            return null;
        }
    }

    /// <summary>A pattern added or removed; or, without a pattern, a shard to resync (<see cref="Added"/>: and to tell of its loss).</summary>
    private readonly record struct InterestChange(string? Pattern, bool Added, int Shard = 0)
    {
        public static InterestChange Resync(int shard, bool tell) => new(null, tell, shard);
    }

    /// <summary>What this node subscribes to on one shard: the worker's, but <see cref="Readers"/> (any thread).</summary>
    private sealed class ShardSubscriptions(ClusterConnection shard)
    {
        public ClusterConnection Shard { get; } = shard;

        public Dictionary<CoverKey, RedisSubscription> Inbound { get; } = [];

        /// <summary>What <see cref="Inbound"/> holds, for readers on other threads (monitoring).</summary>
        public RedisSubscription[] Readers { get => _readers; set => _readers = value; }

        private volatile RedisSubscription[] _readers = [];

        /// <summary>False until this node's cover on the shard is in Redis whole (again, after a resync).</summary>
        public bool CoverWritten { get; set; }
    }
}
