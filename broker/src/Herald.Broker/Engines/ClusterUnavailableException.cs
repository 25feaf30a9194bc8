namespace Herald.Broker.Engines;

/// <summary>
/// An engine behind a seam could not reach what it is built on (a cluster's Redis, for one): the one exception a
/// Redis implementation raises for an unreachable or timed-out backplane, so no transport or session ever sees a
/// backplane's own exception types. Every transport maps it the same way (TCP and WebSocket: an ERROR
/// <c>ClusterUnavailable</c>; HTTP: 503 with the same code).
/// </summary>
internal sealed class ClusterUnavailableException(string message, Exception? inner = null) : Exception(message, inner);
