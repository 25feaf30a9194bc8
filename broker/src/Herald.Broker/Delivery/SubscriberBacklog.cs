using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Delivery;

/// <summary>What a subscriber's backlog does when it is over its limits (spec §6.3, longpoll §3).</summary>
public enum SlowConsumerPolicy
{
    /// <summary>Discard the backlog and close the subscriber (a fatal SlowConsumer ERROR on TCP, 410 on long-poll).</summary>
    Disconnect,

    /// <summary>Discard the oldest messages and tell the subscriber how many it missed.</summary>
    DropOldest,
}

/// <summary>
/// The limits one backlog enforces: messages and bytes waiting, and what happens beyond them; with
/// <paramref name="Shared"/>, also its share of a budget several backlogs hold together.
/// </summary>
internal readonly record struct BacklogLimits(int MaxMessages, int MaxBytes, SlowConsumerPolicy Policy, PendingBudget? Shared = null);

/// <summary>
/// The reading side of a <see cref="SubscriberBacklog"/>: a stream's <see cref="PipeDrain{TFormat}"/> (TCP, WebSocket, Server-Sent Events), a
/// long-poll session's poll window. Told once each time frames start waiting after it went idle.
/// </summary>
internal interface IBacklogReader
{
    /// <summary>Frames are waiting. <paramref name="inline"/>: start on the calling thread; else on the pool.</summary>
    void Wake(bool inline);
}

/// <summary>
/// Every subscriber's one queue, whatever its transport: the frames the router (and the session's own
/// control frames) queued for it, by reference, in order, until its transport has taken them. One set of
/// limits, one set of slow-consumer policies, one count of drops and of the memory it holds.
/// </summary>
/// <remarks>
/// <para>
/// Publishers append (frame reference, sid) pairs under <c>_gate</c>: an O(1) critical section, no I/O.
/// The first append after the reader went idle returns <c>true</c>; that publisher calls
/// <see cref="Flush"/> or <see cref="ScheduleFlush"/> once at the end of its batch, which wakes the reader
/// (flushes are coalesced per batch, never per message). The reader takes frames in one of two ways:
/// </para>
/// <list type="bullet">
/// <item>a stream (<see cref="Take"/>): the oldest frames, a bounded batch at a time, into a socket; frames leave as they are taken;</item>
/// <item>a window (<see cref="Acknowledge"/>, <see cref="TakeAbove"/>): every frame has a sequence number and stays,
/// counted against the limits, until the client acknowledges it (long-poll: a lost response is sent again).</item>
/// </list>
/// <para>
/// Control frames (WELCOME, PING, PONG, non-fatal ERROR: the session's replies) are queued in order with
/// the messages and count against the same limits, so what a client asks for costs it as what it is sent
/// does (spec §6.3). They are never dropped by <see cref="SlowConsumerPolicy.DropOldest"/>: a client that
/// asks faster than it reads is held back instead, its transport reading no more input while
/// <see cref="PendingReplies"/> is at its bound (<see cref="WhenRepliesBelow"/>). Drops are counted when
/// they happen.
/// </para>
/// </remarks>
internal sealed partial class SubscriberBacklog : IMessageSink
{
    private const uint ControlSid = FrameCopy.ControlSid;

    private readonly BacklogLimits _limits;
    private readonly Action _onSlowConsumer;
    private readonly BrokerMetrics _metrics;
    private readonly Lock _gate = new();
    private IBacklogReader? _reader;

    // Guarded by _gate. _ring[0] has sequence _headSequence; the rest follow consecutively.
    private FrameRing _ring = new();
    private long _headSequence = 1;
    private long _pendingBytes;
    private int _pendingMessages;
    private int _pendingReplies;
    private TaskCompletionSource? _repliesTaken;
    private long _droppedUnreported;
    private long _shedUnreported;
    private SortedSet<uint>? _gapsUnreported;
    private long _droppedTotal;
    /// <summary>
    /// A DropOldest episode is going on: from its first drop until the reader has taken everything queued. A reader that
    /// takes part of its backlog and falls behind again (a stalled socket accepting a chunk, a subscriber reading at 90 %
    /// of the rate) is one episode, not one per take.
    /// </summary>
    private bool _slowEpisode;
    private long _highestAck;
    private long _highestSent;
    private DeltaCursors? _deltas;
    private bool _signalled;
    private bool _refusing;
    private bool _completing;
    private bool _closed;
    private MessageBuffer? _final;
    private TaskCompletionSource? _drained;
    private bool _readsByWindow;

    public SubscriberBacklog(BacklogLimits limits, BrokerMetrics metrics, Action onSlowConsumer)
    {
        _limits = limits;
        _metrics = metrics;
        _onSlowConsumer = onSlowConsumer;
    }

