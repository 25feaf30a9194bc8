using System.Collections.Concurrent;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Routing;

/// <summary>
/// The subscription index: which subscriptions a topic matches (the trie, its match cache and the cache's own trie
/// of cached topics), kept as subscriptions come and go; what is done with a match is <see cref="Fanout"/>'s.
/// </summary>
/// <remarks>
/// <para>
/// Read-optimised, after nats-server's sublist. Subscriptions live in a trie of dot-separated tokens
/// with '*' and '>' branches, changed under a write lock. Publishes look the topic up in a match cache
/// (a concurrent dictionary from topic to an immutable array of subscriptions) without taking any lock;
/// a miss walks the trie under the read lock and fills the cache.
/// </para>
/// <para>
/// A subscription change costs what its pattern matches, never what others cached. The cache
/// has a second face, an index of the cached topics' tokens (<see cref="CachedTopicIndex"/>: a trie read from the
/// first token and one per token count read from the last, each node counting the topics below it), and a change
/// removes only the entries its pattern matches: a literal pattern its one entry; a wildcard walks whichever trie its
/// literal tokens narrow more (a literal token follows one branch, '*' every branch of its level, '>' the subtree),
/// so a pattern whose first or last literal tokens no cached topic has touches nothing (<c>device.*.alarm</c> beside
/// 65,536 cached <c>device.N.status</c>). Where the walk would still pass <see cref="MaxInvalidationVisits"/> cached
/// topics (a pattern matching that many, or one whose literal tokens on both sides are each common but never
/// together, <c>a.*.d</c> beside many <c>a.N.b</c> and <c>c.N.d</c>), it stops and the whole cache is dropped
/// instead, in O(1): the change stays bounded by a constant, and every publisher pays at most one miss per topic to
/// refill it (counted in <c>herald.router.cache.evictions</c>).
/// Measured (<c>broker/bench/Herald.Benchmarks</c>, <c>TopicRouterBenchmarks</c>): see README's Performance section.
/// The alternatives were weighed: a generation counter makes every change a miss for every publisher
/// (a miss allocates and takes the read lock, so churn would cost all publishers), and a small cache as
/// NATS's 1,024 entries makes publishers of many distinct topics miss all the time.
/// </para>
/// <para>
/// The cache holds at most <c>cacheCapacity</c> topics (65,536): a fill that finds it full first evicts
/// a quarter of the entries (in hash order, that is at random, as nats-server's sweep), so a flood of
/// distinct topics costs its publisher, amortised O(1) per miss. Fills run under the read lock and
/// <see cref="_fill"/>; changes under the write lock; so the cache and its trie always agree, and no
/// change can be lost between computing a result and caching it. Cached publishes never wait for a
/// change: the write lock is held for O(pattern + <see cref="MaxInvalidationVisits"/>).
/// </para>
/// <para>
/// Each subscription sits in exactly one trie node (its pattern's), and a topic reaches a node by at most
/// one path, so a subscription appears at most once in a match result even when several patterns of the
/// same connection overlap: each matching subscription gets the message exactly once.
/// </para>
/// <para>
/// Locks, in short: <see cref="_gate"/>'s write lock for every change (trie, counts, cache invalidation, the interest
/// listener's calls); its read lock for a miss (trie walk and fill, which also holds <see cref="_fill"/>) and the
/// snapshot; no lock for a cached match. There is no generation counter: a change removes exactly the cache entries it
/// makes stale (or all of them), under the write lock, so a cached result is never stale when read.
/// </para>
/// </remarks>
internal sealed partial class SubscriptionIndex : IDisposable
{
    /// <summary>Default bound of the match cache, in topics.</summary>
    public const int DefaultCacheCapacity = 65_536;

    /// <summary>Cached topics a wildcard change may look at before it drops the whole cache instead (nats-server's whole cache is this size).</summary>
    public const int MaxInvalidationVisits = 1_024;

    private const int StackTopic = 512;

