using System.Collections.Concurrent;
using System.Diagnostics;
using System.Security.Cryptography;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.History;

/// <summary>
/// Every topic's history on this node (spec §13), in process memory: which topics keep one (the first rule of
/// <see cref="HistoryOptions.Topics"/> whose pattern matches), the histories themselves, and their shared bounds:
/// at most <see cref="HistoryOptions.MaxTopics"/> topics and <see cref="HistoryOptions.MaxBytes"/> bytes. When
/// either is reached, the least recently published topics give way (a CLOCK hand over the topics in creation order:
/// one published since the hand last passed is spared once), so one topic cannot take the others' room for long.
/// </summary>
/// <remarks>
/// A topic with no rule costs a publication one pattern test per rule (after a dictionary miss); a topic with a
/// history, one dictionary hit. Creating and evicting histories takes <c>_evictGate</c>: only a topic's first
/// publication or resume, and the eviction that makes room, ever do.
/// </remarks>
internal sealed class HistoryStore : IDisposable
{
    private readonly HistoryOptions _options;
    private readonly ConcurrentDictionary<string, TopicHistory> _topics = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<string, TopicHistory>.AlternateLookup<ReadOnlySpan<char>> _bySpan;
    private readonly Queue<TopicHistory> _clock = new(); // creation order; the eviction hand's round
    private readonly Lock _evictGate = new();
    private readonly Timer _sweeper;
    private long _bytes;
    private long _evictedTopics;
    private long _recovered;
    private long _notRecovered;

    public HistoryStore(HistoryOptions options)
    {
        _options = options;
        _bySpan = _topics.GetAlternateLookup<ReadOnlySpan<char>>();
        TimeSpan shortest = options.Topics.Min(rule => rule.MaxAge);
        TimeSpan period = TimeSpan.FromTicks(Math.Clamp(shortest.Ticks / 4, TimeSpan.TicksPerMillisecond * 100, TimeSpan.TicksPerSecond * 10));
        _sweeper = new Timer(_ => Sweep(), null, period, period);
    }

    public HistoryOptions Options => _options;

    /// <summary>
    /// Fed by the cluster (spec cluster.md §9): Redis gives every publication of a history topic its offset and epoch,
    /// and this store keeps, per topic, what this node routed, as a bridge for resumes. Set before any traffic.
    /// </summary>
    public bool Shared { get; set; }

    /// <summary>Bytes every history holds together (what <see cref="HistoryOptions.MaxBytes"/> bounds).</summary>
    public long Bytes => Interlocked.Read(ref _bytes);

    public int TopicCount => _topics.Count;

    /// <summary>Histories dropped whole to make room for another topic's.</summary>
    public long EvictedTopics => Interlocked.Read(ref _evictedTopics);

    public long Recovered => Interlocked.Read(ref _recovered);

    public long NotRecovered => Interlocked.Read(ref _notRecovered);

    internal bool OverBudget => Interlocked.Read(ref _bytes) > _options.MaxBytes;

    public void Dispose() => _sweeper.Dispose();

    /// <summary>The history of <paramref name="topic"/> (a valid topic name), created on first use; null when no rule covers it.</summary>
    public TopicHistory? Find(ReadOnlySpan<char> topic)
    {
        if (_bySpan.TryGetValue(topic, out TopicHistory? history))
        {
            return history;
        }

        return RuleFor(topic) is { } rule ? Create(topic.ToString(), rule) : null;
    }

    /// <summary>
    /// Routes one publication, through its topic's history when it keeps one (stamped with its position and kept,
    /// <see cref="TopicHistory.TryPublish"/>), else straight to the router: how every publication on this node is
    /// routed, a client's or another node's, so a history holds them all in the order this node delivered them.
    /// </summary>
    public int Publish(TopicRouter router, in PublishContext context, int maxFrame)
    {
        ref readonly PublishFrame publish = ref context.Publication;
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var topic = new TopicChars(publish.Topic, stack);
        while (!Shared && Find(topic.Span) is { } history)
        {
            if (history.TryPublish(router, in context, maxFrame, out int deliveries))
            {
                return deliveries;
            }
        }

        return router.Publish(in context);
    }

