using System.Net;
using Herald.Protocol;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Telemetry;

/// <summary>
/// Every log line of the broker core, source-generated, with stable event ids (1xxx: listeners and
/// life cycle, 2xxx: connections, 3xxx: long-poll, 4xxx: socket policy, 5xxx: operations). Nothing here
/// is called per message. Serilog writes them (text or JSON, <see cref="TelemetrySetup"/>).
/// </summary>
internal static partial class BrokerLog
{
    [LoggerMessage(1001, LogLevel.Information, "Herald '{ServerName}' listening for TCP on {Host} ports {First}-{Last}.")]
    public static partial void TcpListening(this ILogger logger, string serverName, string host, int first, int last);

    [LoggerMessage(1002, LogLevel.Information, "Shutdown: closing {Count} connections, draining for up to {DrainTimeout}.")]
    public static partial void ShuttingDown(this ILogger logger, int count, TimeSpan drainTimeout);

    [LoggerMessage(1003, LogLevel.Warning, "Configuration key {Key} is not a Herald setting and is ignored{DidYouMean}. Herald:StrictConfiguration=true refuses to start instead.")]
    public static partial void UnknownSetting(this ILogger logger, string key, string didYouMean);

    [LoggerMessage(2001, LogLevel.Debug, "Connection {ConnectionId} from {Remote} said HELLO as '{ClientName}'.")]
    public static partial void Welcomed(this ILogger logger, long connectionId, EndPoint? remote, string clientName);

    [LoggerMessage(2002, LogLevel.Warning, "Connection {ConnectionId} from {Remote} broke the protocol ({Code}): {Reason}")]
    public static partial void ProtocolError(this ILogger logger, long connectionId, EndPoint? remote, ErrorCode code, string reason);

    [LoggerMessage(2003, LogLevel.Warning, "Connection {ConnectionId} from {Remote} closed: {Code}: {Reason}")]
    public static partial void ClosedByBroker(this ILogger logger, long connectionId, EndPoint? remote, ErrorCode code, string reason);

    [LoggerMessage(2004, LogLevel.Debug, "Connection {ConnectionId} from {Remote} closed by the client.")]
    public static partial void ClosedByClient(this ILogger logger, long connectionId, EndPoint? remote);

    [LoggerMessage(2005, LogLevel.Warning, "Connection {ConnectionId} from {Remote} closed in the middle of a frame ({Bytes} bytes unread).")]
    public static partial void TruncatedFrame(this ILogger logger, long connectionId, EndPoint? remote, long bytes);

    [LoggerMessage(2006, LogLevel.Error, "Connection {ConnectionId} from {Remote} failed; it is closed and nothing else is affected.")]
    public static partial void ConnectionFailed(this ILogger logger, Exception exception, long connectionId, EndPoint? remote);

    [LoggerMessage(2009, LogLevel.Warning, "{Count} more client faults were not logged in this interval of {Interval} (Herald:Logging:ClientFaultsPerInterval is {Limit}; metrics count them all): {ByKind}.")]
    public static partial void ClientFaultsSuppressed(this ILogger logger, long count, TimeSpan interval, int limit, string byKind);

    [LoggerMessage(2030, LogLevel.Warning, "Hook {Hook} brought no decision ({Failure}: {Why}); its failure policy {Policy} decided.")]
    public static partial void HookFailed(this ILogger logger, string hook, string failure, string why, string policy);

    /// <summary>
    /// The events one client causes by misbehaving or being cut off (not the broker's own failures, 2006):
    /// under attack there is one per connection, so <see cref="ClientFaultLog"/> rate-limits them.
    /// </summary>
    public static bool IsClientFault(int eventId) => eventId is 2002 or 2003 or 2005 or 2007 or 2008 or 2030 or 3002;

    [LoggerMessage(3001, LogLevel.Debug, "Long-poll session {SessionId} ended after {Timeout} without a request.")]
    public static partial void SessionExpired(this ILogger logger, long sessionId, TimeSpan timeout);

    [LoggerMessage(3002, LogLevel.Warning, "Long-poll session {SessionId} ended: more than {Limit} unacknowledged messages (slow consumer).")]
    public static partial void SessionSlowConsumer(this ILogger logger, long sessionId, int limit);

    [LoggerMessage(3004, LogLevel.Information, "Long-poll session {SessionId} taken over (its owner's lease expired or was given up), with {Subscriptions} subscriptions.")]
    public static partial void SessionTakenOver(this ILogger logger, long sessionId, int subscriptions);

    [LoggerMessage(3005, LogLevel.Warning, "Long-poll session {SessionId} lost its lease to another node (not renewed within {Lease}: this node was cut from Redis or stalled): it is served there now, and what this node had not appended is resumed there on history topics only.")]
    public static partial void SessionLeaseLost(this ILogger logger, long sessionId, TimeSpan lease);

    [LoggerMessage(3003, LogLevel.Information, "Herald listening for HTTP (long-poll, policy files) on {Host}:{Port}.")]
    public static partial void HttpListening(this ILogger logger, string host, int port);

    [LoggerMessage(4001, LogLevel.Information, "Socket policy responder listening on port {Port}.")]
    public static partial void PolicyListening(this ILogger logger, int port);

