using System.Text.Json;
using System.Text.Json.Serialization;
using Herald.Broker.Sessions;
using Herald.Broker.Transports.LongPoll;

namespace Herald.Broker.Monitoring;

/// <summary><c>/healthz</c> and <c>/readyz</c>.</summary>
/// <summary><c>/healthz</c> and <c>/readyz</c>. <see cref="Cluster"/>: <c>connected</c> or <c>redis unreachable</c> on a cluster node (serving its own clients either way), absent on a single node.</summary>
internal sealed record HealthReport(string Status, string? TcpPorts, int? HttpPort, string Policy, string? Cluster = null);

/// <summary><c>/varz</c>: server information, configuration limits and totals since start (after NATS's <c>/varz</c>).</summary>
internal sealed record Varz(
    string ServerName,
    string Version,
    string Runtime,
    string Host,
    int Pid,
    string Status,
    DateTimeOffset Start,
    DateTimeOffset Now,
    string Uptime,
    double UptimeSeconds,
    VarzPorts Ports,
    int Connections,
    int LongPollSessions,
    long TotalConnections,
    long ClosedConnections,
    int HeldPolls,
    int Subscriptions,
    int Topics,
    VarzMessages Messages,
    long SlowConsumers,
    long ProtocolErrors,
    long PartialFrameBytes,
    VarzProcess Process,
    LimitOptions Limits,
    LongPollOptions LongPoll,
    Compression.CompressionOptions Compression,
    VarzCluster? Cluster = null,
    VarzHistory? History = null,
    VarzPresence? Presence = null,
    VarzDeltas? Deltas = null);

/// <summary>
/// <c>/varz</c> <c>deltas</c> (spec §11.2): topics with a delta subscription, the bytes kept as their bases against the
/// bound, deltas sent (one per publication) and the payload bytes they saved, publications that went out full, and of
/// those the ones a topic's ratio switched off (not paying) or the bound refused (over budget); absent when deltas are off.
/// </summary>
internal sealed record VarzDeltas(int Topics, long KeptBytes, long MaxKeptBytes, long Sent, long SavedBytes, long Skipped, long NotPaying, long OverBudget);

/// <summary>
/// <c>/varz</c> and <c>/statusz</c> <c>presence</c> (spec §15): the counts, and the <see cref="StatusSampler.Rows"/> topics
/// with the most members (topic names, as the top topics by rate show them; never a member's name, never an inbox;
/// absent on a cluster node, whose engine does not rank them); absent when the broker does not grant presence.
/// </summary>
internal sealed record VarzPresence(long Members, long MaxMembers, long Topics, long EventsSubscriptions, long Events, long EventsSuppressed, IReadOnlyList<PresenceTopicInfo>? Busiest);

/// <summary>A topic's occupancy: its members and the distinct identities among them.</summary>
internal sealed record PresenceTopicInfo(string Topic, long Members, long Identities);

/// <summary><c>/varz</c> <c>history</c>: the topic histories (README "History and resume"), absent when none is configured.</summary>
internal sealed record VarzHistory(int Topics, int MaxTopics, long Bytes, long MaxBytes, long EvictedTopics, long ResumesRecovered, long ResumesNotRecovered);

/// <summary>
/// The cluster, on a cluster node only: this node's id, its Redis (endpoints only, never the
/// configuration's password), whether it is connected, what it subscribes to there, and its traffic
/// through Redis: sent to the other nodes, received from them, dropped (kept local: queue full or Redis
/// unreachable), duplicates skipped at subscription changes, invalid envelopes.
/// </summary>
internal sealed record VarzCluster(
    string Node,
    IReadOnlyList<string> Redis,
    bool Connected,
    string ChannelPrefix,
    int RedisSubscriptions,
    long PendingInterest,
    long Sent,
    long Received,
    long Dropped,
    long Duplicates,
    long Invalid,
    long ForwardQueueBytes,
    long InboundQueued,
    IReadOnlyList<VarzNode> Nodes,
    bool HistoryRulesMatch = true,
    long SessionsTakenOver = 0,
    long SessionRequestsForwarded = 0,
    IReadOnlyList<VarzShard>? Shards = null,
    VarzSessionsKept? SessionsKept = null);

