using System.Text.Json;
using System.Text.Unicode;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.Delivery;

/// <summary>
/// The JSON form of a plain MESSAGE frame, for readers that ask for JSON (long-poll, protocol-spec/longpoll.md
/// §2.2). Written straight from the shared frame's bytes: no copy of the frame, no string of the topic or
/// payload, no decompression (a compressed frame has no JSON form; such readers take frames).
/// </summary>
/// <remarks>
/// <code>
/// {"seq":7,"sid":1,"topic":"chat.room1","replyTo":null,"payload":"aGVsbG8=","text":"hello"}
///  text: only when the payload is valid UTF-8
/// </code>
/// </remarks>
internal static class MessageJson
{
    /// <summary>Writes <paramref name="frame"/> (a MESSAGE frame, length prefix first) as one JSON object.</summary>
    public static void Write(Utf8JsonWriter json, MessageBuffer frame, long sequence, uint sid)
    {
        var reader = new MessagePackReader(frame.Memory[ProtocolConstants.LengthPrefixSize..]);
        FrameDecoder.ReadHeader(ref reader, out int count);
        PublishFrame message = FrameDecoder.ReadMessage(ref reader, count);
        if ((message.Flags & PayloadFlags.Zstd) != 0)
        {
            throw new InvalidOperationException("A compressed MESSAGE has no JSON form.");
        }

        // One contiguous frame: every slice of it is a single segment.
        ReadOnlySpan<byte> payload = message.Payload.FirstSpan;
        json.WriteStartObject();
        json.WriteNumber("seq"u8, sequence);
        json.WriteNumber("sid"u8, sid);
        json.WriteString("topic"u8, message.Topic.FirstSpan);
        if (message.ReplyTo is { } replyTo)
        {
            json.WriteString("replyTo"u8, replyTo.FirstSpan);
        }
        else
        {
            json.WriteNull("replyTo"u8);
        }

        json.WriteBase64String("payload"u8, payload);
        if (Utf8.IsValid(payload))
        {
            json.WriteString("text"u8, payload);
        }

        json.WriteEndObject();
    }
}