    private readonly ReaderWriterLockSlim _gate = new(LockRecursionPolicy.NoRecursion);
    private readonly Node _root = new();
    private readonly ConcurrentDictionary<string, Subscription[]> _cache = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<string, Subscription[]>.AlternateLookup<ReadOnlySpan<char>> _cacheBySpan;
    private int _subscriptionCount;
    private int _patternCount;
    private int _elsewhereCount;
    private readonly int _maxPatterns;

    // The cache's trie of topics: changed by fills (read lock and _fill) and by changes (write lock).
    private readonly Lock _fill = new();
    private readonly int _cacheCapacity;
    private readonly List<string> _matched = [];
    private CachedTopicIndex _cachedTopicIndex = new();
    private int _cachedTopics;
    private long _invalidationVisits;

    private readonly BrokerMetrics? _metrics;
    private IInterestListener? _interest;

    public SubscriptionIndex(BrokerMetrics? metrics = null, int maxPatterns = 0, int cacheCapacity = DefaultCacheCapacity)
    {
        _metrics = metrics;
        _maxPatterns = maxPatterns;
        _cacheCapacity = cacheCapacity;
        _cacheBySpan = _cache.GetAlternateLookup<ReadOnlySpan<char>>();
    }

    public void Dispose() => _gate.Dispose();

    /// <summary>
    /// From now on, tells <paramref name="listener"/> of every pattern that gains its first subscription or
    /// loses its last (under the write lock, in order); first it is told of every pattern subscribed now.
    /// One listener: the cluster engine, set once at start.
    /// </summary>
    public void Listen(IInterestListener listener)
    {
        _gate.EnterWriteLock();
        try
        {
            if (_interest is not null)
            {
                throw new InvalidOperationException("The router already has an interest listener.");
            }

            _interest = listener;
            foreach (Node node in AllNodes())
            {
                foreach (Subscription first in node.Subscriptions)
                {
                    listener.PatternAdded(first.Pattern); // every subscription of a node has its pattern
                    break;
                }

                foreach (Subscription subscription in node.Subscriptions)
                {
                    if (subscription.Group is not null)
                    {
                        listener.MemberAdded(subscription);
                    }
                }
            }
        }
        finally
        {
            _gate.ExitWriteLock();
        }
    }

    public int SubscriptionCount => Volatile.Read(ref _subscriptionCount);

    /// <summary>Cluster: whether any queue group has members on another node (<see cref="AddElsewhere"/>); when none has, a group is chosen among this node's members, as on one node.</summary>
    public bool HasMembersElsewhere => Volatile.Read(ref _elsewhereCount) > 0;

    /// <summary>Distinct patterns with at least one subscription (kept on subscribe/unsubscribe, for <c>MaxTopics</c> and the topics gauge).</summary>
    public int PatternCount => Volatile.Read(ref _patternCount);

    /// <summary>Topics in the match cache now.</summary>
    public int CachedTopics => Volatile.Read(ref _cachedTopics);

    /// <summary>
    /// Cached topics looked at by subscription changes so far: the router's work for them, which depends
    /// on what their patterns match and never exceeds <see cref="MaxInvalidationVisits"/> per change.
    /// </summary>
    public long InvalidationVisits => Interlocked.Read(ref _invalidationVisits);

    public void Add(Subscription subscription)
    {
        _gate.EnterWriteLock();
        try
        {
            if (_maxPatterns > 0 && _patternCount >= _maxPatterns && !HasSubscribers(subscription.Pattern))
            {
                throw new ProtocolException(ErrorCode.TooManyTopics, $"The broker holds its maximum of {_maxPatterns} distinct subscription patterns.");
            }

            Node node = _root;
            foreach (Range token in Tokens(subscription.Pattern))
            {
                node = node.GetOrAddChild(subscription.Pattern[token]);
            }

            if (node.Subscriptions.Count == 0)
            {
                _patternCount++;
                _interest?.PatternAdded(subscription.Pattern);
            }

            node.Subscriptions.Add(subscription);
            _subscriptionCount++;
            if (subscription.Group is not null)
            {
                _interest?.MemberAdded(subscription);
            }

            Invalidate(subscription.Pattern);
            _metrics?.SubscriptionChanged();
        }
        finally
        {
            _gate.ExitWriteLock();
        }
    }