/// <summary>
/// What a cluster node keeps of the shared long-poll sessions it owns (spec cluster.md §10): sessions owned and those with
/// appends kept, the appends and messages kept against their bound (<see cref="MaxMessages"/>: each owned session's
/// <c>LongPoll:MaxPendingMessagesPerSession</c>), the bytes that takes (no frame), and the bytes of frames of its latest
/// append calls against <c>Cluster:KeptFrameBytes</c>.
/// </summary>
internal sealed record VarzSessionsKept(int Owned, int Sessions, long Appends, long Messages, long MaxMessages, long Bytes, long FrameBytes, long MaxFrameBytes);

/// <summary>
/// One shard of the cluster (spec cluster.md §13): its index, endpoints (never a password), prefix, whether it is
/// reachable, publications sent there, received from there and dropped for its topics, Redis subscriptions held
/// there, publications from it waiting to be routed (this node's lag on it), subscriptions told they may have lost
/// messages when it came back after an outage, and Redis subscriptions this node could not make there.
/// </summary>
internal sealed record VarzShard(int Index, IReadOnlyList<string> Endpoints, string Prefix, bool Connected, long Sent, long Received, long Dropped, long Subscriptions, long InboundQueued, long LossNotices, long SubscribeFailures);

/// <summary>A member of the cluster as this node last saw it (heartbeats in Redis, spec cluster.md §5); <see cref="Self"/>: this node.</summary>
internal sealed record VarzNode(string Id, string Name, string Host, DateTimeOffset Started, DateTimeOffset LastSeen, bool Self, string History = "", int Groups = 0, int GroupMembers = 0, long GroupsVersion = 0);

internal sealed record VarzPorts(int? TcpFirst, int? TcpLast, int? Http, int? Policy, string? PolicyUnavailable, int? Monitoring);

/// <summary>Message totals: <c>published</c> received, <c>delivered</c> queued to subscriptions, <c>sent</c> written to them.</summary>
internal sealed record VarzMessages(long Published, long PublishedBytes, long Delivered, long Sent, long SentBytes, long Dropped);

/// <summary>The process: CPU (percent of one core since the previous <c>/varz</c>) and memory.</summary>
internal sealed record VarzProcess(int Cores, double CpuSeconds, double CpuPercent, long WorkingSetBytes, long GcHeapBytes, long GcAllocatedBytes, int[] GcCollections, int ThreadPoolThreads);

/// <summary><c>/connz</c>: one page of the open connections and long-poll sessions (after NATS's <c>/connz</c>).</summary>
internal sealed record Connz(DateTimeOffset Now, int Total, int Offset, int Limit, int NumConnections, IReadOnlyList<ConnectionInfo> Connections);

/// <summary>
/// One connection (TCP) or session (long-poll). Fields a transport does not know are left out: a long-poll
/// session has no one remote address (each request may come from another), a TCP connection is never idle-polling.
/// <c>client</c> is the client id the server API names it by (spec §15.1), <c>identity</c> who it authenticated as.
/// </summary>
internal sealed record ConnectionInfo(
    long Cid,
    string Transport,
    string? Ip,
    int? Port,
    DateTimeOffset? Start,
    double? UptimeSeconds,
    double? IdleSeconds,
    bool? Polling,
    string? Name,
    int? Subscriptions,
    long? PendingMessages,
    long? PendingBytes,
    long? Dropped,
    string? Client = null,
    string? Identity = null);

/// <summary>
/// <c>/subsz</c>: subscribed patterns with their number of subscriptions, most subscribed first. Inbox
/// patterns (<c>_INBOX.</c>, spec §7) are never listed, only counted in <see cref="NumInboxPatterns"/>:
/// their names are their owners' reply addresses.
/// </summary>
internal sealed record Subsz(DateTimeOffset Now, int NumSubscriptions, int NumPatterns, int NumInboxPatterns, string? Topic, int Total, int Offset, int Limit, bool Truncated, IReadOnlyList<PatternInfo> Patterns);

internal sealed record PatternInfo(string Pattern, int Subscribers);

