using Herald.Broker.Delivery;
using Herald.Broker.Hosting;
using Herald.Broker.Monitoring;
using Herald.Broker.Telemetry;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>How a held poll ended (protocol-spec/longpoll.md §2).</summary>
internal enum PollWake
{
    Messages,
    Replaced,
    Ended,
    ShuttingDown,
}

/// <summary>What one poll takes away: consecutive messages from <see cref="FirstSequence"/>, each retained for the response.</summary>
internal readonly record struct PollBatch(long FirstSequence, (MessageBuffer Frame, uint Sid)[] Messages, int Count, long Bytes, long Dropped, bool Redelivery)
{
    public static PollBatch Empty(long ack) => new(ack + 1, [], 0, 0, 0, false);

    /// <summary>Releases the references taken for the response, once it is written.</summary>
    public void Release()
    {
        for (int i = 0; i < Count; i++)
        {
            Messages[i].Frame.Release();
        }
    }
}

/// <summary>
/// A long-poll session: the HTTP counterpart of a TCP connection (longpoll §1). It is an
/// <see cref="IMessageSink"/> of the one router, so it receives the very MESSAGE buffers TCP
/// subscribers get, and keeps each one (by reference) until the client acknowledges its sequence number.
/// </summary>
/// <remarks>
/// Threading: everything mutable is guarded by <c>_gate</c>. Publishers call <see cref="Enqueue"/> and
/// <see cref="Flush"/> from their own threads; HTTP requests of the same session may run concurrently.
/// Lock order: session, then router (the router never calls a sink while holding its own lock).
/// </remarks>
internal sealed class PollSession : IMessageSink, IConnectionStats
{
    private readonly Lock _gate = new();
    private readonly LongPollOptions _options;
    private readonly Action<PollSession> _onSlowConsumer;
    private readonly BrokerMetrics _metrics;
    private readonly Dictionary<uint, Subscription> _subscriptions = [];

    // Unacknowledged messages, oldest first: _ring[0] has sequence _headSequence, then consecutive.
    private FrameRing _ring = new();
    private long _headSequence = 1;
    private long _highestSent;
    private long _highestAck;
    private long _pendingBytes;
    private TaskCompletionSource<PollWake>? _waiter;
    private bool _ended;
    private long _lastActivity = Environment.TickCount64;

    public PollSession(string token, long id, LongPollOptions options, BrokerMetrics metrics, Action<PollSession> onSlowConsumer)
    {
        _metrics = metrics;
        Token = token;
        Id = id;
        _options = options;
        _onSlowConsumer = onSlowConsumer;
    }

    public string Token { get; }

    /// <inheritdoc/>
    public bool AcceptsZstd { get; init; }

    /// <inheritdoc/>
    public string? ClientName { get; init; }

    /// <summary>Who created the session (bearer token); every operation of the session acts as it.</summary>
    public Identity Identity { get; init; } = Identity.Anonymous;

    /// <inheritdoc/>
    public int SubscriptionCount
    {
        get
        {
            lock (_gate)
            {
                return _subscriptions.Count;
            }
        }
    }

    /// <inheritdoc/>
    public long PendingMessages
    {
        get
        {
            lock (_gate)
            {
                return _ring.Count;
            }
        }
    }

    /// <inheritdoc/>
    public long PendingBytes
    {
        get
        {
            lock (_gate)
            {
                return _pendingBytes;
            }
        }
    }

    public long Id { get; }

    /// <summary>Whether a poll is held right now (an idle session is one with none).</summary>
    public bool IsPolling
    {
        get
        {
            lock (_gate)
            {
                return _waiter is not null;
            }
        }
    }

    public long LastActivity => Volatile.Read(ref _lastActivity);

    public void Touch() => Volatile.Write(ref _lastActivity, Environment.TickCount64);

    /// <inheritdoc/>
    public bool Enqueue(MessageBuffer frame, uint sid)
    {
        bool slow = false;
        bool dropped = false;
        bool wake;
        lock (_gate)
        {
            if (_ended)
            {
                frame.Release();
                return false;
            }

            if (_ring.Count >= _options.MaxPendingMessagesPerSession)
            {
                if (_options.SlowConsumerPolicy == SlowConsumerPolicy.Disconnect)
                {
                    frame.Release();
                    slow = true;
                }
                else
                {
                    DropHead(); // the client sees the gap on its next poll (Herald-Dropped)
                    dropped = true;
                }
            }

            if (!slow)
            {
                _ring.Push(new QueuedFrame(frame, sid));
                _pendingBytes += frame.Length;
            }

            wake = !slow && _waiter is not null;
        }

        if (dropped)
        {
            _metrics.SlowConsumer(nameof(SlowConsumerPolicy.DropOldest));
            _metrics.Dropped(1);
        }

        if (slow)
        {
            _onSlowConsumer(this);
        }

        return wake;
    }

    /// <inheritdoc/>
    public void Flush() => Wake(PollWake.Messages);

    /// <inheritdoc/>
    public void ScheduleFlush() => Wake(PollWake.Messages); // the waiter's continuation already runs on the pool

