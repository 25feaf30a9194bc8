using System.Net;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Sessions;

/// <summary>
/// An operation the session refused without ending (a non-fatal ERROR of spec §8: PermissionDenied,
/// UnknownSubscription, TooManyTopics, RateLimited). The transport tells the client in its own medium: an
/// ERROR frame on TCP, a problem or a notice header on long-poll. Fatal refusals are thrown instead, as a
/// <see cref="ProtocolException"/>, and end the session.
/// </summary>
internal readonly record struct Refusal(ErrorCode Code, string? Message)
{
    public bool IsNone => Code == ErrorCode.None;

    /// <summary>The refused SUBSCRIBE, where the ERROR names it (spec §15.1); 0: none.</summary>
    public uint Sid { get; init; }
}

/// <summary>
/// One client of the broker, whatever carries its bytes: everything a client may do and everything it is
/// held to. The identity it authenticated as and that identity's quotas (clients, subscriptions: see
/// <see cref="IdentityQuotas"/>), its subscriptions (with the subscription-change rate charged per frame),
/// publishing (topic and reply checks, permissions, the rate limit charged per message, Zstd and header
/// negotiation, header blocks' reserved keys and limits, bounded decompression, the no-responders status), its one
/// <see cref="SubscriberBacklog"/> with its limits and slow-consumer policy, credential expiry, and the
/// metrics of all that. A transport only accepts clients, moves bytes, and maps these operations and their
/// answers onto its medium: <see cref="FrameSession"/> for framed byte streams (TCP, WebSocket), the
/// long-poll session for HTTP requests. No permission, limit or rate check exists outside this class.
/// </summary>
/// <remarks>
/// Threading: <see cref="Open"/>, <see cref="Subscribe"/>, <see cref="Unsubscribe"/>, the publish methods
/// and <see cref="FlushTouched"/> are called by one caller at a time (a connection's read loop; long-poll
/// serialises a session's requests). <see cref="Close"/>, <see cref="CheckLiveness"/> and the backlog may be
/// called from any thread; the subscription table is guarded by <c>_subscriptionsGate</c> so that a close
/// from another thread never races a subscribe into a leaked route.
/// </remarks>
internal abstract partial class ProtocolSession : INoResponders
{
    private readonly Lock _subscriptionsGate = new();
    private readonly List<IMessageSink> _toFlush = [];
    private Dictionary<uint, Subscription>? _subscriptions;
    private int _subscriptionCount;
    private bool _subscriptionsEnded;
    private Identity _identity = Identity.Anonymous;
    private bool _opened;
    private ReplyPermits? _replyPermits; // a restricted identity's reply permissions (spec §10); null while it may publish everywhere
    private bool _noResponders; // granted: a request that reaches no subscription is answered at once (spec §7)
    private FanoutTally? _fanout; // what routing a traced publication did, for its span (made at the first one)
    private PublicationTally? _tally; // where one thread routes: publications counted in the metrics once per topic and read batch
    private uint _routed; // publications routed, for the fan-out latency's sampling (long-poll requests may race on it: a sample, not a count)
    private uint _routedAtFlush; // _routed when the last batch was flushed: whether a batch's receivers are one publication's

    // The last topic a PUBLISH of this session named that passed the topic rules, and the permissions that granted
    // publishing to it (null: not granted by permissions, or not asked): a publisher sending to one topic pays
    // the rules and the permission match once, not on every publication. Only where one thread checks
    // (ChecksOnOneThread: a TCP read loop); made at the first publication.
    private byte[]? _checkedTopic;
    private int _checkedTopicLength = -1; // -1: none remembered (0 would match an empty topic, which is never valid)
    private Permissions? _checkedTopicGrantedBy;
    private bool _interestChanged; // cluster: this session changed its subscriptions since it last waited for Redis
    private Task? _resumes; // cluster: resumes reading Redis (their replay not yet queued)
    private Task? _joins; // cluster: joins Redis has not decided yet (ProtocolSession.Presence)
    private GroupAssignments? _groups; // cluster: which node the router gave each queue group of a publication (made at the first)

