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
/// a miss walks the trie under the read lock and fills the cache.
/// </para>
/// <para>
/// A subscription change costs what its pattern matches, never what others cached (issue 22). The cache
/// has a second face, a trie of the cached topics' tokens (<see cref="CachedNode"/>), and a change
/// removes only the entries its pattern matches: a literal pattern its one entry; a wildcard walks that
/// trie along its tokens (a literal token follows one branch, '*' every branch of its level, '>' the
/// subtree), so a pattern whose literal tokens no cached topic has touches nothing. Where a '*' fans out
/// over more than <see cref="MaxInvalidationVisits"/> cached topics without matching them (say
/// <c>device.*.alarm</c> beside 65,536 cached <c>device.N.status</c>), the walk stops and the whole
/// cache is dropped instead, in O(1): the change stays bounded by a constant, and every publisher pays at
/// most one miss per topic to refill it (counted in <c>herald.router.cache.evictions</c>).
/// Measured (<c>broker/bench/Herald.Benchmarks</c>, <c>TopicRouterBenchmarks</c>, short job on a shared
/// 2-core machine): a wildcard SUBSCRIBE/UNSUBSCRIBE pair that matches no cached topic costs about 1.2 us
/// with 0, 1,000 or 65,536 cached topics (it was 1.2 us, 51 us and 29 ms: every entry was matched under the
/// write lock); an exact pair about 1.2 us as before; a cached publish match 25-40 ns as before.
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
/// </remarks>
internal sealed class TopicRouter : IDisposable
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
    private long _encodedFrames;

    // The cache's trie of topics: changed by fills (read lock and _fill) and by changes (write lock).
    private readonly Lock _fill = new();
    private readonly int _cacheCapacity;
    private readonly List<string> _matched = [];
    private CachedNode _cachedRoot = new();
    private int _cachedTopics;
    private long _invalidationVisits;

    private readonly BrokerMetrics? _metrics;
    private IInterestListener? _interest;

    public TopicRouter(BrokerMetrics? metrics = null, int maxPatterns = 0, int cacheCapacity = DefaultCacheCapacity)
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

    /// <summary>MESSAGE frames encoded so far: one per publication that had at least one subscriber.</summary>
    public long EncodedFrames => Interlocked.Read(ref _encodedFrames);

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

    /// <summary>
    /// Routes one publication: encodes its MESSAGE frame once (only if someone is subscribed) and queues
    /// the same bytes to every matching subscription. A subscriber that negotiated Zstd may instead get
    /// the compressed form, and one that did not gets the plain form of a compressed publication; a
    /// publication with headers goes to a subscriber that did not negotiate them without its header block
    /// (spec §4.9): each form is built at most once, only if some subscriber needs it (<paramref name="encoder"/>).
    /// Sinks that were idle are added to <paramref name="toFlush"/>; the caller flushes them once, at
    /// the end of its read batch. Returns the number of deliveries.
    /// </summary>
    /// <param name="plainPayload">For a publication sent compressed: its payload, decompressed.</param>
    /// <param name="receivedAt"><see cref="System.Diagnostics.Stopwatch"/> timestamp of the read that carried the PUBLISH, or 0 (fan-out latency not measured).</param>
    /// <param name="tally">For a traced publication only: what the routing did, for its span; null costs a test per subscriber.</param>
    /// <param name="groups">
    /// Cluster (spec cluster.md §11): which node delivers each queue group; null on a single node (each group is
    /// chosen among this node's members, members elsewhere are not looked at).
    /// </param>
    public int Publish(in PublishFrame publish, IMessageSink? origin, List<IMessageSink> toFlush, MessageEncoder? encoder = null, ReadOnlySpan<byte> plainPayload = default, long receivedAt = 0, FanoutTally? tally = null, GroupAssignments? groups = null) =>
        Publish(publish, origin, toFlush, encoder, plainPayload, receivedAt, tally, groups, keep: false, out _);

    /// <summary>
    /// As the other <see cref="Publish(in PublishFrame, IMessageSink?, List{IMessageSink}, MessageEncoder?, ReadOnlySpan{byte}, long, FanoutTally?, GroupAssignments?)"/>,
    /// and hands the caller one reference to the publication's MESSAGE as sent, with its header block (built even
    /// when nobody is subscribed): what a topic's history keeps (spec §13).
    /// </summary>
    public int Publish(in PublishFrame publish, IMessageSink? origin, List<IMessageSink> toFlush, MessageEncoder? encoder, ReadOnlySpan<byte> plainPayload, long receivedAt, FanoutTally? tally, GroupAssignments? groups, out MessageBuffer kept)
    {
        int deliveries = Publish(publish, origin, toFlush, encoder, plainPayload, receivedAt, tally, groups, keep: true, out MessageBuffer? asSent);
        kept = asSent!;
        return deliveries;
    }

    /// <summary>
    /// Cluster (spec cluster.md §9, §11): chooses, for a publication of this node's client that is not routed here
    /// first (a history topic's, which comes back from Redis), which node delivers each queue group, as
    /// <see cref="Publish(in PublishFrame, IMessageSink?, List{IMessageSink}, MessageEncoder?, ReadOnlySpan{byte}, long, FanoutTally?, GroupAssignments?)"/>
    /// would; a group chosen here is not recorded, and is delivered here when the publication comes back.
    /// </summary>
    public void ChooseGroups(in ReadOnlySequence<byte> topic, IMessageSink? origin, GroupAssignments groups)
    {
        groups.Decide();
        Subscription[] subscriptions = Match(topic);
        for (int i = 0; i < subscriptions.Length; i++)
        {
            if (subscriptions[i].Group is { } group)
            {
                int end = RunEnd(subscriptions, i, group);
                ChooseMember(subscriptions.AsSpan(i, end - i), origin, groups);
                i = end - 1;
            }
        }
    }

    private static int RunEnd(Subscription[] subscriptions, int start, string group)
    {
        int end = start + 1;
        while (end < subscriptions.Length && string.Equals(subscriptions[end].Group, group, StringComparison.Ordinal))
        {
            end++;
        }

        return end;
    }

    private int Publish(in PublishFrame publish, IMessageSink? origin, List<IMessageSink> toFlush, MessageEncoder? encoder, ReadOnlySpan<byte> plainPayload, long receivedAt, FanoutTally? tally, GroupAssignments? groups, bool keep, out MessageBuffer? kept)
    {
        kept = null;
        if (groups is { Deciding: true })
        {
            groups.Decide(); // this routing's choices only (a history evicted meanwhile routes again)
        }

        Subscription[] subscriptions = Match(publish.Topic);
        tally?.Start(subscriptions.Length);
        if (subscriptions.Length == 0)
        {
            if (keep)
            {
                kept = CopyAsSent(publish, withHeaders: true);
                Interlocked.Increment(ref _encodedFrames);
            }

            return 0;
        }

        bool sentCompressed = (publish.Flags & PayloadFlags.Zstd) != 0;
        bool hasHeaders = publish.HasHeaders;
        Forms forms = default;
        int deliveries = 0;
        bool isRequest = publish.ReplyTo.HasValue;
        for (int i = 0; i < subscriptions.Length; i++)
        {
            Subscription subscription = subscriptions[i];
            if (subscription.Group is { } group)
            {
                int end = RunEnd(subscriptions, i, group);
                Subscription? chosen = ChooseMember(subscriptions.AsSpan(i, end - i), origin, groups);
                i = end - 1;
                if (chosen is null)
                {
                    continue;
                }

                subscription = chosen;
            }
            else if ((subscription.NoEcho && ReferenceEquals(subscription.Sink, origin)) || subscription.Held)
            {
                continue;
            }

            if (isRequest && subscription.Replies is { } replies)
            {
                replies.Grant(publish.ReplyTo!.Value); // a restricted receiver may answer: recorded before it can see the request
            }

            int form = hasHeaders && !subscription.Sink.AcceptsHeaders ? Bare : 0;
            MessageBuffer? frame = null;
            if (subscription.Sink.AcceptsZstd != sentCompressed)
            {
                frame = Form(ref forms[form | Other], form | Other, publish, sentCompressed, encoder, plainPayload, subscriptions.Length, receivedAt);
                form |= frame is null ? 0 : Other;
            }

            frame ??= Form(ref forms[form], form, publish, sentCompressed, encoder, plainPayload, subscriptions.Length, receivedAt);
            forms[form].Uses++;
            deliveries++;
            Enqueued enqueued = subscription.Sink.Enqueue(frame!, subscription.Sid);
            if ((enqueued & Enqueued.Wake) != 0)
            {
                toFlush.Add(subscription.Sink);
            }

            tally?.Count(enqueued);
        }

        if (tally is not null)
        {
            bool bare = forms[Other].Frame is null;
            tally.Compression(publish, plainPayload, sentCompressed ? null : forms[bare ? Other | Bare : Other].Frame, compressedWithHeaders: !bare);
        }

        if (keep)
        {
            kept = Form(ref forms[0], 0, publish, sentCompressed, encoder, plainPayload, subscriptions.Length, receivedAt)!;
            kept.Retain(1); // the caller's
        }

        // Each form was retained once per subscription up front (one atomic add); drop the unused
        // references and our own. Every sink releases its own when written.
        for (int i = 0; i < FormCount; i++)
        {
            ReleaseOwn(forms[i].Frame, subscriptions.Length - forms[i].Uses + 1);
        }

        return deliveries;
    }

    /// <summary>
    /// One member of a queue group (spec §14) for a publication: at random among those that may take it (not
    /// held by a resume, not a no-echo member of the publishing connection); null when none may, or when the
    /// group is delivered on another node.
    /// </summary>
    /// <remarks>
    /// In a cluster (spec cluster.md §11), for this node's publication (<paramref name="groups"/> deciding), each
    /// member elsewhere weighs as many as it stands for, so every member of the cluster is as likely as any other
    /// (NATS weighs its routes' queue subscriptions the same way); a choice elsewhere is recorded for the envelope and
    /// nothing is delivered here. For another node's publication, this node delivers the group only where that node's
    /// choice says so (<see cref="GroupAssignments.DeliversHere"/>), to one of its own members.
    /// </remarks>
    private static Subscription? ChooseMember(ReadOnlySpan<Subscription> members, IMessageSink? origin, GroupAssignments? groups)
    {
        int eligible = 0;
        long elsewhere = 0;
        foreach (Subscription member in members)
        {
            if (member.Node != 0)
            {
                elsewhere += member.Members;
            }
            else if (IsEligible(member, origin))
            {
                eligible++;
            }
        }

        if (groups is null || !groups.Deciding)
        {
            if (groups is not null && !groups.DeliversHere(members))
            {
                return null;
            }

            elsewhere = 0; // chosen here: among this node's members
        }

        long total = eligible + elsewhere;
        if (total == 0)
        {
            return null;
        }

        long pick = total == 1 ? 0 : Random.Shared.NextInt64(total);
        Subscription? last = null; // the last candidate: taken if the weights or eligibility moved since they were counted
        foreach (Subscription member in members)
        {
            if (member.Node != 0)
            {
                if (elsewhere > 0)
                {
                    last = member;
                    if ((pick -= member.Members) < 0)
                    {
                        return Elsewhere(members, member, origin, groups!, eligible);
                    }
                }
            }
            else if (IsEligible(member, origin))
            {
                last = member;
                if (pick-- == 0)
                {
                    return member;
                }
            }
        }

        return last is { Node: not 0 } ? Elsewhere(members, last, origin, groups!, eligible) : last;

        static bool IsEligible(Subscription member, IMessageSink? origin) =>
            !member.Held && !(member.NoEcho && ReferenceEquals(member.Sink, origin));

        // Chosen on another node: recorded for the envelope, nothing delivered here; past what an envelope carries,
        // a member here if one may take it.
        static Subscription? Elsewhere(ReadOnlySpan<Subscription> members, Subscription chosen, IMessageSink? origin, GroupAssignments groups, int eligible) =>
            groups.TryAssign(chosen.GroupId, chosen.Node) || eligible == 0 ? null : ChooseMember(members, origin, groups: null);
    }

    /// <summary>
    /// Orders a match so that each queue group's members are next to each other, after every plain subscription.
    /// Done once per cached topic.
    /// </summary>
    private static void GroupMembersTogether(Subscription[] matched)
    {
        if (Array.Exists(matched, s => s.Group is not null))
        {
            Array.Sort(matched, static (a, b) => string.CompareOrdinal(a.Group, b.Group)); // null (plain) first
        }
    }

    // A publication's forms (index: Other | Bare): as sent or the other compression, with its header block or without.
    private const int Other = 1;
    private const int Bare = 2;
    private const int FormCount = 4;

    private struct FormSlot
    {
        public MessageBuffer? Frame;
        public int Uses;
        public bool Tried;
    }

    [System.Runtime.CompilerServices.InlineArray(FormCount)]
    private struct Forms
    {
        private FormSlot _slot;
    }

    /// <summary>One form of the publication, built the first time a subscriber needs it (the other compression may come out null: then it is never tried again).</summary>
    private MessageBuffer? Form(ref FormSlot slot, int form, in PublishFrame publish, bool sentCompressed, MessageEncoder? encoder, ReadOnlySpan<byte> plainPayload, int holders, long receivedAt)
    {
        if (slot.Tried)
        {
            return slot.Frame;
        }

        slot.Tried = true;
        bool withHeaders = (form & Bare) == 0;
        MessageBuffer? frame = (form & Other) == 0
            ? CopyAsSent(publish, withHeaders)
            : sentCompressed ? MessageEncoder.Encode(publish, PayloadFlags.None, plainPayload, withHeaders) : encoder?.TryCompress(publish, withHeaders);
        if (frame is not null)
        {
            Interlocked.Increment(ref _encodedFrames);
            frame.ReceivedAt = receivedAt;
            frame.Retain(holders);
        }

        return slot.Frame = frame;
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

    /// <summary>The frame as the publisher sent it: header, then its envelope (and header block) copied as is (no re-encode).</summary>
    private static MessageBuffer CopyAsSent(in PublishFrame publish, bool withHeaders)
    {
        int envelopeLength = (int)publish.Envelope.Length;
        int headersLength = withHeaders ? (int)publish.Headers.Length : 0;
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + envelopeLength + headersLength);
        Span<byte> bytes = frame.Span;
        FrameWriter.WriteMessageHeader(bytes, envelopeLength + headersLength, sid: 0, hasHeaders: headersLength > 0);
        publish.Envelope.CopyTo(bytes[ProtocolConstants.MessageHeaderSize..]);
        if (headersLength > 0)
        {
            publish.Headers.CopyTo(bytes[(ProtocolConstants.MessageHeaderSize + envelopeLength)..]);
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
            return cached; // a hit costs no counter: hits are derived, every publication minus the misses
        }

        _metrics?.RouterCacheMiss();
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
            GroupMembersTogether(result);

            // Still under the read lock: no writer can invalidate between computing and caching.
            lock (_fill)
            {
                if (_cachedTopics >= _cacheCapacity)
                {
                    Sweep(); // rare: a flood of distinct topics; the hot ones come back on their next publish
                }

                if (_cachedRoot.Add(topic))
                {
                    _cachedTopics++;
                    _metrics?.RouterCacheSize(_cachedTopics);
                }

                _cache[topic] = result;
            }

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
            AddAll(tail, found); // '>' matches this token and everything after it
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
            AddAll(child, found);
        }
        else
        {
            Collect(child, topic, end + 1, found);
        }
    }

    private static void AddAll(Node node, List<Subscription> found)
    {
        found.AddRange(node.Subscriptions);
        if (node.Elsewhere is { Count: > 0 } elsewhere)
        {
            found.AddRange(elsewhere);
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

    // Caller holds the write lock (so no fill runs).
    private void Invalidate(string pattern)
    {
        if (pattern.AsSpan().IndexOfAny('*', '>') < 0) // validated: '*' and '>' only occur as wildcard tokens
        {
            Interlocked.Increment(ref _invalidationVisits);
            if (_cache.TryRemove(pattern, out _) && _cachedRoot.Remove(pattern, 0))
            {
                _cachedTopics--;
                _metrics?.RouterCacheSize(_cachedTopics);
            }

            return;
        }

        int visits = 0;
        bool bounded = CollectCached(_cachedRoot, pattern, 0, ref visits);
        Interlocked.Add(ref _invalidationVisits, visits);
        if (!bounded)
        {
            DropCache();
        }
        else if (_matched.Count > 0)
        {
            foreach (string topic in _matched)
            {
                _cache.TryRemove(topic, out _);
                _cachedRoot.Remove(topic, 0);
            }

            _cachedTopics -= _matched.Count;
            _metrics?.RouterCacheSize(_cachedTopics);
        }

        _matched.Clear();
    }

    /// <summary>
    /// Adds to <see cref="_matched"/> the cached topics below <paramref name="node"/> that the pattern's
    /// tokens from <paramref name="start"/> on match; false when that took more than
    /// <see cref="MaxInvalidationVisits"/> visits (then <see cref="_matched"/> is incomplete).
    /// Caller holds the write lock.
    /// </summary>
    private bool CollectCached(CachedNode node, string pattern, int start, ref int visits)
    {
        if (node.Children is not { } children)
        {
            return true;
        }

        int end = pattern.IndexOf('.', start);
        bool last = end < 0;
        if (last)
        {
            end = pattern.Length;
        }

        ReadOnlySpan<char> token = pattern.AsSpan(start, end - start);
        if (token is ">")
        {
            foreach (CachedNode child in children.Values)
            {
                if (!CollectSubtree(child, ref visits))
                {
                    return false;
                }
            }

            return true;
        }

        if (token is "*")
        {
            foreach (CachedNode child in children.Values)
            {
                if (!CollectChild(child, pattern, end, last, ref visits))
                {
                    return false;
                }
            }

            return true;
        }

        return !children.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(token, out CachedNode? literal)
            || CollectChild(literal, pattern, end, last, ref visits);
    }

    private bool CollectChild(CachedNode child, string pattern, int end, bool last, ref int visits)
    {
        if (++visits > MaxInvalidationVisits)
        {
            return false;
        }

        if (!last)
        {
            return CollectCached(child, pattern, end + 1, ref visits);
        }

        if (child.Topic is { } topic)
        {
            _matched.Add(topic);
        }

        return true;
    }

    // '>' matched: every cached topic at or below `node`.
    private bool CollectSubtree(CachedNode node, ref int visits)
    {
        if (++visits > MaxInvalidationVisits)
        {
            return false;
        }

        if (node.Topic is { } topic)
        {
            _matched.Add(topic);
        }

        if (node.Children is { } children)
        {
            foreach (CachedNode child in children.Values)
            {
                if (!CollectSubtree(child, ref visits))
                {
                    return false;
                }
            }
        }

        return true;
    }

    // Caller holds the write lock. O(1) for the caller: the old tables go to the collector.
    private void DropCache()
    {
        _cache.Clear();
        _cachedRoot = new CachedNode();
        _metrics?.RouterCacheEvicted(_cachedTopics);
        _cachedTopics = 0;
        _metrics?.RouterCacheSize(0);
    }

    // Caller holds the read lock and _fill (so no other fill runs): evicts a quarter of the cache.
    private void Sweep()
    {
        int target = _cacheCapacity - Math.Max(1, _cacheCapacity / 4);
        int evicted = 0;
        foreach (KeyValuePair<string, Subscription[]> entry in _cache)
        {
            if (_cachedTopics - evicted <= target)
            {
                break;
            }

            if (_cache.TryRemove(entry.Key, out _) && _cachedRoot.Remove(entry.Key, 0))
            {
                evicted++;
            }
        }

        _cachedTopics -= evicted;
        _metrics?.RouterCacheEvicted(evicted);
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

    /// <summary>
    /// A node of the match cache's trie of topics (literal tokens only): where subscription changes find
    /// the cached topics their pattern matches. Changed under the write lock, or under the read lock and
    /// <see cref="_fill"/>; never read by publishers.
    /// </summary>
    private sealed class CachedNode
    {
        public Dictionary<string, CachedNode>? Children { get; private set; }

        /// <summary>The cached topic this node ends, if any.</summary>
        public string? Topic { get; private set; }

        /// <summary>Adds <paramref name="topic"/>; false if it was there.</summary>
        public bool Add(string topic)
        {
            CachedNode node = this;
            int start = 0;
            while (true)
            {
                int end = topic.IndexOf('.', start);
                if (end < 0)
                {
                    end = topic.Length;
                }

                node.Children ??= new Dictionary<string, CachedNode>(StringComparer.Ordinal);
                Dictionary<string, CachedNode>.AlternateLookup<ReadOnlySpan<char>> lookup = node.Children.GetAlternateLookup<ReadOnlySpan<char>>();
                ReadOnlySpan<char> token = topic.AsSpan(start, end - start);
                if (!lookup.TryGetValue(token, out CachedNode? child))
                {
                    child = new CachedNode();
                    lookup[token] = child;
                }

                node = child;
                if (end == topic.Length)
                {
                    break;
                }

                start = end + 1;
            }

            bool added = node.Topic is null;
            node.Topic = topic;
            return added;
        }

        /// <summary>Removes <paramref name="topic"/> (its tokens from <paramref name="start"/> on, below this node), pruning empty nodes; false if it was not there.</summary>
        public bool Remove(string topic, int start)
        {
            int end = topic.IndexOf('.', start);
            if (end < 0)
            {
                end = topic.Length;
            }

            ReadOnlySpan<char> token = topic.AsSpan(start, end - start);
            if (Children is null || !Children.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(token, out CachedNode? child))
            {
                return false;
            }

            bool removed;
            if (end == topic.Length)
            {
                removed = child.Topic is not null;
                child.Topic = null;
            }
            else
            {
                removed = child.Remove(topic, end + 1);
            }

            if (child.Topic is null && (child.Children is null || child.Children.Count == 0))
            {
                Children.GetAlternateLookup<ReadOnlySpan<char>>().Remove(token);
            }

            return removed;
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
}
