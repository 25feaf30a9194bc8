using System.Buffers;
using System.Buffers.Binary;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>
/// Runs <c>protocol-spec/vectors/longpoll.json</c> (longpoll.md) through the shared codec: binary poll bodies
/// through <see cref="FrameReader"/> and <see cref="FrameDecoder"/> (whole, split at every byte, one byte per
/// segment), JSON poll bodies against their binary twins (loss marks included: <c>Herald-Dropped</c>, <c>Herald-Gaps</c>
/// and the ack that moves past them), poll answers a client must refuse, and frames publish bodies. The <c>requests</c> cases
/// are replayed over HTTP against the real broker by Herald.Broker.Tests (<c>LongPollRequestVectorTests</c>);
/// here only their shape is checked, and that they cover what the broker must refuse.
/// </summary>
public class LongPollVectorTests
{
    private static readonly UTF8Encoding StrictUtf8 = new(encoderShouldEmitUTF8Identifier: false, throwOnInvalidBytes: true);

    private static readonly string[] Sections =
    [
        LongPollVectors.PollBinary, LongPollVectors.PollJson, LongPollVectors.PollRefused, LongPollVectors.Requests, LongPollVectors.FramesValid, LongPollVectors.FramesInvalid,
    ];

    private static int MaxFrame => VectorCatalog.MaxFrame;

    [Fact]
    public void File_has_every_section_with_unique_names_and_an_empty_poll()
    {
        Assert.True(LongPollVectors.MaxTopicLength > 0);
        Assert.Equal(LongPollVectors.FramesMediaType, LongPollVectors.Root.GetProperty("framesBody").GetProperty("contentType").GetString());
        foreach (string section in Sections)
        {
            IReadOnlyList<JsonElement> cases = LongPollVectors.Cases(section);
            Assert.NotEmpty(cases);
            string[] names = [.. cases.Select(c => c.GetProperty("name").GetString()!)];
            Assert.Equal(names.Length, names.Distinct(StringComparer.Ordinal).Count());
        }

        Assert.Contains(LongPollVectors.Cases(LongPollVectors.PollBinary), c => c.GetProperty("messages").GetArrayLength() == 0 && c.GetProperty("hex").GetString()!.Length == 0);
        Assert.Contains(LongPollVectors.Cases(LongPollVectors.PollBinary), c => c.GetProperty("messages").GetArrayLength() > 1);
    }

    [Fact]
    public void Every_poll_has_a_binary_and_a_json_case_of_the_same_name()
    {
        string[] binary = [.. LongPollVectors.Cases(LongPollVectors.PollBinary).Select(c => c.GetProperty("name").GetString()!)];
        string[] json = [.. LongPollVectors.Cases(LongPollVectors.PollJson).Select(c => c.GetProperty("name").GetString()!)];

        Assert.Equal(binary, json);
    }

    [Theory]
    [MemberData(nameof(LongPollVectors.PollBinaryIds), MemberType = typeof(LongPollVectors))]
    public void Poll_binary_body_decodes_to_exactly_its_messages(CaseName id)
    {
        JsonElement c = LongPollVectors.Get(id);
        byte[] body = LongPollVectors.Hex(c);
        JsonElement[] messages = [.. c.GetProperty("messages").EnumerateArray()];
        JsonElement headers = c.GetProperty("headers");
        AssertHeaderNames(headers);
        long first = Header(headers, "Herald-First-Sequence");
        long ack = c.GetProperty("ack").GetInt64();
        uint[] gaps = Gaps(headers);

        (List<DecodedFrame> frames, string end) = ReadAll(Sequences.Whole(body));

        Assert.Equal(Transcript.NeedMoreData(0), end);
        Assert.Equal(Header(headers, "Herald-Count"), frames.Count);
        Assert.Equal(messages.Length, frames.Count);
        Assert.True(first > ack, "The first sequence of a poll is above its ack (an empty poll's is ack + 1).");
        Assert.True((Header(headers, "Herald-Dropped") == 0 && gaps.Length == 0) || first > ack + 1, "A loss takes a sequence number (a dropped message's or a loss mark's) between ack and the first.");
        Assert.Equal([.. gaps.Order().Distinct()], gaps); // longpoll §2: the broker lists each sid once, in order
        for (int i = 0; i < messages.Length; i++)
        {
            Assert.Equal(first + i, messages[i].GetProperty("seq").GetInt64());
            Assert.Equal(FrameType.Message, frames[i].Type);
            Assert.Equal(FrameModel.Describe(LongPollVectors.Frame(messages[i])), FrameModel.Describe(frames[i]));
        }
    }

