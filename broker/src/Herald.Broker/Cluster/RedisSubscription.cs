using Herald.Broker.Routing;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// What an ended subscription delivered last, per origin, on the topics of <see cref="Key"/>: its copies are skipped by the subscriptions that
/// replace it.
/// </summary>
internal sealed record Handover(CoverKey Key, Dictionary<ulong, ulong> LastDelivered);

/// <summary>
/// One Redis subscription of this node (a channel or a glob) and its reader (<see cref="ClusterInbound"/>); made and ended by <see
/// cref="ClusterInterest"/>.
/// </summary>
internal sealed class RedisSubscription(CoverKey key, ChannelMessageQueue queue)
{
    public CoverKey Key { get; } = key;

    /// <summary>The shard it is made on (spec cluster.md §13): only its topics' envelopes are routed from it.</summary>
    public required ClusterConnection Shard { get; init; }

    public ChannelMessageQueue Queue { get; } = queue;

    /// <summary>
    /// Publications the reader took off <see cref="Queue"/> ahead of routing them, oldest first, to count their bytes
    /// against <c>MaxInboundBytes</c> (StackExchange.Redis's queue counts only messages). The reader's.
    /// </summary>
    public Queue<ChannelMessage> Ahead { get; } = new();

    /// <summary>The bytes of <see cref="Ahead"/>'s publications. The reader's.</summary>
    public long AheadBytes { get; set; }

    /// <summary>How many <see cref="Ahead"/> holds: written by the reader, read by monitoring (<see cref="ClusterInterest.InboundQueuedOn"/>).</summary>
    public int AheadCount
    {
        get => Volatile.Read(ref _aheadCount);
        set => Volatile.Write(ref _aheadCount, value);
    }

    private int _aheadCount;

    public Task Reader { get; set; } = Task.CompletedTask;

    public CancellationTokenSource Stop { get; } = new();

    /// <summary>Per origin, the last sequence number this subscription delivered. The reader's; read by the worker once the reader ended.</summary>
    public Dictionary<ulong, ulong> LastDelivered { get; } = [];

    /// <summary>Checks envelopes' tags when the cluster has a secret. The reader's.</summary>
    public EnvelopeSigner? Signer { get; init; }

    /// <summary>Where each envelope's origin gave its queue groups (spec cluster.md §11). The reader's.</summary>
    public required GroupAssignments Groups { get; init; }

    /// <summary>What routing a traced publication did, for its span (made at the first). The reader's.</summary>
    public FanoutTally? Tally { get; set; }

    /// <summary>Copies to skip after a change of subscriptions; null once none is left. The reader's.</summary>
    public List<Handover>? Skip { get; set; }
}
