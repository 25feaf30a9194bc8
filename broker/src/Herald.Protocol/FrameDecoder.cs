using System.Buffers;
using System.Buffers.Binary;
using System.Text;
using System.Text.Unicode;
using MessagePack;

namespace Herald.Protocol;

/// <summary>
/// Decodes frame bodies (spec §2-§4) with MessagePack's low-level reader over the fixed, positional
/// schema. Client input is untrusted: nothing here goes through a formatter (no typeless or dynamic
/// deserialization, CVE-2020-5234), maps are read only where the schema has one (WELCOME, from the
/// server) into a bounded dictionary, unknown trailing elements are skipped with a depth limit, and
/// strings are strict UTF-8. Every failure is a <see cref="ProtocolException"/> with the spec's code.
/// </summary>
public static partial class FrameDecoder
{
    private static readonly UTF8Encoding StrictUtf8 = new(encoderShouldEmitUTF8Identifier: false, throwOnInvalidBytes: true);

    /// <summary>Reads the array header and frame type: the start of every body.</summary>
    public static FrameType ReadHeader(ref MessagePackReader reader, out int elementCount)
    {
        uint type;
        try
        {
            elementCount = reader.ReadArrayHeader();
            if (elementCount < 1)
            {
                ThrowHelper.ThrowMalformed("Frame body is an empty array; its first element must be the frame type.");
            }

            type = reader.ReadUInt32();
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            ThrowHelper.ThrowMalformed("Frame body is not a MessagePack array starting with the frame type.", e);
            throw; // unreachable
        }

        if (type is 0 or > (uint)FrameType.Subscribed)
        {
            ThrowHelper.Throw(ErrorCode.UnknownFrameType, $"Unknown frame type {type}.");
        }

        return (FrameType)type;
    }

    /// <summary>Reads HELLO (after <see cref="ReadHeader"/>), its <c>info</c> held to the default <c>max_presence_info</c> (spec §4.1, §9).</summary>
    public static HelloFrame ReadHello(ref MessagePackReader reader, int elementCount) =>
        ReadHello(ref reader, elementCount, ProtocolConstants.DefaultMaxPresenceInfoBytes);

    /// <summary>Reads HELLO (after <see cref="ReadHeader"/>); an <c>info</c> over <paramref name="maxInfoBytes"/> UTF-8 bytes is <c>MalformedFrame</c> (spec §4.1).</summary>
    public static HelloFrame ReadHello(ref MessagePackReader reader, int elementCount, int maxInfoBytes)
    {
        try
        {
            Require(elementCount, 5, "HELLO");
            uint version = reader.ReadUInt32();
            string name = ReadString(ref reader, "client_name") ?? ThrowNil<string>("client_name");
            if (Encoding.UTF8.GetByteCount(name) > ProtocolConstants.MaxClientNameBytes)
            {
                ThrowHelper.ThrowMalformed($"HELLO client_name is longer than {ProtocolConstants.MaxClientNameBytes} bytes.");
            }

            var caps = (Capabilities)reader.ReadUInt32();
            string? auth = ReadString(ref reader, "auth");
            string? info = null;
            if (elementCount > 5)
            {
                info = ReadString(ref reader, "info");
                if (info is not null && Encoding.UTF8.GetByteCount(info) > maxInfoBytes)
                {
                    ThrowHelper.ThrowMalformed($"HELLO info is longer than max_presence_info, {maxInfoBytes} bytes.");
                }
            }

            SkipRest(ref reader, elementCount - 6);
            return new HelloFrame(version, name, caps, auth) { Info = info };
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<HelloFrame>("HELLO", e);
        }
    }