    // Rate limits (publishes; subscription changes), owned by the one caller.
    private TokenBucket _publishes;
    private TokenBucket _subscriptionChanges;

    // The identity's quota this session claimed (ClaimQuota), and whether it gave it back.
    private IdentityUsage? _usage;
    private int _quotaReleased;

    // Why the session ended; set once, from any thread.
    private int _closeCode;
    private string? _closeReason;

    /// <param name="input">The gate this session's input passes (shutdown closes it); its own unless it shares one.</param>
    protected ProtocolSession(BrokerCore broker, long id, string transport, EndPoint? remoteEndPoint, BacklogLimits backlogLimits, InputGate? input = null)
    {
        Input = input ?? new InputGate();
        Broker = broker;
        Limits = broker.Limits;
        Id = id;
        Transport = transport;
        RemoteEndPoint = remoteEndPoint;
        Since = DateTimeOffset.UtcNow;
        _publishes = new TokenBucket(Limits.PublishBurst);
        _subscriptionChanges = new TokenBucket(Limits.SubscriptionBurst);
        Backlog = new SubscriberBacklog(backlogLimits, broker.Metrics, OnSlowConsumer);
    }

    public long Id { get; }

    /// <summary>The transport's name, as in metrics and <c>/connz</c> (<c>tcp</c>, <c>longpoll</c>).</summary>
    public string Transport { get; }

    public EndPoint? RemoteEndPoint { get; }

    public DateTimeOffset Since { get; }

    /// <summary>Where the client's input enters: shutdown closes it before any session is closed (spec §6.4).</summary>
    public InputGate Input { get; }

    /// <summary>Every subscriber's one queue: what the router delivered and the transport has not yet taken.</summary>
    public SubscriberBacklog Backlog { get; }

    /// <summary>The name the client gave (HELLO, or long-poll's create); null when it gave none.</summary>
    public string? ClientName { get; private set; }

    /// <summary>Who the client authenticated as; every operation acts as it.</summary>
    public Identity Identity => Volatile.Read(ref _identity);

    /// <summary>Whether the client was accepted (HELLO answered, or the long-poll session created).</summary>
    public bool IsOpen => Volatile.Read(ref _opened);

    public int SubscriptionCount => Volatile.Read(ref _subscriptionCount);

    /// <summary>Whether the client was granted the no-responders status for its requests (spec §7).</summary>
    public bool GrantsNoResponders => _noResponders;

    /// <summary>Whether the client was told this broker keeps topic histories (spec §4.1 bit 3, §13).</summary>
    public bool GrantsHistory { get; private set; }

    /// <summary>The client may name a queue group in SUBSCRIBE (spec §4.3, §14): it asked for queue_groups.</summary>
    public bool GrantsQueueGroups { get; private set; }

    /// <summary>Why the session ended (<see cref="ErrorCode.None"/>: it has not, or the client left).</summary>
    public ErrorCode CloseCode => Volatile.Read(ref _closeCode) is var code && code > 0 ? (ErrorCode)code : ErrorCode.None;

    public string? CloseReason => Volatile.Read(ref _closeReason);

    /// <summary>
    /// How long the transport must stop taking input from this client to hold the publish rate and the
    /// subscription-change rate (0: no wait). TCP stops reading (before the next frame, so the rate holds per
    /// message); long-poll holds the request's answer. Nothing sent is dropped.
    /// </summary>
    public TimeSpan Throttle
    {
        get
        {
            TimeSpan publishes = _publishes.Debt(Limits.PublishRatePerSecond);
            TimeSpan changes = _subscriptionChanges.Debt(Limits.SubscriptionRatePerSecond);
            return publishes > changes ? publishes : changes;
        }
    }

    /// <summary>
    /// The transport has waited out <see cref="Throttle"/>: a timer that fired late credits the client nothing
    /// beyond the debt, so its episode goes on (told once) until it keeps under the rate by itself.
    /// </summary>
    public void ThrottleServed()
    {
        _publishes.Paid(Limits.PublishRatePerSecond);
        _subscriptionChanges.Paid(Limits.SubscriptionRatePerSecond);
    }

