using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Routing;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.History;

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

    private readonly Lock _gate = new();
    private readonly HistoryStore _store;
    private readonly HistoryRule _rule;
    private readonly Queue<Entry> _entries = new();
    private ulong _last;
    private long _bytes;
    private bool _evicted;

    public TopicHistory(HistoryStore store, string topic, HistoryRule rule, string epoch)
    {
        _store = store;
        Topic = topic;
        _rule = rule;
        Epoch = epoch;
    }

    public string Topic { get; }

    /// <summary>Changes only with a new <see cref="TopicHistory"/>: an evicted topic comes back with another.</summary>
    public string Epoch { get; }

    /// <summary>Set by each publication, cleared by the store's eviction hand: a topic published since it last passed is spared (CLOCK).</summary>
    public bool Referenced { get; set; } = true;

    /// <summary>The offset of the last publication, and this history's epoch.</summary>
    public StreamPosition Top
    {
        get
        {
            lock (_gate)
            {
                return new StreamPosition(_last, Epoch);
            }
        }
    }

    /// <summary>Bytes this history holds (its part of the store's budget).</summary>
    public long Bytes
    {
        get
        {
            lock (_gate)
            {
                return _bytes;
            }
        }
    }

    public int Count
    {
        get
        {
            lock (_gate)
            {
                return _entries.Count;
            }
        }
    }

    /// <summary>
    /// Routes one publication with its position stamped in (<c>Herald-Offset</c>, <c>Herald-Epoch</c> appended to
    /// its header block, once) and keeps its MESSAGE. False when this history was evicted meanwhile: the caller
    /// asks the store again. A publication whose stamped MESSAGE would not fit <paramref name="maxFrame"/> is
    /// refused with <c>FrameTooLarge</c> before it takes an offset.
    /// </summary>
    public bool TryPublish(TopicRouter router, in PublishFrame publish, IMessageSink? origin, List<IMessageSink> toFlush, MessageEncoder encoder, ReadOnlySpan<byte> plainPayload, long receivedAt, FanoutTally? tally, int maxFrame, out int deliveries)
    {
        deliveries = 0;
        lock (_gate)
        {
            if (_evicted)
            {
                return false;
            }

            ulong offset = _last + 1;
            byte[] block = HeaderBlock.Append(publish.Headers,
            [
                new(StreamPosition.OffsetHeader, offset.ToString(CultureInfo.InvariantCulture)),
                new(StreamPosition.EpochHeader, Epoch),
            ]);
            int body = ProtocolConstants.MessageHeaderSize - ProtocolConstants.LengthPrefixSize + (int)publish.Envelope.Length + block.Length;
            if (body > maxFrame)
            {
                throw new ProtocolException(ErrorCode.FrameTooLarge, $"Topic '{Topic}' keeps a history: its MESSAGE, with the position the broker stamps in ({block.Length - publish.Headers.Length} bytes), would be {body} bytes, over max_frame ({maxFrame}).");
            }

            _last = offset;
            PublishFrame stamped = publish with { Headers = new ReadOnlySequence<byte>(block), HeaderValues = publish.HeaderValues + 2 };
            deliveries = router.Publish(stamped, origin, toFlush, encoder, plainPayload, receivedAt, tally, out MessageBuffer kept);
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
            var top = new StreamPosition(_last, Epoch);
            ulong oldest = _entries.TryPeek(out Entry first) ? first.Offset : _last + 1;
            ResumeOutcome outcome = since switch
            {
                { IsNone: true } => new(true, "Live", top, 0),
                _ when since.Epoch != Epoch => new(false, $"History lost: epoch {since.Epoch} is not the topic's ({Epoch}); the broker restarted or evicted it", top, 0),
                _ when since.Offset > _last => new(false, $"Position {since.Offset} is ahead of the topic's last offset {_last}", top, 0),
                _ when since.Offset + 1 < oldest => new(false, $"Too old: the history keeps offsets {oldest} to {_last}, and {since.Offset + 1} was asked for", top, 0),
                _ => new(true, "Recovered", top, (int)(_last - since.Offset)),
            };

            Status(sink, sid, outcome, toFlush);
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
            while (_entries.Count > 0)
            {
                DropOldest();
            }
        }
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
        while (_entries.TryPeek(out Entry oldest) && (_entries.Count > _rule.MaxMessages || now - oldest.At > maxAge))
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

    /// <summary>The resume's answer (spec §13): a MESSAGE on the topic with an empty payload and the status headers.</summary>
    private void Status(IMessageSink sink, uint sid, ResumeOutcome outcome, List<IMessageSink> toFlush)
    {
        byte[] headers = HeaderBlock.Encode(
        [
            new(StreamPosition.StatusHeader, [outcome.Recovered ? StreamPosition.Recovered : StreamPosition.NotRecovered]),
            new(StreamPosition.DescriptionHeader, [outcome.Description]),
            new(StreamPosition.OffsetHeader, [outcome.Top.Offset.ToString(CultureInfo.InvariantCulture)]),
            new(StreamPosition.EpochHeader, [outcome.Top.Epoch]),
        ]);
        byte[] topic = System.Text.Encoding.ASCII.GetBytes(Topic);
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(topic.Length, 0, PayloadFlags.None, 0) + headers.Length);
        FrameWriter.WriteMessage(new MessageBufferWriter(frame), 0, topic, default, PayloadFlags.None, default, headers);
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

    private readonly record struct Entry(ulong Offset, long At, MessageBuffer Frame, int Cost);
}
