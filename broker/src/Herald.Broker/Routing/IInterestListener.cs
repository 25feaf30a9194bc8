namespace Herald.Broker.Routing;

/// <summary>
/// Told when the router's set of distinct patterns changes: a pattern's first subscription arrived, or its
/// last one left; and when a queue group's member of this node comes or goes. This is the interest a cluster
/// engine asks its backplane for, and the group membership it shares with the other nodes (Cluster/); the
/// single-node broker has none.
/// </summary>
/// <remarks>
/// Called under the router's write lock, in the order the changes happened: an implementation only records
/// the change (no I/O, no waiting, no lock the router's callers may hold) and applies it elsewhere.
/// </remarks>
internal interface IInterestListener
{
    void PatternAdded(string pattern);

    void PatternRemoved(string pattern);

    /// <summary>A subscription of this node that names a queue group (<see cref="Subscription.Group"/>) was added.</summary>
    void MemberAdded(Subscription member);

    /// <summary>A subscription of this node that names a queue group was removed.</summary>
    void MemberRemoved(Subscription member);
}
