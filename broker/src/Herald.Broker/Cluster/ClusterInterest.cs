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
/// </summary>
internal sealed class ClusterInterest : ISharedInterest, IInterestListener
{
    private readonly ClusterConnection _connection;
    private readonly ClusterOptions _options;
    private readonly ClusterNodes _nodes;
    private readonly ClusterGroups _groups;
    private readonly ClusterInbound _in;
    private readonly ILogger _log;
    private readonly Channel<InterestChange> _changes = Channel.CreateUnbounded<InterestChange>(new UnboundedChannelOptions { SingleReader = true });
    private readonly SettleCounter _settle = new();

    // Owned by the worker.
    private readonly InterestCover _cover;
    private readonly Dictionary<CoverKey, RedisSubscription> _inbound = [];

    private volatile RedisSubscription[] _readers = []; // what _inbound holds, for readers on other threads (monitoring)
    private volatile bool _running;
    private bool _coverWritten; // the interest worker's: false until this node's cover is in Redis whole (again, after a resync)
    private Task _worker = Task.CompletedTask;
    private CancellationToken _stop;

    public ClusterInterest(ClusterConnection connection, ClusterNodes nodes, ClusterGroups groups, ClusterInbound inbound, ILogger log)
    {
        _connection = connection;
        _options = connection.Options;
        _nodes = nodes;
        _groups = groups;
        _in = inbound;
        _log = log;
        _cover = new InterestCover(_options.MaxRedisSubscriptionsPerInbox);
    }

    /// <summary>Redis channels and globs this node subscribes to now.</summary>
    public int RedisSubscriptions => _readers.Length;

    /// <summary>What this node subscribes to in Redis now, as channel and glob names (monitoring).</summary>
    public IReadOnlyList<string> Covering => [.. _readers.Select(inbound => inbound.Key.RedisName(_options.ChannelPrefix))];

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
            foreach (RedisSubscription inbound in _readers)
            {
                if (inbound.Queue.TryGetCount(out int count))
                {
                    queued += count;
                }
            }

            return queued;
        }
    }

    /// <summary>
    /// Origins the subscriptions remember the last sequence of, together (bounded: <see cref="ClusterInbound.MaxOriginsKept"/> each, past that only
    /// members). Read when quiet (tests).
    /// </summary>
    internal int OriginsRemembered => _inbound.Values.Sum(inbound => inbound.LastDelivered.Count);

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

    /// <summary>Redis is back: subscriptions that failed meanwhile are made again.</summary>
    public void Resync() => _changes.Writer.TryWrite(InterestChange.Resync);

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
            while (await changes.WaitToReadAsync(_stop).ConfigureAwait(false))
            {
                long taken = 0;
                while (changes.TryRead(out InterestChange change))
                {
                    if (change.Pattern is null)
                    {
                        _coverWritten = false; // resync: the pass below makes what is missing, and writes the cover whole (Redis may be empty)
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

                try
                {
                    await ApplyAsync(_options.ReceiveAll ? _cover.All() : _cover.Compute()).ConfigureAwait(false);
                }
                catch (Exception e) when (e is not OperationCanceledException)
                {
                    _log.ClusterInterestFailed(e);
                }

                _settle.Applied(taken);
            }
        }
        catch (OperationCanceledException)
        {
            // Stopping.
        }
    }

    /// <summary>
    /// Makes Redis hold exactly <paramref name="cover"/>, without a gap or a duplicate (see the remarks). Caller: the interest worker.
    /// </summary>
    private async Task ApplyAsync(HashSet<CoverKey> cover)
    {
        List<CoverKey> added = [.. cover.Where(key => !_inbound.ContainsKey(key))];
        List<CoverKey> removed = [.. _inbound.Keys.Where(key => !cover.Contains(key))];
        if (added.Count == 0 && removed.Count == 0 && _coverWritten)
        {
            return;
        }

        // 1. The new subscriptions, confirmed by Redis; not read yet. (All at once: one round trip, not one each.)
        ChannelMessageQueue?[] queues = await Task.WhenAll(added.Select(SubscribeAsync)).ConfigureAwait(false);
        var fresh = new List<RedisSubscription>(added.Count);
        for (int i = 0; i < added.Count; i++)
        {
            if (queues[i] is { } queue)
            {
                fresh.Add(new RedisSubscription(added[i], queue) { Signer = _options.Secret is { } secret ? new EnvelopeSigner(secret) : null, Groups = new GroupAssignments(_connection.NodeId) });
            }
        }

        // 2. The old ones unsubscribed and drained: what each delivered is known to the last sequence number.
        var old = new List<RedisSubscription>(removed.Count);
        foreach (CoverKey key in removed)
        {
            old.Add(_inbound[key]);
            _inbound.Remove(key);
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
            _inbound[inbound.Key] = inbound;
            inbound.Reader = Task.Run(() => _in.ReadLoopAsync(inbound, _stop));
        }

        _readers = [.. _inbound.Values];
        try
        {
            // Before the change is confirmed to anyone. What was not subscribed (Redis unreachable) is left out, and
            // written at the resync that makes it.
            await _nodes.PublishCoverAsync(_connection.Database, _inbound.Keys, fresh.Select(inbound => inbound.Key), removed, whole: !_coverWritten).ConfigureAwait(false);
            _coverWritten = true;
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _coverWritten = false; // what Redis holds of it is unknown: written whole next time
            _log.ClusterSubscribeFailed(_options.ChannelPrefix + "covers", e.Message);
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
            _log.ClusterSubscribeFailed(inbound.Key.RedisName(_options.ChannelPrefix), e.Message); // gone locally; Redis drops it with the connection
        }

        if (await Task.WhenAny(inbound.Reader, Task.Delay(TimeSpan.FromSeconds(5), _stop)).ConfigureAwait(false) != inbound.Reader)
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
            return await _connection.Subscriber.SubscribeAsync(channel).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Not made (Redis unreachable): forget whatever the client registered, and make it again at the next resync.
            _log.ClusterSubscribeFailed(name, e.Message);
            try
            {
                await _connection.Subscriber.UnsubscribeAsync(channel, handler: null, CommandFlags.FireAndForget).ConfigureAwait(false);
            }
            catch (Exception again) when (again is RedisException or TimeoutException)
            {
                // Unreachable still: it is gone locally all the same.
            }

            return null;
        }
    }

    private readonly record struct InterestChange(string? Pattern, bool Added)
    {
        public static InterestChange Resync => new(null, false);
    }
}
