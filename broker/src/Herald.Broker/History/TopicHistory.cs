using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Routing;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.History;

/// <summary>
/// What Redis holds of a topic for a cluster resume (spec cluster.md §9): its epoch and last offset, Redis's clock (Unix ms), and the entries
/// after the asked position (offset, when kept, the publishing node's envelope), as many as the reader's budget (its connection's pending
/// limit) allows; <c>Cut</c> when the read stopped at that budget before the topic's last offset.
/// </summary>
internal sealed record SharedRead(string Epoch, ulong Top, long NowMs, IReadOnlyList<(ulong Offset, long Ms, byte[] Envelope)> Entries, bool Cut = false);

/// <summary>What a resume found (spec §13): the status MESSAGE's code and description, and the position live delivery starts after.</summary>
internal readonly record struct ResumeOutcome(bool Recovered, string Description, StreamPosition Top, int Replayed);

/// <summary>
/// One topic's history (spec §13): the MESSAGE frames of its last publications, each stamped with its offset and
/// the history's epoch, bounded by its rule and the store's byte budget. Its gate orders everything on the topic:
/// a publication takes its offset, is routed to the live subscribers and is kept, all under the gate, so offsets
/// follow delivery order; a resume adds its subscription and queues what it missed under the same gate, so it gets
/// every offset after its position exactly once, replayed or live, never both.
/// </summary>
/// <remarks>
/// Lock order: this gate, then a session's subscription gate (the resume's <c>add</c>), then a backlog's; never
/// the other way. Work under the gate is what routing does anyway (queue to each subscriber); only topics that
/// keep a history take it, one gate per topic.
/// </remarks>
internal sealed class TopicHistory
{
    /// <summary>What one kept message costs besides its buffer (the entry, the queue slot), for the byte budget.</summary>
    public const int EntryOverhead = 48;

    /// <summary>
    /// The most a position adds to a header block: the map header growing (2), <c>Herald-Offset</c> with a 20-digit
    /// value (14 + 1 + 21), <c>Herald-Epoch</c> with a 64-byte epoch (13 + 1 + 66).
    /// </summary>
    public const int MaxStampBytes = 2 + 36 + 80;

    private readonly Lock _gate = new();
    private readonly HistoryStore _store;
    private readonly HistoryRule _rule;
    private readonly byte[] _name; // the topic as it travels
    private readonly Queue<Entry> _entries = new();
    private ulong _last;
    private long _bytes; // what _entries cost, against the rule's MaxBytes
    private bool _evicted;
    private string _epoch;
    private long _generation; // the node's Redis restores when this history last routed
    private List<(Subscription Held, ulong After)>? _joining; // cluster resumes waiting for the live stream to pass their replay

    /// <param name="epoch">This node's own epoch; empty for a history fed by the cluster, whose epoch Redis gives.</param>
    public TopicHistory(HistoryStore store, string topic, HistoryRule rule, string epoch)
    {
        _store = store;
        Topic = topic;
        _name = System.Text.Encoding.UTF8.GetBytes(topic);
        _rule = rule;
        _epoch = epoch;
    }

    public string Topic { get; }

    public HistoryRule Rule => _rule;

    /// <summary>
    /// On one node, fixed: an evicted topic comes back with another <see cref="TopicHistory"/> and epoch. Fed by the
    /// cluster, the epoch of the last publication routed here (Redis's), empty before the first.
    /// </summary>
    public string Epoch
    {
        get
        {
            lock (_gate)
            {
                return _epoch;
            }
        }
    }

    /// <summary>Set by each publication, cleared by the store's eviction hand: a topic published since it last passed is spared (CLOCK).</summary>
    public bool Referenced { get; set; } = true;

