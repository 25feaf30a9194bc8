using System.Buffers;
using Herald.Broker.Delivery;
using Herald.Broker.Telemetry;

namespace Herald.Broker.Routing;

/// <summary>
/// The one topic router of the broker: every transport subscribes and publishes here. It puts together the
/// <see cref="SubscriptionIndex"/> (which subscriptions a topic matches: the trie, the match cache and its upkeep,
/// the queue groups' members elsewhere, the <c>/subsz</c> snapshot) and the <see cref="Fanout"/> (what a publication
/// becomes for each of them, and where it is queued), as nats-server keeps its sublist to matching and delivers elsewhere.
/// </summary>
/// <remarks>
/// Every member passes straight through to one of the two; the publish path costs one call more, which the JIT inlines.
/// Threading: subscription changes take the index's write lock; publishes read its cache without a lock (a miss takes
/// the read lock); the fan-out holds no lock of its own.
/// </remarks>
internal sealed class TopicRouter : IDisposable
{
    /// <summary>Default bound of the match cache, in topics.</summary>
    public const int DefaultCacheCapacity = SubscriptionIndex.DefaultCacheCapacity;

    /// <summary>Cached topics a wildcard change may look at before it drops the whole cache instead.</summary>
    public const int MaxInvalidationVisits = SubscriptionIndex.MaxInvalidationVisits;

    private readonly SubscriptionIndex _index;
    private readonly Fanout _fanout;

    public TopicRouter(BrokerMetrics? metrics = null, int maxPatterns = 0, int cacheCapacity = DefaultCacheCapacity)
    {
        _index = new SubscriptionIndex(metrics, maxPatterns, cacheCapacity);
        _fanout = new Fanout(_index, metrics);
    }

    public void Dispose() => _index.Dispose();

    /// <inheritdoc cref="SubscriptionIndex.Listen"/>
    public void Listen(IInterestListener listener) => _index.Listen(listener);

    /// <inheritdoc cref="SubscriptionIndex.SubscriptionCount"/>
    public int SubscriptionCount => _index.SubscriptionCount;

    /// <inheritdoc cref="SubscriptionIndex.HasMembersElsewhere"/>
    public bool HasMembersElsewhere => _index.HasMembersElsewhere;

    /// <inheritdoc cref="SubscriptionIndex.PatternCount"/>
    public int PatternCount => _index.PatternCount;

    /// <inheritdoc cref="Fanout.EncodedFrames"/>
    public long EncodedFrames => _fanout.EncodedFrames;

    /// <inheritdoc cref="SubscriptionIndex.CachedTopics"/>
    public int CachedTopics => _index.CachedTopics;

    /// <inheritdoc cref="SubscriptionIndex.InvalidationVisits"/>
    public long InvalidationVisits => _index.InvalidationVisits;

    /// <inheritdoc cref="SubscriptionIndex.Add"/>
    public void Add(Subscription subscription) => _index.Add(subscription);

    /// <inheritdoc cref="SubscriptionIndex.Remove(Subscription)"/>
    public bool Remove(Subscription subscription)
    {
        subscription.EndDelta();
        return _index.Remove(subscription);
    }

    /// <inheritdoc cref="SubscriptionIndex.AddElsewhere"/>
    public void AddElsewhere(Subscription members) => _index.AddElsewhere(members);

    /// <inheritdoc cref="SubscriptionIndex.RemoveElsewhere"/>
    public bool RemoveElsewhere(Subscription members) => _index.RemoveElsewhere(members);

    /// <inheritdoc cref="SubscriptionIndex.Match(in ReadOnlySequence{byte})"/>
    public Subscription[] Match(in ReadOnlySequence<byte> topic) => _index.Match(topic);

    /// <inheritdoc cref="SubscriptionIndex.Match(ReadOnlySpan{char})"/>
    public Subscription[] Match(ReadOnlySpan<char> topic) => _index.Match(topic);

    /// <summary>This node's subscriptions whose pattern <paramref name="holds"/> says yes to (rare: a walk of every pattern).</summary>
    public List<Subscription> Local(Func<string, bool> holds) => _index.Local(holds);

    /// <inheritdoc cref="SubscriptionIndex.Snapshot"/>
    public IReadOnlyList<(string Pattern, int Subscribers)> Snapshot(int max, out int patterns) => _index.Snapshot(max, out patterns);

    /// <inheritdoc cref="Fanout.Publish(in PublishContext)"/>
    public int Publish(in PublishContext context) => _fanout.Publish(in context);

    /// <inheritdoc cref="Fanout.Publish(in PublishContext, out MessageBuffer)"/>
    public int Publish(in PublishContext context, out MessageBuffer kept) => _fanout.Publish(in context, out kept);

    /// <inheritdoc cref="Fanout.ChooseGroups"/>
    public void ChooseGroups(in ReadOnlySequence<byte> topic, IMessageSink? origin, GroupAssignments groups) => _fanout.ChooseGroups(topic, origin, groups);
}
