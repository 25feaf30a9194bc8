namespace Herald.Broker.Engines;

/// <summary>
/// What monitoring shows of the other nodes (<c>/healthz</c>, <c>/varz</c>, <c>/statusz</c>): read only, asked when a
/// page is asked for, never on the message path. The local implementation, the default, has nothing to show (null).
/// </summary>
internal interface IClusterStatus
{
    /// <summary>Whether the backplane is reachable now; null on a single node.</summary>
    bool? Connected { get; }

    /// <summary>The cluster as this node sees it now; null on a single node.</summary>
    ClusterSnapshot? Snapshot();
}

/// <summary>One node: no cluster to show.</summary>
internal sealed class LocalStatus : IClusterStatus
{
    public static readonly LocalStatus Instance = new();

    public bool? Connected => null;

    public ClusterSnapshot? Snapshot() => null;
}

/// <summary>
/// A cluster as one node sees it (spec cluster.md §5): its id, the backplane's endpoints (never a password) and
/// subscriptions, the pattern changes not yet there, counts of publications sent, received, dropped (queue full or
/// unreachable), duplicates skipped and invalid envelopes, what waits in either direction, the members, and the
/// long-poll sessions taken over and requests forwarded.
/// </summary>
internal sealed record ClusterSnapshot(
    string Node,
    IReadOnlyList<string> Endpoints,
    bool Connected,
    string ChannelPrefix,
    int Subscriptions,
    long PendingInterest,
    long Sent,
    long Received,
    long Dropped,
    long Duplicates,
    long Invalid,
    long ForwardQueueBytes,
    long InboundQueued,
    IReadOnlyList<ClusterMember> Members,
    bool HistoryRulesMatch,
    long SessionsTakenOver,
    long SessionRequestsForwarded,
    IReadOnlyList<ClusterShardStatus>? Shards = null,
    ClusterSessionsKept? SessionsKept = null);

/// <summary>
/// What this node keeps of the shared long-poll sessions it owns (spec cluster.md §10), so that a poll on it is answered
/// from memory: the sessions owned now, those with appends kept, the appends and their messages kept (each session's at
/// most its <c>MaxPendingMessagesPerSession</c>) and the bytes that takes (no frame), and the bytes of frames of its latest
/// append calls kept, against <c>Herald:Cluster:KeptFrameBytes</c>.
/// </summary>
internal sealed record ClusterSessionsKept(int Owned, int Sessions, long Appends, long Messages, long Bytes, long FrameBytes, long MaxFrameBytes);

/// <summary>
/// One shard of the cluster (spec cluster.md §13) as this node sees it: its place, endpoints (never a password) and
/// prefix, whether it is reachable, what this node sent there and received from there, dropped for its topics, how
/// many Redis subscriptions it holds there, what waits from it unrouted (this node's lag on that shard), how many
/// subscriptions it told they may have lost messages when the shard came back after an outage, and how many Redis
/// subscriptions it could not make there.
/// </summary>
internal sealed record ClusterShardStatus(int Index, IReadOnlyList<string> Endpoints, string Prefix, bool Connected, long Sent, long Received, long Dropped, long Subscriptions, long InboundQueued, long LossNotices = 0, long SubscribeFailures = 0);

/// <summary>
/// A member of the cluster as this node last saw it, with the queue groups it knows the member holds (cluster.md §11); <see cref="Self"/>: this node.
/// </summary>
internal sealed record ClusterMember(string Id, string Name, string Host, DateTimeOffset Started, DateTimeOffset LastSeen, bool Self, string History, int Groups, int GroupMembers, long GroupsVersion);
