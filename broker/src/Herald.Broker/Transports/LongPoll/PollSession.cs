using System.Net;
using Herald.Broker.Delivery;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// A long-poll session (longpoll §1): the <see cref="ProtocolSession"/> of a client that speaks HTTP. Its
/// requests call the session's operations; its polls read the session's backlog as a window (longpoll §2):
/// every message keeps its sequence number and stays, counted against the backlog's limits, until the client
/// acknowledges it, so a response lost in transit is sent again. At most one poll is held at a time.
/// </summary>
/// <remarks>
/// Threading: requests that change the session (subscribe, unsubscribe, publish) take <see cref="Requests"/>
/// first, so the session has one caller at a time, as a TCP connection's read loop is; polls only read the
/// backlog through its <see cref="WindowPoller"/>, which is thread-safe.
/// </remarks>
internal sealed class PollSession : ProtocolSession
{
    public const string TransportName = "longpoll";

    private readonly PollSessionStore _store;
    private readonly LongPollOptions _options;
    private readonly WindowPoller _poller;
    private long _lastActivity = Environment.TickCount64;

    public PollSession(BrokerCore broker, PollSessionStore store, LongPollOptions options, string token, long id, EndPoint? remoteEndPoint, PendingBudget? budget)
        : base(broker, id, TransportName, remoteEndPoint, new BacklogLimits(options.MaxPendingMessagesPerSession, broker.Limits.MaxPendingBytes, options.SlowConsumerPolicy, budget))
    {
        _store = store;
        _options = options;
        Token = token;
        _poller = new WindowPoller(Backlog);
    }

    /// <summary>The session's name: 256 random bits, base64url; with authentication on, requests also carry the owner's credential.</summary>
    public string Token { get; }

    /// <summary>Serialises the requests that change the session (one caller at a time).</summary>
    public SemaphoreSlim Requests { get; } = new(1, 1);

    /// <summary>Whether a poll is held right now (an idle session is one with none).</summary>
    public bool IsPolling => _poller.IsPolling;

    public long LastActivity => Volatile.Read(ref _lastActivity);

    public void Touch() => Volatile.Write(ref _lastActivity, Environment.TickCount64);

    /// <summary>
    /// One poll (longpoll §2): applies <paramref name="ack"/> and takes what is waiting above it; if nothing
    /// is, the poll is held as the session's one poll (an older one is answered 409) until a message comes,
    /// the poll timeout passes (an empty take), the session ends (410, or 503 on shutdown) or the client
    /// goes away (an empty take; the caller sees its cancellation).
    /// </summary>
    public async Task<WindowTake> PollAsync(long ack, CancellationToken cancellation)
    {
        ThrowIfEnded();
        Touch();
        PollWake wake;
        WindowTake take;
        try
        {
            (wake, take) = await _poller.PollAsync(ack, _options.MaxMessagesPerPoll, _options.MaxBytesPerPoll, _options.PollTimeout, cancellation).ConfigureAwait(false);
        }
        catch (ArgumentOutOfRangeException e)
        {
            throw HttpProblem.Malformed(e.Message.Split(" (Parameter")[0]);
        }

        Touch();
        BrokerMetrics metrics = Broker.Metrics;
        metrics.Poll(wake switch { PollWake.Messages => take.Count > 0 ? "messages" : "empty", PollWake.Replaced => "replaced", _ => "ended" });
        switch (wake)
        {
            case PollWake.Replaced:
                throw new HttpProblem(StatusCodes.Status409Conflict, "PollReplaced", "A newer poll on this session took over.");
            case PollWake.ShuttingDown:
                throw HttpProblem.Unavailable("ShuttingDown", "The broker is shutting down.", 5);
            case PollWake.Ended:
                throw PollSessionStore.Ended(CloseCode);
        }

        if (take.Redelivery)
        {
            metrics.Redelivered();
        }

        return take;
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

    /// <summary>
    /// Ends the session: forgotten by token, messages released, a held poll told, subscriptions out of the
    /// router. A slow consumer is ended from inside a publisher's delivery (issue 22): its router removals
    /// then run on the pool, on its own account, never on that publisher's read loop.
    /// </summary>
    protected override void OnClose(ErrorCode code, string reason)
    {
        if (code == ErrorCode.SlowConsumer)
        {
            Broker.Log.SessionSlowConsumer(Id, _options.MaxPendingMessagesPerSession);
        }

        _store.Forget(this);
        Backlog.Abandon();
        _poller.Answer(code == ErrorCode.ShuttingDown ? PollWake.ShuttingDown : PollWake.Ended);
        if (code == ErrorCode.SlowConsumer)
        {
            ThreadPool.UnsafeQueueUserWorkItem(static session => session.EndSubscriptions(), this, preferLocal: false);
        }
        else
        {
            EndSubscriptions();
        }
    }

    private void ThrowIfEnded()
    {
        if (IsClosing)
        {
            throw PollSessionStore.Ended(CloseCode);
        }
    }
}
