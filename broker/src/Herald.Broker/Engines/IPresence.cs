using Herald.Broker.Delivery;
using Herald.Protocol;

namespace Herald.Broker.Engines;

/// <summary>
/// The presence seam (spec §15): who is on a topic, the join and leave events of its members, and the occupancy. The
/// local default (<see cref="LocalPresence"/>) keeps this node's members; a cluster's keeps every node's. Sessions check
/// permissions and the capability before they call; the engine keeps its tables within <see cref="PresenceOptions"/>.
/// </summary>
internal interface IPresence
{
    /// <summary>Whether the broker grants the presence capability at all (spec §4.1 bit 5).</summary>
    bool Enabled { get; }

    /// <summary>The limits the engine holds its tables to.</summary>
    PresenceOptions Options { get; }

    /// <summary>What every client id of this broker starts with: nothing on one node, the node's id in a cluster (ids are the cluster's, spec §15.1).</summary>
    string ClientPrefix { get; }

    /// <summary>
    /// Makes <paramref name="member"/> present on <paramref name="topic"/>, or counts one more joined subscription of a
    /// connection already there (one member per connection). Its join event goes to the topic's events subscribers.
    /// Completes with null when joined, or why not (<c>PresenceFull</c>: the limit it would pass, named). The local engine
    /// completes at once; a shared one may complete later (its store decides), after the subscription was made: the
    /// session then tells the client and ends that subscription's join. Raises <see cref="ClusterUnavailableException"/>
    /// (at once or later) when the store cannot be reached.
    /// </summary>
    ValueTask<string?> JoinAsync(string topic, PresenceMember member);

    /// <summary>One joined subscription of <paramref name="member"/> ended; the last one makes it leave, with its leave event.</summary>
    void Leave(string topic, PresenceMember member, PresenceReason reason);

    /// <summary>Sends <paramref name="topic"/>'s join and leave events to subscription <paramref name="sid"/> of <paramref name="sink"/> from now on.</summary>
    void Watch(string topic, IMessageSink sink, uint sid, bool noEcho);

    /// <summary>Stops what <see cref="Watch"/> started.</summary>
    void Unwatch(string topic, IMessageSink sink, uint sid);

    /// <summary>
    /// The occupancy and up to <paramref name="limit"/> members ordered by client id after <paramref name="cursor"/>
    /// (exclusive), read without copying the topic's members; <see cref="PresencePage.Next"/> is the last one listed when
    /// more follow. The local engine completes at once; a shared one asks its store and raises
    /// <see cref="ClusterUnavailableException"/> when it cannot (never an empty page passed off as the truth).
    /// </summary>
    ValueTask<PresencePage> ReadAsync(string topic, int limit, string? cursor);

    /// <summary>Counts for metrics and /varz (never the members' names).</summary>
    PresenceCounts Counts { get; }

    /// <summary>
    /// The <paramref name="count"/> topics with the most members, most first (ties by name), for the status page and
    /// /varz: ranked when asked, one pass over the topics with members and nothing kept per join; reply inboxes are
    /// never ranked (monitoring names no inbox). Null from an engine that cannot rank its topics cheaply (the cluster's,
    /// whose members are counted in Redis): monitoring then says the ranking is not kept rather than list none.
    /// </summary>
    IReadOnlyList<PresenceTopic>? Busiest(int count) => null;
}

/// <summary>A connection present on a topic: its client id, identity, the info it joined with, whose quota it counts against (<see cref="PresenceOptions.MaxPerIdentity"/>: the identity, or an anonymous client's address), and its queue (no-echo).</summary>
internal sealed record PresenceMember(string Client, string Identity, string? Info, string Quota, IMessageSink Sink);

/// <summary>Why a member left (spec §15.2 <c>Herald-Reason</c>).</summary>
internal enum PresenceReason
{
    Unsubscribe,
    Disconnect,
    Expired,
    Revoked,
    Node,
}

internal readonly record struct PresenceOccupancy(long Members, long Identities);

/// <summary>A topic and its occupancy, as <see cref="IPresence.Busiest"/> ranks it.</summary>
internal readonly record struct PresenceTopic(string Topic, PresenceOccupancy Occupancy);

internal readonly record struct PresencePage(PresenceOccupancy Occupancy, IReadOnlyList<PresenceEntry> Entries, string? Next);

/// <summary>What the engine holds and did: entries in all, topics with members, events sent and suppressed.</summary>
internal readonly record struct PresenceCounts(long Entries, long Topics, long Watchers, long Events, long Suppressed);