    /// <summary>
    /// Applies <paramref name="ack"/> and takes what is waiting above it; if nothing is, registers this
    /// poll as the session's one held poll (answering an older one <see cref="PollWake.Replaced"/>).
    /// Returns the batch, or the task to await.
    /// </summary>
    public bool TryTake(long ack, out PollBatch batch, out Task<PollWake>? wait)
    {
        TaskCompletionSource<PollWake>? replaced = null;
        lock (_gate)
        {
            ThrowIfEnded();
            long lastAssigned = _headSequence + _ring.Count - 1;
            if (ack > lastAssigned || ack < 0)
            {
                throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", $"ack {ack} is not between 0 and the last sequence assigned, {lastAssigned}.");
            }

            Acknowledge(ack);
            Touch();
            if (_headSequence + _ring.Count - 1 > ack)
            {
                batch = TakeAbove(ack);
                wait = null;
                return true;
            }

            replaced = _waiter;
            _waiter = new TaskCompletionSource<PollWake>(TaskCreationOptions.RunContinuationsAsynchronously);
            wait = _waiter.Task;
            batch = default;
        }

        replaced?.TrySetResult(PollWake.Replaced);
        return false;
    }

    /// <summary>After a held poll woke with messages (or timed out): takes what is above <paramref name="ack"/>, maybe nothing.</summary>
    public PollBatch TakeAfterWait(long ack, Task<PollWake> wait)
    {
        lock (_gate)
        {
            if (_waiter?.Task == wait)
            {
                _waiter = null; // timed out or cancelled: no longer held
            }

            Touch();
            ThrowIfEnded();
            return _headSequence + _ring.Count - 1 > ack ? TakeAbove(ack) : PollBatch.Empty(ack);
        }
    }

    /// <summary>Forgets a held poll whose request went away.</summary>
    public void Abandon(Task<PollWake> wait)
    {
        lock (_gate)
        {
            if (_waiter?.Task == wait)
            {
                _waiter = null;
            }

            Touch();
        }
    }

    public void Subscribe(Subscription subscription, int maxSubscriptions, TopicRouter router)
    {
        lock (_gate)
        {
            ThrowIfEnded();
            if (_subscriptions.ContainsKey(subscription.Sid))
            {
                throw new ProtocolException(ErrorCode.DuplicateSubscription, $"Subscription id {subscription.Sid} is already in use on this session.");
            }

            if (_subscriptions.Count >= maxSubscriptions)
            {
                throw new ProtocolException(ErrorCode.TooManySubscriptions, $"More than {maxSubscriptions} subscriptions on one session.");
            }

            router.Add(subscription); // may refuse (TooManyTopics): then nothing changed
            _subscriptions.Add(subscription.Sid, subscription);
        }
    }

    public bool Unsubscribe(uint sid, TopicRouter router)
    {
        lock (_gate)
        {
            ThrowIfEnded();
            if (!_subscriptions.Remove(sid, out Subscription? subscription))
            {
                return false;
            }

            router.Remove(subscription);
            return true;
        }
    }

    /// <summary>Ends the session: subscriptions leave the router, held messages are released, a held poll is told.</summary>
    public void End(TopicRouter router, PollWake reason = PollWake.Ended)
    {
        TaskCompletionSource<PollWake>? waiter;
        lock (_gate)
        {
            if (_ended)
            {
                return;
            }

            _ended = true;
            foreach (Subscription subscription in _subscriptions.Values)
            {
                router.Remove(subscription);
            }

            _subscriptions.Clear();
            while (_ring.Count > 0)
            {
                DropHead();
            }

            waiter = _waiter;
            _waiter = null;
        }

        waiter?.TrySetResult(reason);
    }

    private void Wake(PollWake reason)
    {
        TaskCompletionSource<PollWake>? waiter;
        lock (_gate)
        {
            waiter = _waiter;
            _waiter = null;
        }

        waiter?.TrySetResult(reason);
    }

    // Caller holds _gate. Releases every message at or below `ack`.
    private void Acknowledge(long ack)
    {
        _highestAck = Math.Max(_highestAck, ack);
        while (_ring.Count > 0 && _headSequence <= ack)
        {
            DropHead();
        }
    }

    // Caller holds _gate.
    private void DropHead()
    {
        MessageBuffer frame = _ring.PopFront().Frame;
        _pendingBytes -= frame.Length;
        frame.Release();
        _headSequence++;
    }

    // Caller holds _gate; at least one message is above `ack` (all at or below were just released).
    private PollBatch TakeAbove(long ack)
    {
        // Messages between what the client has acknowledged (ever) and the head were dropped, not delivered.
        long dropped = Math.Max(0, _headSequence - 1 - _highestAck);
        int take = 0;
        long bytes = 0;
        while (take < _ring.Count && take < _options.MaxMessagesPerPoll)
        {
            int length = _ring[take].Frame.Length;
            if (take > 0 && bytes + length > _options.MaxBytesPerPoll)
            {
                break;
            }

            bytes += length;
            take++;
        }

        var messages = new (MessageBuffer, uint)[take];
        for (int i = 0; i < take; i++)
        {
            (MessageBuffer frame, uint sid) = _ring[i];
            frame.Retain(1); // the response's own reference: an ack may release the session's meanwhile
            messages[i] = (frame, sid);
        }

        bool redelivery = _headSequence <= _highestSent;
        _highestSent = Math.Max(_highestSent, _headSequence + take - 1);
        return new PollBatch(_headSequence, messages, take, bytes, dropped, redelivery);
    }

    private void ThrowIfEnded()
    {
        if (_ended)
        {
            throw new LongPollException(StatusCodes.Status410Gone, "SessionExpired", "The session has ended.");
        }
    }
}

/// <summary>A long-poll request failed; becomes an RFC 7807 problem with <see cref="Code"/> (longpoll §3).</summary>
internal sealed class LongPollException : Exception
{
    public LongPollException(int status, string code, string message) : base(message)
    {
        Status = status;
        Code = code;
    }

    public int Status { get; }

    public string Code { get; }

    public TimeSpan? RetryAfter { get; init; }
}
