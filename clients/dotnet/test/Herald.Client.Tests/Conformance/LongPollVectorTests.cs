using System.Buffers;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using Herald.Client.Protocol;
using Herald.Client.Tests.Infrastructure;
using Herald.Client.Transports.LongPoll;
using Herald.Protocol;

namespace Herald.Client.Tests.Conformance;

/// <summary>
/// protocol-spec/vectors/longpoll.json as a client sees it: every binary poll body (pollBinary) through
/// the client's poll reader, with its headers, whole, split at every byte and byte by byte, and the ack
/// the next poll sends, the loss it reports (<c>Herald-Dropped</c>, <c>Herald-Gaps</c>); every poll answer the
/// client must refuse (pollRefused); every valid frames publish body (framesBody.valid) through the client's encoder;
/// and the client's own create and subscribe bodies sent to the real broker, which must take them and act
/// on every member (and whose accepted subscribe bodies in the requests section use the same member names).
/// </summary>
public class LongPollVectorTests
{
    private static readonly Lazy<JsonElement> Root = new(() => Vectors.File("longpoll.json"));

    public static TheoryData<CaseName> PollBinaryIds => Ids("pollBinary");

    public static TheoryData<CaseName> PollRefusedIds => Ids("pollRefused");

    public static TheoryData<CaseName> FramesValidIds => Ids("framesBody", "valid");

    [Fact]
    public void The_file_has_poll_bodies_including_an_empty_one_and_valid_frames_bodies()
    {
        JsonElement[] polls = [.. Root.Value.GetProperty("pollBinary").EnumerateArray()];

        Assert.NotEmpty(polls);
        Assert.Contains(polls, p => p.GetProperty("messages").GetArrayLength() == 0);
        Assert.Contains(polls, p => p.GetProperty("messages").GetArrayLength() > 1);
        Assert.Equal(LongPollConnection.FramesMediaType, Root.Value.GetProperty("framesBody").GetProperty("contentType").GetString());
        Assert.NotEmpty(Root.Value.GetProperty("framesBody").GetProperty("valid").EnumerateArray());
    }

    [Theory]
    [MemberData(nameof(PollBinaryIds))]
    public void Poll_body_yields_its_messages_with_their_sequence_numbers(CaseName id)
    {
        JsonElement c = Case(id);
        byte[] body = Convert.FromHexString(c.GetProperty("hex").GetString()!);
        PollPage page = Page(c.GetProperty("headers"));
        string expected = string.Concat(c.GetProperty("messages").EnumerateArray().Select(m =>
            $"{m.GetProperty("seq").GetInt64()}: " + FrameText.Message(
                m.GetProperty("sid").GetUInt32(),
                m.GetProperty("topic").GetString()!,
                m.GetProperty("replyTo").GetString(),
                m.GetProperty("flags").GetUInt32(),
                Convert.FromHexString(m.GetProperty("payload").GetString()!),
                FrameText.Headers(m)) + "\n"));

        Assert.Equal(expected, Read(Sequences.Whole(body), page));
        Assert.Equal(expected, Read(Sequences.OneBytePerSegment(body), page));
        for (int at = 0; at <= body.Length; at++)
        {
            Assert.Equal(expected, Read(Sequences.SplitAt(body, at), page));
        }
    }

    [Theory]
    [MemberData(nameof(PollBinaryIds))]
    public void The_next_poll_acknowledges_what_this_one_returned(CaseName id)
    {
        JsonElement c = Case(id);
        long ack = c.GetProperty("ack").GetInt64();
        PollPage page = Page(c.GetProperty("headers"));
        JsonElement json = Root.Value.GetProperty("pollJson").EnumerateArray().Single(j => j.GetProperty("name").GetString() == c.GetProperty("name").GetString());

        // The JSON twin of the same poll states the ack to send next (longpoll §2.2); the binary one implies it (§2.1).
        Assert.Equal(json.GetProperty("body").GetProperty("ack").GetInt64(), page.NextAck(ack));
        Assert.Equal(json.GetProperty("body").GetProperty("dropped").GetInt64(), page.Dropped);
        uint[] gaps = json.GetProperty("body").TryGetProperty("gaps", out JsonElement g) ? [.. g.EnumerateArray().Select(s => s.GetUInt32())] : [];
        Assert.Equal(gaps, page.Gaps);
    }

