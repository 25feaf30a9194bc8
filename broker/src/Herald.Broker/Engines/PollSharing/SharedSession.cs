using Herald.Broker.Delivery;
using Herald.Protocol;

namespace Herald.Broker.Engines.PollSharing;

/// <summary>A shared session as a node that does not own it reads it: who it is, its last sequence, its owner (null: the lease expired), why it ended, its subscriptions.</summary>
internal sealed record SharedSession(string Token, string Identity, string? Client, int Capabilities, long Sequence, string? Owner, string? Ended, IReadOnlyList<SharedSubscription> Subscriptions)
{
    /// <summary>The client info the session joins topics with (spec §15.1), or null.</summary>
    public string? Info { get; init; }
}

/// <summary>A subscription of a shared session; <see cref="Position"/>: "&lt;offset&gt; &lt;epoch&gt;" last delivered on a history topic.</summary>
internal sealed record SharedSubscription(uint Sid, string Pattern, bool NoEcho, string? Position)
{
    /// <summary>The queue group the subscription is in (spec §14), or null.</summary>
    public string? Queue { get; init; }

    /// <summary>Its presence options (join, presence events: spec §15), made again with it by a takeover.</summary>
    public SubscribeOptions Presence { get; init; }
}

/// <summary>
/// One message the owner appends: its session sequence, sid, the MESSAGE frame (the router's buffer, shared by every
/// session that got the message: the same memory is one frame), and its stream position ("offset epoch") if it has one.
/// </summary>
internal readonly record struct SharedEntry(long Sequence, uint Sid, ReadOnlyMemory<byte> Frame, string? Position);

internal enum SharedPollStatus
{
    Ok,
    Unknown,
    Ended,
    AckOutOfRange,
    Replaced,
}

/// <summary>A poll's read of the shared backlog.</summary>
internal sealed record SharedPoll(SharedPollStatus Status)
{
    public string? Reason { get; init; }

    public long LastSequence { get; init; }

    public string? Generation { get; init; }

    public long HighestAck { get; init; }

    public long HighestSent { get; init; }

    /// <summary>The messages read, their frames shared as they are (not pooled: a take's release leaves them).</summary>
    public IReadOnlyList<(long Sequence, uint Sid, MessageBuffer Frame)> Entries { get; init; } = [];
}

/// <summary>
/// The owner's lease renewed: whether it is still this node's, how long since the client's last poll (on any node, by
/// the backplane's clock), whether a poll is held, and why it ended if it did. <see cref="ElsewhereMark"/> names that last
/// poll if it came through another node (0 if it came through this one): a mark the owner has not seen before is a
/// request it has not heard of.
/// </summary>
internal readonly record struct LeaseState(bool Kept, TimeSpan Idle, bool PollHeld, string? Ended, long ElsewhereMark = 0);