    protected BrokerCore Broker { get; }

    protected LimitOptions Limits { get; }

    /// <summary>
    /// Wakes, once each, the subscribers the publications since the last call reached (flushes are
    /// coalesced per batch, never per message). One receiver is written on this thread, and so are up to
    /// <see cref="BrokerCore.InlineReceivers"/> (one by default) when one publication reached them (a room, a small
    /// fan-out: the latency of one message); a larger fan-out, or several publications' receivers (a responder's
    /// replies to many callers: throughput), is spread over the pool, so that one thread does not write them all.
    /// </summary>
    public void FlushTouched()
    {
        _tally?.Count(Broker.Metrics, Transport); // before any receiver is woken: a client that has an answer to a later frame sees the counts
        List<IMessageSink> toFlush = _toFlush;
        int count = toFlush.Count;
        uint routed = _routed;
        bool onePublication = routed - _routedAtFlush <= 1;
        _routedAtFlush = routed;
        if (count == 0)
        {
            return;
        }

        if (count == 1 || (count <= Broker.InlineReceivers && onePublication))
        {
            for (int i = 0; i < count; i++)
            {
                toFlush[i].Flush(); // request/reply, 1:1, a small room: write now on this thread, no hand-off
            }
        }
        else
        {
            for (int i = 0; i < count; i++)
            {
                toFlush[i].ScheduleFlush(); // fan-out: every receiver's drain runs on the pool, in parallel
            }
        }

        toFlush.Clear();
    }

    /// <summary>Queues one of the session's own control frames (WELCOME, PONG, a non-fatal ERROR) behind what is queued.</summary>
    protected void Control(MessageBuffer frame)
    {
        if (Backlog.EnqueueControl(frame))
        {
            _toFlush.Add(Backlog);
        }
    }

    /// <summary>Queues a control frame from off the read loop (a timer, an answer read elsewhere) and flushes it at once.</summary>
    protected void ControlNow(MessageBuffer frame)
    {
        if (Backlog.EnqueueControl(frame))
        {
            Backlog.ScheduleFlush();
        }
    }

    /// <summary>
    /// Ends the session with <paramref name="code"/> (<see cref="ErrorCode.None"/>: the client left). Any
    /// thread; the first call wins and returns <c>true</c>. The transport then tells the client in its medium
    /// (<see cref="OnClose"/>) and calls <see cref="EndSubscriptions"/>.
    /// </summary>
    public bool Close(ErrorCode code, string reason)
    {
        if (Interlocked.CompareExchange(ref _closeCode, code == ErrorCode.None ? -1 : (int)code, 0) != 0)
        {
            return false;
        }

        Volatile.Write(ref _closeReason, reason);
        OnClose(code, reason);
        return true;
    }

    /// <summary>Whether <see cref="Close"/> was called.</summary>
    public bool IsClosing => Volatile.Read(ref _closeCode) != 0;

    /// <summary>Called by the registry's sweeper: credential expiry for every transport, then the transport's own liveness rules.</summary>
    public void CheckLiveness(long now)
    {
        if (IsOpen && Identity.ExpiresAt is { } expires && DateTimeOffset.UtcNow >= expires)
        {
            Close(ErrorCode.AuthenticationFailed, "The credential has expired; a client refreshes it before it does.");
            return;
        }

        CheckTransportLiveness(now);
    }

    /// <summary>
    /// A credential refresh ended subscription <paramref name="sid"/>: the transport tells the client (TCP: a
    /// non-fatal ERROR PermissionDenied naming the sid, spec §4.8). The session's one caller, before the refresh's
    /// answer. A transport without refresh (long-poll binds its credential at create) has nothing to do.
    /// </summary>
    protected virtual void Revoked(uint sid, string message)
    {
    }

    /// <summary>The transport's part of closing: stop reading, tell the client. Called once, from any thread.</summary>
    protected abstract void OnClose(ErrorCode code, string reason);

