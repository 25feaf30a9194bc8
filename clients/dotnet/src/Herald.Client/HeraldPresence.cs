using System.Buffers;
using System.Globalization;
using System.Text;
using Herald.Protocol;

namespace Herald.Client;

/// <summary>What a presence event says happened on its topic (spec §15.2 <c>Herald-Presence</c>).</summary>
public enum HeraldPresenceEventKind
{
    /// <summary>A member joined: <see cref="HeraldPresenceEvent.Client"/>, <see cref="HeraldPresenceEvent.Identity"/> and its <see cref="HeraldPresenceEvent.Info"/>.</summary>
    Join,

    /// <summary>A member left: <see cref="HeraldPresenceEvent.Client"/>, <see cref="HeraldPresenceEvent.Identity"/> and why (<see cref="HeraldPresenceEvent.Reason"/>).</summary>
    Leave,

    /// <summary>
    /// The topic passed the broker's event threshold (<c>max_presence_events_members</c>, default 1 000 members): no
    /// joins or leaves follow until <see cref="Resumed"/>. <see cref="HeraldPresenceEvent.Occupancy"/> stays exact.
    /// </summary>
    Suppressed,

    /// <summary>The topic is back at half the threshold; events follow again. The members may have changed meanwhile: read them again.</summary>
    Resumed,
}

/// <summary>
/// A join, leave, suppressed or resumed event of a topic (spec §15.2), given to the subscription that asked for them
/// (<see cref="SubscriptionOptions.PresenceEvents"/>). Never a <see cref="HeraldMessage"/>: the broker's MESSAGE that
/// carries it is taken by the client.
/// </summary>
public sealed class HeraldPresenceEvent
{
    internal HeraldPresenceEvent(HeraldPresenceEventKind kind, HeraldSubscription subscription, string topic, string? client, string? identity, string? info, string? reason, long? occupancy)
    {
        Kind = kind;
        Subscription = subscription;
        Topic = topic;
        Client = client;
        Identity = identity;
        Info = info;
        Reason = reason;
        Occupancy = occupancy;
    }

    public HeraldPresenceEventKind Kind { get; }

    /// <summary>The subscription it arrived on.</summary>
    public HeraldSubscription Subscription { get; }

    /// <summary>The topic.</summary>
    public string Topic { get; }

    /// <summary>The member's client id (<see cref="HeraldPresenceEventKind.Join"/>, <see cref="HeraldPresenceEventKind.Leave"/>), as in <see cref="HeraldPresenceMember.Client"/>; else <c>null</c>.</summary>
    public string? Client { get; }

    /// <summary>The member's identity (join, leave; <c>""</c> with authentication off); else <c>null</c>.</summary>
    public string? Identity { get; }

    /// <summary>The member's client info on a join (<c>null</c> when it chose none); <c>null</c> on every other event.</summary>
    public string? Info { get; }

    /// <summary>Why the member left (leave only): <c>unsubscribe</c>, <c>disconnect</c>, <c>expired</c>, <c>revoked</c>, <c>node</c> (a later broker may name others); else <c>null</c>.</summary>
    public string? Reason { get; }

    /// <summary>The topic's number of members once this event is counted; <c>null</c> if the broker sent none.</summary>
    public long? Occupancy { get; }

    public override string ToString() => Kind switch
    {
        HeraldPresenceEventKind.Join => $"join {Topic} {Client} ({Identity}){(Info is null ? "" : " " + Info)}, occupancy {Occupancy}",
        HeraldPresenceEventKind.Leave => $"leave {Topic} {Client} ({Identity}) {Reason}, occupancy {Occupancy}",
        _ => $"{Kind.ToString().ToLowerInvariant()} {Topic}, occupancy {Occupancy}",
    };

