using System.Buffers;
using System.Diagnostics;
using System.Threading.Channels;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// <b>In</b> (spec cluster.md §3, §9): the other nodes' publications. Each Redis subscription (<see cref="RedisSubscription"/>)
/// is read in order by its own task: an envelope from another node is routed through this node's router as a
/// publication without a publisher (no-echo never applies; reply permissions are granted as for a local request),
/// encoded once per form for every local subscriber, flushed once per batch read, its queue groups delivered where its
/// origin gave them. This node's own envelopes, which its globs may bring back, are skipped, but for its history
/// topics' publications, which Redis positioned and which are delivered here only now. With the cluster's secret, a
/// signed envelope routed here already, or stamped outside the replay window, is refused (<see cref="ReplayGuard"/>). A history publication whose
/// offset jumped across a Redis outage waits while what this node missed is read back from the topic's stream. With
/// several shards (spec cluster.md §13) every shard's subscriptions are read into the same router; an envelope is routed
/// only from the shard its topic lives on, and the replay guard is kept per shard and origin.
/// </summary>
internal sealed class ClusterInbound
{
    private readonly ClusterShards _shards;
    private readonly TopicRouter _router;
    private readonly MessageEncoder _encoder;
    private readonly BrokerMetrics _brokerMetrics;
    private readonly ClusterMetrics _metrics;
    private readonly ClusterNodes _nodes;
    private readonly KeptOrigins _kept;
    private readonly ClusterSharedHistory _history;
    private readonly int _maxPayloadBytes;
    private readonly int _maxFrameBytes;
    private readonly ReplayGuard[]? _replays; // per shard: an origin's numbers rise on each shard, not across them
    private readonly int _maxInbound;
    private readonly long _maxInboundBytes;

    private readonly RedisPresence? _presence;

    public ClusterInbound(ClusterShards shards, TopicRouter router, MessageEncoder encoder, BrokerMetrics brokerMetrics, ClusterMetrics metrics, ClusterNodes nodes, KeptOrigins kept, ClusterSharedHistory history, int maxPayloadBytes, int maxFrameBytes, RedisPresence? presence = null)
    {
        _presence = presence;
        _shards = shards;
        _router = router;
        _encoder = encoder;
        _brokerMetrics = brokerMetrics;
        _metrics = metrics;
        _nodes = nodes;
        _kept = kept;
        _history = history;
        _maxPayloadBytes = maxPayloadBytes;
        _maxFrameBytes = maxFrameBytes;
        History = history.Store;
        ClusterOptions options = shards.First.Options;
        _maxInbound = options.MaxInboundMessages;
        _maxInboundBytes = options.MaxInboundBytes;
        _replays = options.Secret is null ? null : [.. shards.All.Select(_ => new ReplayGuard(options.ReplayWindow))];
    }

    private ulong NodeId => _shards.NodeId;

    /// <summary>This node's topic histories: the other nodes' publications go through them too (spec §13).</summary>
    private HistoryStore? History { get; }