    [Theory]
    [MemberData(nameof(LongPollVectors.PollBinaryIds), MemberType = typeof(LongPollVectors))]
    public void Poll_binary_body_gives_the_same_answer_split_at_every_byte_and_one_byte_per_segment(CaseName id)
    {
        JsonElement c = LongPollVectors.Get(id);
        byte[] body = LongPollVectors.Hex(c);
        string expected = string.Concat(c.GetProperty("messages").EnumerateArray().Select(m => Transcript.Frame(LongPollVectors.Frame(m)))) + Transcript.NeedMoreData(0);

        AssertSameEverySplit(body, expected);
    }

    [Theory]
    [MemberData(nameof(LongPollVectors.PollBinaryIds), MemberType = typeof(LongPollVectors))]
    public void Poll_binary_body_is_the_bytes_the_tcp_transport_sends(CaseName id)
    {
        JsonElement c = LongPollVectors.Get(id);
        byte[] body = LongPollVectors.Hex(c);
        var output = new ArrayBufferWriter<byte>();

        int offset = 0;
        foreach (JsonElement m in c.GetProperty("messages").EnumerateArray())
        {
            var frame = (PublishFrame)LongPollVectors.Frame(m).Frame!;
            FrameWriter.WriteMessage(output, frame.Sid, frame.Topic.ToArray(), frame.ReplyTo?.ToArray(), frame.Flags, frame.Payload.ToArray(), frame.Headers.ToArray());

            // README §4.6: sid always uint32 (0xce) at frame offset 7; seven elements when the message has headers (§4.9).
            Assert.Equal(frame.HasHeaders ? 0x97 : 0x96, body[offset + 4]);
            Assert.Equal((byte)FrameType.Message, body[offset + 5]);
            Assert.Equal(MessagePack.MessagePackCode.UInt32, body[offset + 6]);
            Assert.Equal(frame.Sid, BinaryPrimitives.ReadUInt32BigEndian(body.AsSpan(offset + ProtocolConstants.MessageSidOffset)));
            offset = output.WrittenCount;
        }

        Assert.Equal(Convert.ToHexStringLower(body), Convert.ToHexStringLower(output.WrittenSpan));
    }

