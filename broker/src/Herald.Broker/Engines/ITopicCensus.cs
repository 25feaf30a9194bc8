using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.Engines;

/// <summary>
/// One page of the topics listing asked of every node: the patterns starting with <see cref="Prefix"/>, ordinally after
/// <see cref="After"/>, at most <see cref="Limit"/> of them on the page.
/// </summary>
internal sealed record TopicQuery(string Prefix, string After, int Limit)
{
    /// <summary>The most a node answers, whatever the query asks: a node's answer is bounded even when a peer asks for more.</summary>
    public const int MaxLimit = 100_000;

    /// <summary>Most patterns a node looks at (as <c>/subsz</c>); past it its answer says <see cref="NodeTopics.Truncated"/>.</summary>
    public const int MaxPatterns = 100_000;

    /// <summary>
    /// The most entries one node answers: its first <see cref="Limit"/> + 1 matching patterns. The merged page is exact with
    /// that many: a pattern among the first <see cref="Limit"/> of all nodes' is among the first <see cref="Limit"/> of every
    /// node that holds it, so its count is whole; the one past them says whether there is a next page.
    /// </summary>
    public int PerNode => Math.Clamp(Limit, 1, MaxLimit) + 1;
}

/// <summary>
/// One node's answer to a <see cref="TopicQuery"/>: its first matching patterns with their subscribers (at most
/// <see cref="TopicQuery.PerNode"/>), in ordinal order, and its totals. <see cref="Node"/> is its cluster id (null on a
/// single node).
/// </summary>
internal sealed record NodeTopics(string? Node, IReadOnlyList<(string Pattern, int Subscribers)> Entries, int Subscriptions, int Patterns, bool Truncated)
{
    /// <summary>This node's answer read from its router (reply inboxes left out: never named), without its cluster id.</summary>
    public static NodeTopics Of(TopicRouter router, TopicQuery query)
    {
        IReadOnlyList<(string Pattern, int Subscribers)> snapshot = router.Snapshot(TopicQuery.MaxPatterns, out int patterns);
        List<(string Pattern, int Subscribers)> entries = [.. snapshot
            .Where(p => !p.Pattern.StartsWith(ProtocolConstants.InboxPrefix, StringComparison.Ordinal)
                && p.Pattern.StartsWith(query.Prefix, StringComparison.Ordinal)
                && string.CompareOrdinal(p.Pattern, query.After) > 0)
            .OrderBy(p => p.Pattern, StringComparer.Ordinal)
            .Take(query.PerNode)];
        return new NodeTopics(null, entries, router.SubscriptionCount, patterns, patterns > snapshot.Count);
    }
}

/// <summary>The nodes' answers to one <see cref="TopicQuery"/>, and the members that did not answer in time (by cluster id).</summary>
internal sealed record TopicCensus(IReadOnlyList<NodeTopics> Answered, IReadOnlyList<string> Silent)
{
    /// <summary>
    /// The page: every node's entries added up per pattern, in ordinal order, the first <see cref="TopicQuery.Limit"/>, and
    /// the <c>after</c> of the next page when there are more.
    /// </summary>
    public (IReadOnlyList<(string Pattern, int Subscribers)> Entries, string? Next) Page(TopicQuery query)
    {
        var summed = new SortedDictionary<string, int>(StringComparer.Ordinal);
        foreach (NodeTopics node in Answered)
        {
            foreach ((string pattern, int subscribers) in node.Entries)
            {
                summed[pattern] = summed.GetValueOrDefault(pattern) + subscribers;
            }
        }

        int limit = Math.Clamp(query.Limit, 1, TopicQuery.MaxLimit);
        List<(string Pattern, int Subscribers)> page = [.. summed.Take(limit).Select(p => (p.Key, p.Value))];
        return (page, summed.Count > limit ? page[^1].Pattern : null);
    }
}

/// <summary>
/// The seam the server API's topics listing enters through: every node's subscriptions, each node asked for its first
/// matching patterns. The local default asks this node only; the cluster's asks every member on the control channel
/// (cluster.md §14) and names the members that did not answer within <c>Herald:Cluster:ControlReplyTimeout</c>.
/// </summary>
internal interface ITopicCensus
{
    /// <summary>This node's answer (called once, by the broker core, before any query).</summary>
    void Serve(Func<TopicQuery, NodeTopics> here);

    /// <summary>Every node's answer to <paramref name="query"/>; raises <see cref="ClusterUnavailableException"/> when the cluster cannot be reached.</summary>
    Task<TopicCensus> CountAsync(TopicQuery query, CancellationToken cancellationToken);
}

/// <summary>One node: its own answer.</summary>
internal sealed class LocalTopicCensus : ITopicCensus
{
    private Func<TopicQuery, NodeTopics>? _here;

    public void Serve(Func<TopicQuery, NodeTopics> here) => _here = here;

    public Task<TopicCensus> CountAsync(TopicQuery query, CancellationToken cancellationToken) =>
        Task.FromResult(new TopicCensus(_here is { } here ? [here(query)] : [], []));
}