    /// <inheritdoc/>
    public bool AcceptsZstd { get; set; }

    /// <inheritdoc/>
    public bool AcceptsHeaders { get; set; }

    public BacklogLimits Limits => _limits;

    /// <summary>Who takes the frames. Set once by the transport, before the backlog is subscribed anywhere.</summary>
    public IBacklogReader Reader
    {
        set => _reader = value;
    }

    /// <summary>
    /// Whether a window reads it (a poll window, or a shared session's pump): a loss it is told of
    /// (<see cref="Lost"/>) is then kept as a <see cref="LossMark"/> among the messages. Set once, with <see cref="Reader"/>.
    /// </summary>
    public bool ReadsByWindow
    {
        set => _readsByWindow = value;
    }

    /// <summary>
    /// Frames waiting (messages and the session's replies) and the bytes they hold (monitoring): queued to be
    /// written, or not yet acknowledged. What the slow-consumer limits are checked against.
    /// </summary>
    public (long Messages, long Bytes) Pending
    {
        get
        {
            lock (_gate)
            {
                return (_pendingMessages, _pendingBytes);
            }
        }
    }

    /// <summary>Messages this backlog has dropped (<see cref="SlowConsumerPolicy.DropOldest"/>) since it was made, counted as they were dropped (monitoring).</summary>
    public long Dropped
    {
        get
        {
            lock (_gate)
            {
                return _droppedTotal;
            }
        }
    }

    /// <summary>The session's own replies (control frames) queued and not yet taken by the reader. Any thread, no lock.</summary>
    public int PendingReplies => Volatile.Read(ref _pendingReplies);

    /// <inheritdoc/>
    public Enqueued Enqueue(MessageBuffer frame, uint sid) => Push(frame, sid);

    /// <inheritdoc/>
    public void TrackDelta(uint sid, bool on)
    {
        lock (_gate)
        {
            if (on)
            {
                (_deltas ??= new DeltaCursors()).Track(sid);
            }
            else
            {
                _deltas?.Untrack(sid);
            }
        }
    }

    /// <summary>
    /// Queues one of the session's replies (WELCOME, PING, PONG, a non-fatal ERROR) in order with the
    /// messages, so a PONG also tells the client that everything queued before it has been written. It
    /// counts against the limits as a message does (over them, the slow-consumer policy acts: a
    /// <see cref="SlowConsumerPolicy.DropOldest"/> backlog drops messages to make room, never a reply).
    /// Returns whether to <see cref="Flush"/>.
    /// </summary>
    public bool EnqueueControl(MessageBuffer frame) => (Push(frame, ControlSid) & Enqueued.Wake) != 0;

    /// <summary>
    /// Completes when fewer than <paramref name="bound"/> replies wait (the reader took them), or the backlog
    /// stops accepting frames, or <see cref="CancelWait"/> is called. One waiter at a time: the session's
    /// read loop, holding its client back.
    /// </summary>
    public Task WhenRepliesBelow(int bound)
    {
        lock (_gate)
        {
            if (_pendingReplies < bound || _refusing)
            {
                return Task.CompletedTask;
            }

            _repliesTaken ??= new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            return _repliesTaken.Task;
        }
    }

    /// <summary>Completes a <see cref="WhenRepliesBelow"/> wait now (the session is closing). Any thread.</summary>
    public void CancelWait()
    {
        lock (_gate)
        {
            ReleaseReplyWaiter();
        }
    }

    private Enqueued Push(MessageBuffer frame, uint sid)
    {
        bool slow = false;
        bool episode = false;
        long dropped = 0;
        bool wake;
        lock (_gate)
        {
            if (_refusing)
            {
                frame.Release();
                return Enqueued.Dropped;
            }

            if (IsOverLimits(frame.Length))
            {
                if (_limits.Policy == SlowConsumerPolicy.Disconnect)
                {
                    frame.Release();
                    slow = true;
                    ClearMessages();
                    ReleaseReplyWaiter();
                    _refusing = true; // the session closes; its transport completes the backlog
                }
                else
                {
                    dropped = DropOldestFor(frame.Length);
                    episode = dropped > 0 && !_slowEpisode; // one slow-consumer action per episode, not per drop
                    _slowEpisode |= dropped > 0;
                }
            }

            if (!slow)
            {
                _ring.Push(new QueuedFrame(frame, sid));
                AddPendingBytes(frame.Length);
                _pendingMessages++;
                if (sid == ControlSid)
                {
                    Volatile.Write(ref _pendingReplies, _pendingReplies + 1);
                }
            }

            wake = !slow && !_signalled;
            _signalled |= wake;
        }

        if (dropped > 0)
        {
            _metrics.Dropped(dropped); // counted now, whether or not the subscriber ever reads again
            if (episode)
            {
                _metrics.SlowConsumer(nameof(SlowConsumerPolicy.DropOldest));
            }
        }

        if (slow)
        {
            _metrics.SlowConsumer(nameof(SlowConsumerPolicy.Disconnect));
            _onSlowConsumer(); // the session is closing from now on; its transport ends it off this publisher's thread
            return Enqueued.Dropped;
        }

        return Enqueued.Queued | (wake ? Enqueued.Wake : 0) | (dropped > 0 ? Enqueued.Evicted : 0);
    }