    /// <summary>
    /// Cluster (spec cluster.md §9): routes a publication Redis positioned through its topic's history here, or
    /// straight to the router (unstamped) when this node's rules keep none for it (the nodes' rules differ).
    /// </summary>
    /// <returns>The deliveries, or -2: a gap across a Redis outage to read back first (<see cref="TopicHistory.PublishAt"/>), nothing routed.</returns>
    public int PublishAt(TopicRouter router, in PublishContext context, ulong offset, string epoch, int maxFrame, long generation, bool repaired, out ulong gapAfter)
    {
        ref readonly PublishFrame publish = ref context.Publication;
        gapAfter = 0;
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var topic = new TopicChars(publish.Topic, stack);
        while (Find(topic.Span) is { } history)
        {
            int deliveries = history.PublishAt(router, in context, offset, epoch, maxFrame, generation, repaired, out gapAfter);
            if (deliveries != -1)
            {
                return deliveries;
            }
        }

        return router.Publish(in context); // a rule this node does not have: delivered, not kept
    }

    /// <summary>The history <paramref name="topic"/> holds now, without making one.</summary>
    public TopicHistory? FindExisting(string topic) => _topics.TryGetValue(topic, out TopicHistory? history) ? history : null;

    /// <summary>Counts a resume's outcome (<c>/varz</c>, metrics).</summary>
    public void Resumed(bool recovered) => Interlocked.Increment(ref recovered ? ref _recovered : ref _notRecovered);

    internal void Added(long bytes) => Interlocked.Add(ref _bytes, bytes);

    internal void Removed(long bytes) => Interlocked.Add(ref _bytes, -bytes);

    /// <summary>Over the byte budget: the hand empties the least recently published topics until it is met (their epochs stay; what they held is gone).</summary>
    internal void EvictForBudget()
    {
        lock (_evictGate)
        {
            for (int turns = 2 * _clock.Count; turns > 0 && OverBudget; turns--)
            {
                TopicHistory candidate = _clock.Dequeue();
                _clock.Enqueue(candidate);
                if (candidate.Referenced)
                {
                    candidate.Referenced = false;
                    continue;
                }

                candidate.Clear(retire: false);
            }
        }
    }

    private HistoryRule? RuleFor(ReadOnlySpan<char> topic)
    {
        foreach (HistoryRule rule in _options.Topics)
        {
            if (Topic.Matches(rule.Pattern, topic))
            {
                return rule;
            }
        }

        return null;
    }

    private TopicHistory Create(string topic, HistoryRule rule)
    {
        lock (_evictGate)
        {
            if (_topics.TryGetValue(topic, out TopicHistory? raced))
            {
                return raced;
            }

            while (_topics.Count >= _options.MaxTopics && _clock.Count > 0)
            {
                TopicHistory candidate = _clock.Dequeue();
                if (candidate.Referenced)
                {
                    candidate.Referenced = false;
                    _clock.Enqueue(candidate);
                    continue;
                }

                candidate.Clear(retire: true); // a publisher holding it finds it retired and asks again
                _topics.TryRemove(candidate.Topic, out _);
                Interlocked.Increment(ref _evictedTopics);
            }

            var history = new TopicHistory(this, topic, rule, Shared ? "" : NewEpoch());
            _topics[topic] = history;
            _clock.Enqueue(history);
            return history;
        }
    }

    private void Sweep()
    {
        long now = Stopwatch.GetTimestamp();
        foreach (TopicHistory history in _topics.Values)
        {
            history.Sweep(now);
        }
    }

    /// <summary>A fresh epoch: 16 lowercase hex digits, random, so no two histories of a topic ever share one.</summary>
    private static string NewEpoch() => Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(8));
}