    [Theory]
    [MemberData(nameof(LongPollVectors.PollJsonIds), MemberType = typeof(LongPollVectors))]
    public void Poll_json_body_says_what_the_binary_body_says(CaseName id)
    {
        JsonElement json = LongPollVectors.Get(id);
        JsonElement binary = LongPollVectors.Find(LongPollVectors.PollBinary, json.GetProperty("name").GetString()!);
        JsonElement body = json.GetProperty("body");
        JsonElement headers = binary.GetProperty("headers");
        JsonElement[] expected = [.. binary.GetProperty("messages").EnumerateArray()];
        JsonElement[] actual = [.. body.GetProperty("messages").EnumerateArray()];
        long ack = json.GetProperty("ack").GetInt64();

        uint[] gaps = Gaps(headers);
        long dropped = Header(headers, "Herald-Dropped");

        Assert.Equal(binary.GetProperty("ack").GetInt64(), ack);
        string[] bodyMembers = gaps.Length > 0 ? ["ack", "dropped", "gaps", "messages"] : ["ack", "dropped", "messages"];
        Assert.Equal(bodyMembers, body.EnumerateObject().Select(p => p.Name).Order(StringComparer.Ordinal));
        Assert.Equal(dropped, body.GetProperty("dropped").GetInt64());
        uint[] jsonGaps = body.TryGetProperty("gaps", out JsonElement g) ? [.. g.EnumerateArray().Select(s => s.GetUInt32())] : [];
        Assert.Equal(gaps, jsonGaps);
        Assert.Equal(expected.Length, actual.Length);

        // ack: Herald-First-Sequence + Herald-Count - 1 (longpoll §2.1): the last sequence returned; with no message,
        // the request's own ack (an empty poll) or, when the answer reports loss marks, the sequence just past them.
        long nextAck = Header(headers, "Herald-First-Sequence") + Header(headers, "Herald-Count") - 1;
        Assert.Equal(nextAck, body.GetProperty("ack").GetInt64());
        if (actual.Length > 0)
        {
            Assert.Equal(actual[^1].GetProperty("seq").GetInt64(), nextAck);
        }
        else
        {
            Assert.True(dropped == 0 && gaps.Length == 0 ? nextAck == ack : nextAck > ack, "An answer of loss marks alone moves the ack past them; an empty one keeps it.");
        }

        for (int i = 0; i < expected.Length; i++)
        {
            JsonElement e = expected[i];
            JsonElement a = actual[i];
            byte[] payload = LongPollVectors.Hex(e, "payload");
            string? text = TryStrictUtf8(payload);
            string[] members = text is null ? ["seq", "sid", "topic", "replyTo", "payload"] : ["seq", "sid", "topic", "replyTo", "payload", "text"];
            if (e.TryGetProperty("headers", out JsonElement expectedHeaders))
            {
                members = [.. members, "headers"]; // longpoll §2.2: present exactly when the message has a header block, as a JSON object
                Assert.Equal(JsonSerializer.Serialize(expectedHeaders), JsonSerializer.Serialize(a.GetProperty("headers")));
            }


            Assert.Equal(members.Order(StringComparer.Ordinal), a.EnumerateObject().Select(p => p.Name).Order(StringComparer.Ordinal));
            Assert.Equal(e.GetProperty("seq").GetInt64(), a.GetProperty("seq").GetInt64());
            Assert.Equal(e.GetProperty("sid").GetUInt32(), a.GetProperty("sid").GetUInt32());
            Assert.Equal(e.GetProperty("topic").GetString(), a.GetProperty("topic").GetString());
            Assert.Equal(e.GetProperty("replyTo").ValueKind, a.GetProperty("replyTo").ValueKind);
            Assert.Equal(e.GetProperty("replyTo").ToString(), a.GetProperty("replyTo").ToString());
            Assert.Equal(Convert.ToBase64String(payload), a.GetProperty("payload").GetString());
            Assert.Equal(payload, a.GetProperty("payload").GetBytesFromBase64());
            if (text is not null)
            {
                Assert.Equal(text, a.GetProperty("text").GetString());
            }
        }
    }

    [Fact]
    public void Polls_cover_loss_marks_with_and_without_messages()
    {
        (JsonElement Binary, JsonElement Json)[] polls = [.. LongPollVectors.Cases(LongPollVectors.PollBinary)
            .Select(b => (b, LongPollVectors.Find(LongPollVectors.PollJson, b.GetProperty("name").GetString()!).GetProperty("body")))];
        static bool NoMessage((JsonElement Binary, JsonElement Json) p) => p.Binary.GetProperty("messages").GetArrayLength() == 0;
        static bool Moves((JsonElement Binary, JsonElement Json) p) => p.Json.GetProperty("ack").GetInt64() > p.Binary.GetProperty("ack").GetInt64();

        Assert.Contains(polls, p => Gaps(p.Binary.GetProperty("headers")).Length > 0 && NoMessage(p) && Moves(p));
        Assert.Contains(polls, p => Gaps(p.Binary.GetProperty("headers")).Length > 0 && !NoMessage(p));
        Assert.Contains(polls, p => Gaps(p.Binary.GetProperty("headers")).Length > 1);
        Assert.Contains(polls, p => Header(p.Binary.GetProperty("headers"), "Herald-Dropped") > 0 && Gaps(p.Binary.GetProperty("headers")).Length == 0 && NoMessage(p) && Moves(p));
        Assert.Contains(polls, p => NoMessage(p) && !Moves(p));
    }

