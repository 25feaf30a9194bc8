namespace Herald.Broker.Routing;

/// <summary>
/// Told when the router's set of distinct patterns changes: a pattern's first subscription arrived, or its
/// last one left. This is the interest a cluster engine asks its backplane for (Cluster/); the single-node
/// broker has none.
/// </summary>
/// <remarks>
/// Called under the router's write lock, in the order the changes happened: an implementation only records
/// the change (no I/O, no waiting, no lock the router's callers may hold) and applies it elsewhere.
/// </remarks>
internal interface IInterestListener
{
    void PatternAdded(string pattern);

    void PatternRemoved(string pattern);
}