    /// <inheritdoc/>
    public Enqueued Lost(long count)
    {
        if (_readsByWindow)
        {
            return MarkLost(new LossMark(count, []));
        }

        bool wake;
        lock (_gate)
        {
            if (_refusing)
            {
                return Enqueued.Dropped;
            }

            _shedUnreported += count; // told with the next write, as DropOldest's drops are, in words of its own
            _droppedTotal += count;
            wake = !_signalled;
            _signalled |= wake;
        }

        _metrics.Dropped(count);
        return Enqueued.Queued | (wake ? Enqueued.Wake : 0);
    }

    /// <inheritdoc/>
    public Enqueued Gaps(uint[] sids)
    {
        if (_readsByWindow)
        {
            return MarkLost(new LossMark(0, sids));
        }

        bool wake;
        lock (_gate)
        {
            if (_refusing)
            {
                return Enqueued.Dropped;
            }

            (_gapsUnreported ??= []).UnionWith(sids); // told with the next write, as a drop is; at most one entry per live sid
            wake = !_signalled;
            _signalled |= wake;
        }

        return Enqueued.Queued | (wake ? Enqueued.Wake : 0);
    }

    /// <inheritdoc/>
    public void Flush() => _reader?.Wake(inline: true);

    /// <inheritdoc/>
    public void ScheduleFlush() => _reader?.Wake(inline: false);

    /// <summary>
    /// Stream reading: moves the oldest queued frames, up to <paramref name="maxBytes"/> (at least one
    /// frame), into <paramref name="batch"/> (grown if needed) and says how many messages were dropped since
    /// the last take and, once completing and emptied, the final frame. What stays is still counted against
    /// the limits: a reader that takes a bounded batch per write holds at most that batch outside them. When
    /// there is nothing at all, the reader is idle from then on (the next enqueue wakes it) and
    /// <see cref="StreamTake.Idle"/> is true.
    /// </summary>
    public StreamTake Take(ref QueuedFrame[] batch, long maxBytes)
    {
        lock (_gate)
        {
            if (_closed)
            {
                _signalled = false;
                return new StreamTake(0, 0, null, Idle: true);
            }

            int count = 0;
            long bytes = 0;
            int replies = 0;
            while (count < _ring.Count && (count == 0 || bytes + _ring[count].Frame.Length <= maxBytes))
            {
                QueuedFrame entry = _ring[count];
                bytes += entry.Frame.Length;
                replies += entry.Sid == ControlSid ? 1 : 0;
                count++;
            }

            long dropped = _droppedUnreported;
            _droppedUnreported = 0;
            long shed = _shedUnreported;
            _shedUnreported = 0;
            uint[]? gaps = _gapsUnreported is null ? null : [.. _gapsUnreported];
            _gapsUnreported = null;
            if (count > 0)
            {
                _ring.MoveTo(ref batch, count);
                PickDeltas(batch, count);
                _headSequence += count;
                AddPendingBytes(-bytes);
                _pendingMessages -= count;
                Volatile.Write(ref _pendingReplies, _pendingReplies - replies);
                ReleaseReplyWaiter();
                _slowEpisode &= _ring.Count > 0; // caught up: a later overflow is a new episode (a take that leaves a backlog is the same one)
            }

            MessageBuffer? final = null;
            if (_completing && _ring.Count == 0)
            {
                final = _final;
                _final = null;
            }

            if (count == 0 && dropped == 0 && shed == 0 && gaps is null && final is null)
            {
                if (_completing)
                {
                    _closed = true;
                    _drained?.TrySetResult();
                }

                _signalled = false;
                return new StreamTake(0, 0, null, Idle: true);
            }

            return new StreamTake(count, dropped, final, Idle: false) { Shed = shed, Gaps = gaps };
        }
    }

