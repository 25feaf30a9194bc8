using System.Buffers;
using System.Collections.Concurrent;
using System.Text;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Routing;

/// <summary>
/// The one topic router of the broker: every transport subscribes and publishes here.
/// </summary>
/// <remarks>
/// <para>
/// Read-optimised, after nats-server's sublist. Subscriptions live in a trie of dot-separated tokens
/// with '*' and '>' branches, changed under a write lock. Publishes look the topic up in a match cache
/// (a concurrent dictionary from topic to an immutable array of subscriptions) without taking any lock;
/// a miss walks the trie under the read lock and fills the cache. A change invalidates only the cache
/// entries it can affect: the entry of a literal pattern, or the entries a wildcard pattern matches.
/// </para>
/// <para>
/// Each subscription sits in exactly one trie node (its pattern's), and a topic reaches a node by at most
/// one path, so a subscription appears at most once in a match result even when several patterns of the
/// same connection overlap: each matching subscription gets the message exactly once.
/// </para>
/// </remarks>
internal sealed class TopicRouter : IDisposable
{
    private const int MaxCachedTopics = 65_536;
    private const int StackTopic = 512;

    private readonly ReaderWriterLockSlim _gate = new(LockRecursionPolicy.NoRecursion);
    private readonly Node _root = new();
    private readonly ConcurrentDictionary<string, Subscription[]> _cache = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<string, Subscription[]>.AlternateLookup<ReadOnlySpan<char>> _cacheBySpan;
    private int _subscriptionCount;
    private int _patternCount;
    private readonly int _maxPatterns;
    private long _encodedFrames;

    private readonly BrokerMetrics? _metrics;

    public TopicRouter(BrokerMetrics? metrics = null, int maxPatterns = 0)
    {
        _metrics = metrics;
        _maxPatterns = maxPatterns;
        _cacheBySpan = _cache.GetAlternateLookup<ReadOnlySpan<char>>();
    }

    public void Dispose() => _gate.Dispose();

    public int SubscriptionCount => Volatile.Read(ref _subscriptionCount);

    /// <summary>Distinct patterns with at least one subscription (kept on subscribe/unsubscribe, for <c>MaxTopics</c> and the topics gauge).</summary>
    public int PatternCount => Volatile.Read(ref _patternCount);

