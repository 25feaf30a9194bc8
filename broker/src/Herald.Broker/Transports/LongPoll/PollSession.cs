using System.Net;
using Herald.Broker.Engines;
using Herald.Broker.Engines.PollSharing;
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
    private readonly WindowPoller? _poller;
    private readonly SharedBacklogPump? _pump;
    private long _lastActivity; // a timestamp of Broker.Time
    private long _elsewhereMark; // the last request through another node that RenewAsync heard of
    private long _idleChecks;
    private int _ended;
    private volatile bool _polledElsewhere;
    private volatile bool _stateMade = true;

    /// <param name="input">A gate shared with others (one-shot publishers, whom the registry does not list); null: its own.</param>
    /// <param name="shared">In a cluster that shares sessions: where the session's state is kept (spec cluster.md §10); this node owns its subscriptions and appends what they deliver, from <paramref name="baseSequence"/> on.</param>
    public PollSession(BrokerCore broker, PollSessionStore store, LongPollOptions options, string token, long id, EndPoint? remoteEndPoint, PendingBudget? budget, InputGate? input = null, ISharedSessions? shared = null, long baseSequence = 0)
        : base(broker, id, TransportName, remoteEndPoint, new BacklogLimits(options.MaxPendingMessagesPerSession, broker.Limits.MaxPendingBytes, options.SlowConsumerPolicy, budget), input)
    {
        _store = store;
        _options = options;
        _lastActivity = broker.Time.GetTimestamp();
        Token = token;
        Shared = shared ?? LocalSessions.Instance;
        if (!Shared.IsShared)
        {
            _poller = new WindowPoller(Backlog);
        }
        else
        {
            _pump = new SharedBacklogPump(this, Shared, baseSequence);
        }
    }

    /// <summary>
    /// Where the session's state lives: shared (<see cref="ISharedSessions.IsShared"/>), its backlog is read by every node's
    /// polls; else (a single node, or a one-shot publisher) it is this node's alone, <see cref="LocalSessions"/>.
    /// </summary>
    public ISharedSessions Shared { get; }

    /// <summary>Deltas in binary answers, picked per take from what the client acknowledged; a shared session's pump copies frames as they are, so it gets full messages.</summary>
    protected override bool CarriesDeltas => !Shared.IsShared;

    public LongPollOptions Options => _options;

    /// <summary>
    /// False while a new shared session's state is being made in Redis (the session is counted here first, for the
    /// limits): until then there is no lease to renew, and a renewal that found no state would let the session go
    /// here before its client even learned its token.
    /// </summary>
    public bool StateMade
    {
        get => _stateMade;
        set => _stateMade = value;
    }

    public BrokerMetrics Metrics => Broker.Metrics;

    /// <summary>How long the session's state outlives its last request in Redis: past its inactivity timeout, a held poll, and a lease.</summary>
    public TimeSpan StateTimeToLive => StateTimeToLiveOf(_options, Shared);

    /// <summary><see cref="StateTimeToLive"/>, for a session this node does not hold.</summary>
    public static TimeSpan StateTimeToLiveOf(LongPollOptions options, ISharedSessions shared) => options.InactivityTimeout + options.PollTimeout + shared.Lease;

    /// <summary>The session's name: 256 random bits, base64url; with authentication on, requests also carry the owner's credential.</summary>
    public string Token { get; }

    /// <summary>Serialises the requests that change the session (one caller at a time).</summary>
    public SemaphoreSlim Requests { get; } = new(1, 1);

    /// <summary>Whether a poll is held right now (an idle session is one with none).</summary>
    public bool IsPolling => _poller?.IsPolling ?? _polledElsewhere;

    /// <summary>
    /// How long since the client's last request: on the broker's <see cref="TimeProvider"/> (the host's clock; a test's
    /// fake one makes inactivity exact), as is everything that decides the session's inactivity.
    /// </summary>
    public TimeSpan Idle => Broker.Time.GetElapsedTime(Volatile.Read(ref _lastActivity));

    public void Touch() => Volatile.Write(ref _lastActivity, Broker.Time.GetTimestamp());

    /// <summary>How many times a shared session idle here asked Redis whether another node saw its client (<see cref="ConfirmIdleAsync"/>; tests wait on it).</summary>
    public long IdleChecks => Interlocked.Read(ref _idleChecks);

    private bool IsInactive => Idle > _options.InactivityTimeout;

    /// <summary>
    /// One poll (longpoll §2): applies <paramref name="ack"/> and takes what is waiting above it; if nothing
    /// is, the poll is held as the session's one poll (an older one is answered 409) until a message comes,
    /// the poll timeout passes (an empty take), the session ends (410, or 503 on shutdown) or the client
    /// goes away (an empty take; the caller sees its cancellation). While the broker drains (spec §6.4) a
    /// poll is never held: it takes what is left, and once nothing is, the session ends with 503 ShuttingDown.
    /// </summary>
    public async Task<WindowTake> PollAsync(long ack, CancellationToken cancellation)
    {
        WindowPoller poller = _poller ?? throw new InvalidOperationException("A shared session is polled through Redis.");
        bool draining = IsDraining;
        if (IsClosing && !draining)
        {
            throw PollProblems.Ended(CloseCode, CloseReason);
        }

        Touch();
        PollWake wake;
        WindowTake take;
        try
        {
            (wake, take) = await poller.PollAsync(ack, _options.MaxMessagesPerPoll, _options.MaxBytesPerPoll, draining ? TimeSpan.Zero : _options.PollTimeout, cancellation).ConfigureAwait(false);
        }
        catch (ArgumentOutOfRangeException e)
        {
            throw HttpProblem.Malformed(e.Message.Split(" (Parameter")[0]);
        }

        if (draining && wake == PollWake.Messages && take.Count == 0)
        {
            End(ErrorCode.ShuttingDown); // all delivered and acknowledged
            wake = PollWake.ShuttingDown;
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
                throw PollProblems.Ended(CloseCode, CloseReason);
        }

        if (take.Redelivery)
        {
            metrics.Redelivered();
        }

        return take;
    }

    /// <summary>The client ends its session (DELETE): at once, also while the broker drains it.</summary>
    public void Leave()
    {
        if (!Close(ErrorCode.None, "Closed by the client."))
        {
            End(ErrorCode.None); // draining: what was queued is the client's to give up
        }
    }

    /// <summary>Closed by shutdown and not yet ended: polls still take what is queued (spec §6.4).</summary>
    private bool IsDraining => CloseCode == ErrorCode.ShuttingDown && Volatile.Read(ref _ended) == 0;

    /// <summary>
    /// Inactivity (longpoll §1): no request, and no poll held, for <c>InactivityTimeout</c>, on the broker's clock
    /// (<see cref="Idle"/>), not the sweep's tick <paramref name="now"/>.
    /// </summary>
    protected override void CheckTransportLiveness(long now)
    {
        if (Shared.IsShared && IsInactive)
        {
            _ = ConfirmIdleAsync(); // its client may be served by other nodes, or be polling there now: Redis knows
            return;
        }

        if (IsInactive && !IsPolling)
        {
            Broker.Log.SessionExpired(Id, _options.InactivityTimeout);
            Close(ErrorCode.StaleConnection, $"No request for {_options.InactivityTimeout.TotalSeconds:0.###} s.");
        }
    }

    /// <summary>
    /// Ends the session: forgotten by token, messages released, a held poll told, subscriptions out of the
    /// router. A slow consumer is ended from inside a publisher's delivery: its router removals
    /// then run on the pool, on its own account, never on that publisher's read loop. Shutdown (spec §6.4)
    /// ends it only once its client has taken and acknowledged what was queued, or after
    /// <c>ShutdownDrainTimeout</c>: until then nothing new arrives and polls take what is left.
    /// </summary>
    protected override void OnClose(ErrorCode code, string reason)
    {
        if (code == ErrorCode.SlowConsumer)
        {
            Broker.Log.SessionSlowConsumer(Id, _options.MaxPendingMessagesPerSession);
        }

        if (Shared.IsShared && code == ErrorCode.ShuttingDown)
        {
            _ = HandOverAsync(); // the session lives on: another node takes it over
            return;
        }

        if (code == ErrorCode.ShuttingDown && Backlog.Pending.Messages > 0)
        {
            EndSubscriptions();
            _poller!.Answer(PollWake.Messages); // a held poll takes what is left (or ends the session if nothing is)
            _ = EndAfterAsync(Limits.ShutdownDrainTimeout);
            return;
        }

        End(code);
    }

    private async Task EndAfterAsync(TimeSpan timeout)
    {
        await Task.Delay(timeout).ConfigureAwait(false);
        if (Volatile.Read(ref _ended) == 0)
        {
            Broker.Log.DrainTimedOut(Id, RemoteEndPoint, timeout);
            End(ErrorCode.ShuttingDown);
        }
    }

    /// <summary>Once: forgotten by token (410 from now on), messages released, a held poll answered, subscriptions out of the router.</summary>
    private void End(ErrorCode code)
    {
        if (Interlocked.Exchange(ref _ended, 1) != 0)
        {
            return;
        }

        _store.Forget(this);
        Backlog.Abandon();
        _poller?.Answer(code == ErrorCode.ShuttingDown ? PollWake.ShuttingDown : PollWake.Ended);
        if (Shared.IsShared)
        {
            _pump!.Stop();
            SharedEnd = EndSharedAsync(Shared, code);
        }

        if (code == ErrorCode.SlowConsumer)
        {
            ThreadPool.UnsafeQueueUserWorkItem(static session => session.EndSubscriptions(), this, preferLocal: false);
        }
        else
        {
            EndSubscriptions(reason: LeaveReason(code));
        }
    }

    /// <summary>Why its members leave (spec §15.2): <c>expired</c> when the session expired (inactivity, its credential), else <c>disconnect</c> (closed by its client, a slow consumer, shutdown).</summary>
    private static PresenceReason LeaveReason(ErrorCode code) =>
        code is ErrorCode.StaleConnection or ErrorCode.AuthenticationFailed ? PresenceReason.Expired : PresenceReason.Disconnect;

    /// <summary>Completes once every node knows the session ended (a shared session's end is written to Redis).</summary>
    public Task SharedEnd { get; private set; } = Task.CompletedTask;

    /// <summary>The session's end, told to every node through Redis (its token answers 410 with the reason).</summary>
    private async Task EndSharedAsync(ISharedSessions shared, ErrorCode code)
    {
        try
        {
            await shared.EndAsync(Token, code == ErrorCode.None ? "ClientClose" : code.ToString(), _options.EndedSessionMemory, asOwner: true).ConfigureAwait(false);
        }
        catch (ClusterUnavailableException)
        {
            // Unreachable: the state expires with its time to live; until then another node may take it over.
        }
    }

    /// <summary>
    /// A graceful stop of this node (spec cluster.md §10): nothing new is routed here; what the backlog holds is
    /// appended (within <c>ShutdownDrainTimeout</c>), then the lease is given up, so the client's next request,
    /// on any node, takes the session over with nothing lost.
    /// </summary>
    private async Task HandOverAsync()
    {
        EndSubscriptions();
        long deadline = Environment.TickCount64 + (long)Limits.ShutdownDrainTimeout.TotalMilliseconds;
        while (Backlog.Pending.Messages > 0 && Environment.TickCount64 < deadline)
        {
            await Task.Delay(20).ConfigureAwait(false);
        }

        _pump!.Stop();
        try
        {
            await Shared.ReleaseAsync(Token).ConfigureAwait(false);
        }
        catch (ClusterUnavailableException)
        {
            // Unreachable: the lease expires by itself.
        }

        Moved();
    }

    /// <summary>
    /// Another node has the session now (this node's lease expired, <paramref name="lost"/>, or was given up), or it
    /// ended there: forgotten here, without a word to Redis.
    /// </summary>
    public void Moved(bool lost = false)
    {
        if (Interlocked.Exchange(ref _ended, 1) != 0)
        {
            return;
        }

        if (lost)
        {
            Broker.Log.SessionLeaseLost(Id, Shared.Lease);
        }

        _pump?.Stop();
        _store.Forget(this, remember: false);
        Backlog.Abandon();
        EndSubscriptions();
    }

    /// <summary>A shared session idle here: ended only if no node saw a request or holds a poll either.</summary>
    private async Task ConfirmIdleAsync()
    {
        if (Interlocked.Exchange(ref _confirming, 1) != 0)
        {
            return;
        }

        try
        {
            await RenewAsync().ConfigureAwait(false);
            if (IsInactive && !IsPolling && !IsClosing)
            {
                Broker.Log.SessionExpired(Id, _options.InactivityTimeout);
                Close(ErrorCode.StaleConnection, $"No request for {_options.InactivityTimeout.TotalSeconds:0.###} s.");
            }
        }
        finally
        {
            Interlocked.Increment(ref _idleChecks);
            Volatile.Write(ref _confirming, 0);
        }
    }

    private int _confirming;

    /// <summary>
    /// The owner keeps its lease (every heartbeat) and learns what the other nodes saw: a poll held, and a request it
    /// had not heard of, placed on this node's clock as long ago as Redis's clock says it was. Only a request through
    /// another node, and only once: this node's own are counted when they come (<see cref="Touch"/>), and a request
    /// heard of before must not be placed again (on a clock that moved on without Redis's, a test's, it would look new).
    /// </summary>
    public async Task RenewAsync()
    {
        if (!StateMade)
        {
            return; // nothing to renew yet
        }

        LeaseState state;
        try
        {
            state = await Shared.RenewAsync(Token, StateTimeToLive).ConfigureAwait(false);
        }
        catch (ClusterUnavailableException)
        {
            return; // unreachable: kept as it is; if the lease expires meanwhile, the next append finds out
        }

        if (!state.Kept)
        {
            Moved(lost: true);
            return;
        }

        if (state.Ended is { } reason)
        {
            Close(Enum.TryParse(reason, out ErrorCode code) ? code : ErrorCode.None, "Ended on another node.");
            return;
        }

        _polledElsewhere = state.PollHeld;
        if (state.ElsewhereMark == 0 || state.ElsewhereMark == Interlocked.Exchange(ref _elsewhereMark, state.ElsewhereMark))
        {
            return;
        }

        long seen = Broker.Time.GetTimestamp() - (long)(state.Idle.TotalSeconds * Broker.Time.TimestampFrequency);
        if (seen > Volatile.Read(ref _lastActivity))
        {
            Volatile.Write(ref _lastActivity, seen);
        }
    }
}