    [Theory]
    [MemberData(nameof(PollRefusedIds))]
    public void A_poll_answer_with_a_malformed_loss_header_is_refused(CaseName id)
    {
        JsonElement c = Case(id);
        byte[] body = Convert.FromHexString(c.GetProperty("hex").GetString()!);

        ProtocolException refused = Assert.Throws<ProtocolException>(() =>
            PollBody.Read(new ReadOnlySequence<byte>(body), Page(c.GetProperty("headers")), Vectors.MaxFrame, (long _, in PublishFrame _) => { }));

        Assert.Equal(c.GetProperty("error").GetString(), refused.Code.ToString());
        Assert.Contains(c.GetProperty("header").GetString()!, refused.Message, StringComparison.Ordinal); // refused for that header, not another fault
    }

    [Fact]
    public void A_poll_body_that_disagrees_with_its_headers_or_holds_another_frame_is_refused()
    {
        JsonElement c = Root.Value.GetProperty("pollBinary").EnumerateArray().First(p => p.GetProperty("messages").GetArrayLength() > 1);
        byte[] body = Convert.FromHexString(c.GetProperty("hex").GetString()!);
        PollPage page = Page(c.GetProperty("headers"));

        Assert.Equal(ErrorCode.MalformedFrame, Assert.Throws<ProtocolException>(() => PollBody.Read(new ReadOnlySequence<byte>(body), page with { Count = page.Count + 1 }, Vectors.MaxFrame, (long _, in PublishFrame _) => { })).Code);
        Assert.Equal(ErrorCode.MalformedFrame, Assert.Throws<ProtocolException>(() => PollBody.Read(new ReadOnlySequence<byte>(body[..^1]), page, Vectors.MaxFrame, (long _, in PublishFrame _) => { })).Code);
        byte[] ping = [0, 0, 0, 2, 0x91, 7];
        Assert.Equal(ErrorCode.UnexpectedFrame, Assert.Throws<ProtocolException>(() => PollBody.Read(new ReadOnlySequence<byte>(ping), page with { Count = 1 }, Vectors.MaxFrame, (long _, in PublishFrame _) => { })).Code);
    }

    [Theory]
    [MemberData(nameof(FramesValidIds))]
    public void Frames_publish_body_is_what_the_client_encodes(CaseName id)
    {
        JsonElement c = Case(id);
        var output = new ArrayBufferWriter<byte>();

        foreach (JsonElement f in c.GetProperty("frames").EnumerateArray())
        {
            Assert.Equal("PUBLISH", f.GetProperty("type").GetString());
            byte[] replyTo = f.GetProperty("replyTo").ValueKind == JsonValueKind.Null ? [] : Encoding.UTF8.GetBytes(f.GetProperty("replyTo").GetString()!);
            ClientFrames.Publish(output, Encoding.UTF8.GetBytes(f.GetProperty("topic").GetString()!), replyTo, (PayloadFlags)f.GetProperty("flags").GetUInt32(), Convert.FromHexString(f.GetProperty("payload").GetString()!));
        }

        Assert.Equal(c.GetProperty("hex").GetString(), Convert.ToHexStringLower(output.WrittenSpan));
    }