    /// <summary>
    /// Routes one publication with its position stamped in (<c>Herald-Offset</c>, <c>Herald-Epoch</c> appended to
    /// its header block, once) and keeps its MESSAGE. False when this history was evicted meanwhile: the caller
    /// asks the store again. A publication whose stamped MESSAGE would not fit <paramref name="maxFrame"/> is
    /// refused with <c>FrameTooLarge</c> before it takes an offset.
    /// </summary>
    public bool TryPublish(TopicRouter router, in PublishContext context, int maxFrame, out int deliveries)
    {
        deliveries = 0;
        lock (_gate)
        {
            if (_evicted)
            {
                return false;
            }

            ulong offset = _last + 1;
            PublishFrame stamped = Stamp(context.Publication, offset, _epoch, maxFrame);
            _last = offset;
            deliveries = router.Publish(context.For(stamped, context.ReceivedAt), out MessageBuffer kept);
            Keep(offset, kept);
            Referenced = true;
        }

        if (_store.OverBudget)
        {
            _store.EvictForBudget();
        }

        return true;
    }

    /// <summary>
    /// Cluster (spec cluster.md §9): routes a publication whose offset and epoch Redis gave, in the order Redis
    /// published them, and keeps it as a bridge for resumes on this node. A copy at or below the last offset routed
    /// is skipped; a gap (this node missed some: its interest began later, or Redis dropped them) or a new epoch
    /// starts what is kept here afresh. A cluster resume waiting for the live stream joins it at the first offset
    /// past its replay.
    /// </summary>
    /// <param name="generation">How many times the node's connection to Redis was restored so far.</param>
    /// <param name="repaired">The caller already read back what the stream held of a gap (<paramref name="gapAfter"/>): route, gap or not.</param>
    /// <param name="gapAfter">With -2: the offset after which this node missed publications across a Redis outage (a restore since this
    /// history last routed); the caller reads them back from the stream, routes them, then this publication again.</param>
    /// <param name="context">The routing; its <see cref="PublishContext.Groups"/> say where the publication's origin gave its queue groups
    /// (spec cluster.md §11). Routed with no fan-out latency sample (the publication was read on another node).</param>
    /// <returns>The deliveries; -1: this history was evicted (ask the store again); -2: a gap to read back first, nothing routed.</returns>
    public int PublishAt(TopicRouter router, in PublishContext context, ulong offset, string epoch, int maxFrame, long generation, bool repaired, out ulong gapAfter)
    {
        int deliveries;
        gapAfter = 0;
        lock (_gate)
        {
            if (_evicted)
            {
                return -1;
            }

            if (!repaired && _epoch == epoch && _last > 0 && offset > _last + 1 && _generation < generation)
            {
                gapAfter = _last;
                return -2;
            }

            _generation = generation;

            if (epoch != _epoch)
            {
                DropAll();
                _epoch = epoch;
                _last = offset - 1;
            }
            else if (offset <= _last)
            {
                return 0; // a copy of what was routed
            }
            else if (offset != _last + 1)
            {
                DropAll(); // a gap: what is kept no longer runs without one
            }

            Join(offset);
            PublishFrame stamped = Stamp(context.Publication, offset, epoch, maxFrame);
            _last = offset;
            deliveries = router.Publish(context.For(stamped, receivedAt: 0), out MessageBuffer kept);
            Keep(offset, kept);
            Referenced = true;
        }

        if (_store.OverBudget)
        {
            _store.EvictForBudget();
        }

        return deliveries;
    }