    [Theory]
    [MemberData(nameof(LongPollVectors.PollRefusedIds), MemberType = typeof(LongPollVectors))]
    public void Poll_refused_breaks_only_the_header_it_names(CaseName id)
    {
        JsonElement c = LongPollVectors.Get(id);
        JsonElement headers = c.GetProperty("headers");
        string named = c.GetProperty("header").GetString()!;
        byte[] body = LongPollVectors.Hex(c);

        Assert.Equal("MalformedFrame", c.GetProperty("error").GetString());
        AssertHeaderNames(headers);
        foreach (JsonProperty header in headers.EnumerateObject())
        {
            string value = header.Value.GetString()!;
            bool valid = header.Name == "Herald-Gaps" ? LongPollVectors.Gaps(value) is not null : LongPollVectors.IsNumber(value);
            Assert.True(valid != (header.Name == named), $"{header.Name}: '{value}' is {(valid ? "valid" : "malformed")}.");
        }

        // The rest is a valid answer: the body holds Herald-Count whole MESSAGE frames, numbered above the ack.
        (List<DecodedFrame> frames, string end) = ReadAll(Sequences.Whole(body));
        Assert.Equal(Transcript.NeedMoreData(0), end);
        Assert.Equal(Header(headers, "Herald-Count"), frames.Count);
        Assert.All(frames, f => Assert.Equal(FrameType.Message, f.Type));
        Assert.True(Header(headers, "Herald-First-Sequence") > c.GetProperty("ack").GetInt64());
    }

    [Fact]
    public void Refused_polls_cover_a_sid_that_is_not_a_number_sid_0_and_a_malformed_dropped_count()
    {
        string[] gaps = [.. LongPollVectors.Cases(LongPollVectors.PollRefused).Where(c => c.GetProperty("header").GetString() == "Herald-Gaps")
            .Select(c => c.GetProperty("headers").GetProperty("Herald-Gaps").GetString()!)];

        Assert.Contains("0", gaps);
        Assert.Contains(gaps, g => g.Any(char.IsAsciiLetter));
        Assert.Contains(gaps, g => g.Length == 0);
        Assert.Contains(LongPollVectors.Cases(LongPollVectors.PollRefused), c => c.GetProperty("header").GetString() == "Herald-Dropped");
    }

    [Fact]
    public void Poll_json_text_rule_is_exercised_both_ways()
    {
        JsonElement[] messages = [.. LongPollVectors.Cases(LongPollVectors.PollJson).SelectMany(c => c.GetProperty("body").GetProperty("messages").EnumerateArray())];

        Assert.Contains(messages, m => m.TryGetProperty("text", out _));
        Assert.Contains(messages, m => !m.TryGetProperty("text", out _));
        Assert.Contains(messages, m => m.TryGetProperty("text", out JsonElement t) && t.GetString()!.Length == 0);
    }

