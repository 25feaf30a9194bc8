namespace Herald.Broker.Delivery;

/// <summary>
/// Window reading (long-poll, protocol-spec/longpoll.md §2): every frame keeps its sequence number until the client
/// acknowledges it, and losses the backlog is told of are kept among the messages as <see cref="LossMark"/>s, so a
/// poll reports them where they happened and a lost response brings them again.
/// </summary>
internal sealed partial class SubscriberBacklog
{
    /// <summary>
    /// Window reading: releases every message (and loss mark) at or below <paramref name="ack"/>. Throws
    /// <see cref="ArgumentOutOfRangeException"/> for an ack above the last sequence assigned or below 0.
    /// </summary>
    public void Acknowledge(long ack)
    {
        lock (_gate)
        {
            long lastAssigned = _headSequence + _ring.Count - 1;
            if (ack > lastAssigned || ack < 0)
            {
                throw new ArgumentOutOfRangeException(nameof(ack), $"ack {ack} is not between 0 and the last sequence assigned, {lastAssigned}.");
            }

            _highestAck = Math.Max(_highestAck, ack);
            while (_ring.Count > 0 && _headSequence <= ack)
            {
                if (_ring[0].Sid != ControlSid)
                {
                    _deltas?.Advance(_ring[0]); // in a window, the cursors are what the client acknowledged
                }

                DropHead();
            }
        }
    }

    /// <summary>
    /// Window reading: the messages above <paramref name="ack"/> (at most <paramref name="maxMessages"/> and,
    /// past the first, <paramref name="maxBytes"/>), each retained once for the caller, which releases them
    /// after use. They stay in the backlog until acknowledged. The loss marks at the start are reported in the take
    /// (<see cref="WindowTake.Dropped"/>, <see cref="WindowTake.Gaps"/>; its first sequence is the one after them,
    /// and it may hold no message) and a later mark ends it, so each mark is reported where it lies; with
    /// <paramref name="marksAsEntries"/> (a shared session's pump, which copies entries as they are) marks are
    /// taken as entries. With nothing above <paramref name="ack"/>, returns <c>false</c> and the reader is idle
    /// (the next enqueue wakes it).
    /// </summary>
    public bool TakeAbove(long ack, int maxMessages, long maxBytes, out WindowTake take, bool marksAsEntries = false)
    {
        lock (_gate)
        {
            int skip = (int)Math.Max(0, ack + 1 - _headSequence);
            int acknowledged = skip;
            if (skip >= _ring.Count)
            {
                _signalled = false;
                take = default;
                return false;
            }

            // Messages between what the client has ever acknowledged and the head were dropped, not delivered.
            long dropped = Math.Max(0, _headSequence + skip - 1 - Math.Max(_highestAck, ack));
            LossMark loss = LossMark.None;
            while (!marksAsEntries && skip < _ring.Count && _ring[skip].Sid == LossMark.Sid)
            {
                loss = loss.Merge(LossMark.Read(_ring[skip].Frame.Span));
                skip++;
            }

            int count = 0;
            long bytes = 0;
            while (skip + count < _ring.Count && count < maxMessages)
            {
                QueuedFrame entry = _ring[skip + count];
                if ((count > 0 && bytes + entry.Frame.Length > maxBytes) || (!marksAsEntries && entry.Sid == LossMark.Sid))
                {
                    break;
                }

                bytes += entry.Frame.Length;
                count++;
            }

            var frames = new QueuedFrame[count];
            for (int i = 0; i < count; i++)
            {
                frames[i] = _ring[skip + i];
                frames[i].Frame.Retain(1); // the caller's own reference: an ack may release the backlog's meanwhile
            }

            bytes += PickWindowDeltas(frames, acknowledged, marksAsEntries); // a full frame for a delta is longer: the body's length says so

            long first = _headSequence + skip;
            bool redelivery = (count > 0 ? first : first - 1) <= _highestSent;
            _highestSent = Math.Max(_highestSent, first + count - 1);
            _signalled &= count > 0; // marks alone: the next message wakes the reader
            take = new WindowTake(first, frames, bytes, dropped + loss.Dropped, redelivery) { Gaps = loss.Gaps };
            _slowEpisode &= skip + count < _ring.Count; // taken up to the newest: caught up, a later overflow is a new episode
            return true;
        }
    }

