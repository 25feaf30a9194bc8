using System.Buffers;
using System.Buffers.Binary;
using System.Text;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// The client-to-broker frame vectors of <c>protocol-spec/vectors</c> (spec §12) replayed over real TCP
/// against one broker run with <c>limits.json</c>: each frame is the first after HELLO (Zstd, headers, queue groups and presence negotiated) on a
/// fresh connection, or the first frame of all for <c>hello.json</c>. An invalid vector must close the
/// connection with its <c>error</c>; a valid one must be taken without an ERROR (a valid PUBLISH delivered, as its
/// <c>fields</c> say, to the connection's own <c>&gt;</c>), or answered with the ERROR its <c>broker</c> member names
/// (a well-formed frame the broker refuses: a bad topic, a payload over <c>max_payload</c>); either way the
/// connection stays open and answers the PING after it. Where a frame breaks two rules, spec §8.1 decides, so each vector has one answer.
/// </summary>
public sealed class FrameVectorReplayTests(VectorBroker fixture) : IClassFixture<VectorBroker>
{
    /// <summary>The files of frames a client sends (spec §3); MESSAGE, WELCOME and ERROR are the broker's.</summary>
    private static readonly string[] ClientFiles = ["hello.json", "subscribe.json", "unsubscribe.json", "publish.json", "ping.json", "pong.json", "presence.json"];

    private static readonly Lazy<Dictionary<string, JsonElement>> Cases = new(() =>
    {
        var cases = new Dictionary<string, JsonElement>(StringComparer.Ordinal);
        foreach (string file in ClientFiles)
        {
            JsonElement root = VectorFiles.Load(file);
            foreach (string kind in (string[])["valid", "invalid"])
            {
                foreach (JsonElement c in root.GetProperty(kind).EnumerateArray())
                {
                    cases.Add($"{file} / {kind} / {c.GetProperty("name").GetString()}", c);
                }
            }
        }

        return cases;
    });

    public static TheoryData<string> Ids
    {
        get
        {
            var data = new TheoryData<string>();
            foreach (string id in Cases.Value.Keys)
            {
                data.Add(id);
            }

            return data;
        }
    }

    [Theory]
    [MemberData(nameof(Ids))]
    public async Task The_broker_answers_each_client_frame_vector_as_the_spec_states(string id)
    {
        JsonElement c = Cases.Value[id];
        byte[] bytes = Convert.FromHexString(c.GetProperty("hex").GetString()!);
        bool hello = id.StartsWith("hello.json", StringComparison.Ordinal);
        await using var client = await ProtocolClient.ConnectAsync(fixture.Broker.Port);
        if (!hello)
        {
            await client.HelloAsync("vectors", Capabilities.Zstd | Capabilities.Headers | Capabilities.QueueGroups | Capabilities.Presence);
            await client.SubscribeAsync(uint.MaxValue - 1, ">"); // what a valid PUBLISH routes comes back here
        }

        await client.SendRawAsync(bytes);
        if (c.TryGetProperty("error", out JsonElement error))
        {
            await client.ExpectClosedWithAsync(Enum.Parse<ErrorCode>(error.GetString()!));
            return;
        }

        if (hello)
        {
            Frame welcome = await client.ReadAsync();
            Assert.True(welcome.Type == FrameType.Welcome, $"{id}: expected WELCOME, got {welcome}");
        }

        await client.SendAsync(FrameWriter.WritePing);
        (List<Frame> answers, bool ponged) = await ReadUntilPongOrCloseAsync(client);
        List<ErrorFrame> errors = [.. answers.Where(f => f.Type == FrameType.Error).Select(f => f.Error!.Value)];
        if (c.TryGetProperty("broker", out JsonElement refused))
        {
            // A fatal refusal closes the connection after its ERROR; any other leaves it open to answer the PING.
            ErrorCode expected = Enum.Parse<ErrorCode>(refused.GetString()!);
            Assert.True(errors.Count == 1 && errors[0].Code == expected, $"{id}: expected ERROR {expected}, got {string.Join(", ", answers)}");
            Assert.Equal(ErrorCodes.IsFatal(expected), errors[0].Fatal);
            Assert.True(ponged != errors[0].Fatal, $"{id}: a {(errors[0].Fatal ? "fatal" : "non-fatal")} ERROR {expected}, and the connection {(ponged ? "answered PING" : "closed")}");
            return;
        }

        Assert.True(ponged, $"{id}: the broker closed the connection instead of answering PING after {string.Join(", ", answers)}");
        Assert.True(errors.Count == 0, $"{id}: expected no ERROR, got {string.Join(", ", answers)}");
        if (id.StartsWith("presence.json / valid", StringComparison.Ordinal))
        {
            // Answered with one PRESENCE_REPLY of its request_id and the vector's reply_code (spec §12, §15.3).
            JsonElement fields = c.GetProperty("fields");
            PresenceReplyFrame reply = Assert.Single(answers, f => f.Type == FrameType.PresenceReply).Reply!.Value;
            Assert.Equal(fields.GetProperty("request_id").GetUInt32(), reply.RequestId);
            Assert.Equal(c.TryGetProperty("reply_code", out JsonElement code) ? Enum.Parse<ErrorCode>(code.GetString()!) : ErrorCode.None, reply.Code);
        }

        foreach (Frame message in answers.Where(f => f.Type == FrameType.Message))
        {
            // Every frame the broker sends stays within the max_frame its WELCOME advertised (spec §4.2).
            Assert.True(message.Body!.Length <= VectorBroker.MaxFrame, $"{id}: a MESSAGE of {message.Body.Length} bytes, over max_frame {VectorBroker.MaxFrame}");
        }

        if (id.StartsWith("publish.json / valid", StringComparison.Ordinal))
        {
            // Taken means routed: the connection's own '>' gets it once, as the vector's fields say.
            JsonElement fields = c.GetProperty("fields");
            Frame delivered = Assert.Single(answers, f => f.Type == FrameType.Message);
            Assert.Equal(fields.GetProperty("topic").GetString(), delivered.Topic);
            Assert.Equal(fields.GetProperty("reply_to").GetString() is { Length: > 0 } replyTo ? replyTo : null, delivered.ReplyTo);
            Assert.Equal(Convert.FromHexString(fields.GetProperty("payload").GetString()!), delivered.Payload);
            Assert.Equal((PayloadFlags)fields.GetProperty("flags").GetInt32(), delivered.Flags);
            Dictionary<string, string[]> expectedHeaders = fields.TryGetProperty("headers", out JsonElement headers)
                ? headers.EnumerateObject().ToDictionary(h => h.Name, h => h.Value.EnumerateArray().Select(v => v.GetString()!).ToArray())
                : [];
            Assert.Equal(expectedHeaders, (delivered.Headers ?? []).ToDictionary(h => h.Key, h => h.Value));
        }
    }