    [Theory]
    [MemberData(nameof(LongPollVectors.FramesValidIds), MemberType = typeof(LongPollVectors))]
    public void Valid_frames_body_is_only_publish_frames(CaseName id)
    {
        JsonElement c = LongPollVectors.Get(id);
        byte[] body = LongPollVectors.Hex(c);
        DecodedFrame[] expected = [.. c.GetProperty("frames").EnumerateArray().Select(LongPollVectors.Frame)];

        (List<DecodedFrame> frames, string end) = ReadAll(Sequences.Whole(body));

        Assert.Equal(202, c.GetProperty("status").GetInt32());
        Assert.Equal(Transcript.NeedMoreData(0), end);
        Assert.NotEmpty(frames);
        Assert.Equal(frames.Count, c.GetProperty("routed").GetInt32());
        Assert.All(frames, f => Assert.Equal(FrameType.Publish, f.Type));
        Assert.Equal(expected.Select(f => FrameModel.Describe(f)), frames.Select(f => FrameModel.Describe(f)));
        Assert.All(frames, f => Assert.Equal(ErrorCode.None, TopicError((PublishFrame)f.Frame!)));

        var output = new ArrayBufferWriter<byte>();
        foreach (DecodedFrame f in expected)
        {
            FrameModel.Write(f, output);
        }

        Assert.Equal(Convert.ToHexStringLower(body), Convert.ToHexStringLower(output.WrittenSpan));
        AssertSameEverySplit(body, string.Concat(expected.Select(Transcript.Frame)) + Transcript.NeedMoreData(0));
    }

    [Theory]
    [MemberData(nameof(LongPollVectors.FramesInvalidIds), MemberType = typeof(LongPollVectors))]
    public void Invalid_frames_body_fails_as_stated(CaseName id)
    {
        JsonElement c = LongPollVectors.Get(id);
        byte[] body = LongPollVectors.Hex(c);
        DecodedFrame[] expected = [.. c.GetProperty("frames").EnumerateArray().Select(LongPollVectors.Frame)];
        JsonElement failure = c.GetProperty("failure");
        string code = c.GetProperty("code").GetString()!;

        Assert.Equal(400, c.GetProperty("status").GetInt32());
        Assert.Equal(400, LongPollVectors.ProblemStatus[code]);
        Assert.Equal(0, c.GetProperty("routed").GetInt32()); // longpoll §1.3: all are routed, or none

        (List<DecodedFrame> frames, string end) = ReadAll(Sequences.Whole(body));
        Assert.Equal(expected.Select(f => FrameModel.Describe(f)), frames.Select(f => FrameModel.Describe(f)));

        string expectedEnd;
        switch (failure.GetProperty("kind").GetString())
        {
            case "incomplete":
                // FrameReader returns false with bytes left over once the whole body has been seen.
                long leftover = failure.GetProperty("leftover").GetInt64();
                Assert.True(leftover > 0);
                expectedEnd = Transcript.NeedMoreData(leftover);
                Assert.Equal("MalformedRequest", code);
                break;
            case "empty":
                Assert.Empty(body);
                expectedEnd = Transcript.NeedMoreData(0);
                Assert.Equal("MalformedRequest", code);
                break;
            case "wrongType":
                FrameType wrong = Enum.Parse<FrameType>(failure.GetProperty("type").GetString()!, ignoreCase: true);
                Assert.NotEqual(FrameType.Publish, wrong);
                Assert.Contains(frames, f => f.Type == wrong);
                Assert.Equal(wrong, frames.First(f => f.Type != FrameType.Publish).Type);
                expectedEnd = Transcript.NeedMoreData(0);
                Assert.Equal("MalformedRequest", code);
                break;
            case "error":
                expectedEnd = Transcript.Error(Enum.Parse<ErrorCode>(failure.GetProperty("error").GetString()!));
                Assert.Equal("MalformedRequest", code);
                break;
            case "topic":
                Assert.All(frames, f => Assert.Equal(FrameType.Publish, f.Type));
                ErrorCode first = frames.Select(f => TopicError((PublishFrame)f.Frame!)).First(e => e != ErrorCode.None);
                Assert.Equal(failure.GetProperty("error").GetString(), first.ToString());
                Assert.Equal(code, first.ToString());
                expectedEnd = Transcript.NeedMoreData(0);
                break;
            default:
                throw new InvalidDataException($"{id}: unknown failure kind {failure}.");
        }

        Assert.Equal(expectedEnd, end);
        AssertSameEverySplit(body, string.Concat(expected.Select(Transcript.Frame)) + expectedEnd);
    }

