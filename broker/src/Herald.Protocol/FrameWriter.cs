using System.Buffers;
using System.Buffers.Binary;
using System.Text;
using MessagePack;

namespace Herald.Protocol;

/// <summary>
/// Encodes frames (spec §2-§4): the four-byte length prefix, then the MessagePack body. The body size is
/// computed first (MessagePack's header sizes are fixed by the value) so the frame is written in one
/// pass straight into the caller's buffer, with no temporary copy.
/// </summary>
public static class FrameWriter
{
    /// <param name="info">The client info others see beside this connection's presence (spec §4.1, §15), sent as a sixth element; null sends the five of a HELLO without one.</param>
    public static void WriteHello(IBufferWriter<byte> output, string clientName, Capabilities capabilities, string? auth = null, uint version = ProtocolConstants.Version, string? info = null)
    {
        ArgumentNullException.ThrowIfNull(clientName);
        int nameBytes = Encoding.UTF8.GetByteCount(clientName);
        int authBytes = auth is null ? 0 : Encoding.UTF8.GetByteCount(auth);
        int body = 1 + 1 + UIntSize(version) + StrSize(nameBytes) + UIntSize((uint)capabilities) + (auth is null ? 1 : StrSize(authBytes));
        if (info is not null)
        {
            body += StrSize(Encoding.UTF8.GetByteCount(info));
        }

        var w = Start(output, body, info is null ? 5 : 6, FrameType.Hello);
        w.Write(version);
        w.Write(clientName);
        w.Write((uint)capabilities);
        w.Write(auth);
        if (info is not null)
        {
            w.Write(info);
        }

        w.Flush();
    }

    /// <param name="inboxPrefix">The client's inbox prefix (spec §7), sent as a seventh element; null sends the six of a broker without one.</param>
    public static void WriteWelcome(IBufferWriter<byte> output, string serverName, ulong connectionId, Capabilities capabilities, IReadOnlyCollection<KeyValuePair<string, ulong>> limits, uint version = ProtocolConstants.Version, string? inboxPrefix = null)
    {
        ArgumentNullException.ThrowIfNull(serverName);
        ArgumentNullException.ThrowIfNull(limits);
        int body = 1 + 1 + UIntSize(version) + StrSize(Encoding.UTF8.GetByteCount(serverName)) + UIntSize(connectionId) + UIntSize((uint)capabilities) + MapHeaderSize(limits.Count);
        foreach (KeyValuePair<string, ulong> limit in limits)
        {
            body += StrSize(Encoding.UTF8.GetByteCount(limit.Key)) + UIntSize(limit.Value);
        }

        if (inboxPrefix is not null)
        {
            body += StrSize(Encoding.UTF8.GetByteCount(inboxPrefix));
        }

        var w = Start(output, body, inboxPrefix is null ? 6 : 7, FrameType.Welcome);
        w.Write(version);
        w.Write(serverName);
        w.Write(connectionId);
        w.Write((uint)capabilities);
        w.WriteMapHeader(limits.Count);
        foreach (KeyValuePair<string, ulong> limit in limits)
        {
            w.Write(limit.Key);
            w.Write(limit.Value);
        }

        if (inboxPrefix is not null)
        {
            w.Write(inboxPrefix);
        }

        w.Flush();
    }

    /// <param name="since">Resume the topic's stream after this position (spec §13), sent as a fifth element; null sends the four of a live subscription.</param>
    /// <param name="queue">The queue group to join (spec §14), sent as a sixth element (the fifth then nil when there is no <paramref name="since"/>); empty: none.</param>
    public static void WriteSubscribe(IBufferWriter<byte> output, uint sid, ReadOnlySpan<byte> pattern, SubscribeOptions options = SubscribeOptions.None, StreamPosition? since = null, ReadOnlySpan<byte> queue = default)
    {
        int body = 1 + 1 + UIntSize(sid) + StrSize(pattern.Length) + UIntSize((uint)options);
        int elements = 4;
        if (since is { } position)
        {
            body += 1 + UIntSize(position.Offset) + StrSize(Encoding.UTF8.GetByteCount(position.Epoch));
            elements = 5;
        }

        if (!queue.IsEmpty)
        {
            body += (since is null ? 1 : 0) + StrSize(queue.Length);
            elements = 6;
        }

        var w = Start(output, body, elements, FrameType.Subscribe);
        w.Write(sid);
        w.WriteString(pattern);
        w.Write((uint)options);
        if (since is { } resume)
        {
            w.WriteArrayHeader(2);
            w.Write(resume.Offset);
            w.Write(resume.Epoch);
        }
        else if (!queue.IsEmpty)
        {
            w.WriteNil();
        }

        if (!queue.IsEmpty)
        {
            w.WriteString(queue);
        }

        w.Flush();
    }

