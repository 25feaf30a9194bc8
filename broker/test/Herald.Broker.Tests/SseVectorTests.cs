using System.Buffers;
using System.IO.Pipelines;
using System.Text;
using System.Text.Json;
using Herald.Broker.Delivery;
using Herald.Broker.Transports.Sse;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// <c>protocol-spec/vectors/sse.json</c> (sse.md §2, §3): how a <c>Last-Event-ID</c> is read, and the exact event text
/// one MESSAGE frame becomes in each format, id line included.
/// </summary>
public sealed class SseVectorTests
{
    private static readonly Lazy<JsonElement> Root = new(() => VectorFiles.Load("sse.json"));

    public static TheoryData<string> ValidIds => Names("valid");

    public static TheoryData<string> InvalidIds => Names("invalid");

    /// <summary>A server-made subscription's notices (sse.md §2, spec §4.10): exactly the event text of each vector.</summary>
    [Fact]
    public void A_server_made_subscriptions_notices_are_the_vectors_events()
    {
        foreach (JsonElement notice in Root.Value.GetProperty("notices").EnumerateArray())
        {
            uint sid = notice.GetProperty("sid").GetUInt32();
            string topic = notice.GetProperty("topic").GetString()!;
            MessageBuffer written = notice.GetProperty("kind").GetString() == "subscribed"
                ? SseFormat.Notice("subscribed"u8, sid, topic, "options"u8, null, notice.GetProperty("options").GetUInt32())
                : SseFormat.Notice("unsubscribed"u8, sid, topic, "message"u8, notice.GetProperty("message").GetString(), 0);
            Assert.Equal(notice.GetProperty("event").GetString(), Encoding.UTF8.GetString(written.Span));
            _ = written.Release();
        }
    }

    public static TheoryData<string> Events
    {
        get
        {
            var data = new TheoryData<string>();
            foreach (JsonElement e in Root.Value.GetProperty("events").EnumerateArray())
            {
                data.Add(e.GetProperty("name").GetString()!);
            }

            return data;
        }
    }

    [Theory]
    [MemberData(nameof(ValidIds))]
    public void A_valid_Last_Event_ID_gives_each_topic_its_position(string name)
    {
        JsonElement vector = Find(Root.Value.GetProperty("last_event_ids").GetProperty("valid"), name);
        Assert.True(SseFormat.TryParseId(vector.GetProperty("id").GetString()!, vector.GetProperty("topics").GetInt32(), out StreamPosition?[] positions));
        StreamPosition?[] expected = vector.GetProperty("positions").EnumerateArray()
            .Select(p => p.ValueKind == JsonValueKind.Null ? (StreamPosition?)null : new StreamPosition(p.GetProperty("offset").GetUInt64(), p.GetProperty("epoch").GetString()!))
            .ToArray();
        Assert.Equal(expected, positions);
    }

    [Theory]
    [MemberData(nameof(InvalidIds))]
    public void An_invalid_Last_Event_ID_is_refused(string name)
    {
        JsonElement vector = Find(Root.Value.GetProperty("last_event_ids").GetProperty("invalid"), name);
        Assert.False(SseFormat.TryParseId(vector.GetProperty("id").GetString()!, vector.GetProperty("topics").GetInt32(), out _));
    }

    [Theory]
    [MemberData(nameof(Events))]
    public async Task A_message_becomes_its_event(string name)
    {
        JsonElement vector = Find(Root.Value.GetProperty("events"), name);
        int topics = vector.GetProperty("topics").GetArrayLength();
        bool[] tracked = vector.TryGetProperty("tracked", out JsonElement t) ? t.EnumerateArray().Select(b => b.GetBoolean()).ToArray() : new bool[topics];
        SseDataFormat format = vector.GetProperty("format").GetString() == "base64" ? SseDataFormat.Base64 : SseDataFormat.Json;

        JsonElement message = vector.GetProperty("message");
        byte[] payload = message.TryGetProperty("payload_hex", out JsonElement hex) ? Convert.FromHexString(hex.GetString()!) : Encoding.UTF8.GetBytes(message.GetProperty("payload_utf8").GetString()!);
        byte[] headers = message.TryGetProperty("headers", out JsonElement h)
            ? HeaderBlock.Encode(h.EnumerateArray().Select(kv => new KeyValuePair<string, string[]>(kv[0].GetString()!, kv[1].EnumerateArray().Select(v => v.GetString()!).ToArray())))
            : [];
        var frame = new ArrayBufferWriter<byte>();
        FrameWriter.WriteMessage(frame, 0, Encoding.UTF8.GetBytes(message.GetProperty("topic").GetString()!),
            message.TryGetProperty("reply_to", out JsonElement replyTo) ? Encoding.UTF8.GetBytes(replyTo.GetString()!) : [], PayloadFlags.None, payload, headers);

        using var events = new SseFormat(format, tracked, new StreamPosition?[topics]);
        var pipe = new Pipe();
        MessageBuffer buffer = MessageBuffer.Copy(frame.WrittenSpan);
        events.Write(pipe.Writer, buffer, (uint)vector.GetProperty("sid").GetInt32());
        buffer.Release();
        await pipe.Writer.CompleteAsync();
        ReadResult written = await pipe.Reader.ReadAsync();
        Assert.Equal(vector.GetProperty("event").GetString(), Encoding.UTF8.GetString(written.Buffer));
    }

    private static TheoryData<string> Names(string kind)
    {
        var data = new TheoryData<string>();
        foreach (JsonElement e in Root.Value.GetProperty("last_event_ids").GetProperty(kind).EnumerateArray())
        {
            data.Add(e.GetProperty("name").GetString()!);
        }

        return data;
    }

    private static JsonElement Find(JsonElement list, string name) =>
        list.EnumerateArray().Single(e => e.GetProperty("name").GetString() == name);
}
