using System.Buffers;
using System.IO.Pipelines;
using System.Runtime.CompilerServices;
using System.Text.Json;
using System.Text.Unicode;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.Delivery;

/// <summary>
/// The JSON form of plain MESSAGE frames, for readers that ask for JSON (long-poll, protocol-spec/longpoll.md
/// §2.2). Written straight from the shared frame's bytes: no copy of the frame, no string of the topic or
/// payload, no decompression (a compressed payload is written as it travelled, marked <c>"zstd":true</c>). A body is
/// bounded as written: <see cref="Fit"/> measures each message in one scratch buffer, then
/// <see cref="WriteAsync"/> streams them.
/// </summary>
/// <remarks>
/// <code>
/// {"messages":[ {"seq":7,"sid":1,"topic":"chat.room1","replyTo":null,"payload":"aGVsbG8=","text":"hello"}, ... ],
///  "dropped":0,"ack":7}           text: only when the payload is valid UTF-8 and not compressed;
///                                 "gaps":[2] (after "dropped") only when subscriptions may have lost messages;
///                                 "zstd":true (then no text) when the payload travelled compressed;
///                                 "headers":{"Key":["v"]} only when the message has a header block
/// </code>
/// </remarks>
internal static class MessageJson
{
    /// <summary>Writes <paramref name="frame"/> (a MESSAGE frame, length prefix first) as one JSON object.</summary>
    /// <remarks>A delta's full frame instead (spec §11.2: the JSON form never carries a delta; the payload is the same publication's).</remarks>
    private static void Write(Utf8JsonWriter json, MessageBuffer frame, long sequence, uint sid) =>
        WriteObject(json, Parse(frame.DeltaFull ?? frame), sequence, sid);

    /// <summary>The MESSAGE in <paramref name="frame"/> (length prefix first), as slices of the frame's bytes.</summary>
    public static PublishFrame Parse(MessageBuffer frame)
    {
        var reader = new MessagePackReader(frame.Memory[ProtocolConstants.LengthPrefixSize..]);
        FrameDecoder.ReadHeader(ref reader, out int count);
        return FrameDecoder.ReadMessage(ref reader, count);
    }

    /// <summary>
    /// One message as a JSON object: <c>seq</c> (only when <paramref name="sequence"/> is not negative: a window's
    /// number), <c>sid</c>, <c>topic</c>, <c>replyTo</c>, <c>payload</c> (base64), <c>text</c> or <c>zstd</c>, <c>headers</c>.
    /// </summary>
    public static void WriteObject(Utf8JsonWriter json, in PublishFrame message, long sequence, uint sid)
    {
        // One contiguous frame: every slice of it is a single segment.
        ReadOnlySpan<byte> payload = message.Payload.FirstSpan;
        json.WriteStartObject();
        if (sequence >= 0)
        {
            json.WriteNumber("seq"u8, sequence);
        }

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
        if ((message.Flags & PayloadFlags.Zstd) != 0)
        {
            json.WriteBoolean("zstd"u8, true); // as it travelled, for a reader that negotiated Zstd: never decompressed here
        }
        else if (Utf8.IsValid(payload))
        {
            json.WriteString("text"u8, payload);
        }

        if (message.HasHeaders)
        {
            WriteHeaders(json, message.Headers);
        }

        json.WriteEndObject();
    }

    /// <summary><c>"headers": {"Key": ["v1", "v2"], ...}</c>, keys in encoded order, from a block the decoder has checked (spec §4.9).</summary>
    private static void WriteHeaders(Utf8JsonWriter json, in ReadOnlySequence<byte> block)
    {
        var reader = new MessagePackReader(block);
        json.WriteStartObject("headers"u8);
        int keys = reader.ReadMapHeader();
        for (int i = 0; i < keys; i++)
        {
            json.WritePropertyName(reader.ReadStringSequence()!.Value.FirstSpan);
            json.WriteStartArray();
            int values = reader.ReadArrayHeader();
            for (int v = 0; v < values; v++)
            {
                json.WriteStringValue(reader.ReadStringSequence()!.Value.FirstSpan);
            }

            json.WriteEndArray();
        }

        json.WriteEndObject();
    }

    /// <summary>
    /// How many of <paramref name="take"/>'s messages (at least one) fit a body of <paramref name="maxBytes"/>
    /// as written, and that body's <paramref name="length"/>.
    /// </summary>
    public static int Fit(WindowTake take, long ack, int maxBytes, out long length)
    {
        var scratch = new ArrayBufferWriter<byte>(1024);
        using var measure = new Utf8JsonWriter(scratch);
        long envelope = Envelope(measure, scratch, take, take.AckAfter(take.Count, ack)); // the longest ack
        long messages = 0;
        int count = 0;
        for (; count < take.Count; count++)
        {
            scratch.ResetWrittenCount();
            measure.Reset(scratch);
            Write(measure, take.Frames[count].Frame, take.FirstSequence + count, take.Frames[count].Sid);
            measure.Flush();
            long next = messages + scratch.WrittenCount + (count > 0 ? 1 : 0); // a comma between messages
            if (count > 0 && envelope + next > maxBytes)
            {
                break;
            }

            messages = next;
        }

        length = messages + Envelope(measure, scratch, take, take.AckAfter(count, ack));
        return count;
    }

    /// <summary>The body of the first <paramref name="count"/> messages of <paramref name="take"/>, streamed.</summary>
    public static async Task WriteAsync(PipeWriter output, WindowTake take, int count, long ack)
    {
        var json = new Utf8JsonWriter(output);
        await using ConfiguredAsyncDisposable disposeJson = json.ConfigureAwait(false);
        json.WriteStartObject();
        json.WriteStartArray("messages"u8);
        for (int i = 0; i < count; i++)
        {
            Write(json, take.Frames[i].Frame, take.FirstSequence + i, take.Frames[i].Sid);
            if (json.BytesPending >= FrameCopy.FlushEvery)
            {
                await json.FlushAsync().ConfigureAwait(false);
            }
        }

        WriteEnd(json, take, take.AckAfter(count, ack));
        await json.FlushAsync().ConfigureAwait(false);
    }

    private static long Envelope(Utf8JsonWriter json, ArrayBufferWriter<byte> scratch, WindowTake take, long ack)
    {
        scratch.ResetWrittenCount();
        json.Reset(scratch);
        json.WriteStartObject();
        json.WriteStartArray("messages"u8);
        WriteEnd(json, take, ack);
        json.Flush();
        return scratch.WrittenCount;
    }

    private static void WriteEnd(Utf8JsonWriter json, WindowTake take, long ack)
    {
        json.WriteEndArray();
        json.WriteNumber("dropped"u8, take.Dropped);
        if (take.Gaps is { Length: > 0 } gaps)
        {
            json.WriteStartArray("gaps"u8);
            foreach (uint sid in gaps)
            {
                json.WriteNumberValue(sid);
            }

            json.WriteEndArray();
        }

        json.WriteNumber("ack"u8, ack);
        json.WriteEndObject();
    }
}