    [LoggerMessage(4002, LogLevel.Warning, "Socket policy responder not started: port {Port} needs root or CAP_NET_BIND_SERVICE ({Reason}). Set Herald:Policy:Port to a port above 1023 and redirect 943 to it, or run with the capability.")]
    public static partial void PolicyPortDenied(this ILogger logger, int port, string reason);

    [LoggerMessage(5001, LogLevel.Information, "Monitoring listener on {Host}:{Port}: /healthz, /readyz{Endpoints}{Guard}.")]
    public static partial void OperationsEndpoints(this ILogger logger, string host, int port, string endpoints, string guard);

    [LoggerMessage(5002, LogLevel.Information, "The monitoring listener is off (Herald:Monitoring:Port=-1).")]
    public static partial void OperationsEndpointsOff(this ILogger logger);

    [LoggerMessage(5004, LogLevel.Information, "The HTTP port {Port} also serves {Endpoints}, without CORS.")]
    public static partial void OperationsOnHttpPort(this ILogger logger, int port, string endpoints);

    [LoggerMessage(5003, LogLevel.Information, "OTLP export of metrics{Traces} to {Endpoint} ({Protocol}), metrics every {Interval}.")]
    public static partial void OtlpExport(this ILogger logger, string traces, string endpoint, string protocol, TimeSpan interval);

    [LoggerMessage(6001, LogLevel.Warning, "SECURITY: authentication is off (Herald:Security:Auth:Mode=None) and the broker listens beyond loopback. Anyone who can reach it gets: {Exposed}.")]
    public static partial void OpenToTheNetwork(this ILogger logger, string exposed);

    [LoggerMessage(6002, LogLevel.Warning, "SECURITY: the monitoring listener {Host}:{Port} is beyond loopback without Herald:Monitoring:Token: anyone who can reach it reads /varz, /connz, /subsz and /metrics (client names and addresses, every subscribed topic and inbox).")]
    public static partial void MonitoringOpenToTheNetwork(this ILogger logger, string host, int port);

    [LoggerMessage(2007, LogLevel.Warning, "Connection {ConnectionId} from {Remote} did not take its last frames within {Timeout}; aborted.")]
    public static partial void DrainTimedOut(this ILogger logger, long connectionId, EndPoint? remote, TimeSpan timeout);

    [LoggerMessage(2008, LogLevel.Warning, "Authentication failed ({Transport}) from {Remote}: {Reason}")]
    public static partial void AuthenticationFailed(this ILogger logger, string transport, EndPoint? remote, string reason);

    [LoggerMessage(2030, LogLevel.Information, "Refused a revoked identity ({Transport}) from {Remote}: '{Identity}' until {Until:O}.")]
    public static partial void ClientRevoked(this ILogger logger, string transport, EndPoint? remote, string identity, DateTimeOffset until);

    [LoggerMessage(2031, LogLevel.Information, "Server API: {Action} reached {Clients} client(s) on this node (client {Client}, identity '{Identity}').")]
    public static partial void ClientActionApplied(this ILogger logger, string action, int clients, string? client, string? identity);

    [LoggerMessage(7001, LogLevel.Information, "Cluster node {NodeId:x16} started on Redis channels '{ChannelPrefix}...' (connected: {Connected}).")]
    public static partial void ClusterStarted(this ILogger logger, ulong nodeId, string channelPrefix, bool connected);

    [LoggerMessage(7007, LogLevel.Information, "Cluster shard {Shard} of {Shards}: Redis {EndPoints}, channels '{ChannelPrefix}...' (connected: {Connected}).")]
    public static partial void ClusterShard(this ILogger logger, int shard, int shards, string endPoints, string channelPrefix, bool connected);

    [LoggerMessage(7002, LogLevel.Warning, "Cluster: Redis {EndPoint} unreachable ({FailureType}): {Reason}. This node serves its own clients and keeps trying; publications meanwhile stay on it (herald.cluster.forward.dropped).")]
    public static partial void ClusterRedisLost(this ILogger logger, string? endPoint, string failureType, string? reason);

    [LoggerMessage(7003, LogLevel.Information, "Cluster: Redis {EndPoint} reachable again; subscriptions are made again.")]
    public static partial void ClusterRedisRestored(this ILogger logger, string? endPoint);

    [LoggerMessage(7004, LogLevel.Warning, "Cluster: Redis subscription {Channel} could not be changed: {Reason}. Made again when Redis is back.")]
    public static partial void ClusterSubscribeFailed(this ILogger logger, string channel, string reason);

    [LoggerMessage(7005, LogLevel.Error, "Cluster: applying subscription changes failed.")]
    public static partial void ClusterInterestFailed(this ILogger logger, Exception exception);

    [LoggerMessage(7006, LogLevel.Warning, "Cluster: node {NodeId} ({Name}) has other history rules ('{Theirs}') than this one ('{Ours}'): topics one keeps and the other does not are delivered without positions on the other (/varz cluster.history_rules_match).")]
    public static partial void ClusterHistoryRulesDiffer(this ILogger logger, string nodeId, string name, string theirs, string ours);
}
