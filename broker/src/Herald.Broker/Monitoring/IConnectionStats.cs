namespace Herald.Broker.Monitoring;

/// <summary>
/// What a session can tell monitoring beyond what its registry knows: its client's name, subscriptions and
/// queue. The protocol core's sessions opt in by implementing it (<c>ClientSession</c> for TCP,
/// <c>PollSession</c> for long-poll); until one does, <c>/connz</c> leaves these fields out and the queue
/// gauges do not report its transport.
/// </summary>
/// <remarks>
/// Read at request or collection time from any thread, never on the hot path: an implementation answers
/// from what it already keeps (a volatile read, or a short lock it already has), and a value may be a
/// moment old.
/// </remarks>
internal interface IConnectionStats
{
    /// <summary>The name the client gave in HELLO (TCP); null when it gave none or has not said HELLO yet.</summary>
    string? ClientName { get; }

    /// <summary>Live subscriptions of this connection or session.</summary>
    int SubscriptionCount { get; }

    /// <summary>Messages waiting: queued to be written (TCP) or not yet acknowledged (long-poll).</summary>
    long PendingMessages { get; }

    /// <summary>Bytes of those messages.</summary>
    long PendingBytes { get; }
}

/// <summary>Finds the <see cref="IConnectionStats"/> of a session, if its type provides them.</summary>
internal static class ConnectionStats
{
    public static IConnectionStats? Of(object session) => session as IConnectionStats;
}