    [Fact]
    public async Task Welcome_advertises_max_payload_and_a_payload_of_that_size_arrives_within_max_frame()
    {
        await using var client = await ProtocolClient.ConnectAsync(fixture.Broker.Port);
        WelcomeFrame welcome = await client.HelloAsync();
        Assert.Equal((ulong)VectorBroker.MaxFrame, welcome.Limits["max_frame"]);
        Assert.Equal((ulong)VectorBroker.MaxPayload, welcome.Limits["max_payload"]);
        Assert.Equal(ProtocolConstants.MaxPayload(VectorBroker.MaxFrame, VectorBroker.MaxTopic), VectorBroker.MaxPayload);

        // The longest topic and reply_to, in the widest encodings a client may use, around max_payload bytes.
        string topic = new('t', VectorBroker.MaxTopic);
        string replyTo = "_INBOX." + new string('r', VectorBroker.MaxTopic - 7);
        await client.SubscribeAsync(1, topic);
        await client.SendAsync(w => WideEnvelope(w, topic, replyTo, new byte[VectorBroker.MaxPayload]));
        List<Frame> delivered = await client.PingPongAsync();
        Frame message = Assert.Single(delivered);
        Assert.Equal(VectorBroker.MaxPayload, message.Payload!.Length);
        Assert.True(message.Body!.Length <= VectorBroker.MaxFrame, $"MESSAGE of {message.Body.Length} bytes, over max_frame {VectorBroker.MaxFrame}");

        // One byte more is refused, though the PUBLISH itself fits in max_frame.
        await client.PublishAsync("t", new byte[VectorBroker.MaxPayload + 1]);
        ErrorFrame error = await client.ExpectClosedWithAsync(ErrorCode.FrameTooLarge);
        Assert.Contains("max_payload", error.Message, StringComparison.Ordinal);
    }

    /// <summary>PUBLISH with str32 topic and reply_to, uint64 flags and a bin32 payload: the most bytes around a payload.</summary>
    private static void WideEnvelope(IBufferWriter<byte> output, string topic, string replyTo, byte[] payload)
    {
        byte[] body = [0x95, (byte)FrameType.Publish, .. Wide(0xdb, Encoding.UTF8.GetBytes(topic)), .. Wide(0xdb, Encoding.UTF8.GetBytes(replyTo)), 0xcf, 0, 0, 0, 0, 0, 0, 0, 0, .. Wide(0xc6, payload)];
        BinaryPrimitives.WriteInt32BigEndian(output.GetSpan(4), body.Length);
        output.Advance(4);
        output.Write(body);

        static byte[] Wide(byte marker, byte[] value)
        {
            byte[] item = new byte[5 + value.Length];
            item[0] = marker;
            BinaryPrimitives.WriteInt32BigEndian(item.AsSpan(1), value.Length);
            value.CopyTo(item, 5);
            return item;
        }
    }

    /// <summary>The frames before PONG, and whether PONG came (false: the connection closed first).</summary>
    private static async Task<(List<Frame> Frames, bool Ponged)> ReadUntilPongOrCloseAsync(ProtocolClient client)
    {
        var frames = new List<Frame>();
        while (await client.TryReadAsync() is { } frame)
        {
            if (frame.Type == FrameType.Pong)
            {
                return (frames, true);
            }

            frames.Add(frame);
        }

        return (frames, false);
    }
}