    public bool Remove(Subscription subscription)
    {
        _gate.EnterWriteLock();
        try
        {
            if (!Remove(_root, subscription.Pattern, 0, subscription))
            {
                return false;
            }

            _subscriptionCount--;
            if (subscription.Group is not null)
            {
                _interest?.MemberRemoved(subscription);
            }

            Invalidate(subscription.Pattern);
            _metrics?.SubscriptionChanged();
            return true;
        }
        finally
        {
            _gate.ExitWriteLock();
        }
    }

    /// <summary>
    /// Cluster (spec cluster.md §11): adds an entry for a queue group's members on another node
    /// (<see cref="Subscription.Elsewhere"/>). It counts for no limit, interest or monitoring of this node; it only
    /// weighs in the choice of a member for this node's publications, and tells a receiving node that the group has
    /// members where a publication comes from. Its weight may change in place (<see cref="Subscription.Members"/>).
    /// </summary>
    public void AddElsewhere(Subscription members)
    {
        if (members.Node == 0 || members.Group is null)
        {
            throw new ArgumentException("Only a group's members on another node.", nameof(members));
        }

        _gate.EnterWriteLock();
        try
        {
            Node node = _root;
            foreach (Range token in Tokens(members.Pattern))
            {
                node = node.GetOrAddChild(members.Pattern[token]);
            }

            if ((node.Elsewhere ??= new HashSet<Subscription>(ReferenceEqualityComparer.Instance)).Add(members))
            {
                _elsewhereCount++;
            }

            Invalidate(members.Pattern);
        }
        finally
        {
            _gate.ExitWriteLock();
        }
    }

    /// <summary>Removes an entry <see cref="AddElsewhere"/> added; false if it was not there.</summary>
    public bool RemoveElsewhere(Subscription members)
    {
        _gate.EnterWriteLock();
        try
        {
            if (!Remove(_root, members.Pattern, 0, members))
            {
                return false;
            }

            _elsewhereCount--;
            Invalidate(members.Pattern);
            return true;
        }
        finally
        {
            _gate.ExitWriteLock();
        }
    }

    // Caller holds the write lock. Whether the pattern already has a subscription (so adding one makes no new pattern).
    private bool HasSubscribers(string pattern)
    {
        Node? node = _root;
        int start = 0;
        while (node is not null)
        {
            int end = pattern.IndexOf('.', start);
            if (end < 0)
            {
                end = pattern.Length;
            }

            node = node.GetChild(pattern.AsSpan(start, end - start));
            if (end == pattern.Length)
            {
                break;
            }

            start = end + 1;
        }

        return node is { Subscriptions.Count: > 0 };
    }

    // Caller holds the write lock.
    private bool Remove(Node node, string pattern, int start, Subscription subscription)
    {
        if (start > pattern.Length)
        {
            if (subscription.Node != 0)
            {
                return node.Elsewhere?.Remove(subscription) == true;
            }

            bool removed = node.Subscriptions.Remove(subscription);
            if (removed && node.Subscriptions.Count == 0)
            {
                _patternCount--;
                _interest?.PatternRemoved(subscription.Pattern);
            }

            return removed;
        }

        int end = pattern.IndexOf('.', start);
        if (end < 0)
        {
            end = pattern.Length;
        }

        Node? child = node.GetChild(pattern.AsSpan(start, end - start));
        if (child is null || !Remove(child, pattern, end + 1, subscription))
        {
            return false;
        }

        if (child.IsEmpty)
        {
            node.RemoveChild(pattern.AsSpan(start, end - start)); // prune, so churn does not leak nodes
        }

        return true;
    }

    private static IEnumerable<Range> Tokens(string pattern)
    {
        int start = 0;
        while (true)
        {
            int end = pattern.IndexOf('.', start);
            if (end < 0)
            {
                yield return start..pattern.Length;
                yield break;
            }

            yield return start..end;
            start = end + 1;
        }
    }

