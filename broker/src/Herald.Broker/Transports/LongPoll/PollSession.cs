using System.Net;
using Herald.Broker.Delivery;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>How a held poll ended (protocol-spec/longpoll.md §2).</summary>
internal enum PollWake
{
    Messages,
    Replaced,
    Ended,
    ShuttingDown,
}

/// <summary>
/// A long-poll session (longpoll §1): the <see cref="ProtocolSession"/> of a client that speaks HTTP. Its
/// requests call the session's operations; its polls read the session's backlog as a window (longpoll §2):
/// every message keeps its sequence number and stays, counted against the backlog's limits, until the client
/// acknowledges it, so a response lost in transit is sent again. At most one poll is held at a time.
/// </summary>
/// <remarks>
/// Threading: <c>_gate</c> guards the held poll. Requests that change the session (subscribe, unsubscribe,
/// publish) take <see cref="Requests"/> first, so the session has one caller at a time, as a TCP
/// connection's read loop is; polls only read the backlog, which is thread-safe.
/// </remarks>
internal sealed class PollSession : ProtocolSession, IBacklogReader
{
    public const string TransportName = "longpoll";

    private readonly Lock _gate = new();
    private readonly PollSessionStore _store;
    private readonly LongPollOptions _options;
    private TaskCompletionSource<PollWake>? _waiter;
    private long _lastActivity = Environment.TickCount64;

    public PollSession(BrokerCore broker, PollSessionStore store, LongPollOptions options, string token, long id, EndPoint? remoteEndPoint)
        : base(broker, id, TransportName, remoteEndPoint, new BacklogLimits(options.MaxPendingMessagesPerSession, broker.Limits.MaxPendingBytes, options.SlowConsumerPolicy))
    {
        _store = store;
        _options = options;
        Token = token;
        Backlog.Reader = this;
    }

    /// <summary>The session's name and only credential after creation: 256 random bits, base64url.</summary>
    public string Token { get; }

    /// <summary>Serialises the requests that change the session (one caller at a time).</summary>
    public SemaphoreSlim Requests { get; } = new(1, 1);

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
    public void Wake(bool inline) => Answer(PollWake.Messages);

    /// <summary>
    /// Applies <paramref name="ack"/> and takes what is waiting above it; if nothing is, this poll is held as
    /// the session's one poll (an older one is answered <see cref="PollWake.Replaced"/>). Returns the
    /// messages, or the task to await.
    /// </summary>
    public bool TryTake(long ack, out WindowTake take, out Task<PollWake>? wait)
    {
        ThrowIfEnded();
        try
        {
            Backlog.Acknowledge(ack);
        }
        catch (ArgumentOutOfRangeException e)
        {
            throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", e.Message.Split(" (Parameter")[0]);
        }

        Touch();

        // Hold first, then look: a message queued after the look wakes the held poll, so none waits for the timeout.
        TaskCompletionSource<PollWake>? replaced;
        var held = new TaskCompletionSource<PollWake>(TaskCreationOptions.RunContinuationsAsynchronously);
        lock (_gate)
        {
            replaced = _waiter;
            _waiter = held;
        }

        replaced?.TrySetResult(PollWake.Replaced);
        if (Backlog.TakeAbove(ack, _options.MaxMessagesPerPoll, _options.MaxBytesPerPoll, out take))
        {
            Release(held.Task);
            wait = null;
            return true;
        }

        wait = held.Task;
        return false;
    }

    /// <summary>After a held poll woke with messages (or timed out): takes what is above <paramref name="ack"/>, maybe nothing.</summary>
    public WindowTake TakeAfterWait(long ack, Task<PollWake> wait)
    {
        Release(wait);
        ThrowIfEnded();
        return Backlog.TakeAbove(ack, _options.MaxMessagesPerPoll, _options.MaxBytesPerPoll, out WindowTake take) ? take : WindowTake.Empty(ack);
    }

    /// <summary>Forgets a held poll: it was answered, timed out, or its request went away.</summary>
    public void Release(Task<PollWake> wait)
    {
        lock (_gate)
        {
            if (_waiter?.Task == wait)
            {
                _waiter = null;
            }
        }

        Touch();
    }

    /// <summary>Inactivity (longpoll §1): no request, and no poll held, for <c>InactivityTimeout</c>.</summary>
    protected override void CheckTransportLiveness(long now)
    {
        if (now - LastActivity > (long)_options.InactivityTimeout.TotalMilliseconds && !IsPolling)
        {
            Broker.Log.SessionExpired(Id, _options.InactivityTimeout);
            Close(ErrorCode.StaleConnection, $"No request for {_options.InactivityTimeout.TotalSeconds:0.###} s.");
        }
    }

    /// <summary>Ends the session: forgotten by token, subscriptions out of the router, messages released, a held poll told.</summary>
    protected override void OnClose(ErrorCode code, string reason)
    {
        if (code == ErrorCode.SlowConsumer)
        {
            Broker.Log.SessionSlowConsumer(Id, _options.MaxPendingMessagesPerSession);
        }

        _store.Forget(this);
        EndSubscriptions();
        Backlog.Abandon();
        Answer(code == ErrorCode.ShuttingDown ? PollWake.ShuttingDown : PollWake.Ended);
    }

    private void Answer(PollWake wake)
    {
        TaskCompletionSource<PollWake>? waiter;
        lock (_gate)
        {
            waiter = _waiter;
            _waiter = null;
        }

        waiter?.TrySetResult(wake);
    }

    private void ThrowIfEnded()
    {
        if (IsClosing)
        {
            throw PollSessionStore.Ended(CloseCode);
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

    /// <summary>Why a session ended (410): the spec §8 code, as the fatal ERROR on TCP says it.</summary>
    public string? Reason { get; init; }
}