/// <summary>
/// <c>/statusz</c>: what the status page shows, in one compact answer. Totals count since start; rates are
/// per second over <see cref="IntervalSeconds"/>, the time since the previous sample (samples are at least
/// half a second apart, whoever asks: a second viewer within that time gets the same answer).
/// </summary>
internal sealed record Statusz(
    string ServerName,
    string Version,
    string Status,
    DateTimeOffset Now,
    double UptimeSeconds,
    double IntervalSeconds,
    bool TokenRequired,
    IReadOnlyDictionary<string, int> Connections,
    int Subscriptions,
    int Topics,
    StatusCounts Totals,
    StatusRates Rates,
    StatusTopTopics TopTopics,
    IReadOnlyList<StatusSlowConsumer> SlowConsumers,
    StatusLongPoll LongPoll,
    StatusCompression Compression,
    StatusProcess Process,
    StatusCluster? Cluster = null,
    VarzPresence? Presence = null);

/// <summary>Totals since start: publications received here, deliveries queued, frames sent, drops, slow-consumer episodes, connections opened.</summary>
internal sealed record StatusCounts(long Published, long PublishedBytes, long Delivered, long Sent, long SentBytes, long Dropped, long SlowConsumers, long ConnectionsOpened);

/// <summary>The same as rates, per second over the sample's interval.</summary>
internal sealed record StatusRates(double Published, double PublishedBytes, double Delivered, double Sent, double SentBytes, double Dropped, double SlowConsumers, double ConnectionsOpened);

/// <summary>
/// The busiest topics (README "Status page"): <see cref="Tracked"/> topics are counted by name, at most
/// <see cref="MaxTracked"/> at once; publications on the others are <see cref="UntrackedPerSecond"/>.
/// </summary>
internal sealed record StatusTopTopics(int Tracked, int MaxTracked, double UntrackedPerSecond, IReadOnlyList<StatusTopic> Topics);

/// <summary>A topic's rates over the interval and its <see cref="Published"/> total since it was first counted (this time).</summary>
internal sealed record StatusTopic(string Topic, double PublishedPerSecond, double DeliveredPerSecond, double BytesPerSecond, long Published);

/// <summary>
/// A session whose backlog holds a tenth of its limit or more (messages or bytes), or that lost messages
/// (<c>DropOldest</c>): <see cref="Fill"/> is the larger share of its limit in use, 0 to 1.
/// </summary>
internal sealed record StatusSlowConsumer(long Cid, string Transport, string? Name, long PendingMessages, long PendingBytes, double Fill, long Dropped, string Policy);

/// <summary>Long-poll sessions: how many, polls held open now, and the first of them (most waiting messages first).</summary>
internal sealed record StatusLongPoll(int Sessions, int HeldPolls, IReadOnlyList<StatusPollSession> Listed);

internal sealed record StatusPollSession(long Cid, string? Name, double IdleSeconds, bool Polling, int Subscriptions, long PendingMessages);

/// <summary>Zstd: on or off, all payload bytes compressed so far before and after, and the topics compressed most often with their recent ratio (compressed / original).</summary>
internal sealed record StatusCompression(bool Enabled, long BytesIn, long BytesOut, IReadOnlyList<StatusTopicRatio> Topics);

internal sealed record StatusTopicRatio(string Topic, double Ratio, long Samples, bool Compressing);

/// <summary>CPU in percent of one core over the interval, working set, GC heap.</summary>
internal sealed record StatusProcess(double CpuPercent, long WorkingSetBytes, long GcHeapBytes);

/// <summary>A cluster node's view: itself, whether it reaches Redis, and every node it knows (heartbeats).</summary>
internal sealed record StatusCluster(string Node, bool Connected, IReadOnlyList<VarzNode> Nodes, IReadOnlyList<VarzShard>? Shards = null);

/// <summary>Source-generated JSON for the monitoring endpoints: snake_case as NATS's, indented for people and curl, nulls left out.</summary>
[JsonSourceGenerationOptions(
    JsonSerializerDefaults.Web,
    PropertyNamingPolicy = JsonKnownNamingPolicy.SnakeCaseLower,
    WriteIndented = true,
    UseStringEnumConverter = true,
    DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(HealthReport))]
[JsonSerializable(typeof(Varz))]
[JsonSerializable(typeof(Connz))]
[JsonSerializable(typeof(Subsz))]
internal sealed partial class MonitoringJsonContext : JsonSerializerContext;

/// <summary><c>/statusz</c>: the same naming, compact (a page polls it every second).</summary>
[JsonSourceGenerationOptions(
    JsonSerializerDefaults.Web,
    PropertyNamingPolicy = JsonKnownNamingPolicy.SnakeCaseLower,
    DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(Statusz))]
internal sealed partial class StatusJsonContext : JsonSerializerContext;
