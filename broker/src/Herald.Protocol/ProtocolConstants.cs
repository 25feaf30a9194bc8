namespace Herald.Protocol;

/// <summary>Numbers fixed by the wire protocol (protocol-spec/README.md).</summary>
public static class ProtocolConstants
{
    /// <summary>The protocol version this library speaks (spec §4.1).</summary>
    public const uint Version = 1;

    /// <summary>Bytes of the length prefix in front of every frame body (spec §2).</summary>
    public const int LengthPrefixSize = 4;

    /// <summary>Longest HELLO client name, in UTF-8 bytes (spec §4.1).</summary>
    public const int MaxClientNameBytes = 128;

    /// <summary>Deepest nesting of unknown trailing elements a receiver will skip over.</summary>
    public const int MaxSkipDepth = 16;

    /// <summary>Offset of the four sid bytes inside an encoded MESSAGE frame, prefix included (spec §4.6).</summary>
    public const int MessageSidOffset = 7;

    /// <summary>Bytes of a MESSAGE frame before the shared envelope: prefix, array header, type, uint32 sid (spec §4.6).</summary>
    public const int MessageHeaderSize = 11;

    /// <summary>
    /// The most bytes a MESSAGE body holds besides its payload, whatever encoding the PUBLISH used, for topics
    /// and reply_to of up to <paramref name="maxTopic"/> bytes: array header and type (2), uint32 sid (5), topic
    /// and reply_to as str32 (2 × (5 + maxTopic)), flags as uint64 (9), the payload's bin32 header (5).
    /// </summary>
    public static int MessageOverhead(int maxTopic) => 31 + (2 * maxTopic);

    /// <summary>
    /// WELCOME's <c>max_payload</c> (spec §4.2): the largest PUBLISH payload, chosen so that the MESSAGE every
    /// subscriber receives fits in <paramref name="maxFrame"/>, the limit WELCOME advertised for every frame.
    /// </summary>
    public static int MaxPayload(int maxFrame, int maxTopic) => maxFrame - MessageOverhead(maxTopic);

    /// <summary>Default longest client info (HELLO's <c>info</c>, <c>max_presence_info</c>), in UTF-8 bytes (spec §4.1, §9).</summary>
    public const int DefaultMaxPresenceInfoBytes = 256;

    /// <summary>Longest presence client id, in UTF-8 bytes (spec §15.1).</summary>
    public const int MaxPresenceClientBytes = 64;

    /// <summary>Most members one PRESENCE_REPLY lists: a larger <c>limit</c> is served as this (spec §15.3).</summary>
    public const int MaxPresencePage = 1000;

    /// <summary>Conventional prefix of reply topics (spec §7).</summary>
    public const string InboxPrefix = "_INBOX.";

    /// <summary>
    /// The header of a long-poll session's notice that the server subscribed it (longpoll.md §1.4, spec §4.10): a MESSAGE of
    /// the new sid, on its pattern, no payload, the value SUBSCRIBE's option bits in decimal.
    /// </summary>
    public const string SubscribedHeader = "Herald-Subscribed";

    /// <summary>The header of a long-poll session's notice that the server ended a subscription (longpoll.md §1.4): its value the reason.</summary>
    public const string UnsubscribedHeader = "Herald-Unsubscribed";
}

/// <summary>Capability bits of HELLO and WELCOME (spec §4.1).</summary>
[Flags]
public enum Capabilities : uint
{
    None = 0,
    /// <summary>The peer can read Zstd-compressed payloads.</summary>
    Zstd = 1,

    /// <summary>The peer reads MESSAGE frames that carry a header block and may send PUBLISH frames with one (spec §4.9).</summary>
    Headers = 2,

    /// <summary>The peer wants a no-responders status for its requests (spec §7); granted only with <see cref="Headers"/>.</summary>
    NoResponders = 4,

    /// <summary>The broker keeps topic histories a subscription may resume (spec §13); granted only with <see cref="Headers"/> and only by a broker that keeps some.</summary>
    History = 8,

    /// <summary>SUBSCRIBE may name a queue group (spec §4.3, §14); granted by a broker that routes them.</summary>
    QueueGroups = 16,

    /// <summary>The peer may be present on topics, get join and leave events and ask who is present (spec §15); granted only with <see cref="Headers"/>.</summary>
    Presence = 32,

    /// <summary>The peer is told of subscriptions the server makes for it (SUBSCRIBED, spec §4.10); granted on framed transports.</summary>
    ServerSubscriptions = 64,

    /// <summary>The peer applies Fossil deltas: subscriptions may ask for them and MESSAGE may carry them (spec §11.2).</summary>
    Deltas = 128,
}

/// <summary>Option bits of SUBSCRIBE (spec §4.3).</summary>
[Flags]
public enum SubscribeOptions : uint
{
    None = 0,
    /// <summary>Do not deliver this connection's own publications to the subscription.</summary>
    NoEcho = 1,

    /// <summary>The subscription makes its connection present on its topic (spec §15.1); needs the presence capability and a topic without wildcards.</summary>
    Join = 2,

    /// <summary>The subscription also receives its topic's join and leave events (spec §15.2); needs the presence capability and a topic without wildcards.</summary>
    PresenceEvents = 4,

    /// <summary>The subscription asks for deltas (spec §11.2); honoured with the deltas capability on a topic without wildcards and without a queue group, else ignored.</summary>
    Delta = 8,
}

/// <summary>Flag bits of PUBLISH and MESSAGE (spec §4.5).</summary>
[Flags]
public enum PayloadFlags : uint
{
    None = 0,
    /// <summary>The payload is Zstd-compressed.</summary>
    Zstd = 1,

    /// <summary>The payload is a Fossil delta against the previous payload (spec §11.2); never together with <see cref="Zstd"/>.</summary>
    Delta = 2,
}