    public static void WriteUnsubscribe(IBufferWriter<byte> output, uint sid)
    {
        var w = Start(output, 1 + 1 + UIntSize(sid), 2, FrameType.Unsubscribe);
        w.Write(sid);
        w.Flush();
    }

    /// <summary>
    /// Writes PUBLISH. An empty <paramref name="replyTo"/> is encoded as nil (no reply wanted); a non-empty
    /// <paramref name="headers"/> (an encoded header block, spec §4.9) is sent as a sixth element, as is.
    /// </summary>
    public static void WritePublish(IBufferWriter<byte> output, ReadOnlySpan<byte> topic, ReadOnlySpan<byte> replyTo, PayloadFlags flags, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> headers = default)
    {
        int body = 1 + 1 + EnvelopeSize(topic.Length, replyTo.Length, flags, payload.Length) + headers.Length;
        var w = Start(output, body, headers.IsEmpty ? 5 : 6, FrameType.Publish);
        WriteEnvelope(ref w, topic, replyTo, flags, payload);
        w.WriteRaw(headers);
        w.Flush();
    }

    /// <summary>Writes a whole MESSAGE frame (the broker instead copies a PUBLISH envelope, see <see cref="WriteMessageHeader"/>); a non-empty <paramref name="headers"/> block is the seventh element.</summary>
    public static void WriteMessage(IBufferWriter<byte> output, uint sid, ReadOnlySpan<byte> topic, ReadOnlySpan<byte> replyTo, PayloadFlags flags, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> headers = default)
    {
        int envelope = EnvelopeSize(topic.Length, replyTo.Length, flags, payload.Length);
        Span<byte> header = output.GetSpan(ProtocolConstants.MessageHeaderSize);
        WriteMessageHeader(header, envelope + headers.Length, sid, hasHeaders: !headers.IsEmpty);
        output.Advance(ProtocolConstants.MessageHeaderSize);
        var w = new MessagePackWriter(output);
        WriteEnvelope(ref w, topic, replyTo, flags, payload);
        w.WriteRaw(headers);
        w.Flush();
    }

    /// <summary>
    /// Writes the eleven bytes that start a MESSAGE frame whose envelope (topic, reply_to, flags,
    /// payload and, with <paramref name="hasHeaders"/>, the header block, already encoded) is
    /// <paramref name="envelopeLength"/> bytes long (spec §4.6).
    /// <code>
    /// | length (4) | 0x96 (0x97 with headers) | 0x06 | 0xce | sid (4, BE) | envelope ... [headers] |
    /// </code>
    /// </summary>
    public static void WriteMessageHeader(Span<byte> destination, int envelopeLength, uint sid, bool hasHeaders = false)
    {
        BinaryPrimitives.WriteUInt32BigEndian(destination, (uint)(ProtocolConstants.MessageHeaderSize - ProtocolConstants.LengthPrefixSize + envelopeLength));
        destination[4] = hasHeaders ? (byte)0x97 : (byte)0x96; // fixarray of 7 or 6
        destination[5] = (byte)FrameType.Message;
        destination[6] = MessagePackCode.UInt32;
        BinaryPrimitives.WriteUInt32BigEndian(destination[ProtocolConstants.MessageSidOffset..], sid);
    }

    /// <summary>Writes <paramref name="sid"/> into a copy of an encoded MESSAGE frame (spec §4.6).</summary>
    public static void StampSid(Span<byte> messageFrame, uint sid) =>
        BinaryPrimitives.WriteUInt32BigEndian(messageFrame[ProtocolConstants.MessageSidOffset..], sid);