    /// <summary>The transport's liveness rules (TCP: handshake timeout and PINGs; long-poll: inactivity).</summary>
    protected virtual void CheckTransportLiveness(long now)
    {
    }

    /// <summary>
    /// The closing sequence of a session the broker closed, for a transport that streams its backlog (TCP, WebSocket,
    /// SSE): <paramref name="lastWords"/> (the transport's form of the fatal ERROR) goes after what is queued on
    /// shutdown (spec §6.4), or at once, the queue discarded, for an error or a timeout; then the drain is waited for, up
    /// to <c>ShutdownDrainTimeout</c> or <c>ErrorFlushTimeout</c>. True when the client took it all; false when it did
    /// not in time: logged, the backlog abandoned, and the caller aborts its connection.
    /// </summary>
    protected async Task<bool> SayLastWordsAsync(ErrorCode code, MessageBuffer lastWords)
    {
        bool drainQueued = code == ErrorCode.ShuttingDown;
        TimeSpan timeout = drainQueued ? Limits.ShutdownDrainTimeout : Limits.ErrorFlushTimeout;
        Task drained = Backlog.Complete(lastWords, discardQueued: !drainQueued);
        if (await Task.WhenAny(drained, Task.Delay(timeout)).ConfigureAwait(false) == drained)
        {
            return true;
        }

        Broker.Log.DrainTimedOut(Id, RemoteEndPoint, timeout);
        Backlog.Abandon();
        return false;
    }

    /// <summary>
    /// Takes every subscription out of the router; nothing more is routed to this session. Gives back the identity's
    /// connection slot too, unless <paramref name="keepQuota"/> (a connection the registry counts until its socket is
    /// gone keeps it until then). Its members leave with <paramref name="reason"/> (spec §15.2: <c>expired</c> for a
    /// long-poll or SSE session that expired, else <c>disconnect</c>).
    /// </summary>
    protected void EndSubscriptions(bool keepQuota = false, PresenceReason reason = PresenceReason.Disconnect)
    {
        lock (_subscriptionsGate)
        {
            _subscriptionsEnded = true;
            if (_subscriptions is not null)
            {
                foreach (Subscription subscription in _subscriptions.Values)
                {
                    EndPresence(subscription.Sid, reason);
                    Broker.Router.Remove(subscription);
                    subscription.Held = false; // a cluster resume waiting for it lets it go
                    _usage?.RemoveSubscription(subscription.Pattern);
                }

                _subscriptions.Clear();
            }

            Volatile.Write(ref _subscriptionCount, 0);
        }

        if (!keepQuota)
        {
            ReleaseQuota();
        }
    }

    protected static void Throw(ErrorCode code, string message) => throw new ProtocolException(code, message);

    private void OnSlowConsumer() => Close(ErrorCode.SlowConsumer, $"Slow consumer: more than {Backlog.Limits.MaxMessages} messages or {Backlog.Limits.MaxBytes} bytes were waiting for this client.");

    /// <summary>
    /// Gives back the client this session claimed of its identity's quota. Once; any thread. A session the registry
    /// counts gives it back when the registry forgets it (its socket gone); one it does not, when its subscriptions end.
    /// </summary>
    public void ReleaseQuota()
    {
        if (Volatile.Read(ref _usage) is { } usage && Interlocked.Exchange(ref _quotaReleased, 1) == 0)
        {
            Broker.Quotas.ReleaseClient(usage);
        }
    }

    /// <summary>A refused SUBSCRIBE or PUBLISH (spec §8 PermissionDenied): counted and told; the session stays unless configured otherwise.</summary>
    private Refusal Denied(string message)
    {
        if (Broker.DisconnectOnPermissionDenied)
        {
            Throw(ErrorCode.PermissionDenied, message); // configured: refused, then closed
        }

        return Refuse(ErrorCode.PermissionDenied, message);
    }

    private Refusal Refuse(ErrorCode code, string message)
    {
        Broker.Metrics.ProtocolError(code);
        return new Refusal(code, message);
    }
}
