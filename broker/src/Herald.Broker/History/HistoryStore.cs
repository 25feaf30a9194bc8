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
/// <para>
/// A topic with no rule costs a publication one pattern test per rule (after a dictionary miss); a topic with a
/// history, one dictionary hit. Creating and evicting histories takes <c>_evictGate</c>: only a topic's first
/// publication, and the eviction that makes room, ever do.
/// </para>
/// <para>
/// Only a publication makes a history. A resume reads: on a topic that has none yet it is answered from the
/// <em>unborn epoch</em> (<see cref="ResumeUnborn"/>), the epoch the topic's first history will take, so "Live"
/// still gives a position a later resume recovers from; every eviction draws a new unborn epoch, so a position
/// taken before one can never pass for a history made after it. A client can therefore neither make histories
/// by reading (refused or not) nor evict another identity's by it. In a cluster a resume needs this node's
/// bridge (<see cref="FindForResume"/>): made only while there is room, never by evicting.
/// </para>
/// </remarks>
internal sealed class HistoryStore : IDisposable
{
    private readonly HistoryOptions _options;
    private readonly ConcurrentDictionary<string, TopicHistory> _topics = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<string, TopicHistory>.AlternateLookup<ReadOnlySpan<char>> _bySpan;
    private readonly Queue<TopicHistory> _clock = new(); // creation order; the eviction hand's round
    private readonly Lock _evictGate = new();
    private readonly Timer _sweeper;
    private byte[] _unborn = RandomNumberGenerator.GetBytes(32); // keys each topic's unborn epoch; drawn anew (under _evictGate) at each eviction
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

    /// <summary>The history of <paramref name="topic"/> (a valid topic name), made by its first publication (or, in a cluster, by a routed one); null when no rule covers it. Publications only: a resume never makes one.</summary>
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

    /// <summary>Whether a rule keeps a history for <paramref name="topic"/> (a valid topic name), without making one.</summary>
    public bool Keeps(ReadOnlySpan<char> topic) => _bySpan.ContainsKey(topic) || RuleFor(topic) is not null;

    /// <summary>
    /// Cluster: the history of <paramref name="topic"/> a resume on this node needs as its bridge (spec cluster.md §9):
    /// the one there is, else one made while fewer than <see cref="HistoryOptions.MaxTopics"/> are held; a read never
    /// evicts. Made this way it is the first the eviction hand takes (not referenced). Null: no rule, or no room.
    /// </summary>
    public TopicHistory? FindForResume(string topic)
    {
        if (_topics.TryGetValue(topic, out TopicHistory? history))
        {
            return history;
        }

        if (RuleFor(topic) is not { } rule)
        {
            return null;
        }

        lock (_evictGate)
        {
            if (_topics.TryGetValue(topic, out TopicHistory? raced))
            {
                return raced;
            }

            if (_topics.Count >= _options.MaxTopics)
            {
                return null;
            }

            var made = new TopicHistory(this, topic, rule, Shared ? "" : UnbornEpoch(topic)) { Referenced = false };
            _topics[topic] = made;
            _clock.Enqueue(made);
            return made;
        }
    }

    /// <summary>
    /// A resume (spec §13) of <paramref name="topic"/>, which keeps a history but has none on this node yet: under the
    /// store's gate (so the topic's first publication comes after it), <paramref name="add"/> makes the subscription
    /// live (false: refused, nothing more), then the status MESSAGE is queued, answered from the unborn epoch: no
    /// position, "Live" there; offset 0 of it, "Recovered" (nothing was published since); anything else, lost or ahead.
    /// </summary>
    /// <returns>The outcome; null when refused; <paramref name="made"/> true (nothing done) when the history exists now: resume it instead.</returns>
    public ResumeOutcome? ResumeUnborn(string topic, StreamPosition since, Func<bool> add, IMessageSink sink, uint sid, List<IMessageSink> toFlush, out bool made)
    {
        lock (_evictGate)
        {
            made = _topics.ContainsKey(topic);
            if (made || !add())
            {
                return null;
            }

            var top = new StreamPosition(0, UnbornEpoch(topic));
            ResumeOutcome outcome = since switch
            {
                { IsNone: true } => new(true, "Live", top, 0),
                _ when since.Epoch != top.Epoch => new(false, $"History lost: epoch {since.Epoch} is not the topic's ({top.Epoch}); the broker restarted or evicted it", top, 0),
                _ when since.Offset > 0 => new(false, $"Position {since.Offset} is ahead of the topic's last offset 0", top, 0),
                _ => new(true, "Recovered", top, 0),
            };
            TopicHistory.Status(sink, sid, topic, outcome, toFlush);
            return outcome;
        }
    }

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
                _unborn = RandomNumberGenerator.GetBytes(32); // a position of the evicted one's never passes for what comes next
            }

            var history = new TopicHistory(this, topic, rule, Shared ? "" : UnbornEpoch(topic));
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

    /// <summary>
    /// The epoch <paramref name="topic"/>'s next history takes: 16 lowercase hex digits, HMAC-SHA256 of the topic under a
    /// random key drawn at start and at every eviction, so each topic's differs and no two histories of a topic share one.
    /// Caller holds <c>_evictGate</c>.
    /// </summary>
    private string UnbornEpoch(string topic)
    {
        Span<byte> mac = stackalloc byte[32];
        HMACSHA256.HashData(_unborn, System.Text.Encoding.UTF8.GetBytes(topic), mac);
        return Convert.ToHexStringLower(mac[..8]);
    }
}
