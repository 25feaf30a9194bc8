using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.Engines;

/// <summary>
/// Where a publication routed on this node goes next: to the other nodes, if any (Centrifuge's <c>Broker</c>). A
/// session asks it, once per publication, who chooses the queue groups (<see cref="Assigning"/>), routes the
/// publication here, then hands it over (<see cref="Forward"/>). The local implementation, the default, sends
/// nothing anywhere; the cluster's copies the publication into a queue for Redis.
/// </summary>
internal interface IPublicationExchange
{
    /// <summary>
    /// What a publisher hands the router for <paramref name="publish"/>, to choose each queue group among every node's
    /// members: <paramref name="reused"/> (made at the first). Null, each group chosen among this node's members, when
    /// no group has members elsewhere or the publication cannot reach the other nodes now. No allocation but the first.
    /// </summary>
    GroupAssignments? Assigning(ref GroupAssignments? reused, in PublishFrame publish);

    /// <summary>
    /// Hands a publication routed here to the other nodes (the caller's bytes are not kept). <paramref name="request"/>:
    /// a request nobody here took. True when the exchange answers it (it tells <paramref name="request"/> later, from
    /// its own thread, if no node took it either); false when the caller answers "no responders" now.
    /// </summary>
    bool Forward(in PublishFrame publish, INoResponders? request, GroupAssignments? groups);
}

/// <summary>
/// One node: nothing leaves it, each queue group is chosen among this node's members, and an unanswered request is answered at once.
/// </summary>
internal sealed class LocalExchange : IPublicationExchange
{
    public static readonly LocalExchange Instance = new();

    public GroupAssignments? Assigning(ref GroupAssignments? reused, in PublishFrame publish) => null;

    public bool Forward(in PublishFrame publish, INoResponders? request, GroupAssignments? groups) => false;
}