    /// <summary>Every node of the trie, depth first. Caller holds the read or write lock while it enumerates.</summary>
    private IEnumerable<Node> AllNodes()
    {
        var pending = new Stack<Node>();
        pending.Push(_root);
        while (pending.TryPop(out Node? node))
        {
            yield return node;
            foreach (Node child in node.Children?.Values ?? (IEnumerable<Node>)[])
            {
                pending.Push(child);
            }

            if (node.Star is { } star)
            {
                pending.Push(star);
            }

            if (node.Tail is { } tail)
            {
                pending.Push(tail);
            }
        }
    }

    /// <summary>
    /// This node's subscriptions whose pattern <paramref name="holds"/>
    /// says yes to: a walk of the whole trie under the read lock, for what is rare (a cluster shard back after an outage).
    /// </summary>
    public List<Subscription> Local(Func<string, bool> holds)
    {
        var found = new List<Subscription>();
        _gate.EnterReadLock();
        try
        {
            foreach (Node node in AllNodes())
            {
                foreach (Subscription first in node.Subscriptions)
                {
                    if (holds(first.Pattern)) // every subscription of a node has its pattern
                    {
                        found.AddRange(node.Subscriptions);
                    }

                    break;
                }
            }
        }
        finally
        {
            _gate.ExitReadLock();
        }

        return found;
    }

    /// <summary>
    /// Monitoring only (<c>/subsz</c>, the <c>herald.topics</c> gauge), never on the publish path: every
    /// pattern with at least one subscription and its number of subscriptions, at most <paramref name="max"/>
    /// of them (in no particular order), and in <paramref name="patterns"/> how many there are in all.
    /// Walks the trie under the read lock: O(patterns); publishes that hit the match cache are not held up.
    /// </summary>
    public IReadOnlyList<(string Pattern, int Subscribers)> Snapshot(int max, out int patterns)
    {
        var found = new List<(string, int)>(Math.Min(max, 1024));
        patterns = 0;
        _gate.EnterReadLock();
        try
        {
            foreach (Node node in AllNodes())
            {
                if (node.Subscriptions.Count > 0)
                {
                    patterns++;
                    if (found.Count < max)
                    {
                        foreach (Subscription first in node.Subscriptions)
                        {
                            found.Add((first.Pattern, node.Subscriptions.Count)); // every subscription of a node has its pattern
                            break;
                        }
                    }
                }
            }
        }
        finally
        {
            _gate.ExitReadLock();
        }

        return found;
    }

    /// <summary>A trie node. Mutated only under the write lock; read under the read lock.</summary>
    private sealed class Node
    {
        public Dictionary<string, Node>? Children { get; private set; }

        public Node? Star { get; private set; }

        public Node? Tail { get; private set; }

        public HashSet<Subscription> Subscriptions { get; } = new(ReferenceEqualityComparer.Instance);

        /// <summary>Cluster: queue groups' members on other nodes with this pattern (<see cref="AddElsewhere"/>); not subscriptions of this node.</summary>
        public HashSet<Subscription>? Elsewhere { get; set; }

        public bool IsEmpty => Subscriptions.Count == 0 && (Elsewhere is null || Elsewhere.Count == 0) && Star is null && Tail is null && (Children is null || Children.Count == 0);

        public Node GetOrAddChild(string token)
        {
            switch (token)
            {
                case "*":
                    return Star ??= new Node();
                case ">":
                    return Tail ??= new Node();
                default:
                    Children ??= new Dictionary<string, Node>(StringComparer.Ordinal);
                    if (!Children.TryGetValue(token, out Node? child))
                    {
                        child = new Node();
                        Children.Add(token, child);
                    }

                    return child;
            }
        }

        public Node? GetChild(ReadOnlySpan<char> token) => token switch
        {
            "*" => Star,
            ">" => Tail,
            _ => Children is not null && Children.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(token, out Node? child) ? child : null,
        };

        public void RemoveChild(ReadOnlySpan<char> token)
        {
            switch (token)
            {
                case "*":
                    Star = null;
                    break;
                case ">":
                    Tail = null;
                    break;
                default:
                    Children?.GetAlternateLookup<ReadOnlySpan<char>>().Remove(token);
                    break;
            }
        }
    }
}
