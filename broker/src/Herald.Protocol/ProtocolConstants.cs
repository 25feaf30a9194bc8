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

    /// <summary>Conventional prefix of reply topics (spec §7).</summary>
    public const string InboxPrefix = "_INBOX.";
}

/// <summary>Capability bits of HELLO and WELCOME (spec §4.1).</summary>
[Flags]
public enum Capabilities : uint
{
    None = 0,
    /// <summary>The peer can read Zstd-compressed payloads.</summary>
    Zstd = 1,
}

/// <summary>Option bits of SUBSCRIBE (spec §4.3).</summary>
[Flags]
public enum SubscribeOptions : uint
{
    None = 0,
    /// <summary>Do not deliver this connection's own publications to the subscription.</summary>
    NoEcho = 1,
}

/// <summary>Flag bits of PUBLISH and MESSAGE (spec §4.5).</summary>
[Flags]
public enum PayloadFlags : uint
{
    None = 0,
    /// <summary>The payload is Zstd-compressed.</summary>
    Zstd = 1,
}