    [Fact]
    public void Invalid_frames_bodies_cover_truncation_and_a_subscribe_frame()
    {
        IReadOnlyList<JsonElement> invalid = LongPollVectors.Cases(LongPollVectors.FramesInvalid);

        Assert.Contains(invalid, c => c.GetProperty("failure").GetProperty("kind").GetString() == "incomplete");
        Assert.Contains(invalid, c => c.GetProperty("failure").GetProperty("kind").GetString() == "wrongType"
            && c.GetProperty("failure").GetProperty("type").GetString() == "SUBSCRIBE");
    }

    [Theory]
    [MemberData(nameof(LongPollVectors.RequestIds), MemberType = typeof(LongPollVectors))]
    public void Request_case_is_well_formed(CaseName id)
    {
        JsonElement c = LongPollVectors.Get(id);
        string[] known = ["name", "endpoint", "method", "path", "contentType", "body", "given", "status", "code", "note"];
        Assert.All(c.EnumerateObject(), p => Assert.Contains(p.Name, known));

        string endpoint = c.GetProperty("endpoint").GetString()!;
        string body = c.GetProperty("body").GetString()!;
        int status = c.GetProperty("status").GetInt32();
        string? code = c.GetProperty("code").GetString();
        JsonElement contentType = c.GetProperty("contentType");
        string[] given = c.TryGetProperty("given", out JsonElement g) ? [.. g.EnumerateArray().Select(x => x.GetString()!)] : [];
        Assert.True(given.Length == 0 || endpoint == "subscribe", "Only a subscribe case is given earlier subscriptions.");
        Assert.All(given, b => Assert.True(IsJson(b), "A given subscription is a JSON body."));

        string path = c.GetProperty("path").GetString()!;
        if (endpoint == "presence")
        {
            // GET /presence?topic=&limit=&cursor= (longpoll.md): a query, no body
            Assert.Equal("GET", c.GetProperty("method").GetString());
            Assert.StartsWith("/presence", path, StringComparison.Ordinal);
            Assert.True(path == "/presence" || path.StartsWith("/presence?", StringComparison.Ordinal), $"{id}: {path}");
            Assert.Equal(JsonValueKind.Null, contentType.ValueKind);
            Assert.Equal("", body);
        }
        else
        {
            Assert.Equal("POST", c.GetProperty("method").GetString());
            Assert.Equal(endpoint switch
            {
                "create" => "/poll/sessions",
                "subscribe" => "/poll/sessions/{session}/subscriptions",
                _ => throw new InvalidDataException($"{id}: unknown endpoint {endpoint}."),
            }, path);
        }

        Assert.True(contentType.ValueKind == JsonValueKind.Null || contentType.GetString() == "application/json");
        Assert.True(contentType.ValueKind == JsonValueKind.String || body.Length == 0, "A body is sent as application/json.");
        if (code is null)
        {
            Assert.Equal(endpoint switch { "create" => 201, "presence" => 200, _ => 204 }, status);
        }
        else
        {
            Assert.Equal(LongPollVectors.ProblemStatus[code], status);
        }
    }

    [Fact]
    public void Requests_cover_what_the_broker_must_refuse()
    {
        IReadOnlyList<JsonElement> requests = LongPollVectors.Cases(LongPollVectors.Requests);
        string?[] codes = [.. requests.Select(c => c.GetProperty("code").GetString())];

        foreach (string code in (string[])["MalformedRequest", "InvalidTopic", "TopicTooLong", "DuplicateSubscription"])
        {
            Assert.Contains(code, codes);
        }

        Assert.Contains(requests, c => c.GetProperty("endpoint").GetString() == "create" && c.GetProperty("status").GetInt32() == 201);
        Assert.Contains(requests, c => c.GetProperty("endpoint").GetString() == "subscribe" && c.GetProperty("status").GetInt32() == 204);
        Assert.Contains(requests, c => c.GetProperty("status").GetInt32() == 400 && !IsJson(c.GetProperty("body").GetString()!));
    }