    /// <summary>
    /// Cluster resume (spec cluster.md §9), once Redis answered: under the gate, decides the status from what Redis
    /// holds (<paramref name="read"/>, read after this node's interest in the topic was settled), queues it, then
    /// the missed publications Redis kept (<paramref name="decode"/> turns an entry into its PUBLISH) and those this
    /// node routed since the read, and lets <paramref name="held"/> join the live stream right after them.
    /// </summary>
    public ResumeOutcome ResumeShared(StreamPosition since, SharedRead read, Subscription held, IMessageSink sink, List<IMessageSink> toFlush, int maxPayload, int maxFrame, Func<byte[], PublishFrame?> decode)
    {
        lock (_gate)
        {
            var redisTop = new StreamPosition(read.Top, read.Epoch);
            ulong needed = since.Offset + 1;
            bool continuous = read.Entries.Count > 0 && read.Entries[0].Offset == needed && (read.Entries[^1].Offset == read.Top || read.Cut)
                && read.Entries[0].Ms >= read.NowMs - (long)_rule.MaxAge.TotalMilliseconds;
            bool bridged = _epoch == read.Epoch && _last >= read.Top;
            bool bridgeKept = !bridged || _last == read.Top || (_entries.TryPeek(out Entry first) && first.Offset <= read.Top + 1);
            StreamPosition top = bridged ? new StreamPosition(_last, _epoch) : redisTop;
            ResumeOutcome outcome = since switch
            {
                { IsNone: true } => new(true, "Live", top, 0),
                _ when since.Epoch != read.Epoch => new(false, $"History lost: epoch {since.Epoch} is not the topic's ({read.Epoch}); Redis lost it or it expired", top, 0),
                _ when since.Offset > read.Top => new(false, $"Position {since.Offset} is ahead of the topic's last offset {read.Top}", top, 0),
                _ when since.Offset < read.Top && !continuous => new(false, $"Too old: the history no longer holds offset {needed} (last {read.Top})", top, 0),
                _ when !bridgeKept => new(false, $"Too old: this node no longer holds offsets {read.Top + 1} to {_last}", top, 0),
                _ when read.Cut => new(false, $"Too much to replay: more was missed after offset {since.Offset} than this connection may have queued (Herald:Limits:MaxPendingMessages, MaxPendingBytes)", top, 0),
                _ => new(true, "Recovered", top, (int)(top.Offset - since.Offset)),
            };

            Status(sink, held.Sid, Topic, outcome, toFlush);
            if (outcome.Recovered && !since.IsNone)
            {
                foreach ((ulong offset, _, byte[] envelope) in read.Entries)
                {
                    if (offset > since.Offset && decode(envelope) is { } publish && IsOf(publish))
                    {
                        MessageBuffer frame = MessageEncoder.Encode(Stamp(publish, offset, read.Epoch, maxFrame), publish.Flags, publish.Payload.IsSingleSegment ? publish.Payload.FirstSpan : publish.Payload.ToArray());
                        Deliver(sink, held.Sid, frame, toFlush, maxPayload);
                        frame.Release();
                    }
                }

                if (bridged)
                {
                    foreach (Entry entry in _entries)
                    {
                        if (entry.Offset > read.Top)
                        {
                            Deliver(sink, held.Sid, entry.Frame, toFlush, maxPayload);
                        }
                    }
                }
            }

            if (bridged)
            {
                held.Held = false; // the live stream here is past the replay: it joins now
            }
            else
            {
                _joining?.RemoveAll(j => !j.Held.Held); // unsubscribed meanwhile
                (_joining ??= []).Add((held, read.Top)); // joins at the first publication routed past Redis's top
            }

            return outcome;
        }
    }

    /// <summary>
    /// A SUBSCRIBE with <c>since</c> (spec §13): under the gate, <paramref name="add"/> makes the subscription live
    /// (false: it was refused, nothing more happens), then the status MESSAGE and, when recovered, every kept
    /// message after <paramref name="since"/> are queued to <paramref name="sink"/> for <paramref name="sid"/>,
    /// ahead of anything published after.
    /// </summary>
    public ResumeOutcome? Resume(StreamPosition since, Func<bool> add, IMessageSink sink, uint sid, List<IMessageSink> toFlush, int maxPayload)
    {
        lock (_gate)
        {
            if (!add())
            {
                return null;
            }

            Trim(Stopwatch.GetTimestamp());
            var top = new StreamPosition(_last, _epoch);
            ulong oldest = _entries.TryPeek(out Entry first) ? first.Offset : _last + 1;
            ResumeOutcome outcome = since switch
            {
                { IsNone: true } => new(true, "Live", top, 0),
                _ when since.Epoch != _epoch => new(false, $"History lost: epoch {since.Epoch} is not the topic's ({_epoch}); the broker restarted or evicted it", top, 0),
                _ when since.Offset > _last => new(false, $"Position {since.Offset} is ahead of the topic's last offset {_last}", top, 0),
                _ when since.Offset + 1 < oldest => new(false, $"Too old: the history keeps offsets {oldest} to {_last}, and {since.Offset + 1} was asked for", top, 0),
                _ => new(true, "Recovered", top, (int)(_last - since.Offset)),
            };

            Status(sink, sid, Topic, outcome, toFlush);
            if (outcome.Replayed > 0)
            {
                foreach (Entry entry in _entries)
                {
                    if (entry.Offset > since.Offset)
                    {
                        Deliver(sink, sid, entry.Frame, toFlush, maxPayload);
                    }
                }
            }

            return outcome;
        }
    }

