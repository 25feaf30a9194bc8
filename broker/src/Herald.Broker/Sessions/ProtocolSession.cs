using System.Buffers;
using System.Diagnostics;
using System.Net;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using MessagePack;

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
internal abstract class ProtocolSession : INoResponders
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
    private uint _routed; // publications routed, for the fan-out latency's sampling (long-poll requests may race on it: a sample, not a count)

    // The last topic a PUBLISH of this session named that passed the topic rules, and the permissions that granted
    // publishing to it (null: not granted by permissions, or not asked): a publisher sending to one topic pays
    // the rules and the permission match once, not on every publication. Only where one thread checks
    // (ChecksOnOneThread: a TCP read loop); made at the first publication.
    private byte[]? _checkedTopic;
    private int _checkedTopicLength = -1; // -1: none remembered (0 would match an empty topic, which is never valid)
    private Permissions? _checkedTopicGrantedBy;
    private bool _interestChanged; // cluster: this session changed its subscriptions since it last waited for Redis
    private Task? _resumes; // cluster: resumes reading Redis (their replay not yet queued)
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
    /// Checks a credential (HELLO's auth, an HTTP bearer token). A failure throws the fatal
    /// AuthenticationFailed, which tells the client only that; why goes to the log with the remote address
    /// (never the credential).
    /// </summary>
    public static Identity Authenticate(BrokerCore broker, string? credential, EndPoint? remote, string transport)
    {
        if (broker.Authenticator.Authenticate(credential, out string failure) is { } identity)
        {
            return identity;
        }

        broker.Log.AuthenticationFailed(transport, remote, failure);
        throw new ProtocolException(ErrorCode.AuthenticationFailed, AuthenticationFailedMessage);
    }

    /// <summary>All a client is told about a failed authentication (spec §4.1).</summary>
    public const string AuthenticationFailedMessage = "Authentication failed.";

    /// <summary>
    /// Accepts the client as <paramref name="identity"/> (spec §4.1-§4.2): returns the capabilities the
    /// broker grants of those requested. Called again on an open session, it is a credential refresh: it must
    /// name the same identity, and every subscription the new permissions no longer allow is ended and told
    /// (<see cref="Revoked"/>) before this returns.
    /// </summary>
    public Capabilities Open(Identity identity, string? clientName, Capabilities requested)
    {
        if (IsOpen && identity.Name != Identity.Name)
        {
            Broker.Log.AuthenticationFailed(Transport, RemoteEndPoint, "A refreshing credential named another identity.");
            throw new ProtocolException(ErrorCode.AuthenticationFailed, AuthenticationFailedMessage);
        }

        Volatile.Write(ref _identity, identity);
        _replyPermits = identity.Permissions.IsAllowAll || Broker.Responses is not { } responses ? null
            : _replyPermits ?? new ReplyPermits(responses.MaxMessages, responses.Expires, responses.MaxPerSession);
        if (IsOpen)
        {
            Reevaluate(identity);
        }

        ClientName = clientName is { Length: > ProtocolConstants.MaxClientNameBytes } ? clientName[..ProtocolConstants.MaxClientNameBytes] : clientName;
        Capabilities accepted = (requested & Capabilities.Zstd) != 0 && Broker.Encoder.Enabled ? Capabilities.Zstd : Capabilities.None;
        if ((requested & Capabilities.Headers) != 0)
        {
            accepted |= Capabilities.Headers | (requested & Capabilities.NoResponders); // no_responders never without headers
            if (Broker.History is not null)
            {
                accepted |= requested & Capabilities.History; // told only where resuming can work: headers, and some history kept
            }
        }

        Backlog.AcceptsZstd = (accepted & Capabilities.Zstd) != 0;
        Backlog.AcceptsHeaders = (accepted & Capabilities.Headers) != 0;
        _noResponders = (accepted & Capabilities.NoResponders) != 0;
        accepted |= requested & Capabilities.QueueGroups; // every broker of this version routes them
        GrantsHistory = (accepted & Capabilities.History) != 0;
        GrantsQueueGroups = (accepted & Capabilities.QueueGroups) != 0;
        Volatile.Write(ref _opened, true);
        return accepted;
    }

    /// <summary>
    /// SUBSCRIBE (spec §4.3): charged to the subscription-change rate, then the sid and pattern rules, the
    /// subscription limits (the client's, its identity's), permissions, the broker's pattern limit.
    /// </summary>
    /// <param name="since">Resume the topic's history after this position (spec §13): the subscription is answered
    /// with a status MESSAGE, then what it missed, then the live stream. Only for a client granted headers.</param>
    /// <param name="queue">The queue group to join (spec §14), or null: only for a client granted queue_groups, never with <paramref name="since"/>.</param>
    public Refusal Subscribe(uint sid, in ReadOnlySequence<byte> pattern, bool noEcho, StreamPosition? since = null, string? queue = null)
    {
        bool overRate = TakeSubscriptionToken();
        try
        {
            return Answer(overRate, queue is not null ? SubscribeQueue(sid, pattern, noEcho, since, queue)
                : since is { } position ? SubscribeSince(sid, pattern, noEcho, position)
                : SubscribeCore(sid, pattern, noEcho));
        }
        catch (ProtocolException) when (overRate)
        {
            _subscriptionChanges.Unwarn(); // refused fatally (long-poll: only this request fails): the next change is told
            throw;
        }
    }

    /// <summary>UNSUBSCRIBE (spec §4.4): charged to the subscription-change rate; an unknown sid is refused, not fatal.</summary>
    public Refusal Unsubscribe(uint sid)
    {
        bool overRate = TakeSubscriptionToken();
        return Answer(overRate, UnsubscribeCore(sid));
    }

    /// <summary>
    /// Claims one client of the identity's quota (<see cref="LimitOptions.MaxConnectionsPerIdentity"/>), once,
    /// when the session is first opened; a refusal (<c>TooManyConnections</c>) says the transport must end it.
    /// Given back when the session's subscriptions end.
    /// </summary>
    public Refusal ClaimQuota()
    {
        if (_usage is not null)
        {
            return default;
        }

        string key = IdentityQuotas.KeyOf(Identity, RemoteEndPoint);
        if (Broker.Quotas.TryClaimClient(key) is not { } usage)
        {
            return new Refusal(ErrorCode.TooManyConnections, $"'{key}' holds its maximum of {Limits.MaxConnectionsPerIdentity} connections.");
        }

        lock (_subscriptionsGate)
        {
            _usage = usage;
            if (!_subscriptionsEnded)
            {
                return default;
            }
        }

        ReleaseQuota(); // ended meanwhile
        return default;
    }

    private Refusal SubscribeCore(uint sid, in ReadOnlySequence<byte> pattern, bool noEcho) =>
        AddSubscription(sid, CheckSubscribe(sid, pattern), noEcho);

    /// <summary>SUBSCRIBE with a queue group (spec §4.3, §14): the shape rules, the pattern's, then the name's.</summary>
    private Refusal SubscribeQueue(uint sid, in ReadOnlySequence<byte> pattern, bool noEcho, StreamPosition? since, string queue)
    {
        if (!GrantsQueueGroups)
        {
            Throw(ErrorCode.MalformedFrame, "A SUBSCRIBE named a queue group without negotiating queue_groups (HELLO's capabilities).");
        }

        if (since is not null)
        {
            Throw(ErrorCode.MalformedFrame, "A SUBSCRIBE named both a queue group and a since: a queue group has no position to resume.");
        }

        string checkedPattern = CheckSubscribe(sid, pattern);
        if (!Topic.IsQueueName(queue))
        {
            Throw(ErrorCode.InvalidTopic, Topic.DescribeQueueName(queue));
        }

        return AddSubscription(sid, checkedPattern, noEcho, queue: queue);
    }

    private string CheckSubscribe(uint sid, in ReadOnlySequence<byte> pattern)
    {
        if (sid == 0)
        {
            Throw(ErrorCode.DuplicateSubscription, "Subscription id 0 is not allowed.");
        }

        return TopicRules.CheckPattern(pattern, Limits.MaxTopicLength);
    }

    /// <summary>
    /// SUBSCRIBE with <c>since</c> (spec §13). On a topic that keeps a history, the history adds the subscription
    /// and queues the status and what was missed under its gate (no gap, no duplicate); on anything else (a
    /// pattern with wildcards, a topic without history) the subscription is made live and answered "not recovered".
    /// Either way the status MESSAGE comes before any other MESSAGE of the subscription.
    /// </summary>
    private Refusal SubscribeSince(uint sid, in ReadOnlySequence<byte> pattern, bool noEcho, StreamPosition since)
    {
        if (!Backlog.AcceptsHeaders)
        {
            Throw(ErrorCode.MalformedFrame, "A SUBSCRIBE with since was sent without negotiating headers: its answer is a status MESSAGE with a header block (HELLO's capabilities, or long-poll's \"headers\": true).");
        }

        string checkedPattern = CheckSubscribe(sid, pattern);
        TopicHistory? history = !HasWildcards(checkedPattern) ? Broker.History?.Find(checkedPattern) : null;
        if (history is null)
        {
            Refusal refused = AddSubscription(sid, checkedPattern, noEcho);
            if (refused.IsNone)
            {
                string why = HasWildcards(checkedPattern) ? "A pattern with wildcards has no single history to resume" : "This topic keeps no history";
                NotResumable(sid, checkedPattern, why, _toFlush);
            }

            return refused;
        }

        if (Broker.History!.Shared)
        {
            // The cluster's history is in Redis: the subscription is routed held (so this node's interest in the topic
            // settles), then Redis is read and the replay queued; it joins the live stream where the replay ends.
            var held = new Subscription(Backlog, sid, checkedPattern, noEcho) { Held = true };
            Refusal refused = AddSubscription(sid, checkedPattern, noEcho, held);
            if (refused.IsNone)
            {
                TrackResume(ResumeSharedAsync(history, since, held));
            }

            return refused;
        }

        Refusal answer = default;
        ResumeOutcome? outcome = history.Resume(since, () => (answer = AddSubscription(sid, checkedPattern, noEcho)).IsNone, Backlog, sid, _toFlush, Limits.MaxPayloadBytes);
        if (outcome is { } resumed)
        {
            Broker.History!.Resumed(resumed.Recovered);
            Resumed(sid, resumed);
        }

        return answer;
    }

    private static bool HasWildcards(string pattern) => pattern.AsSpan().IndexOfAny('*', '>') >= 0;

    /// <summary>A cluster resume (spec cluster.md §9): waits for this node's Redis subscription, reads Redis, then queues status and replay under the topic's gate.</summary>
    private async Task ResumeSharedAsync(TopicHistory history, StreamPosition since, Subscription held)
    {
        ResumeOutcome outcome;
        var toFlush = new List<IMessageSink>(1);
        try
        {
            await Broker.Interest.WhenSettledAsync().ConfigureAwait(false);
            SharedRead read = await Broker.SharedHistory.ReadAsync(history, since).ConfigureAwait(false);
            outcome = history.ResumeShared(since, read, held, Backlog, toFlush, Limits.MaxPayloadBytes, Limits.MaxFrameBytes, Broker.SharedHistory.DecodeKept);
        }
        catch (ClusterUnavailableException e)
        {
            // Redis unreachable: no replay; the subscription goes live at once and says so.
            held.Held = false;
            NotResumable(held.Sid, history.Topic, $"History unavailable: Redis did not answer ({e.Message})", toFlush);
            Backlog.ScheduleFlush();
            return;
        }

        Broker.History!.Resumed(outcome.Recovered);
        Resumed(held.Sid, outcome);
        if (toFlush.Count > 0)
        {
            Backlog.ScheduleFlush();
        }
    }

    /// <summary>Keeps the cluster resumes in flight: the transport answers the client's next question (PONG, the subscribe response) after them.</summary>
    private void TrackResume(Task resume)
    {
        lock (_subscriptionsGate)
        {
            _resumes = _resumes is { IsCompleted: false } earlier ? Task.WhenAll(earlier, resume) : resume;
        }
    }

    /// <summary>The transport learns how a resume went (long-poll answers it in the subscribe response); TCP has nothing to add to the status MESSAGE.</summary>
    protected virtual void Resumed(uint sid, ResumeOutcome outcome)
    {
    }

    /// <summary>The status MESSAGE of a resume that cannot be (spec §13): 410 with why, and no position.</summary>
    private void NotResumable(uint sid, string topic, string why, List<IMessageSink> toFlush)
    {
        byte[] headers = HeaderBlock.Encode(
        [
            new(StreamPosition.StatusHeader, [StreamPosition.NotRecovered]),
            new(StreamPosition.DescriptionHeader, [why]),
        ]);
        byte[] name = System.Text.Encoding.UTF8.GetBytes(topic);
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(name.Length, 0, PayloadFlags.None, 0) + headers.Length);
        FrameWriter.WriteMessage(new MessageBufferWriter(frame), 0, name, default, PayloadFlags.None, default, headers);
        if ((Backlog.Enqueue(frame, sid) & Enqueued.Wake) != 0)
        {
            toFlush.Add(Backlog);
        }

        Broker.History?.Resumed(false);
        Resumed(sid, new ResumeOutcome(false, why, default, 0));
    }

    private Refusal AddSubscription(uint sid, string checkedPattern, bool noEcho, Subscription? held = null, string? queue = null)
    {
        lock (_subscriptionsGate)
        {
            _subscriptions ??= [];
            if (_subscriptionsEnded)
            {
                return default; // closing: nothing more is routed to this session
            }

            if (_subscriptions.ContainsKey(sid))
            {
                Throw(ErrorCode.DuplicateSubscription, $"Subscription id {sid} is already in use by this client.");
            }

            if (_subscriptions.Count >= Limits.MaxSubscriptionsPerConnection)
            {
                Throw(ErrorCode.TooManySubscriptions, $"More than {Limits.MaxSubscriptionsPerConnection} subscriptions for one client.");
            }

            if (!Identity.Permissions.CanSubscribe(checkedPattern))
            {
                return Denied($"Subscribing to '{checkedPattern}' is not permitted for '{Identity.Name}'.");
            }

            if (_usage is { } usage && !usage.TryAddSubscription(Limits.MaxSubscriptionsPerIdentity))
            {
                return Refuse(ErrorCode.TooManyTopics, $"'{usage.Key}' holds its maximum of {Limits.MaxSubscriptionsPerIdentity} subscriptions across its connections.");
            }

            Subscription subscription = held ?? new Subscription(Backlog, sid, checkedPattern, noEcho, queue, Identity.Name);
            subscription.Replies = _replyPermits;
            try
            {
                Broker.Router.Add(subscription);
            }
            catch (ProtocolException e) when (e.Code == ErrorCode.TooManyTopics)
            {
                _usage?.RemoveSubscriptions(1);
                return Refuse(e.Code, e.Message); // refused, told; the session stays
            }

            _subscriptions.Add(sid, subscription);
            Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
            _interestChanged = true;
        }

        return default;
    }

    private Refusal UnsubscribeCore(uint sid)
    {
        lock (_subscriptionsGate)
        {
            if (_subscriptions is null || !_subscriptions.Remove(sid, out Subscription? subscription))
            {
                return Refuse(ErrorCode.UnknownSubscription, $"No live subscription with id {sid}.");
            }

            Broker.Router.Remove(subscription);
            subscription.Held = false; // a cluster resume waiting for it lets it go
            _usage?.RemoveSubscriptions(1);
            Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
            _interestChanged = true;
        }

        return default;
    }

    /// <summary>
    /// Cluster: this session changed its subscriptions and Redis does not have every change yet. The transport
    /// answers the client's next question (a PONG, a long-poll response) only after
    /// <see cref="InterestSettledAsync"/>, so a subscription the client was told of is live on every node.
    /// One test of a field on a single node. Caller: the session's input (one at a time).
    /// </summary>
    public bool AwaitsInterest => (_interestChanged && !Broker.Interest.IsSettled) || _resumes is { IsCompleted: false };

    /// <summary>Completes when every subscription change made so far is in Redis (at once on a single node), and every cluster resume has queued its replay.</summary>
    public async Task InterestSettledAsync()
    {
        _interestChanged = false;
        await Broker.Interest.WhenSettledAsync().ConfigureAwait(false);

        if (_resumes is { } resumes)
        {
            await resumes.ConfigureAwait(false);
        }
    }

    /// <summary>
    /// PUBLISH (spec §4.5): checked, charged one token, then routed once to every matching subscriber. A
    /// refusal (PermissionDenied) routes nothing; a RateLimited notice (once per episode) routed it and
    /// asks the transport to wait <see cref="Throttle"/>.
    /// </summary>
    public Refusal Publish(in PublishFrame publish, long receivedAt)
    {
        Refusal refused = Check(publish);
        if (!refused.IsNone)
        {
            return refused;
        }

        Refusal notice = Limits.PublishRatePerSecond > 0 ? TakeToken() : default;
        if ((publish.Flags & PayloadFlags.Zstd) == 0)
        {
            Route(publish, default, receivedAt);
            return notice;
        }

        // Sent compressed: always checked (bounded, so no decompression bomb) before anything is routed;
        // subscribers without Zstd get the plain form.
        int length = Zstd.Decompress(publish.Payload, PlainPayloadLimit(publish), out byte[] plain);
        try
        {
            Route(publish, plain.AsSpan(0, length), receivedAt);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(plain);
        }

        return notice;
    }

    /// <summary>
    /// A body of PUBLISH frames back to back (long-poll's publish, longpoll §1.3): every one is read and
    /// checked, and every compressed payload decompressed, before any is routed; then all are routed in
    /// order. The bytes the payloads declare they decompress to count, together, against
    /// <paramref name="maxDecompressedBytes"/> before any buffer is taken, so one small body cannot hold
    /// more than that (issue 22).
    /// </summary>
    public Refusal PublishAll(ReadOnlySequence<byte> frames, long receivedAt, int maxDecompressedBytes)
    {
        var publishes = new List<PublishFrame>();
        while (FrameReader.TryReadFrame(ref frames, Limits.MaxFrameBytes, out ReadOnlySequence<byte> frame))
        {
            var reader = new MessagePackReader(frame);
            FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
            publishes.Add(type == FrameType.Publish ? FrameDecoder.ReadPublish(ref reader, count) : throw new ProtocolException(ErrorCode.UnexpectedFrame, $"Only PUBLISH frames may be posted here, not {type}."));
        }

        if (!frames.IsEmpty || publishes.Count == 0)
        {
            Throw(ErrorCode.MalformedFrame, frames.IsEmpty ? "The body holds no PUBLISH frame." : $"The body ends with {frames.Length} bytes of an incomplete frame.");
        }

        long decompressed = 0;
        foreach (PublishFrame publish in publishes)
        {
            Refusal refused = Check(publish);
            if (!refused.IsNone)
            {
                return refused;
            }

            if ((publish.Flags & PayloadFlags.Zstd) != 0 && (decompressed += Zstd.DecompressedCapacity(publish.Payload, PlainPayloadLimit(publish))) > maxDecompressedBytes)
            {
                Throw(ErrorCode.DecompressionFailed, $"The body's compressed payloads would decompress to more than {maxDecompressedBytes} bytes together.");
            }
        }

        var plain = new (byte[]? Bytes, int Length)[publishes.Count];
        Refusal notice = default;
        try
        {
            for (int i = 0; i < publishes.Count; i++)
            {
                if ((publishes[i].Flags & PayloadFlags.Zstd) != 0)
                {
                    plain[i].Length = Zstd.Decompress(publishes[i].Payload, PlainPayloadLimit(publishes[i]), out plain[i].Bytes);
                }
            }

            for (int i = 0; i < publishes.Count; i++)
            {
                if (Limits.PublishRatePerSecond > 0 && TakeToken() is { IsNone: false } warned)
                {
                    notice = warned;
                }

                Route(publishes[i], plain[i].Bytes is { } bytes ? bytes.AsSpan(0, plain[i].Length) : default, receivedAt);
            }
        }
        finally
        {
            foreach ((byte[]? bytes, _) in plain)
            {
                if (bytes is not null)
                {
                    ArrayPool<byte>.Shared.Return(bytes);
                }
            }
        }

        return notice;
    }

    /// <summary>
    /// Wakes, once each, the subscribers the publications since the last call reached (flushes are
    /// coalesced per batch, never per message). One receiver is written on this thread; a fan-out is
    /// spread over the pool.
    /// </summary>
    public void FlushTouched()
    {
        List<IMessageSink> toFlush = _toFlush;
        int count = toFlush.Count;
        if (count == 0)
        {
            return;
        }

        if (count == 1)
        {
            toFlush[0].Flush(); // one receiver (request/reply, 1:1): write now on this thread, no hand-off
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

    /// <summary>Takes every subscription out of the router; nothing more is routed to this session.</summary>
    protected void EndSubscriptions()
    {
        lock (_subscriptionsGate)
        {
            _subscriptionsEnded = true;
            if (_subscriptions is not null)
            {
                foreach (Subscription subscription in _subscriptions.Values)
                {
                    Broker.Router.Remove(subscription);
                    subscription.Held = false; // a cluster resume waiting for it lets it go
                }

                _usage?.RemoveSubscriptions(_subscriptions.Count);
                _subscriptions.Clear();
            }

            Volatile.Write(ref _subscriptionCount, 0);
        }

        ReleaseQuota();
    }

    protected static void Throw(ErrorCode code, string message) => throw new ProtocolException(code, message);

    private void OnSlowConsumer() => Close(ErrorCode.SlowConsumer, $"Slow consumer: more than {Backlog.Limits.MaxMessages} messages or {Backlog.Limits.MaxBytes} bytes were waiting for this client.");

    /// <summary>
    /// A PUBLISH's checks (spec §4.5, §10), in the order of spec §8.1: Zstd negotiation, topic and reply_to
    /// rules, the payload limit, then permissions. A reply_to must be a topic the publisher may subscribe to
    /// (never a reserved one, where no responder may publish); a topic the permissions do not grant may still
    /// be a reply the session was asked for (one of its <see cref="ReplyPermits"/>, spent here). Allow-all
    /// identities pay only the reserved-prefix test.
    /// </summary>
    private Refusal Check(in PublishFrame publish)
    {
        if ((publish.Flags & PayloadFlags.Zstd) != 0 && !Backlog.AcceptsZstd)
        {
            Throw(ErrorCode.MalformedFrame, "A Zstd-compressed payload was sent without negotiating Zstd (HELLO's capabilities, or long-poll's \"zstd\": true).");
        }

        if (publish.HasHeaders && !Backlog.AcceptsHeaders)
        {
            Throw(ErrorCode.MalformedFrame, "A header block was sent without negotiating headers (HELLO's capabilities, or long-poll's \"headers\": true).");
        }

        bool checkedBefore = ChecksOnOneThread && IsCheckedTopic(publish.Topic);
        if (!checkedBefore)
        {
            TopicRules.CheckName(publish.Topic, Limits.MaxTopicLength);
        }

        Permissions permissions = Identity.Permissions;
        if (publish.ReplyTo is { } replyTo)
        {
            TopicRules.CheckName(replyTo, Limits.MaxTopicLength, isReplyTo: true);
        }

        if (publish.ReservedHeader is { } reserved)
        {
            Throw(ErrorCode.InvalidHeaders, $"Header '{reserved}' is under the prefix {HeaderBlock.ReservedPrefix}, which only the broker sets.");
        }

        if (publish.Payload.Length + publish.Headers.Length > Limits.MaxPayloadBytes)
        {
            Throw(ErrorCode.FrameTooLarge, publish.HasHeaders
                ? $"Payload of {publish.Payload.Length} bytes with a header block of {publish.Headers.Length} bytes is over max_payload ({Limits.MaxPayloadBytes} bytes, WELCOME): its MESSAGE would not fit in max_frame."
                : $"Payload of {publish.Payload.Length} bytes is over max_payload ({Limits.MaxPayloadBytes} bytes, WELCOME): its MESSAGE would not fit in max_frame.");
        }

        if (publish.HeaderValues > Limits.MaxHeaders || publish.Headers.Length > Limits.MaxHeaderBytes)
        {
            Throw(ErrorCode.InvalidHeaders, $"The header block ({publish.HeaderValues} values, {publish.Headers.Length} bytes) is over max_headers ({Limits.MaxHeaders}) or max_header_bytes ({Limits.MaxHeaderBytes}, WELCOME).");
        }

        if (publish.ReplyTo is { } reply && (TopicRules.IsReserved(reply) || (!permissions.IsAllowAll && !MayNameAsReplyTo(permissions, reply))))
        {
            return Denied($"Naming '{publish.ReplyToString}' as reply_to is not permitted for '{Identity.Name}': a reply topic must be one it may subscribe to, and not reserved.");
        }

        if (!permissions.IsAllowAll && !(checkedBefore && ReferenceEquals(_checkedTopicGrantedBy, permissions)))
        {
            PublishGrant grant = MayPublish(permissions, publish.Topic);
            if (grant == PublishGrant.None)
            {
                return Denied($"Publishing to '{publish.TopicString}' is not permitted for '{Identity.Name}'.");
            }

            if (ChecksOnOneThread)
            {
                RememberCheckedTopic(publish.Topic, grant == PublishGrant.Permissions ? permissions : null); // a reply permit is spent: never remembered
            }
        }
        else if (ChecksOnOneThread && !checkedBefore)
        {
            RememberCheckedTopic(publish.Topic, permissions); // allow-all: nothing to match
        }

        return default;
    }

    /// <summary>Whether the one thread that calls <see cref="Check"/> is always the same (a TCP read loop), so that it may remember the last topic it checked.</summary>
    protected virtual bool ChecksOnOneThread => false;

    private bool IsCheckedTopic(in ReadOnlySequence<byte> topic) =>
        _checkedTopicLength >= 0 && topic.IsSingleSegment && topic.FirstSpan.SequenceEqual(_checkedTopic.AsSpan(0, _checkedTopicLength));

    private void RememberCheckedTopic(in ReadOnlySequence<byte> topic, Permissions? grantedBy)
    {
        if (!topic.IsSingleSegment || topic.Length > CheckedTopicBytes)
        {
            _checkedTopicLength = -1; // forget the one before: it is no longer the last
            _checkedTopicGrantedBy = null;
            return;
        }

        _checkedTopic ??= new byte[CheckedTopicBytes];
        topic.FirstSpan.CopyTo(_checkedTopic);
        _checkedTopicLength = (int)topic.Length;
        _checkedTopicGrantedBy = grantedBy;
    }

    /// <summary>The longest topic remembered as checked (<see cref="IsCheckedTopic"/>).</summary>
    private const int CheckedTopicBytes = 128;

    private enum PublishGrant
    {
        None,
        Permissions,
        ReplyPermit,
    }

    /// <summary>The most a compressed payload may decompress to: its plain MESSAGE, header block included, must fit in max_frame (spec §4.5, §11).</summary>
    private int PlainPayloadLimit(in PublishFrame publish) => Limits.MaxPayloadBytes - (int)publish.Headers.Length;

    /// <summary>A restricted identity's PUBLISH: granted, or a reply it was asked for (spent here). Allocates nothing.</summary>
    private PublishGrant MayPublish(Permissions permissions, in ReadOnlySequence<byte> topic)
    {
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var name = new TopicChars(topic, stack);
        return permissions.CanPublish(name.Span) ? PublishGrant.Permissions
            : _replyPermits?.TryUse(name.Span) == true ? PublishGrant.ReplyPermit
            : PublishGrant.None;
    }

    private static bool MayNameAsReplyTo(Permissions permissions, in ReadOnlySequence<byte> replyTo)
    {
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var name = new TopicChars(replyTo, stack);
        return permissions.CanReceive(name.Span);
    }

    /// <summary>
    /// A credential refresh (spec §4.1): ends every subscription the new permissions no longer allow, telling
    /// the client of each (<see cref="Revoked"/>); the rest record reply permissions as the identity now needs.
    /// </summary>
    private void Reevaluate(Identity identity)
    {
        List<Subscription>? revoked = null;
        lock (_subscriptionsGate)
        {
            if (_subscriptions is null || _subscriptionsEnded)
            {
                return;
            }

            foreach (Subscription subscription in _subscriptions.Values)
            {
                if (identity.Permissions.CanSubscribe(subscription.Pattern))
                {
                    subscription.Replies = _replyPermits;
                }
                else
                {
                    (revoked ??= []).Add(subscription);
                }
            }

            foreach (Subscription subscription in revoked ?? [])
            {
                Broker.Router.Remove(subscription);
                subscription.Held = false; // a cluster resume waiting for it lets it go
                _subscriptions.Remove(subscription.Sid);
                _usage?.RemoveSubscriptions(1);
            }

            Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
        }

        foreach (Subscription subscription in revoked ?? [])
        {
            Broker.Metrics.ProtocolError(ErrorCode.PermissionDenied);
            Revoked(subscription.Sid, $"Subscription {subscription.Sid} to '{subscription.Pattern}' ended: the refreshed credential of '{identity.Name}' no longer permits it.");
        }
    }

    private void Route(in PublishFrame publish, ReadOnlySpan<byte> plainPayload, long receivedAt)
    {
        // The broker's span (issue 20.3), only for a publication whose headers carry a sampled traceparent and
        // while something listens: without headers this costs the HasHeaders test, with them HasListeners.
        Activity? span = publish.HasHeaders && BrokerTracing.Source.HasListeners() ? StartSpan(publish, receivedAt) : null;
        FanoutTally? tally = span is null ? null : _fanout;
        if (Broker.History is { Shared: true } && SharedHistoryOf(publish) is { } kept)
        {
            int stamped = ProtocolConstants.MessageHeaderSize - ProtocolConstants.LengthPrefixSize + (int)(publish.Envelope.Length + publish.Headers.Length) + TopicHistory.MaxStampBytes;
            if (stamped > Limits.MaxFrameBytes)
            {
                Throw(ErrorCode.FrameTooLarge, $"Topic '{kept.Topic}' keeps a history: its MESSAGE, with the position the broker stamps in (up to {TopicHistory.MaxStampBytes} bytes), could be {stamped} bytes, over max_frame ({Limits.MaxFrameBytes}).");
            }

            // A history topic in a cluster: Redis gives it its offset, and it comes back to be delivered here too.
            Broker.SharedHistory.ForwardKept(publish, kept, Backlog, ref _groups);
            span?.Dispose();
            Broker.Metrics.Published(Transport, publish.Topic, 0, ProtocolConstants.MessageHeaderSize + (int)(publish.Envelope.Length + publish.Headers.Length));
            return;
        }

        // The fan-out latency (herald.fanout.duration) of one publication in FanoutSampling: a histogram record
        // on every publication cost about 5 % of a streaming publisher's broker CPU (loadtest/docs/profile.md).
        long sampledAt = (_routed++ & (BrokerMetrics.FanoutSampling - 1)) == 0 ? receivedAt : 0;
        GroupAssignments? groups = Broker.Exchange.Assigning(ref _groups, publish); // cluster: queue groups chosen among every node's members
        int deliveries = Broker.History is { } histories
            ? histories.Publish(Broker.Router, publish, Backlog, _toFlush, Broker.Encoder, plainPayload, sampledAt, tally, Limits.MaxFrameBytes, groups)
            : Broker.Router.Publish(publish, Backlog, _toFlush, Broker.Encoder, plainPayload, sampledAt, tally, groups);
        if (span is not null)
        {
            _fanout!.WriteTo(span);
            span.Dispose(); // ended once queued to every subscriber, not when written
        }

        Broker.Metrics.Published(Transport, publish.Topic, deliveries, ProtocolConstants.MessageHeaderSize + (int)(publish.Envelope.Length + publish.Headers.Length));
        bool unanswered = deliveries == 0 && _noResponders && publish.ReplyTo.HasValue;
        // In a cluster the other nodes decide whether anyone takes the request, and the groups given to them go along;
        // on one node (the exchange takes nothing) an unanswered request is answered here.
        if (!Broker.Exchange.Forward(publish, unanswered ? this : null, groups) && unanswered && AnswerNoResponders(publish.ReplyTo!.Value))
        {
            _toFlush.Add(Backlog);
        }
    }

    private TopicHistory? SharedHistoryOf(in PublishFrame publish)
    {
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var topic = new TopicChars(publish.Topic, stack);
        return Broker.History!.Find(topic.Span);
    }

    /// <summary>A request of this session reached no subscriber on any node (cluster): answered as on one node, from the cluster's thread.</summary>
    void INoResponders.NoResponders(ReadOnlyMemory<byte> replyTo)
    {
        if (AnswerNoResponders(new ReadOnlySequence<byte>(replyTo)))
        {
            Backlog.ScheduleFlush();
        }
    }

    /// <summary>Starts the broker's span of a publication carrying a sampled traceparent, with this session's attributes; null otherwise.</summary>
    private Activity? StartSpan(in PublishFrame publish, long receivedAt)
    {
        Activity? span = BrokerTracing.StartRoute(publish, receivedAt);
        if (span is null)
        {
            return null;
        }

        if (span.IsAllDataRequested)
        {
            span.SetTag("herald.transport", Transport);
            span.SetTag("herald.connection.id", Id);
            if (ClientName is { } name)
            {
                span.SetTag("messaging.client.id", name);
            }
        }

        _fanout ??= new FanoutTally();
        return span;
    }

    /// <summary>The status block of a no-responders answer (spec §7), encoded once.</summary>
    private static readonly byte[] NoRespondersHeaders = HeaderBlock.Encode(
    [
        new("Herald-Status", ["503"]),
        new("Herald-Description", ["No responders"]),
    ]);

    /// <summary>
    /// A request of this session reached no subscription (spec §7): a MESSAGE on its reply_to, with the
    /// no-responders status and nothing else, to this session's own subscriptions that match the reply_to (no
    /// one else's; nothing if it has none). Off the hot path: only a request that found nobody gets here.
    /// True when the backlog must be woken (by the caller: its batch's flush, or at once).
    /// </summary>
    private bool AnswerNoResponders(in ReadOnlySequence<byte> replyTo)
    {
        Broker.Metrics.NoResponders();
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var reply = new TopicChars(replyTo, stack);
        ReadOnlySpan<byte> topic = replyTo.IsSingleSegment ? replyTo.FirstSpan : replyTo.ToArray();
        List<uint>? sids = null;
        lock (_subscriptionsGate)
        {
            if (_subscriptions is null || _subscriptionsEnded)
            {
                return false;
            }

            foreach (Subscription subscription in _subscriptions.Values)
            {
                if (Topic.Matches(subscription.Pattern, reply.Span))
                {
                    (sids ??= []).Add(subscription.Sid);
                }
            }
        }

        if (sids is null)
        {
            return false;
        }

        // Queued outside the gate: a full backlog may end the session, which takes the gate.
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(topic.Length, 0, PayloadFlags.None, 0) + NoRespondersHeaders.Length);
        FrameWriter.WriteMessage(new MessageBufferWriter(frame), 0, topic, default, PayloadFlags.None, default, NoRespondersHeaders);
        frame.Retain(sids.Count - 1);
        bool wake = false;
        foreach (uint sid in sids)
        {
            wake |= (Backlog.Enqueue(frame, sid) & Enqueued.Wake) != 0;
        }

        return wake;
    }

    private Refusal TakeToken()
    {
        int rate = Limits.PublishRatePerSecond;
        return _publishes.Take(rate, Limits.PublishBurst)
            ? Refuse(ErrorCode.RateLimited, $"Publishing faster than {rate} messages/s (burst {Limits.PublishBurst}): input is paused to hold that rate; nothing is dropped.")
            : default;
    }

    /// <summary>Charges one SUBSCRIBE or UNSUBSCRIBE to the subscription-change rate: <c>true</c> for the first over it in an episode.</summary>
    private bool TakeSubscriptionToken() =>
        Limits.SubscriptionRatePerSecond > 0 && _subscriptionChanges.Take(Limits.SubscriptionRatePerSecond, Limits.SubscriptionBurst);

    /// <summary>
    /// A subscription change's answer: its own refusal wins over the rate notice, which then goes to the next
    /// change over the rate; else the RateLimited notice (the change was made), once per episode.
    /// </summary>
    private Refusal Answer(bool overRate, Refusal answer)
    {
        if (!answer.IsNone || !overRate)
        {
            if (overRate)
            {
                _subscriptionChanges.Unwarn();
            }

            return answer;
        }

        int rate = Limits.SubscriptionRatePerSecond;
        return Refuse(ErrorCode.RateLimited, $"Changing subscriptions faster than {rate} per second (burst {Limits.SubscriptionBurst}): input is paused to hold that rate; the change was made.");
    }

    /// <summary>Gives back the client this session claimed of its identity's quota. Once; any thread.</summary>
    private void ReleaseQuota()
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
