using Herald.Broker.Compression;
using Herald.Broker.Engines;
using Herald.Broker.Engines.PollSharing;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Telemetry;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Sessions;

/// <summary>What every session shares: the options, the one router, metrics and the log.</summary>
internal sealed class BrokerCore
{
    public BrokerCore(string serverName, LimitOptions limits, SecurityOptions security, TopicRouter router, MessageEncoder encoder, Authenticator authenticator, BrokerMetrics metrics, ILogger log, BrokerEngines? engines = null, HistoryStore? history = null, TimeProvider? time = null)
    {
        Time = time ?? TimeProvider.System;
        engines ??= BrokerEngines.Local;
        Exchange = engines.Exchange;
        Interest = engines.Interest;
        SharedHistory = engines.History;
        ClusterStatus = engines.Status;
        SharedSessions = engines.Sessions;
        Presence = engines.Presence ?? new LocalPresence(new PresenceOptions(), enabled: true);
        ClientControl = engines.Control ?? new LocalClientControl(new Revocations(security.MaxRevocations, Time));
        Census = engines.Census ?? new LocalTopicCensus();
        History = history;
        ServerName = serverName;
        Limits = limits;
        DisconnectOnPermissionDenied = security.DisconnectOnPermissionDenied;
        Responses = security.AllowInboxReplies ? security.Responses : null;
        Authenticator = authenticator;
        _access = new LocalAccess(authenticator);
        Encoder = encoder;
        Router = router;
        Census.Serve(query => NodeTopics.Of(router, query)); // this node's part of the topics listing
        Metrics = metrics;
        Log = log;
        Quotas = new IdentityQuotas(limits);
        PartialFrames = new PartialFrameBudget(limits.MaxPartialFrameBytesTotal);
        WelcomeLimits =
        [
            new("max_frame", (ulong)limits.MaxFrameBytes),
            new("max_topic", (ulong)limits.MaxTopicLength),
            new("max_payload", (ulong)limits.MaxPayloadBytes),
            new("max_subscriptions", (ulong)limits.MaxSubscriptionsPerConnection),
            new("max_pending_bytes", (ulong)limits.MaxPendingBytes),
            new("max_pending_msgs", (ulong)limits.MaxPendingMessages),
            new("ping_interval_ms", (ulong)limits.PingInterval.TotalMilliseconds),
            new("max_headers", (ulong)limits.MaxHeaders),
            new("max_header_bytes", (ulong)limits.MaxHeaderBytes),
        ];
    }

    /// <summary>Name sent in WELCOME.</summary>
    public string ServerName { get; }

    /// <summary>What every session is held to.</summary>
    public LimitOptions Limits { get; }

    /// <summary>The clock of reply grants' expiry: the host's <see cref="TimeProvider"/> (the system's; a test's fake one makes expiry exact).</summary>
    public TimeProvider Time { get; }

    /// <summary>Whether a refused SUBSCRIBE or PUBLISH also ends the session (spec §10).</summary>
    public bool DisconnectOnPermissionDenied { get; }

    /// <summary>The reply permission a delivered request grants a restricted receiver (spec §10); null: none (inbox replies off).</summary>
    public ResponseOptions? Responses { get; }

    public TopicRouter Router { get; }

    /// <summary>Where a publication routed here goes next (the other nodes, in a cluster): one call per publication.</summary>
    public IPublicationExchange Exchange { get; }

    /// <summary>Whether this node's subscription changes are known where they must be (at once on a single node).</summary>
    public ISharedInterest Interest { get; }

    /// <summary>Topic histories kept for every node (asked only when <see cref="HistoryStore.Shared"/>).</summary>
    public ISharedHistory SharedHistory { get; }

    /// <summary>What monitoring shows of the cluster (nothing on a single node).</summary>
    public IClusterStatus ClusterStatus { get; }

    /// <summary>
    /// The most receivers of one publication a read batch writes on its own thread (<see cref="ProtocolSession.FlushTouched"/>);
    /// more, or several publications' receivers, are spread over the pool (<see cref="Transports.Tcp.TcpOptions.InlineFanout"/>, 1 by default).
    /// </summary>
    public int InlineReceivers { get; init; } = 1;

    /// <summary>Where long-poll sessions' state is kept for every node to serve them (<see cref="LocalSessions"/>: nowhere, on a single node).</summary>
    public ISharedSessions SharedSessions { get; }

    /// <summary>Who is on a topic, its join and leave events and its occupancy (spec §15).</summary>
    public IPresence Presence { get; }

    /// <summary>The server API's actions on clients (disconnect, revoke, subscribe), reaching the node that holds the client.</summary>
    public IClientControl ClientControl { get; }

    /// <summary>The server API's topics listing: this node's subscriptions, or every node's on a cluster node.</summary>
    public ITopicCensus Census { get; }

    /// <summary>The identities refused until a time (spec §8 <c>Revoked</c>), checked whenever a client authenticates.</summary>
    public Revocations Revocations => ClientControl.Revocations;

    /// <summary>Topic histories, when <c>Herald:History:Topics</c> names a pattern; null otherwise (one test per publication).</summary>
    public HistoryStore? History { get; }

    /// <summary>Who a client is and what it may do (HELLO's auth, or an HTTP bearer token).</summary>
    public Authenticator Authenticator { get; }

    /// <summary>
    /// The access decisions: a credential's identity, and what the application's backend says of a subscription or a
    /// publication (<see cref="HookedAccess"/>, where hooks are configured); the local ones otherwise.
    /// </summary>
    public IAccessDecisions Access
    {
        get => _access;
        init
        {
            _access = value;
            DecidesPublications = value.DecidesPublications;
        }
    }

    private readonly IAccessDecisions _access;

    /// <summary>Whether a publication may need the backend's decision: read once per PUBLISH, nothing more when false.</summary>
    public bool DecidesPublications { get; private init; }

    /// <summary>Builds the compressed or plain second form of a publication when a subscriber needs it.</summary>
    public MessageEncoder Encoder { get; }

    public BrokerMetrics Metrics { get; }

    /// <summary>What each identity holds across its clients (per-identity connection and subscription quotas).</summary>
    public IdentityQuotas Quotas { get; }

    public ILogger Log { get; }

    /// <summary>The bytes all TCP connections may hold of large frames not yet complete (spec §6.2).</summary>
    public PartialFrameBudget PartialFrames { get; }

    /// <summary>The limits map of WELCOME (spec §4.2), built once.</summary>
    public KeyValuePair<string, ulong>[] WelcomeLimits { get; }
}