    /// <summary>MESSAGE frames encoded so far: one per publication that had at least one subscriber.</summary>
    public long EncodedFrames => Interlocked.Read(ref _encodedFrames);

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
            }

            node.Subscriptions.Add(subscription);
            _subscriptionCount++;
            Invalidate(subscription.Pattern);
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
            Invalidate(subscription.Pattern);
            return true;
        }
        finally
        {
            _gate.ExitWriteLock();
        }
    }

    /// <summary>
    /// Routes one publication: encodes its MESSAGE frame once (only if someone is subscribed) and queues
    /// the same bytes to every matching subscription. A subscriber that negotiated Zstd may instead get
    /// the compressed form, and one that did not gets the plain form of a compressed publication: each
    /// form is built at most once, only if some subscriber needs it (<paramref name="encoder"/>).
    /// Sinks that were idle are added to <paramref name="toFlush"/>; the caller flushes them once, at
    /// the end of its read batch. Returns the number of deliveries.
    /// </summary>
    /// <param name="plainPayload">For a publication sent compressed: its payload, decompressed.</param>
    /// <param name="receivedAt"><see cref="System.Diagnostics.Stopwatch"/> timestamp of the read that carried the PUBLISH, or 0 (fan-out latency not measured).</param>
    public int Publish(in PublishFrame publish, IMessageSink? origin, List<IMessageSink> toFlush, MessageEncoder? encoder = null, ReadOnlySpan<byte> plainPayload = default, long receivedAt = 0)
    {
        Subscription[] subscriptions = Match(publish.Topic);
        if (subscriptions.Length == 0)
        {
            return 0;
        }

        bool sentCompressed = (publish.Flags & PayloadFlags.Zstd) != 0;
        MessageBuffer? asSent = null;
        MessageBuffer? other = null;
        bool otherTried = false;
        int asSentUses = 0;
        int otherUses = 0;
        bool isRequest = publish.ReplyTo.HasValue;
        foreach (Subscription subscription in subscriptions)
        {
            if (subscription.NoEcho && ReferenceEquals(subscription.Sink, origin))
            {
                continue;
            }

            if (isRequest && subscription.Replies is { } replies)
            {
                replies.Grant(publish.ReplyTo!.Value); // a restricted receiver may answer: recorded before it can see the request
            }

            MessageBuffer frame;
            if (subscription.Sink.AcceptsZstd != sentCompressed && (other ??= TryOther(publish, sentCompressed, encoder, plainPayload, subscriptions.Length, receivedAt, ref otherTried)) is { } alternate)
            {
                frame = alternate;
                otherUses++;
            }
            else
            {
                frame = asSent ??= CopyAsSent(publish, subscriptions.Length, receivedAt);
                asSentUses++;
            }

            if (subscription.Sink.Enqueue(frame, subscription.Sid))
            {
                toFlush.Add(subscription.Sink);
            }
        }

        // Each form was retained once per subscription up front (one atomic add); drop the unused
        // references and our own. Every sink releases its own when written.
        ReleaseOwn(asSent, subscriptions.Length - asSentUses + 1);
        ReleaseOwn(other, subscriptions.Length - otherUses + 1);
        return asSentUses + otherUses;
    }

    private void ReleaseOwn(MessageBuffer? frame, int references)
    {
        if (frame is null)
        {
            return;
        }

        long receivedAt = frame.ReceivedAt;
        if (frame.Release(references) && receivedAt != 0 && _metrics is not null)
        {
            _metrics.FanoutCompleted(receivedAt); // every subscriber wrote it before the fan-out loop ended
        }
    }

    /// <summary>The frame as the publisher sent it: header, then its envelope copied as is (no re-encode).</summary>
    private MessageBuffer CopyAsSent(in PublishFrame publish, int holders, long receivedAt)
    {
        Interlocked.Increment(ref _encodedFrames);
        int envelopeLength = (int)publish.Envelope.Length;
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + envelopeLength);
        Span<byte> bytes = frame.Span;
        FrameWriter.WriteMessageHeader(bytes, envelopeLength, sid: 0);
        publish.Envelope.CopyTo(bytes[ProtocolConstants.MessageHeaderSize..]);
        frame.ReceivedAt = receivedAt;
        frame.Retain(holders);
        return frame;
    }

    /// <summary>The other form, tried once: compressed for Zstd subscribers of a plain publication, plain for the others of a compressed one.</summary>
    private MessageBuffer? TryOther(in PublishFrame publish, bool sentCompressed, MessageEncoder? encoder, ReadOnlySpan<byte> plainPayload, int holders, long receivedAt, ref bool tried)
    {
        if (tried)
        {
            return null;
        }

        tried = true;
        MessageBuffer? frame = sentCompressed
            ? MessageEncoder.Encode(publish, PayloadFlags.None, plainPayload)
            : encoder?.TryCompress(publish);
        if (frame is not null)
        {
            Interlocked.Increment(ref _encodedFrames);
            frame.ReceivedAt = receivedAt;
            frame.Retain(holders);
        }

        return frame;
    }

    /// <summary>Every subscription matching a topic given as (already validated) ASCII bytes.</summary>
    public Subscription[] Match(in ReadOnlySequence<byte> topic)
    {
        int length = (int)topic.Length;
        char[]? rented = null;
        Span<char> chars = length <= StackTopic ? stackalloc char[StackTopic] : (rented = ArrayPool<char>.Shared.Rent(length));
        chars = chars[..length];
        if (topic.IsSingleSegment)
        {
            Ascii.ToUtf16(topic.FirstSpan, chars, out _);
        }
        else
        {
            Encoding.ASCII.GetChars(topic, chars);
        }

        Subscription[] result = Match(chars);
        if (rented is not null)
        {
            ArrayPool<char>.Shared.Return(rented);
        }

        return result;
    }

    /// <summary>Every subscription matching <paramref name="topic"/> (a valid topic name).</summary>
    public Subscription[] Match(ReadOnlySpan<char> topic)
    {
        if (_cacheBySpan.TryGetValue(topic, out Subscription[]? cached))
        {
            return cached;
        }

        return MatchSlow(topic.ToString());
    }

    private Subscription[] MatchSlow(string topic)
    {
        _gate.EnterReadLock();
        try
        {
            if (_cache.TryGetValue(topic, out Subscription[]? cached))
            {
                return cached;
            }

            var found = new List<Subscription>();
            Collect(_root, topic, 0, found);
            Subscription[] result = found.Count == 0 ? [] : found.ToArray();
            if (_cache.Count >= MaxCachedTopics)
            {
                _cache.Clear(); // rare: a flood of distinct topics; the hot ones come back on their next publish
            }

            // Still under the read lock: no writer can invalidate between computing and caching.
            _cache[topic] = result;
            return result;
        }
        finally
        {
            _gate.ExitReadLock();
        }
    }

    // Caller holds the read lock. `start` indexes the first character of the token to match.
    private static void Collect(Node node, string topic, int start, List<Subscription> found)
    {
        int end = topic.IndexOf('.', start);
        bool last = end < 0;
        if (last)
        {
            end = topic.Length;
        }

        if (node.Tail is { } tail)
        {
            found.AddRange(tail.Subscriptions); // '>' matches this token and everything after it
        }

        if (node.Children is { } children && children.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(topic.AsSpan(start, end - start), out Node? literal))
        {
            Visit(literal, topic, end, last, found);
        }

        if (node.Star is { } star)
        {
            Visit(star, topic, end, last, found);
        }
    }

    private static void Visit(Node child, string topic, int end, bool last, List<Subscription> found)
    {
        if (last)
        {
            found.AddRange(child.Subscriptions);
        }
        else
        {
            Collect(child, topic, end + 1, found);
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
            bool removed = node.Subscriptions.Remove(subscription);
            if (removed && node.Subscriptions.Count == 0)
            {
                _patternCount--;
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

    // Caller holds the write lock.
    private void Invalidate(string pattern)
    {
        if (pattern.AsSpan().IndexOfAny('*', '>') < 0) // validated: '*' and '>' only occur as wildcard tokens
        {
            _cache.TryRemove(pattern, out _);
            return;
        }

        foreach (KeyValuePair<string, Subscription[]> entry in _cache)
        {
            if (Topic.Matches(pattern, entry.Key))
            {
                _cache.TryRemove(entry.Key, out _);
            }
        }
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

    /// <summary>A trie node. Mutated only under the write lock; read under the read lock.</summary>
    private sealed class Node
    {
        public Dictionary<string, Node>? Children { get; private set; }

        public Node? Star { get; private set; }

        public Node? Tail { get; private set; }

        public HashSet<Subscription> Subscriptions { get; } = new(ReferenceEqualityComparer.Instance);

        public bool IsEmpty => Subscriptions.Count == 0 && Star is null && Tail is null && (Children is null || Children.Count == 0);

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
        var pending = new Stack<Node>();
        _gate.EnterReadLock();
        try
        {
            pending.Push(_root);
            while (pending.TryPop(out Node? node))
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

                if (node.Children is { } children)
                {
                    foreach (Node child in children.Values)
                    {
                        pending.Push(child);
                    }
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
        finally
        {
            _gate.ExitReadLock();
        }

        return found;
    }
}