    /// <summary>
    /// The server API's read by position: the epoch, the last offset, and copies of at most <paramref name="max"/> of the
    /// kept MESSAGE frames after <paramref name="after"/>, oldest first. Under the gate, as a resume reads.
    /// </summary>
    public (string Epoch, ulong Last, List<(ulong Offset, byte[] Frame)> Entries) Read(ulong after, int max)
    {
        lock (_gate)
        {
            Trim(Stopwatch.GetTimestamp());
            var entries = new List<(ulong Offset, byte[] Frame)>(Math.Min(max, _entries.Count));
            foreach (Entry entry in _entries)
            {
                if (entry.Offset > after && entries.Count < max)
                {
                    entries.Add((entry.Offset, entry.Frame.Span.ToArray()));
                }
            }

            return (_epoch, _last, entries);
        }
    }

    /// <summary>Drops what is older than the rule's age. Called by the store's sweep; any thread.</summary>
    public void Sweep(long now)
    {
        lock (_gate)
        {
            Trim(now);
        }
    }

    /// <summary>Drops every kept message; with <paramref name="retire"/>, the history is gone (its topic gets a new one, with a new epoch).</summary>
    public void Clear(bool retire)
    {
        lock (_gate)
        {
            _evicted |= retire;
            DropAll();
            if (retire)
            {
                Join(ulong.MaxValue); // nothing more is routed through this history: waiting resumes go live now
            }
        }
    }

    /// <summary>Lets every waiting cluster resume whose replay ends before <paramref name="offset"/> join the live stream.</summary>
    private void Join(ulong offset)
    {
        if (_joining is null)
        {
            return;
        }

        _joining.RemoveAll(j =>
        {
            if (j.After >= offset)
            {
                return false;
            }

            j.Held.Held = false;
            return true;
        });
        if (_joining.Count == 0)
        {
            _joining = null;
        }
    }

    private void DropAll()
    {
        while (_entries.Count > 0)
        {
            DropOldest();
        }
    }

    /// <summary>The publication with its position appended to its header block (built once); <c>FrameTooLarge</c> when its MESSAGE would pass <paramref name="maxFrame"/>.</summary>
    private PublishFrame Stamp(in PublishFrame publish, ulong offset, string epoch, int maxFrame)
    {
        byte[] block = HeaderBlock.Append(publish.Headers,
        [
            new(StreamPosition.OffsetHeader, offset.ToString(CultureInfo.InvariantCulture)),
            new(StreamPosition.EpochHeader, epoch),
        ]);
        int body = ProtocolConstants.MessageHeaderSize - ProtocolConstants.LengthPrefixSize + (int)publish.Envelope.Length + block.Length;
        if (body > maxFrame)
        {
            throw new ProtocolException(ErrorCode.FrameTooLarge, $"Topic '{Topic}' keeps a history: its MESSAGE, with the position the broker stamps in ({block.Length - publish.Headers.Length} bytes), would be {body} bytes, over max_frame ({maxFrame}).");
        }

        return publish with { Headers = new ReadOnlySequence<byte>(block), HeaderValues = publish.HeaderValues + 2 };
    }

    private void Keep(ulong offset, MessageBuffer frame)
    {
        int cost = frame.Capacity + EntryOverhead;
        _entries.Enqueue(new Entry(offset, Stopwatch.GetTimestamp(), frame, cost));
        _bytes += cost;
        _store.Added(cost);
        Trim(Stopwatch.GetTimestamp());
        while (_entries.Count > 1 && _store.OverBudget)
        {
            DropOldest(); // this topic pays first for the budget it takes
        }
    }