    /// <summary>
    /// Reads one Redis subscription, in order, until it is unsubscribed (and drained), ended, or the node stops (<paramref name="stopping"/>).
    /// </summary>
    public async Task ReadLoopAsync(RedisSubscription inbound, CancellationToken stopping)
    {
        var toFlush = new List<IMessageSink>();
        using var stop = CancellationTokenSource.CreateLinkedTokenSource(stopping, inbound.Stop.Token);
        try
        {
            for (int read = 0; ; read++)
            {
                if (!TryNext(inbound, out ChannelMessage message))
                {
                    Flush(toFlush); // once per batch read, never per message
                    message = await inbound.Queue.ReadAsync(stop.Token).ConfigureAwait(false);
                }
                else if ((read & (ShedCheckEvery - 1)) == 0 && (_maxInbound > 0 || _maxInboundBytes > 0))
                {
                    Bound(inbound, toFlush);
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

    /// <summary>How often (in messages read without waiting) a reader looks at how many wait behind it: a power of 2.</summary>
    private const int ShedCheckEvery = 16;

    /// <summary>The next publication waiting: the oldest the reader took ahead (<see cref="Bound"/>), else the queue's. Caller: the reader.</summary>
    private static bool TryNext(RedisSubscription inbound, out ChannelMessage message)
    {
        if (inbound.Ahead.Count > 0 && inbound.Ahead.TryDequeue(out message))
        {
            inbound.AheadBytes -= SizeOf(message);
            inbound.AheadCount = inbound.Ahead.Count;
            return true;
        }

        return inbound.Queue.TryRead(out message);
    }

    /// <summary>What a waiting publication holds: its bytes as Redis sent them (the envelope), and about 100 of StackExchange.Redis's (README).</summary>
    private static long SizeOf(in ChannelMessage message) => ((ReadOnlyMemory<byte>)message.Message).Length;

    /// <summary>
    /// Counts what waits behind the reader against its bounds (spec cluster.md §4): with <c>MaxInboundBytes</c>, every
    /// publication queued is taken ahead (<see cref="RedisSubscription.Ahead"/>) and its bytes added up, since
    /// StackExchange.Redis's queue counts only messages. Over either bound, sheds the oldest. Caller: the reader, every
    /// <see cref="ShedCheckEvery"/> publications read without waiting.
    /// </summary>
    private void Bound(RedisSubscription inbound, List<IMessageSink> toFlush)
    {
        if (_maxInboundBytes > 0)
        {
            while (inbound.AheadBytes <= _maxInboundBytes && inbound.Queue.TryRead(out ChannelMessage next))
            {
                inbound.Ahead.Enqueue(next);
                inbound.AheadBytes += SizeOf(next);
            }

            inbound.AheadCount = inbound.Ahead.Count;
        }

        int waiting = inbound.AheadCount + (inbound.Queue.TryGetCount(out int queued) ? queued : 0);
        bool overCount = _maxInbound > 0 && waiting > _maxInbound;
        bool overBytes = _maxInboundBytes > 0 && inbound.AheadBytes > _maxInboundBytes;
        if (overCount || overBytes)
        {
            Shed(inbound, overCount ? waiting - (_maxInbound / 2) : 0, toFlush);
        }
    }

    /// <summary>
    /// The reader is over its bound (<c>MaxInboundMessages</c> by <paramref name="count"/> publications, or
    /// <c>MaxInboundBytes</c>, spec cluster.md §4): the oldest are taken off its queue without being routed, down to half
    /// of each bound, counted, and each subscriber here whose pattern matches one is told how many it lost (as shed, not
    /// as a slow consumer: README §6.3), once for the whole shedding. A queue group's members are each told of what one
    /// of them would have had. Rare, and cheaper per publication than routing it (a decode and a cached match), so a
    /// reader that sheds catches up. Caller: the reader.
    /// </summary>
    private void Shed(RedisSubscription inbound, int count, List<IMessageSink> toFlush)
    {
        var lost = new Dictionary<IMessageSink, long>(ReferenceEqualityComparer.Instance);
        int shed = 0;
        for (; (shed < count || (_maxInboundBytes > 0 && inbound.AheadBytes > _maxInboundBytes / 2)) && TryNext(inbound, out ChannelMessage message); shed++)
        {
            ReadOnlyMemory<byte> bytes = message.Message;
            bool positioned = ClusterHistory.TryReadPositioned(bytes, out _, out _, out ReadOnlyMemory<byte> envelope);
            if (!ClusterEnvelope.TryRead(positioned ? envelope : bytes, inbound.Signer, out ulong origin, out _, out ReadOnlyMemory<byte> body) || (origin == NodeId && !positioned))
            {
                continue; // not one (told nobody), or our own: delivered here already
            }

            try
            {
                foreach (Subscription subscription in _router.Match(ClusterEnvelope.ReadPublish(body).Topic))
                {
                    if (subscription.Node == 0)
                    {
                        lost[subscription.Sink] = lost.GetValueOrDefault(subscription.Sink) + 1;
                    }
                }
            }
            catch (ProtocolException)
            {
                // Not a PUBLISH: nobody lost it.
            }
        }

        _metrics.Shed(shed);
        foreach ((IMessageSink sink, long missed) in lost)
        {
            if ((sink.Lost(missed) & Enqueued.Wake) != 0)
            {
                toFlush.Add(sink);
            }
        }
    }

    /// <returns>Null, or a history publication held back for the gap before it (<see cref="RepairAsync"/>).</returns>
    private Gap? Deliver(RedisSubscription inbound, ReadOnlyMemory<byte> bytes, List<IMessageSink> toFlush)
    {
        if (bytes.Length > 1 && bytes.Span[1] == PresenceScripts.EventVersion && bytes.Span[0] == ClusterEnvelope.Magic)
        {
            _presence?.Receive(bytes.Span, toFlush); // a join or leave (cluster.md §12), in order with the topic's publications
            return null;
        }

        bool positioned = ClusterHistory.TryReadPositioned(bytes, out ulong offset, out string epoch, out ReadOnlyMemory<byte> envelope);
        if (!ClusterEnvelope.TryRead(positioned ? envelope : bytes, inbound.Signer, out ulong origin, out ulong sequence, out ReadOnlyMemory<byte> assignments, out ReadOnlyMemory<byte> body))
        {
            _metrics.InvalidOne();
            return null;
        }

        IMessageSink? publisher = null;
        if (origin == NodeId)
        {
            if (!positioned)
            {
                return null; // our own, back through a glob: delivered here already
            }

            publisher = _kept.Take(sequence); // our own history publication, back from Redis: delivered here now, no-echo kept
        }

        try
        {
            PublishFrame publish = ClusterEnvelope.ReadPublish(body);
            if (_shards.Count > 1 && _shards.For(publish.Topic) != inbound.Shard)
            {
                _metrics.InvalidOne(); // another shard's topic: never published here by a node (a copy, or a forgery)
                return null;
            }

            if (inbound.Skip is { } skip && SkipCopy(inbound, skip, origin, sequence, publish.Topic))
            {
                _metrics.Duplicate();
                return null;
            }

            if (_replays is { } replays && !replays[inbound.Shard.Index].Admit(origin, sequence, DateTimeOffset.UtcNow.ToUnixTimeMilliseconds()))
            {
                _metrics.ReplayedOne(); // routed here already (from whichever channel), or stamped outside the window
                return null;
            }

            inbound.LastDelivered[origin] = sequence;
            if (inbound.LastDelivered.Count > MaxOriginsKept)
            {
                ForgetGoneOrigins(inbound.LastDelivered);
            }

            // This node's own route span for another node's publication, only for a sampled traceparent while something
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

            _metrics.ReceivedOne(inbound.Shard.Index);
            _brokerMetrics.Delivered(deliveries, ProtocolConstants.MessageHeaderSize + (int)(publish.Envelope.Length + publish.Headers.Length));
        }
        catch (ProtocolException)
        {
            _metrics.InvalidOne(); // not a PUBLISH, or a Zstd payload that does not decompress within max_payload
        }

        return null;
    }

    /// <summary>Origins a subscription remembers before it forgets the ones no longer members (restarted nodes come back with new ids).</summary>
    internal const int MaxOriginsKept = 64;

    /// <summary>
    /// Keeps the table of last sequences bounded: the entries of nodes that left the member list go (they send
    /// nothing more, so no copy of theirs can come); then, if still over, all but the current members'.
    /// Caller: the subscription's reader.
    /// </summary>
    private void ForgetGoneOrigins(Dictionary<ulong, ulong> lastDelivered)
    {
        HashSet<ulong> members = _nodes.MemberIds;
        foreach (ulong origin in lastDelivered.Keys)
        {
            if (!members.Contains(origin))
            {
                lastDelivered.Remove(origin);
            }
        }
    }

    private static Activity? StartSpan(RedisSubscription inbound, in PublishFrame publish, ulong origin)
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

    /// <summary>
    /// Routes another node's publication here: the same router, forms and flushes as a local one, without a publisher, its queue groups where its
    /// origin gave them.
    /// </summary>
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
    private async Task RepairAsync(RedisSubscription inbound, Gap gap, List<IMessageSink> toFlush)
    {
        try
        {
            if (History!.FindExisting(gap.Publish.TopicString) is { } history)
            {
                SharedRead read = await _history.ReadAsync(history, new Herald.Protocol.StreamPosition(gap.After, gap.Epoch)).ConfigureAwait(false);
                if (read.Epoch == gap.Epoch)
                {
                    foreach ((ulong missed, _, byte[] kept) in read.Entries)
                    {
                        if (missed < gap.Offset && _history.DecodeKept(kept, inbound.Groups) is { } publish)
                        {
                            _metrics.RepairedOne();
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
        _metrics.ReceivedOne(inbound.Shard.Index);
        _brokerMetrics.Delivered(deliveries, ProtocolConstants.MessageHeaderSize + (int)(gap.Publish.Envelope.Length + gap.Publish.Headers.Length));
    }

    /// <summary>A positioned publication held back until the gap before it is read back (<see cref="RepairAsync"/>).</summary>
    private sealed record Gap(PublishFrame Publish, ulong Offset, string Epoch, IMessageSink? Publisher, ulong After, ulong Origin, ReadOnlyMemory<byte> Assignments);

    /// <summary>
    /// A publication Redis positioned (spec cluster.md §9): through its topic's history here, stamped with Redis's offset and epoch.
    /// </summary>
    private int RoutePositioned(HistoryStore histories, in PublishFrame publish, ulong offset, string epoch, IMessageSink? publisher, List<IMessageSink> toFlush, FanoutTally? tally, bool repaired, GroupAssignments groups, out ulong gapAfter)
    {
        if ((publish.Flags & PayloadFlags.Zstd) == 0)
        {
            var routing = new PublishContext(in publish, toFlush) { Origin = publisher, Encoder = _encoder, Tally = tally, Groups = groups };
            return histories.PublishAt(_router, in routing, offset, epoch, _maxFrameBytes, _history.Restores(publish.Topic), repaired, out gapAfter);
        }

        int length = Zstd.Decompress(publish.Payload, _maxPayloadBytes - (int)publish.Headers.Length, out byte[] plain);
        try
        {
            var routing = new PublishContext(in publish, toFlush)
            {
                Origin = publisher,
                Encoder = _encoder,
                PlainPayload = plain.AsSpan(0, length),
                Tally = tally,
                Groups = groups,
            };
            return histories.PublishAt(_router, in routing, offset, epoch, _maxFrameBytes, _history.Restores(publish.Topic), repaired, out gapAfter);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(plain);
        }
    }

    /// <summary>Through this node's topic histories when it keeps any (so they hold the other nodes' publications too), else the router.</summary>
    private int RouteHere(in PublishFrame publish, List<IMessageSink> toFlush, ReadOnlySpan<byte> plainPayload, FanoutTally? tally, GroupAssignments groups)
    {
        var routing = new PublishContext(in publish, toFlush) { Encoder = _encoder, PlainPayload = plainPayload, Tally = tally, Groups = groups };
        return History is { Shared: false } history ? history.Publish(_router, in routing, _maxFrameBytes) : _router.Publish(in routing);
    }

    /// <summary>
    /// A copy an old subscription already delivered: from <paramref name="origin"/>, at or below the last
    /// sequence number it delivered from there, on a topic it covered. A later number from an origin means
    /// every copy from it is past: its entry goes, and the table with its last entry.
    /// </summary>
    private static bool SkipCopy(RedisSubscription inbound, List<Handover> skip, ulong origin, ulong sequence, in ReadOnlySequence<byte> topic)
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
}