    private static bool TryParse(string body, out JsonElement root)
    {
        try
        {
            using JsonDocument doc = JsonDocument.Parse(body);
            root = doc.RootElement.Clone();
            return true;
        }
        catch (JsonException)
        {
            root = default;
            return false;
        }
    }

    private static bool IsJson(string body) => TryParse(body, out _);

    /// <summary>What the broker refuses in a PUBLISH's topic or reply_to (README §4.5, §5), at limits.json's max_topic.</summary>
    private static ErrorCode TopicError(PublishFrame frame)
    {
        byte[] topic = frame.Topic.ToArray();
        ErrorCode error = Topic.ValidateName(topic, LongPollVectors.MaxTopicLength);
        if (error != ErrorCode.None)
        {
            return error;
        }

        if (Topic.IsReserved(topic))
        {
            return ErrorCode.ReservedTopic;
        }

        return frame.ReplyTo is { } r ? Topic.ValidateName(r.ToArray(), LongPollVectors.MaxTopicLength) : ErrorCode.None;
    }

    /// <summary>
    /// The canonical read loop over a whole body: every frame <see cref="FrameReader"/> yields, then how it stopped
    /// (as <see cref="Transcript"/> writes it: need more data with the bytes left, or the error).
    /// </summary>
    private static (List<DecodedFrame> Frames, string End) ReadAll(ReadOnlySequence<byte> buffer)
    {
        var frames = new List<DecodedFrame>();
        try
        {
            while (FrameReader.TryReadFrame(ref buffer, MaxFrame, out ReadOnlySequence<byte> body))
            {
                frames.Add(FrameModel.Decode(body));
            }

            return (frames, Transcript.NeedMoreData(buffer.Length));
        }
        catch (ProtocolException e)
        {
            return (frames, Transcript.Error(e.Code));
        }
    }

    private static void AssertSameEverySplit(byte[] body, string expected)
    {
        Assert.Equal(expected, Transcript.Of(Sequences.Whole(body), MaxFrame));
        Assert.Equal(expected, Transcript.Of(Sequences.OneBytePerSegment(body), MaxFrame));
        for (int at = 0; at <= body.Length; at++)
        {
            string actual = Transcript.Of(Sequences.SplitAt(body, at), MaxFrame);
            Assert.True(actual == expected, $"Split at byte {at}:\nexpected {expected}\nactual   {actual}");
        }
    }

    private static long Header(JsonElement headers, string name) =>
        long.Parse(headers.GetProperty(name).GetString()!, NumberStyles.None, CultureInfo.InvariantCulture);

    /// <summary>The sids of a valid answer's <c>Herald-Gaps</c> (longpoll §2.1), or none when it has no such header.</summary>
    private static uint[] Gaps(JsonElement headers) =>
        headers.TryGetProperty("Herald-Gaps", out JsonElement value)
            ? LongPollVectors.Gaps(value.GetString()!) ?? throw new InvalidDataException($"Herald-Gaps '{value}' is malformed.")
            : [];

    /// <summary>The headers of a binary poll answer (longpoll §2.1), in the order the broker sets them; <c>Herald-Gaps</c> only when present.</summary>
    private static void AssertHeaderNames(JsonElement headers)
    {
        string[] names = headers.TryGetProperty("Herald-Gaps", out _)
            ? ["Herald-First-Sequence", "Herald-Count", "Herald-Dropped", "Herald-Gaps"]
            : ["Herald-First-Sequence", "Herald-Count", "Herald-Dropped"];
        Assert.Equal(names, headers.EnumerateObject().Select(h => h.Name));
    }

    private static string? TryStrictUtf8(byte[] bytes)
    {
        try
        {
            return StrictUtf8.GetString(bytes);
        }
        catch (DecoderFallbackException)
        {
            return null;
        }
    }
}
