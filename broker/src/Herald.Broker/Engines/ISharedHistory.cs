using Herald.Broker.Delivery;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.Engines;

/// <summary>
/// Topic histories kept for every node at once (spec cluster.md §9), used when this node's <see cref="HistoryStore.Shared"/>
/// says so: a history topic's publication is positioned elsewhere before any node delivers it, and a resume reads what
/// is kept there. The local implementation, the default, shares nothing (a single node's histories are its own and
/// never shared, so none of it is asked); the cluster's keeps them in Redis. A backplane that does not answer raises
/// <see cref="ClusterUnavailableException"/>.
/// </summary>
internal interface ISharedHistory
{
    /// <summary>
    /// Sends a publication of a history topic to be positioned and kept, then delivered on every node, this one included;
    /// <paramref name="publisher"/> is remembered for its no-echo subscriptions, <paramref name="groups"/> (made at the
    /// first) chooses its queue groups. False when it could not be queued: nobody gets it.
    /// </summary>
    bool ForwardKept(in PublishFrame publish, TopicHistory history, IMessageSink publisher, ref GroupAssignments? groups);

    /// <summary>
    /// What is kept of <paramref name="history"/>'s topic after <paramref name="since"/>, for a resume on this node: at most
    /// <paramref name="maxEntries"/> entries, and none after the one that takes their envelopes past <paramref name="maxBytes"/>
    /// (<see cref="SharedRead.Cut"/>), so what is read is what the resuming connection may be sent (plus one entry).
    /// </summary>
    Task<SharedRead> ReadAsync(TopicHistory history, StreamPosition since, int maxEntries, long maxBytes);

    /// <summary>A kept entry (of <see cref="SharedRead.Entries"/>) as its PUBLISH; null when it is not one.</summary>
    PublishFrame? DecodeKept(byte[] entry);
}

/// <summary>One node: its histories are its own (<see cref="HistoryStore.Shared"/> is false), so nothing is kept elsewhere.</summary>
internal sealed class LocalHistory : ISharedHistory
{
    public static readonly LocalHistory Instance = new();

    public bool ForwardKept(in PublishFrame publish, TopicHistory history, IMessageSink publisher, ref GroupAssignments? groups) => false;

    public Task<SharedRead> ReadAsync(TopicHistory history, StreamPosition since, int maxEntries, long maxBytes) =>
        Task.FromException<SharedRead>(new ClusterUnavailableException("This node shares no history."));

    public PublishFrame? DecodeKept(byte[] entry) => null;
}