    public static void WritePing(IBufferWriter<byte> output) => WriteEmpty(output, FrameType.Ping);

    public static void WritePong(IBufferWriter<byte> output) => WriteEmpty(output, FrameType.Pong);

    /// <param name="sid">The subscription this error ended (spec §4.8), sent as a sixth element; 0 sends the five of an error about none.</param>
    public static void WriteError(IBufferWriter<byte> output, ErrorCode code, bool fatal, string message, ulong count = 0, uint sid = 0)
    {
        ArgumentNullException.ThrowIfNull(message);
        int body = 1 + 1 + UIntSize((uint)code) + 1 + StrSize(Encoding.UTF8.GetByteCount(message)) + UIntSize(count) + (sid == 0 ? 0 : UIntSize(sid));
        var w = Start(output, body, sid == 0 ? 5 : 6, FrameType.Error);
        w.Write((uint)code);
        w.Write(fatal);
        w.Write(message);
        w.Write(count);
        if (sid != 0)
        {
            w.Write(sid);
        }

        w.Flush();
    }

    /// <summary>Writes SUBSCRIBED (spec §4.10): the server made subscription <paramref name="sid"/> to <paramref name="pattern"/> for this client.</summary>
    public static void WriteSubscribed(IBufferWriter<byte> output, uint sid, string pattern, SubscribeOptions options = SubscribeOptions.None)
    {
        ArgumentNullException.ThrowIfNull(pattern);
        int body = 1 + 1 + UIntSize(sid) + StrSize(Encoding.UTF8.GetByteCount(pattern)) + UIntSize((uint)options);
        var w = Start(output, body, 4, FrameType.Subscribed);
        w.Write(sid);
        w.Write(pattern);
        w.Write((uint)options);
        w.Flush();
    }

    /// <summary>
    /// Writes the ERROR that tells a client its subscriptions <paramref name="sids"/> may have lost an unknown number of
    /// messages (spec §4.8, §6.3: a non-fatal <see cref="ErrorCode.MessagesDropped"/> with count 0, no sid, and the
    /// sids as a seventh element; a cluster shard's outage, cluster.md §13).
    /// </summary>
    public static void WriteMessagesLost(IBufferWriter<byte> output, string message, ReadOnlySpan<uint> sids)
    {
        ArgumentNullException.ThrowIfNull(message);
        int body = 1 + 1 + UIntSize((uint)ErrorCode.MessagesDropped) + 1 + StrSize(Encoding.UTF8.GetByteCount(message)) + 1 + 1 + ArrayHeaderSize(sids.Length);
        foreach (uint sid in sids)
        {
            body += UIntSize(sid);
        }

        var w = Start(output, body, 7, FrameType.Error);
        w.Write((uint)ErrorCode.MessagesDropped);
        w.Write(false);
        w.Write(message);
        w.Write(0UL);
        w.Write(0U);
        w.WriteArrayHeader(sids.Length);
        foreach (uint sid in sids)
        {
            w.Write(sid);
        }

        w.Flush();
    }

    /// <summary>Writes PRESENCE (spec §15.3): ask for at most <paramref name="limit"/> members of <paramref name="topic"/> after <paramref name="cursor"/> (null: the first page); a limit of 0 asks for the occupancy alone.</summary>
    public static void WritePresence(IBufferWriter<byte> output, uint requestId, ReadOnlySpan<byte> topic, ulong limit, string? cursor = null)
    {
        int body = 1 + 1 + UIntSize(requestId) + StrSize(topic.Length) + UIntSize(limit) + (cursor is null ? 1 : StrSize(Encoding.UTF8.GetByteCount(cursor)));
        var w = Start(output, body, 5, FrameType.Presence);
        w.Write(requestId);
        w.WriteString(topic);
        w.Write(limit);
        w.Write(cursor);
        w.Flush();
    }