    /// <summary>
    /// The event a presence MESSAGE carries (spec §15.2), or <c>null</c> for a kind this client does not know (a later
    /// broker's): such a MESSAGE is the broker's all the same and is never delivered as a message.
    /// </summary>
    internal static HeraldPresenceEvent? FromFrame(in PublishFrame frame, HeraldSubscription subscription, string kindText)
    {
        HeraldPresenceEventKind kind;
        switch (kindText)
        {
            case "join": kind = HeraldPresenceEventKind.Join; break;
            case "leave": kind = HeraldPresenceEventKind.Leave; break;
            case "suppressed": kind = HeraldPresenceEventKind.Suppressed; break;
            case "resumed": kind = HeraldPresenceEventKind.Resumed; break;
            default: return null;
        }

        bool member = kind is HeraldPresenceEventKind.Join or HeraldPresenceEventKind.Leave;
        HeraldHeaders headers = HeraldHeaders.FromBlock(frame.Headers);
        long? occupancy = long.TryParse(headers.GetFirstValue(PresenceHeaders.Occupancy), NumberStyles.None, CultureInfo.InvariantCulture, out long count) ? count : null;
        return new HeraldPresenceEvent(
            kind,
            subscription,
            frame.TopicString,
            member ? headers.GetFirstValue(PresenceHeaders.Client) ?? "" : null,
            member ? headers.GetFirstValue(PresenceHeaders.Identity) ?? "" : null,
            kind == HeraldPresenceEventKind.Join && !frame.Payload.IsEmpty ? Encoding.UTF8.GetString(frame.Payload.ToArray()) : null,
            kind == HeraldPresenceEventKind.Leave ? headers.GetFirstValue(PresenceHeaders.Reason) ?? "" : null,
            occupancy);
    }
}

/// <summary>One member of a topic (spec §15.1): a connection or long-poll session that joined it.</summary>
public sealed class HeraldPresenceMember
{
    public HeraldPresenceMember(string client, string identity, string? info)
    {
        Client = client;
        Identity = identity;
        Info = info;
    }

    /// <summary>The member's client id: opaque, unique among the broker's connections while it lives, the same on every topic it joins. Never its address.</summary>
    public string Client { get; }

    /// <summary>Its identity (a token's name, a JWT's <c>sub</c>); <c>""</c> with authentication off.</summary>
    public string Identity { get; }

    /// <summary>Its client info (<see cref="HeraldClientOptions.Info"/>, a JWT's <c>herald_info</c>), or <c>null</c>.</summary>
    public string? Info { get; }

    public override string ToString() => Info is null ? $"{Client} ({Identity})" : $"{Client} ({Identity}) {Info}";
}

/// <summary>A topic's occupancy (spec §15.3): its number of members and of distinct identities among them.</summary>
public sealed class HeraldOccupancy
{
    public HeraldOccupancy(long members, long identities)
    {
        Members = members;
        Identities = identities;
    }

    /// <summary>The topic's number of members.</summary>
    public long Members { get; }

    /// <summary>The number of distinct identities among them.</summary>
    public long Identities { get; }

    public override string ToString() => $"{Members} members, {Identities} identities";
}

/// <summary>A page of a topic's members (spec §15.3): the occupancy, up to the asked number of members, and the cursor of the next page.</summary>
public sealed class HeraldPresencePage
{
    public HeraldPresencePage(string topic, HeraldOccupancy occupancy, IReadOnlyList<HeraldPresenceMember> members, string? next)
    {
        ArgumentNullException.ThrowIfNull(occupancy);
        ArgumentNullException.ThrowIfNull(members);
        Topic = topic;
        Occupancy = occupancy;
        Members = members;
        Next = next;
    }

    /// <summary>The topic asked about.</summary>
    public string Topic { get; }

    /// <summary>The whole topic's occupancy (not only this page's).</summary>
    public HeraldOccupancy Occupancy { get; }

    /// <summary>This page's members, ordered by <see cref="HeraldPresenceMember.Client"/> (bytewise).</summary>
    public IReadOnlyList<HeraldPresenceMember> Members { get; }

    /// <summary>Pass as the cursor of <see cref="HeraldClient.PresenceAsync"/> for the page after this one; <c>null</c> when this page ends the list.</summary>
    public string? Next { get; }
}

/// <summary>The broker's header keys on a presence event (spec §15.2).</summary>
internal static class PresenceHeaders
{
    public const string Presence = "Herald-Presence";
    public const string Client = "Herald-Client";
    public const string Identity = "Herald-Identity";
    public const string Reason = "Herald-Reason";
    public const string Occupancy = "Herald-Occupancy";
}
