using System.ComponentModel.DataAnnotations;
using Herald.Protocol;

namespace Herald.Broker.Engines;

/// <summary>
/// Presence (spec §15): who is on a topic, join and leave events, occupancy. Every table it keeps is bounded here:
/// members per topic, entries per identity over all its connections, entries in all, the size of a client's info.
/// </summary>
public sealed class PresenceOptions
{
    /// <summary>Whether the broker grants the presence capability (HELLO bit 5, with headers); in a cluster, every node should say the same.</summary>
    public bool Enabled { get; set; } = true;

    /// <summary>Most members of one topic (<c>max_presence_members</c>; in a cluster, over all its nodes); a join past it is refused with <c>PresenceFull</c>.</summary>
    [Range(1, 10_000_000)]
    public int MaxMembersPerTopic { get; set; } = 10_000;

    /// <summary>Most presence entries of one identity over all its connections and topics (<c>max_presence_per_identity</c>; in a cluster, on each node).</summary>
    [Range(1, 10_000_000)]
    public int MaxPerIdentity { get; set; } = 1_000;

    /// <summary>Most presence entries of the whole broker (<c>max_presence_entries</c>; in a cluster, of each node's members).</summary>
    [Range(1, 100_000_000)]
    public int MaxEntries { get; set; } = 1_000_000;

    /// <summary>Longest client info, in UTF-8 bytes (HELLO's <c>info</c>, the <c>herald_info</c> claim; <c>max_presence_info</c>).</summary>
    [Range(0, 65_536)]
    public int MaxInfoBytes { get; set; } = ProtocolConstants.DefaultMaxPresenceInfoBytes;

    /// <summary>Members above which a topic's join and leave events are suppressed (<c>max_presence_events_members</c>, spec §15.2).</summary>
    [Range(1, 10_000_000)]
    public int MaxEventsMembers { get; set; } = 1_000;

    /// <summary>Members a PRESENCE lists when it asks for more than <see cref="MaxPageSize"/> (spec §9: 100 is the SDKs' default page).</summary>
    [Range(1, ProtocolConstants.MaxPresencePage)]
    public int MaxPageSize { get; set; } = ProtocolConstants.MaxPresencePage;
}
