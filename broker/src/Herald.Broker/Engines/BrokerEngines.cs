using Herald.Broker.Engines.PollSharing;

namespace Herald.Broker.Engines;

/// <summary>
/// The engines a broker's sessions and monitoring reach through their seams, as the composition root picked them:
/// <see cref="Local"/> on a single node, the cluster's (Redis) implementations on a cluster node. Never null.
/// </summary>
internal sealed record BrokerEngines(IPublicationExchange Exchange, ISharedInterest Interest, ISharedHistory History, IClusterStatus Status, ISharedSessions Sessions)
{
    /// <summary>A single node's: nothing is shared.</summary>
    public static readonly BrokerEngines Local = new(LocalExchange.Instance, LocalInterest.Instance, LocalHistory.Instance, LocalStatus.Instance, LocalSessions.Instance);

    /// <summary>Presence (spec §15): it keeps state, so each broker has its own (composed by Hosting); null: a default <see cref="LocalPresence"/>.</summary>
    public IPresence? Presence { get; init; }

    /// <summary>The server API's actions on clients and the revocations (they keep state, composed by Hosting); null: a <see cref="LocalClientControl"/>.</summary>
    public IClientControl? Control { get; init; }

    /// <summary>The server API's topics listing, every node's subscriptions; null: a <see cref="LocalTopicCensus"/>.</summary>
    public ITopicCensus? Census { get; init; }
}