    public static WelcomeFrame ReadWelcome(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            Require(elementCount, 6, "WELCOME");
            uint version = reader.ReadUInt32();
            string name = ReadString(ref reader, "server_name") ?? ThrowNil<string>("server_name");
            ulong id = reader.ReadUInt64();
            var caps = (Capabilities)reader.ReadUInt32();
            int count = reader.ReadMapHeader();
            if (count > 256)
            {
                ThrowHelper.ThrowMalformed("WELCOME limits map has more than 256 entries.");
            }

            var limits = new Dictionary<string, ulong>(count, StringComparer.Ordinal);
            for (int i = 0; i < count; i++)
            {
                string key = ReadString(ref reader, "limits key") ?? ThrowNil<string>("limits key");
                if (reader.NextMessagePackType == MessagePackType.Integer)
                {
                    limits[key] = reader.ReadUInt64();
                }
                else
                {
                    Skip(ref reader, 0); // a later version's non-integer limit: ignored
                }
            }

            string? inboxPrefix = null;
            if (elementCount > 6)
            {
                if (reader.NextMessagePackType == MessagePackType.String)
                {
                    inboxPrefix = ReadString(ref reader, "inbox_prefix");
                }
                else
                {
                    Skip(ref reader, 0); // nil, or a shape this version does not know: no prefix
                }
            }

            SkipRest(ref reader, elementCount - 7);
            return new WelcomeFrame(version, name, id, caps, limits, inboxPrefix);
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<WelcomeFrame>("WELCOME", e);
        }
    }

    public static SubscribeFrame ReadSubscribe(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            Require(elementCount, 4, "SUBSCRIBE");
            uint sid = reader.ReadUInt32();
            ReadOnlySequence<byte> pattern = reader.ReadStringSequence() ?? ThrowNil<ReadOnlySequence<byte>>("pattern");
            RequireUtf8(pattern, "pattern");
            var options = (SubscribeOptions)reader.ReadUInt32();
            StreamPosition? since = elementCount > 4 ? ReadSince(ref reader) : null;
            ReadOnlySequence<byte> queue = default;
            if (elementCount > 5 && !reader.TryReadNil())
            {
                queue = reader.ReadStringSequence() ?? default;
                RequireUtf8(queue, "queue");
            }

            SkipRest(ref reader, elementCount - 6);
            return new SubscribeFrame(sid, pattern, options) { Since = since, Queue = queue };
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<SubscribeFrame>("SUBSCRIBE", e);
        }
    }

    /// <summary>SUBSCRIBE's <c>since</c> (spec §4.3): nil, or <c>[offset: uint, epoch: str]</c> with an epoch of at most 64 bytes.</summary>
    private static StreamPosition? ReadSince(ref MessagePackReader reader)
    {
        if (reader.TryReadNil())
        {
            return null;
        }

        if (reader.NextMessagePackType != MessagePackType.Array || reader.ReadArrayHeader() != 2)
        {
            ThrowHelper.ThrowMalformed("SUBSCRIBE since is neither nil nor an array of [offset, epoch].");
        }

        ulong offset = reader.ReadUInt64();
        string epoch = ReadString(ref reader, "since epoch") ?? ThrowNil<string>("since epoch");
        if (Encoding.UTF8.GetByteCount(epoch) > StreamPosition.MaxEpochBytes)
        {
            ThrowHelper.ThrowMalformed($"SUBSCRIBE since epoch is longer than {StreamPosition.MaxEpochBytes} bytes.");
        }

        return new StreamPosition(offset, epoch);
    }

    public static UnsubscribeFrame ReadUnsubscribe(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            Require(elementCount, 2, "UNSUBSCRIBE");
            uint sid = reader.ReadUInt32();
            SkipRest(ref reader, elementCount - 2);
            return new UnsubscribeFrame(sid);
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<UnsubscribeFrame>("UNSUBSCRIBE", e);
        }
    }

    /// <summary>Reads PUBLISH (after <see cref="ReadHeader"/>): a sixth element is its header block (spec §4.9).</summary>
    public static PublishFrame ReadPublish(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            Require(elementCount, 5, "PUBLISH");
            return ReadEnvelope(ref reader, sid: 0, elementCount - 5, PayloadFlags.Zstd);
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<PublishFrame>("PUBLISH", e);
        }
    }

    /// <summary>
    /// The common PUBLISH, decoded straight from a body in one segment without the general reader: the
    /// shape <see cref="FrameWriter"/> writes for a topic and reply_to under 256 bytes and no header block.
    /// <code>
    /// 0x95 0x05 | topic: fixstr/str8 | reply_to: nil/fixstr/str8 | flags: 0x00/0x01 | payload: bin8/16/32, to the end
    /// </code>
    /// Anything else (a header block, extra elements, other encodings of the same values, a body split across
    /// segments, any error) returns <c>false</c> and decodes nothing: the caller then reads it with
    /// <see cref="ReadHeader"/> and <see cref="ReadPublish"/>, which give the same frame or the spec's error.
    /// The same checks hold: topic and reply_to strict UTF-8, no reserved flag bits. Spec §4.5.
    /// </summary>
    /// <remarks>
    /// The general reader costs a publisher about 230 ns per 91-byte PUBLISH on the reference machine
    /// (<c>PublicationPathBenchmarks</c>), more than the broker's routing and enqueue together; most of it is
    /// <c>SequenceReader</c> bookkeeping this shape does not need (loadtest/docs/profile.md).
    /// </remarks>
    public static bool TryReadCommonPublish(in ReadOnlySequence<byte> body, out PublishFrame publish)
    {
        publish = default;
        if (!body.IsSingleSegment)
        {
            return false;
        }

        ReadOnlySpan<byte> span = body.FirstSpan;
        if (span.Length < 6 || span[0] != 0x95 || span[1] != (byte)FrameType.Publish)
        {
            return false;
        }

        int at = 2;
        if (!TryReadShortString(span, ref at, out int topicStart, out int topicLength))
        {
            return false;
        }

        int replyStart = 0;
        int replyLength = -1; // nil
        if (at < span.Length && span[at] == MessagePackCode.Nil)
        {
            at++;
        }
        else if (!TryReadShortString(span, ref at, out replyStart, out replyLength))
        {
            return false;
        }

        if (at >= span.Length || span[at] > (byte)PayloadFlags.Zstd)
        {
            return false;
        }

        var flags = (PayloadFlags)span[at++];
        if (!TryReadBinHeader(span, ref at, out int payloadLength) || payloadLength != span.Length - at)
        {
            return false;
        }

        if (!Utf8.IsValid(span.Slice(topicStart, topicLength)) || (replyLength > 0 && !Utf8.IsValid(span.Slice(replyStart, replyLength))))
        {
            return false;
        }

        publish = new PublishFrame(0, body.Slice(topicStart, topicLength), replyLength < 0 ? null : body.Slice(replyStart, replyLength), flags, body.Slice(at, payloadLength), body.Slice(2));
        return true;
    }

    /// <summary>A fixstr or str8 at <paramref name="at"/>, whole within <paramref name="span"/>.</summary>
    private static bool TryReadShortString(ReadOnlySpan<byte> span, ref int at, out int start, out int length)
    {
        start = 0;
        length = 0;
        if (at >= span.Length)
        {
            return false;
        }

        byte code = span[at];
        if (code is >= MessagePackCode.MinFixStr and <= MessagePackCode.MaxFixStr)
        {
            length = code & 0x1f;
            start = at + 1;
        }
        else if (code == MessagePackCode.Str8 && at + 1 < span.Length)
        {
            length = span[at + 1];
            start = at + 2;
        }
        else
        {
            return false;
        }

        at = start + length;
        return at <= span.Length;
    }

    /// <summary>A bin8, bin16 or bin32 header at <paramref name="at"/>: the payload's length, <paramref name="at"/> moved to its first byte.</summary>
    private static bool TryReadBinHeader(ReadOnlySpan<byte> span, ref int at, out int length)
    {
        length = 0;
        int left = span.Length - at;
        switch (left > 0 ? span[at] : (byte)0)
        {
            case MessagePackCode.Bin8 when left >= 2:
                length = span[at + 1];
                at += 2;
                return true;
            case MessagePackCode.Bin16 when left >= 3:
                length = BinaryPrimitives.ReadUInt16BigEndian(span[(at + 1)..]);
                at += 3;
                return true;
            case MessagePackCode.Bin32 when left >= 5:
                uint declared = BinaryPrimitives.ReadUInt32BigEndian(span[(at + 1)..]);
                if (declared > int.MaxValue)
                {
                    return false;
                }

                length = (int)declared;
                at += 5;
                return true;
            default:
                return false;
        }
    }

    /// <summary>Reads MESSAGE (after <see cref="ReadHeader"/>): a seventh element is its header block (spec §4.9).</summary>
    public static PublishFrame ReadMessage(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            Require(elementCount, 6, "MESSAGE");
            uint sid = reader.ReadUInt32();
            return ReadEnvelope(ref reader, sid, elementCount - 6, PayloadFlags.Zstd | PayloadFlags.Delta);
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<PublishFrame>("MESSAGE", e);
        }
    }

    /// <summary>Reads SUBSCRIBED (after <see cref="ReadHeader"/>, spec §4.10): a sid of 0 or a nil pattern is MalformedFrame; later elements are skipped.</summary>
    public static SubscribedFrame ReadSubscribed(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            Require(elementCount, 4, "SUBSCRIBED");
            uint sid = reader.ReadUInt32();
            string pattern = ReadString(ref reader, "pattern") ?? ThrowNil<string>("pattern");
            var options = (SubscribeOptions)reader.ReadUInt32();
            if (sid == 0)
            {
                ThrowHelper.ThrowMalformed("SUBSCRIBED sid is 0.");
            }

            SkipRest(ref reader, elementCount - 4);
            return new SubscribedFrame(sid, pattern, options);
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<SubscribedFrame>("SUBSCRIBED", e);
        }
    }

    /// <summary>Checks a PING or PONG body (no fields).</summary>
    public static void ReadEmpty(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            SkipRest(ref reader, elementCount - 1);
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            ThrowMalformed<int>("PING/PONG", e);
        }
    }

    /// <summary>
    /// Reads topic, reply_to, flags, payload and the optional header block. <paramref name="allowed"/> are the flag bits
    /// the frame may carry (PUBLISH: zstd; MESSAGE: zstd or delta, never both, spec §4.5, §4.6); any other is malformed.
    /// </summary>
    private static PublishFrame ReadEnvelope(ref MessagePackReader reader, uint sid, int extra, PayloadFlags allowed)
    {
        SequencePosition start = reader.Position;
        ReadOnlySequence<byte> topic = reader.ReadStringSequence() ?? ThrowNil<ReadOnlySequence<byte>>("topic");
        RequireUtf8(topic, "topic");
        ReadOnlySequence<byte>? replyTo = reader.ReadStringSequence();
        if (replyTo is { } r)
        {
            RequireUtf8(r, "reply_to");
        }

        uint flags = reader.ReadUInt32();
        if ((flags & ~(uint)allowed) != 0 || flags == (uint)(PayloadFlags.Zstd | PayloadFlags.Delta))
        {
            ThrowHelper.ThrowMalformed($"Payload flags 0x{flags:x} set reserved bits.");
        }

        if (reader.NextMessagePackType != MessagePackType.Binary && !reader.IsNil)
        {
            // ReadBytes would also take a str (MessagePack's old-spec compatibility); spec §2: a payload is bin.
            ThrowHelper.ThrowMalformed("Field payload is not MessagePack bin.");
        }

        ReadOnlySequence<byte> payload = reader.ReadBytes() ?? ThrowNil<ReadOnlySequence<byte>>("payload");
        ReadOnlySequence<byte> envelope = reader.Sequence.Slice(start, reader.Position);
        if (extra == 0)
        {
            SkipRest(ref reader, 0);
            return new PublishFrame(sid, topic, replyTo, (PayloadFlags)flags, payload, envelope);
        }

        // The header block (spec §4.9): skipped as an element (bounded depth), then its shape checked once.
        if (reader.NextMessagePackType != MessagePackType.Map)
        {
            ThrowHelper.ThrowMalformed("Field headers is not a MessagePack map.");
        }

        SequencePosition headersStart = reader.Position;
        Skip(ref reader, 0);
        ReadOnlySequence<byte> headers = reader.Sequence.Slice(headersStart, reader.Position);
        int values = HeaderBlock.Validate(headers, out string? reserved);
        SkipRest(ref reader, extra - 1);
        return new PublishFrame(sid, topic, replyTo, (PayloadFlags)flags, payload, envelope) { Headers = headers, HeaderValues = values, ReservedHeader = reserved };
    }

    private static string? ReadString(ref MessagePackReader reader, string field)
    {
        ReadOnlySequence<byte>? bytes = reader.ReadStringSequence();
        if (bytes is not { } b)
        {
            return null;
        }

        try
        {
            return StrictUtf8.GetString(b);
        }
        catch (DecoderFallbackException e)
        {
            ThrowHelper.ThrowMalformed($"Field {field} is not valid UTF-8.", e);
            return null; // unreachable
        }
    }

    /// <summary>
    /// Every <c>str</c> is UTF-8 (spec §2): one that is not is <c>MalformedFrame</c>, topics included, before
    /// any topic rule is applied (spec §8.1). Topics stay bytes (no string is made); a topic split across
    /// segments is copied to be checked (rare: only where a frame straddles two reads).
    /// </summary>
    private static void RequireUtf8(in ReadOnlySequence<byte> value, string field)
    {
        if (!(value.IsSingleSegment ? Utf8.IsValid(value.FirstSpan) : Utf8.IsValid(value.ToArray())))
        {
            ThrowHelper.ThrowMalformed($"Field {field} is not valid UTF-8.");
        }
    }

    private static void Require(int elementCount, int required, string frame)
    {
        if (elementCount < required)
        {
            ThrowHelper.ThrowMalformed($"{frame} needs {required} elements, got {elementCount}.");
        }
    }

    /// <summary>Skips elements a later protocol version may add, then requires the body to be over.</summary>
    private static void SkipRest(ref MessagePackReader reader, int elements)
    {
        for (int i = 0; i < elements; i++)
        {
            Skip(ref reader, 0);
        }

        if (!reader.End)
        {
            ThrowHelper.ThrowMalformed("Bytes follow the frame's MessagePack array.");
        }
    }

    private static void Skip(ref MessagePackReader reader, int depth)
    {
        if (depth > ProtocolConstants.MaxSkipDepth)
        {
            ThrowHelper.ThrowMalformed($"Unknown elements nest deeper than {ProtocolConstants.MaxSkipDepth}.");
        }

        switch (reader.NextMessagePackType)
        {
            case MessagePackType.Array:
                int items = reader.ReadArrayHeader();
                for (int i = 0; i < items; i++) Skip(ref reader, depth + 1);
                break;
            case MessagePackType.Map:
                int pairs = reader.ReadMapHeader();
                for (int i = 0; i < pairs; i++)
                {
                    Skip(ref reader, depth + 1);
                    Skip(ref reader, depth + 1);
                }

                break;
            default:
                reader.Skip(); // a scalar, string, binary or extension: no recursion
                break;
        }
    }

    // ArgumentOutOfRangeException: MessagePack reads a str32/bin32 length of 2^31 or more as a negative int and
    // then fails slicing or advancing by it.
    private static bool IsDecodeFailure(Exception e) => e is MessagePackSerializationException or EndOfStreamException or OverflowException or InvalidOperationException or ArgumentOutOfRangeException;

    private static T ThrowNil<T>(string field)
    {
        ThrowHelper.ThrowMalformed($"Field {field} may not be nil.");
        return default!;
    }

    private static T ThrowMalformed<T>(string frame, Exception e)
    {
        ThrowHelper.ThrowMalformed($"{frame} is malformed: {e.Message}", e);
        return default!;
    }
}
