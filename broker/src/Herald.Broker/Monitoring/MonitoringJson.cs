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
    VarzHistory? History = null);

/// <summary><c>/varz</c> <c>history</c>: the topic histories (README "History and resume"), absent when none is configured.</summary>
internal sealed record VarzHistory(int Topics, int MaxTopics, long Bytes, long MaxBytes, long EvictedTopics, long ResumesRecovered, long ResumesNotRecovered);

/// <summary>
/// The cluster (issue 14), on a cluster node only: this node's id, its Redis (endpoints only, never the
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
    long SessionRequestsForwarded = 0);

/// <summary>A member of the cluster as this node last saw it (heartbeats in Redis, spec cluster.md §5); <see cref="Self"/>: this node.</summary>
internal sealed record VarzNode(string Id, string Name, string Host, DateTimeOffset Started, DateTimeOffset LastSeen, bool Self, string History = "");

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
    long? Dropped);

/// <summary>
/// <c>/subsz</c>: subscribed patterns with their number of subscriptions, most subscribed first. Inbox
/// patterns (<c>_INBOX.</c>, spec §7) are never listed, only counted in <see cref="NumInboxPatterns"/>:
/// their names are their owners' reply addresses.
/// </summary>
internal sealed record Subsz(DateTimeOffset Now, int NumSubscriptions, int NumPatterns, int NumInboxPatterns, string? Topic, int Total, int Offset, int Limit, bool Truncated, IReadOnlyList<PatternInfo> Patterns);

internal sealed record PatternInfo(string Pattern, int Subscribers);

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
