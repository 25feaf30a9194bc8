using Herald.Broker.Delivery;
using Herald.Broker.History;
using Herald.Broker.Routing;

namespace Herald.Broker.Cluster;

/// <summary>
/// What a shard's outage cost this node's subscribers, told (spec cluster.md §13, "Faults"): while the connection this
/// node's subscriptions on a shard travel on was down, what other nodes published on that shard's topics did not reach
/// this node, and nothing counts how much. When it is back and the subscriptions there are made again, every local
/// subscription whose publications pass through that shard (an exact pattern whose topic lives there; a pattern with a
/// wildcard, subscribed on every shard) is told it may have lost an unknown number of messages, each subscriber once for
/// all its sids (<see cref="IMessageSink.Gaps"/>, which each transport writes in its own form: README §6.3, longpoll §2,
/// sse §2). A subscription on another shard's topic is told nothing, nor is one to a single topic that keeps a history
/// (spec cluster.md §9): its publications waited for the shard, and what this node missed is read back from the topic's
/// stream, so it lost nothing. Rare (once per outage), so it walks every pattern.
/// </summary>
internal sealed class ShardLossNotices(ClusterShards shards, TopicRouter router, HistoryStore? history, ClusterMetrics metrics)
{
    /// <summary>Tells the subscribers of <paramref name="shard"/>'s topics; returns how many subscriptions were told. Caller: the interest worker.</summary>
    public int Tell(ClusterConnection shard)
    {
        List<Subscription> carried = router.Local(pattern => CoverKey.Of(pattern).IsPrefix || (shards.For(pattern) == shard && history?.Keeps(pattern) != true));
        var bySubscriber = new Dictionary<IMessageSink, List<uint>>(ReferenceEqualityComparer.Instance);
        int told = 0;
        foreach (Subscription subscription in carried)
        {
            if (subscription.Sid == FrameCopy.ControlSid)
            {
                continue; // not a client's subscription: nobody to tell
            }

            if (!bySubscriber.TryGetValue(subscription.Sink, out List<uint>? sids))
            {
                bySubscriber[subscription.Sink] = sids = [];
            }

            sids.Add(subscription.Sid);
            told++;
        }

        foreach ((IMessageSink subscriber, List<uint> sids) in bySubscriber)
        {
            sids.Sort();
            if ((subscriber.Gaps([.. sids]) & Enqueued.Wake) != 0)
            {
                subscriber.ScheduleFlush();
            }
        }

        metrics.LossNotices(shard.Index, told);
        return told;
    }
}