    /// <summary>
    /// Writes PRESENCE_REPLY (spec §15.3). With a non-zero <paramref name="code"/> the caller passes zero counts, no entries
    /// and no <paramref name="next"/>: the spec says a refusal carries nothing else.
    /// <code>
    /// [ 11, request_id, code, members, identities, [ [client, identity, info], ... ], next ]
    /// </code>
    /// </summary>
    public static void WritePresenceReply(IBufferWriter<byte> output, uint requestId, ErrorCode code, ulong members, ulong identities, IReadOnlyList<PresenceEntry> entries, string? next)
    {
        ArgumentNullException.ThrowIfNull(entries);
        int body = 1 + 1 + UIntSize(requestId) + UIntSize((uint)code) + UIntSize(members) + UIntSize(identities) + ArrayHeaderSize(entries.Count)
            + (next is null ? 1 : StrSize(Encoding.UTF8.GetByteCount(next)));
        for (int i = 0; i < entries.Count; i++)
        {
            PresenceEntry entry = entries[i];
            body += 1 + StrSize(Encoding.UTF8.GetByteCount(entry.Client)) + StrSize(Encoding.UTF8.GetByteCount(entry.Identity))
                + (entry.Info is null ? 1 : StrSize(Encoding.UTF8.GetByteCount(entry.Info)));
        }

        var w = Start(output, body, 7, FrameType.PresenceReply);
        w.Write(requestId);
        w.Write((uint)code);
        w.Write(members);
        w.Write(identities);
        w.WriteArrayHeader(entries.Count);
        for (int i = 0; i < entries.Count; i++)
        {
            PresenceEntry entry = entries[i];
            w.WriteArrayHeader(3);
            w.Write(entry.Client);
            w.Write(entry.Identity);
            w.Write(entry.Info);
        }

        w.Write(next);
        w.Flush();
    }

    /// <summary>Size of an encoded envelope: topic, reply_to (nil when empty), flags, payload.</summary>
    public static int EnvelopeSize(int topicLength, int replyToLength, PayloadFlags flags, int payloadLength) =>
        StrSize(topicLength) + (replyToLength == 0 ? 1 : StrSize(replyToLength)) + UIntSize((uint)flags) + BinSize(payloadLength);

    private static void WriteEnvelope(ref MessagePackWriter w, ReadOnlySpan<byte> topic, ReadOnlySpan<byte> replyTo, PayloadFlags flags, ReadOnlySpan<byte> payload)
    {
        w.WriteString(topic);
        if (replyTo.IsEmpty)
        {
            w.WriteNil();
        }
        else
        {
            w.WriteString(replyTo);
        }

        w.Write((uint)flags);
        w.Write(payload);
    }

    private static void WriteEmpty(IBufferWriter<byte> output, FrameType type)
    {
        Span<byte> span = output.GetSpan(6);
        BinaryPrimitives.WriteUInt32BigEndian(span, 2);
        span[4] = 0x91; // fixarray of 1
        span[5] = (byte)type;
        output.Advance(6);
    }

    private static MessagePackWriter Start(IBufferWriter<byte> output, int bodyLength, int elements, FrameType type)
    {
        ArgumentNullException.ThrowIfNull(output);
        Span<byte> prefix = output.GetSpan(ProtocolConstants.LengthPrefixSize);
        BinaryPrimitives.WriteUInt32BigEndian(prefix, (uint)bodyLength);
        output.Advance(ProtocolConstants.LengthPrefixSize);
        var w = new MessagePackWriter(output);
        w.WriteArrayHeader(elements);
        w.Write((byte)type);
        return w;
    }

    internal static int UIntSize(ulong value) => value switch
    {
        < 0x80 => 1,
        <= byte.MaxValue => 2,
        <= ushort.MaxValue => 3,
        <= uint.MaxValue => 5,
        _ => 9,
    };

    internal static int StrSize(int length) => length switch
    {
        < 32 => 1,
        <= byte.MaxValue => 2,
        <= ushort.MaxValue => 3,
        _ => 5,
    } + length;

    internal static int BinSize(int length) => length switch
    {
        <= byte.MaxValue => 2,
        <= ushort.MaxValue => 3,
        _ => 5,
    } + length;

    private static int MapHeaderSize(int count) => count < 16 ? 1 : count <= ushort.MaxValue ? 3 : 5;

    private static int ArrayHeaderSize(int count) => count < 16 ? 1 : count <= ushort.MaxValue ? 3 : 5;
}