    private void Trim(long now)
    {
        long maxAge = (long)(_rule.MaxAge.TotalSeconds * Stopwatch.Frequency);
        while (_entries.TryPeek(out Entry oldest) && (_entries.Count > _rule.MaxMessages || now - oldest.At > maxAge || (_bytes > _rule.MaxBytes && _entries.Count > 1)))
        {
            DropOldest();
        }
    }

    private void DropOldest()
    {
        Entry oldest = _entries.Dequeue();
        _bytes -= oldest.Cost;
        _store.Removed(oldest.Cost);
        oldest.Frame.Release();
    }

    /// <summary>The resume's answer (spec §13): a MESSAGE on <paramref name="topic"/> with an empty payload and the status headers.</summary>
    internal static void Status(IMessageSink sink, uint sid, string topic, ResumeOutcome outcome, List<IMessageSink> toFlush)
    {
        byte[] headers = HeaderBlock.Encode(
        [
            new(StreamPosition.StatusHeader, [outcome.Recovered ? StreamPosition.Recovered : StreamPosition.NotRecovered]),
            new(StreamPosition.DescriptionHeader, [outcome.Description]),
            new(StreamPosition.OffsetHeader, [outcome.Top.Offset.ToString(CultureInfo.InvariantCulture)]),
            new(StreamPosition.EpochHeader, [outcome.Top.Epoch]),
        ]);
        byte[] name = System.Text.Encoding.ASCII.GetBytes(topic);
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(name.Length, 0, PayloadFlags.None, 0) + headers.Length);
        FrameWriter.WriteMessage(new MessageBufferWriter(frame), 0, name, default, PayloadFlags.None, default, headers);
        Enqueue(sink, sid, frame, toFlush);
    }

    /// <summary>A kept MESSAGE to one resuming subscriber: the same bytes, or (kept compressed, for a subscriber without Zstd) its plain form.</summary>
    private static void Deliver(IMessageSink sink, uint sid, MessageBuffer kept, List<IMessageSink> toFlush, int maxPayload)
    {
        if (sink.AcceptsZstd || !IsCompressed(kept))
        {
            kept.Retain(1);
            Enqueue(sink, sid, kept, toFlush);
            return;
        }

        var reader = new MessagePackReader(kept.Memory[ProtocolConstants.LengthPrefixSize..]);
        FrameDecoder.ReadHeader(ref reader, out int count);
        PublishFrame message = FrameDecoder.ReadMessage(ref reader, count);
        int length = Zstd.Decompress(message.Payload, maxPayload, out byte[] plain);
        try
        {
            Enqueue(sink, sid, MessageEncoder.Encode(message, PayloadFlags.None, plain.AsSpan(0, length)), toFlush);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(plain);
        }
    }

    private static bool IsCompressed(MessageBuffer frame)
    {
        var reader = new MessagePackReader(frame.Memory[ProtocolConstants.MessageHeaderSize..]);
        reader.Skip(); // topic
        reader.Skip(); // reply_to
        return (reader.ReadUInt32() & (uint)PayloadFlags.Zstd) != 0;
    }

    private static void Enqueue(IMessageSink sink, uint sid, MessageBuffer frame, List<IMessageSink> toFlush)
    {
        if ((sink.Enqueue(frame, sid) & Enqueued.Wake) != 0)
        {
            toFlush.Add(sink);
        }
    }

    /// <summary>
    /// Whether a publication read back from the shared history is of this topic: an entry's envelope is checked as a
    /// node's (signed, with <c>Cluster:Secret</c>), and its topic must be this one, so a node's genuine publication
    /// copied into another topic's stream is never replayed to that topic's readers.
    /// </summary>
    private bool IsOf(in PublishFrame publish)
    {
        ReadOnlySequence<byte> topic = publish.Topic;
        return topic.IsSingleSegment ? topic.FirstSpan.SequenceEqual(_name) : topic.ToArray().AsSpan().SequenceEqual(_name);
    }

    private readonly record struct Entry(ulong Offset, long At, MessageBuffer Frame, int Cost);
}
