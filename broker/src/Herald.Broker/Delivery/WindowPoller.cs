namespace Herald.Broker.Delivery;

/// <summary>How a held poll ended.</summary>
internal enum PollWake
{
    Messages,
    Replaced,
    Ended,
    ShuttingDown,
}

/// <summary>
/// The reader of a backlog that its client polls (long-poll, protocol-spec/longpoll.md §2): each poll
/// acknowledges what the client has, then takes the window above it or, with nothing there, is held until a
/// frame is queued, the timeout passes, a newer poll replaces it, or the subscriber ends. At most one poll is
/// held at a time.
/// </summary>
/// <remarks>Threading: <c>_gate</c> guards the held poll; polls, wakes and answers may come from any thread.</remarks>
internal sealed class WindowPoller : IBacklogReader
{
    private readonly Lock _gate = new();
    private readonly SubscriberBacklog _backlog;
    private TaskCompletionSource<PollWake>? _waiter;

    public WindowPoller(SubscriberBacklog backlog)
    {
        _backlog = backlog;
        backlog.Reader = this;
        backlog.ReadsByWindow = true;
    }

    /// <summary>Whether a poll is held right now.</summary>
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

    /// <inheritdoc/>
    public void Wake(bool inline) => Answer(PollWake.Messages);

    /// <summary>Answers the held poll, if any, with <paramref name="wake"/>.</summary>
    public void Answer(PollWake wake)
    {
        TaskCompletionSource<PollWake>? waiter;
        lock (_gate)
        {
            waiter = _waiter;
            _waiter = null;
        }

        waiter?.TrySetResult(wake);
    }

    /// <summary>
    /// One poll: acknowledges <paramref name="ack"/> (<see cref="ArgumentOutOfRangeException"/> past the last
    /// sequence), then the window above it, or the wake of the held poll. A timeout or the caller's
    /// cancellation is an empty take.
    /// </summary>
    public async Task<(PollWake Wake, WindowTake Take)> PollAsync(long ack, int maxMessages, int maxBytes, TimeSpan timeout, CancellationToken cancellation)
    {
        _backlog.Acknowledge(ack);

        // Hold first, then look: a frame queued after the look wakes the held poll, so none waits for the timeout.
        var held = new TaskCompletionSource<PollWake>(TaskCreationOptions.RunContinuationsAsynchronously);
        TaskCompletionSource<PollWake>? replaced;
        lock (_gate)
        {
            replaced = _waiter;
            _waiter = held;
        }

        replaced?.TrySetResult(PollWake.Replaced);
        PollWake wake = PollWake.Messages;
        // Loss marks alone that a poll took before (its answer was lost, or its client does not ack an empty answer)
        // are held as nothing would be, then answered with whatever is there: a client never spins on them.
        if (!_backlog.TakeAbove(ack, maxMessages, maxBytes, out WindowTake take) || (take.Count == 0 && take.Redelivery))
        {
            try
            {
                wake = await held.Task.WaitAsync(timeout, cancellation).ConfigureAwait(false);
            }
            catch (Exception e) when (e is TimeoutException or OperationCanceledException)
            {
                // nothing came, or the client went away: answer empty (or whatever slipped in just now)
            }

            take.Release();
            take = wake == PollWake.Messages && !cancellation.IsCancellationRequested && _backlog.TakeAbove(ack, maxMessages, maxBytes, out WindowTake late) ? late : WindowTake.Empty(ack);
        }

        lock (_gate)
        {
            if (_waiter == held)
            {
                _waiter = null;
            }
        }

        return (wake, take);
    }
}