    /// <summary>
    /// Stops accepting frames; a stream reader takes what is queued, then <paramref name="finalFrame"/> (if
    /// any, e.g. a fatal ERROR), and the returned task completes. With <paramref name="discardQueued"/> the
    /// queued messages are dropped first (a protocol error: the client gets its ERROR at once).
    /// </summary>
    public Task Complete(MessageBuffer? finalFrame, bool discardQueued)
    {
        bool wake;
        Task drained;
        lock (_gate)
        {
            if (_closed)
            {
                finalFrame?.Release();
                return Task.CompletedTask;
            }

            if (discardQueued)
            {
                ClearMessages();
            }

            if (finalFrame is not null)
            {
                if (_final is null)
                {
                    _final = finalFrame;
                }
                else
                {
                    finalFrame.Release(); // the first reason to close wins
                }
            }

            _refusing = true;
            _completing = true;
            ReleaseReplyWaiter();
            _drained ??= new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            drained = _drained.Task;
            wake = !_signalled;
            _signalled = true;
        }

        if (wake)
        {
            Flush();
        }

        return drained;
    }

    /// <summary>Drops everything still held (the subscriber is gone). Safe to call more than once.</summary>
    public void Abandon()
    {
        lock (_gate)
        {
            _refusing = true;
            _completing = true;
            _closed = true;
            ClearMessages();
            ReleaseReplyWaiter();
            _final?.Release();
            _final = null;
            _drained?.TrySetResult();
        }
    }

    // Caller holds _gate. Drops the oldest messages until `incoming` fits; control frames met on the way
    // are kept, in order, at the front (they count, but are never dropped: replies are bounded by holding
    // their client's input back instead). Returns how many were dropped.
    private long DropOldestFor(int incoming)
    {
        long dropped = 0;
        int keptControls = 0;
        while (_ring.Count > keptControls && IsOverLimits(incoming))
        {
            QueuedFrame entry = _ring[keptControls];
            if (entry.Sid == ControlSid && (!_readsByWindow || keptControls == 0))
            {
                keptControls++;
                continue;
            }

            AddPendingBytes(-entry.Frame.Length);
            _pendingMessages--;
            if (entry.Sid == ControlSid)
            {
                // A window's second loss mark at the front joins the first: marks stay as few as the messages between them.
                MergeKeptMark(ref _ring[keptControls - 1], entry);
                Volatile.Write(ref _pendingReplies, _pendingReplies - 1);
            }
            else
            {
                dropped++;
            }

            entry.Frame.Release();

            // Close the gap: shift the kept control frames one slot towards the back, then drop the front.
            for (int i = keptControls; i > 0; i--)
            {
                _ring[i] = _ring[i - 1];
            }

            _ring.PopFront();
            _headSequence++;
        }

        _droppedUnreported += dropped;
        _droppedTotal += dropped;
        return dropped;
    }

    // Caller holds _gate. Over its own limits, or over its share of a full shared budget.
    private bool IsOverLimits(int incoming) =>
        _pendingMessages + 1 > _limits.MaxMessages || _pendingBytes + incoming > _limits.MaxBytes
        || (_limits.Shared is { } shared && shared.Squeezes(_pendingBytes, incoming));

    // Caller holds _gate.
    private void AddPendingBytes(long bytes)
    {
        _pendingBytes += bytes;
        _limits.Shared?.Add(bytes);
    }

    // Caller holds _gate.
    private void DropHead()
    {
        QueuedFrame entry = _ring.PopFront();
        AddPendingBytes(-entry.Frame.Length);
        _pendingMessages--;
        if (entry.Sid == ControlSid)
        {
            Volatile.Write(ref _pendingReplies, _pendingReplies - 1);
        }

        entry.Frame.Release();
        _headSequence++;
    }

    // Caller holds _gate.
    private void ReleaseReplyWaiter()
    {
        _repliesTaken?.TrySetResult();
        _repliesTaken = null;
    }

    /// <summary>Taken for writing: each delta goes as is only if its sid holds the base, else as its full frame (<see cref="DeltaCursors"/>).</summary>
    /// <remarks>Caller holds _gate.</remarks>
    private void PickDeltas(QueuedFrame[] batch, int count)
    {
        if (_deltas is not { } deltas)
        {
            return;
        }

        for (int i = 0; i < count; i++)
        {
            if (batch[i].Sid != ControlSid)
            {
                batch[i] = deltas.Pick(batch[i]);
            }
        }
    }

    // Caller holds _gate.
    private void ClearMessages()
    {
        while (_ring.Count > 0)
        {
            DropHead();
        }
    }
}

/// <summary>What one stream take moved: <see cref="Count"/> frames into the batch, drops to report, the final frame.</summary>
internal readonly record struct StreamTake(int Count, long Dropped, MessageBuffer? Final, bool Idle)
{
    /// <summary>Messages shed on their way in from another node since the last take (<see cref="IMessageSink.Lost"/>), told apart from <see cref="Dropped"/>.</summary>
    public long Shed { get; init; }

    /// <summary>The sids that may have lost an unknown number of messages since the last take (ascending), or null.</summary>
    public uint[]? Gaps { get; init; }
}