    /// <summary>
    /// A window take's deltas (spec §11.2): each goes as is only if its sid holds the base once the client has what it
    /// acknowledged (the first <paramref name="acknowledged"/> entries, not yet released) and what comes before it in
    /// the take, else its full frame. Picked from the acknowledged state every time, so a take served again is the
    /// same bytes; a shared session's pump (<paramref name="asEntries"/>) is never given deltas. Returns how many bytes
    /// the take grew by.
    /// </summary>
    /// <remarks>Caller holds _gate.</remarks>
    private long PickWindowDeltas(QueuedFrame[] frames, int acknowledged, bool asEntries)
    {
        if (_deltas is not { } deltas || frames.Length == 0 || asEntries)
        {
            return 0;
        }

        DeltaCursors client = deltas.Copy();
        for (int i = 0; i < acknowledged; i++)
        {
            if (_ring[i].Sid != ControlSid)
            {
                client.Advance(_ring[i]);
            }
        }

        long grown = 0;
        for (int i = 0; i < frames.Length; i++)
        {
            if (frames[i].Sid != ControlSid)
            {
                int before = frames[i].Frame.Length;
                frames[i] = client.Pick(frames[i]);
                grown += frames[i].Frame.Length - before;
            }
        }

        return grown;
    }

    /// <summary>
    /// A window's loss: a mark after the messages queued, joined to the last entry if that is a mark no poll has taken yet
    /// (so marks are never more than one per take or message). Counted now, as a drop is.
    /// </summary>
    private Enqueued MarkLost(LossMark loss)
    {
        bool wake;
        lock (_gate)
        {
            if (_refusing)
            {
                return Enqueued.Dropped;
            }

            _droppedTotal += loss.Dropped;
            int last = _ring.Count - 1;
            if (last >= 0 && _ring[last].Sid == LossMark.Sid && _headSequence + last > _highestSent)
            {
                ref QueuedFrame tail = ref _ring[last];
                MessageBuffer frame = LossMark.Read(tail.Frame.Span).Merge(loss).ToFrame();
                AddPendingBytes(frame.Length - tail.Frame.Length);
                tail.Frame.Release();
                tail = new QueuedFrame(frame, LossMark.Sid);
                wake = false;
            }
            else
            {
                wake = true;
            }
        }

        _metrics.Dropped(loss.Dropped);
        return wake ? Push(loss.ToFrame(), LossMark.Sid) : Enqueued.Queued;
    }

    // Caller holds _gate. A mark dropped from the front of a window joins the one kept before it; the sequence it held
    // reads as one dropped message from then on, so its count is one less.
    private void MergeKeptMark(ref QueuedFrame kept, QueuedFrame dropped)
    {
        LossMark merged = LossMark.Read(kept.Frame.Span).Merge(LossMark.Read(dropped.Frame.Span));
        MessageBuffer frame = (merged with { Dropped = Math.Max(0, merged.Dropped - 1) }).ToFrame();
        AddPendingBytes(frame.Length - kept.Frame.Length);
        kept.Frame.Release();
        kept = new QueuedFrame(frame, LossMark.Sid);
    }
}

/// <summary>
/// What one window take holds: consecutive frames from <see cref="FirstSequence"/>, each retained for the
/// caller; <see cref="Dropped"/> messages were lost just before them (to the slow-consumer policy, or counted as
/// lost on their way), and the subscriptions in <see cref="Gaps"/> may have lost an unknown number.
/// </summary>
internal readonly record struct WindowTake(long FirstSequence, QueuedFrame[] Frames, long Bytes, long Dropped, bool Redelivery)
{
    /// <summary>The sids that may have lost messages just before this take, how many unknown (longpoll §2); null or empty: none.</summary>
    public uint[]? Gaps { get; init; }

    /// <summary>An empty answer to a poll that acknowledged <paramref name="ack"/>.</summary>
    public static WindowTake Empty(long ack) => new(ack + 1, [], 0, 0, false);

    public int Count => Frames?.Length ?? 0;

    /// <summary>The ack that takes in the first <paramref name="count"/> frames and every mark before them.</summary>
    public long AckAfter(int count, long ack) => Math.Max(ack, FirstSequence + count - 1);

    /// <summary>Releases the references taken for the caller, once it has written them.</summary>
    public void Release()
    {
        if (Frames is null)
        {
            return;
        }

        foreach (QueuedFrame frame in Frames)
        {
            frame.Frame.Release();
        }
    }
}