    [Fact]
    public async Task The_clients_create_and_subscribe_bodies_are_what_the_broker_accepts()
    {
        JsonElement[] requests = [.. Root.Value.GetProperty("requests").EnumerateArray()];
        await using var broker = await TestBroker.StartAsync(o => (o.Limits.MaxFrameBytes, o.Limits.MaxTopicLength) = (Vectors.MaxFrame, Vectors.MaxTopic));
        using var http = new HttpClient { BaseAddress = new Uri(broker.HttpUrl) };
        using JsonContent create = JsonContent.Create(new CreateSessionRequest { Client = "web-1", Zstd = true }, LongPollJsonContext.Default.CreateSessionRequest);
        using JsonContent subscribe = JsonContent.Create(new SubscribeRequest { Sid = 7, Pattern = "prices.*.>", NoEcho = true }, LongPollJsonContext.Default.SubscribeRequest);

        // The broker takes the client's create body, and read it: it offers Zstd because the body asked for it.
        using HttpResponseMessage created = await http.PostAsync("/poll/sessions", create);
        Assert.Equal(HttpStatusCode.Created, created.StatusCode);
        JsonElement session = await created.Content.ReadFromJsonAsync<JsonElement>();
        Assert.True(session.GetProperty("zstd").GetBoolean());
        string path = $"/poll/sessions/{session.GetProperty("session").GetString()}";

        using HttpResponseMessage subscribed = await http.PostAsync($"{path}/subscriptions", subscribe);
        Assert.Equal(HttpStatusCode.NoContent, subscribed.StatusCode);

        // sid, pattern and noEcho as the broker understood them: the session's own publication on a matching
        // topic is not echoed; another's, published after it, arrives under sid 7.
        using (HttpResponseMessage own = await http.PostAsync($"{path}/publish?topic=prices.eur.own", new StringContent("own")))
        {
            Assert.True(own.IsSuccessStatusCode, $"{own.StatusCode}");
        }

        using (HttpResponseMessage other = await http.PostAsync("/poll/publish?topic=prices.eur.spot", new StringContent("spot")))
        {
            Assert.True(other.IsSuccessStatusCode, $"{other.StatusCode}");
        }

        using var poll = new HttpRequestMessage(HttpMethod.Get, $"{path}/messages?ack=0");
        poll.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
        using HttpResponseMessage polled = await http.SendAsync(poll);
        Assert.Equal(HttpStatusCode.OK, polled.StatusCode);
        JsonElement[] messages = [.. (await polled.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("messages").EnumerateArray()];
        Assert.Equal([("prices.eur.spot", 7u)], messages.Select(m => (m.GetProperty("topic").GetString(), m.GetProperty("sid").GetUInt32())));

        // The accepted subscribe bodies of the file use the member names the client writes.
        using JsonDocument s = JsonDocument.Parse(await subscribe.ReadAsStringAsync());
        string[] accepted = [.. requests.Where(r => r.GetProperty("endpoint").GetString() == "subscribe" && r.GetProperty("status").GetInt32() == 204)
            .SelectMany(r => JsonDocument.Parse(r.GetProperty("body").GetString()!).RootElement.EnumerateObject().Select(p => p.Name)).Distinct()];
        Assert.Subset(new HashSet<string>(["sid", "pattern", "noEcho"]), new HashSet<string>(accepted));
        Assert.Subset(new HashSet<string>(s.RootElement.EnumerateObject().Select(p => p.Name)), new HashSet<string>(["sid", "pattern", "noEcho"]));
    }

    private static string Read(ReadOnlySequence<byte> body, PollPage page)
    {
        var text = new StringBuilder();
        PollBody.Read(body, page, Vectors.MaxFrame, (long sequence, in PublishFrame m) =>
            text.Append($"{sequence}: ").Append(FrameText.Message(m.Sid, m.TopicString, m.ReplyToString, (uint)m.Flags, m.Payload.ToArray(), FrameText.Headers(m))).Append('\n'));
        return text.ToString();
    }

    private static PollPage Page(JsonElement headers)
    {
        using var response = new HttpResponseMessage();
        foreach (JsonProperty header in headers.EnumerateObject())
        {
            response.Headers.Add(header.Name, header.Value.GetString());
        }

        return PollPage.FromHeaders(response.Headers);
    }

    private static JsonElement Case(CaseName id)
    {
        string[] parts = id.Value.Split(" / ", 2);
        JsonElement section = parts[0].Split('.').Aggregate(Root.Value, (node, name) => node.GetProperty(name));
        return section.EnumerateArray().Single(c => c.GetProperty("name").GetString() == parts[1]);
    }

    private static TheoryData<CaseName> Ids(params string[] path)
    {
        var data = new TheoryData<CaseName>();
        JsonElement section = path.Aggregate(Root.Value, (node, name) => node.GetProperty(name));
        foreach (JsonElement c in section.EnumerateArray())
        {
            data.Add(new CaseName($"{string.Join('.', path)} / {c.GetProperty("name").GetString()}"));
        }

        return data;
    }
}
