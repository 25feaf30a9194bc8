using System.Buffers;
using System.Text;

namespace Herald.Protocol;

/// <summary>HELLO (spec §4.1).</summary>
public readonly record struct HelloFrame(uint Version, string ClientName, Capabilities Capabilities, string? Auth)
{
    /// <summary>The optional sixth element (spec §4.1, §15): the client info others see beside this connection's presence; null: none.</summary>
    public string? Info { get; init; }
}

/// <summary>WELCOME (spec §4.2). <see cref="InboxPrefix"/> is null from a broker that sends none.</summary>
public readonly record struct WelcomeFrame(uint Version, string ServerName, ulong ConnectionId, Capabilities Capabilities, IReadOnlyDictionary<string, ulong> Limits, string? InboxPrefix = null);

/// <summary>SUBSCRIBE (spec §4.3). <see cref="Pattern"/> is a slice of the frame: copy it to keep it.</summary>
public readonly record struct SubscribeFrame(uint Sid, ReadOnlySequence<byte> Pattern, SubscribeOptions Options)
{
    /// <summary>The fifth element (spec §4.3, §13): resume the topic's stream after this position; null: live only.</summary>
    public StreamPosition? Since { get; init; }

    /// <summary>The sixth element (spec §4.3, §14): the queue group the subscription joins; empty: none. A slice of the frame.</summary>
    public ReadOnlySequence<byte> Queue { get; init; }

    public string PatternString => Encoding.UTF8.GetString(Pattern);

    /// <summary>The queue group's name, or null for a plain subscription.</summary>
    public string? QueueString => Queue.IsEmpty ? null : Encoding.UTF8.GetString(Queue);
}

/// <summary>UNSUBSCRIBE (spec §4.4).</summary>
public readonly record struct UnsubscribeFrame(uint Sid);

/// <summary>
/// PUBLISH (spec §4.5) or MESSAGE (spec §4.6; <see cref="Sid"/> is 0 for PUBLISH). Every member is a
/// slice of the frame it was read from, valid only while that buffer is.
/// </summary>
public readonly record struct PublishFrame(
    uint Sid,
    ReadOnlySequence<byte> Topic,
    ReadOnlySequence<byte>? ReplyTo,
    PayloadFlags Flags,
    ReadOnlySequence<byte> Payload,
    ReadOnlySequence<byte> Envelope)
{
    /// <summary>The encoded elements topic..payload, exactly as MESSAGE carries them after its sid.</summary>
    public ReadOnlySequence<byte> Envelope { get; } = Envelope;

    /// <summary>
    /// The encoded header block (spec §4.9), byte for byte as it travelled, right after <see cref="Envelope"/>;
    /// empty when the frame has none (an empty map is one byte, <c>0x80</c>).
    /// </summary>
    public ReadOnlySequence<byte> Headers { get; init; }

    /// <summary>Values over all keys of <see cref="Headers"/> (what <c>max_headers</c> counts).</summary>
    public int HeaderValues { get; init; }

    /// <summary>The first key of <see cref="Headers"/> under the broker's reserved prefix <c>Herald-</c>, or null.</summary>
    public string? ReservedHeader { get; init; }

    public bool HasHeaders => !Headers.IsEmpty;

    public string TopicString => Encoding.UTF8.GetString(Topic);

    public string? ReplyToString => ReplyTo is { } r ? Encoding.UTF8.GetString(r) : null;
}

/// <summary>SUBSCRIBED (spec §4.10): the server made subscription <see cref="Sid"/> to <see cref="Pattern"/> for this client, with SUBSCRIBE's <see cref="Options"/>.</summary>
public readonly record struct SubscribedFrame(uint Sid, string Pattern, SubscribeOptions Options);

/// <summary>ERROR (spec §4.8). <see cref="Sid"/> names the subscription the error ended (0: none).</summary>
public readonly record struct ErrorFrame(ErrorCode Code, bool Fatal, string Message, ulong Count, uint Sid = 0)
{
    /// <summary>
    /// The seventh element (spec §4.8): on a <see cref="ErrorCode.MessagesDropped"/> with <see cref="Count"/> 0, the
    /// subscriptions that may have lost an unknown number of messages (a cluster shard's outage); null when absent.
    /// </summary>
    public uint[]? Sids { get; init; }
}

/// <summary>PRESENCE (spec §15.3): who is on <see cref="Topic"/> (a slice of the frame), at most <see cref="Limit"/> of them after <see cref="Cursor"/>.</summary>
public readonly record struct PresenceFrame(uint RequestId, ReadOnlySequence<byte> Topic, ulong Limit, string? Cursor)
{
    public string TopicString => Encoding.UTF8.GetString(Topic);
}

/// <summary>One member of a topic's presence (spec §15.1): its client id, identity and client info.</summary>
public readonly record struct PresenceEntry(string Client, string Identity, string? Info);

/// <summary>
/// PRESENCE_REPLY (spec §15.3): the answer to the PRESENCE of <see cref="RequestId"/>. With a non-zero
/// <see cref="Code"/> the counts are 0, <see cref="Entries"/> empty and <see cref="Next"/> null.
/// </summary>
public readonly record struct PresenceReplyFrame(uint RequestId, ErrorCode Code, ulong Members, ulong Identities, IReadOnlyList<PresenceEntry> Entries, string? Next);
