using System.Buffers;
using System.Buffers.Binary;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Client;

/// <summary>
/// Reads frames on the load tool's receive hot path without the general decoder: the frame type from the
/// first two body bytes, and a MESSAGE in the one form the broker writes (spec §4.6):
/// <code>
/// body:    | 0x9N fixarray of N | type as positive fixint (1-9) | ...
/// MESSAGE: | 96 | 06 | ce sid (4, BE) | topic: str | reply_to: nil or str | flags: fixint | payload: bin |
///          | 97 | 06 | ... as above ...                                                       | headers: map |
/// </code>
/// The header block (spec §4.9, the seventh element) is handed back as the bytes after the payload, not parsed.
/// Anything in another (still valid) MessagePack form peeks as "not recognised": decode it with
/// <see cref="FrameDecoder"/> instead. Both Herald clients of the tool use this, so parsing a delivery
/// costs the tool about what parsing a NATS MSG line costs its NATS client (fair CPU on a shared machine).
/// </summary>
internal static class FramePeek
{
    public static FrameType TypeOf(ReadOnlySpan<byte> body) =>
        body.Length >= 2 && (body[0] & 0xF0) == 0x90 && body[1] is >= (byte)FrameType.Hello and <= (byte)FrameType.Error
            ? (FrameType)body[1]
            : 0;

    /// <summary>
    /// Reads an uncompressed MESSAGE in the broker's form; false for any other frame or form (then use
    /// <see cref="ReadMessageSlow"/> or the decoder). <paramref name="headers"/> is the encoded header
    /// block of a seven-element MESSAGE, empty for six.
    /// </summary>
    public static bool TryReadMessage(ReadOnlySpan<byte> body, out uint sid, out ReadOnlySpan<byte> replyTo, out ReadOnlySpan<byte> payload, out ReadOnlySpan<byte> headers)
    {
        sid = 0;
        replyTo = default;
        payload = default;
        headers = default;
        if (body.Length < 7 || body[0] is not (0x96 or 0x97) || body[1] != (byte)FrameType.Message || body[2] != MessagePackCode.UInt32)
        {
            return false;
        }

        sid = BinaryPrimitives.ReadUInt32BigEndian(body[3..]);
        int at = ReadString(body, 7, out _);
        if (at < 0 || at >= body.Length)
        {
            return false;
        }

        if (body[at] == MessagePackCode.Nil)
        {
            at++;
        }
        else if ((at = ReadString(body, at, out replyTo)) < 0)
        {
            return false;
        }

        if (at >= body.Length || body[at] != 0) // flags: anything but "plain" (e.g. compressed) goes the slow way
        {
            return false;
        }

        at++;
        if (at >= body.Length)
        {
            return false;
        }

        int length;
        switch (body[at])
        {
            case MessagePackCode.Bin8 when at + 2 <= body.Length:
                length = body[at + 1];
                at += 2;
                break;
            case MessagePackCode.Bin16 when at + 3 <= body.Length:
                length = BinaryPrimitives.ReadUInt16BigEndian(body[(at + 1)..]);
                at += 3;
                break;
            case MessagePackCode.Bin32 when at + 5 <= body.Length:
                length = (int)Math.Min(BinaryPrimitives.ReadUInt32BigEndian(body[(at + 1)..]), int.MaxValue);
                at += 5;
                break;
            default:
                return false;
        }

        if (length > body.Length - at)
        {
            return false;
        }

        payload = body.Slice(at, length);
        at += length;
        if (body[0] == 0x96)
        {
            return at == body.Length;
        }

        headers = body[at..];
        return !headers.IsEmpty;
    }

    /// <summary>Any MESSAGE, through the general decoder (another encoder's form, or flags set).</summary>
    public static PublishFrame ReadMessageSlow(ReadOnlySequence<byte> body)
    {
        var reader = new MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
        return type == FrameType.Message
            ? FrameDecoder.ReadMessage(ref reader, elements)
            : throw new ProtocolException(ErrorCode.UnexpectedFrame, $"expected MESSAGE, got {type}");
    }

    /// <summary>Reads the string at <paramref name="at"/>; returns the index after it, or -1 when it is not one.</summary>
    private static int ReadString(ReadOnlySpan<byte> body, int at, out ReadOnlySpan<byte> value)
    {
        value = default;
        if (at >= body.Length)
        {
            return -1;
        }

        byte code = body[at];
        int length, header;
        if (code is >= MessagePackCode.MinFixStr and <= MessagePackCode.MaxFixStr)
        {
            length = code & 0x1F;
            header = 1;
        }
        else if (code == MessagePackCode.Str8 && at + 2 <= body.Length)
        {
            length = body[at + 1];
            header = 2;
        }
        else if (code == MessagePackCode.Str16 && at + 3 <= body.Length)
        {
            length = BinaryPrimitives.ReadUInt16BigEndian(body[(at + 1)..]);
            header = 3;
        }
        else
        {
            return -1;
        }

        if (at + header + length > body.Length)
        {
            return -1;
        }

        value = body.Slice(at + header, length);
        return at + header + length;
    }
}
