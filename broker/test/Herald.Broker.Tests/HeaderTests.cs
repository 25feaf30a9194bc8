using System.Net;
using System.Net.Http.Headers;
using System.Text;
using Herald.Broker.Telemetry;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>
/// Message headers (spec §4.9) over real sockets and real HTTP: carried byte for byte on every transport,
/// only to clients that negotiated them, refused with a clear error when bad (the bystanders carry on).
/// </summary>
public sealed class HeaderTests
{
    private const Capabilities WithHeaders = Capabilities.Headers;

    /// <summary>Multi-valued, non-ASCII, empty, case kept, in an order no sort would give.</summary>
    private static readonly KeyValuePair<string, string[]>[] Sample =
    [
        new("trace-ID", ["0af7651916cd43dd"]),
        new("Accept-Language", ["fr", "en-GB"]),
        new("X-Note", ["héllo wörld ✓", ""]),
    ];

    [Fact]
    public async Task Headers_go_from_tcp_to_tcp_byte_for_byte_in_a_seven_element_message()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await subscriber.SubscribeAsync(1, "orders.>");
        await subscriber.PingPongAsync();

        await publisher.PublishAsync("orders.new", "{}", Sample);

        Frame message = await subscriber.ReadMessageAsync();
        Assert.Equal(("orders.new", "{}"), (message.Topic, message.Text));
        AssertSample(message.Headers);
        Assert.Equal(0x97, message.Body![0]); // fixarray of 7 (spec §4.6)
        byte[] block = HeaderBlock.Encode(Sample);
        Assert.Equal(Convert.ToHexString(block), Convert.ToHexString(message.Body[^block.Length..])); // as published, byte for byte
    }

    [Fact]
    public async Task A_subscriber_without_headers_gets_the_six_element_message_of_the_same_publication()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var plain = await ProtocolClient.ConnectAsync(broker.Port);
        WelcomeFrame plainWelcome = await plain.HelloAsync("plain", Capabilities.NoResponders); // no_responders alone: neither is granted
        await using var aware = await ProtocolClient.ConnectAsync(broker.Port);
        WelcomeFrame awareWelcome = await aware.HelloAsync("aware", Capabilities.Headers | Capabilities.NoResponders);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        Assert.Equal(Capabilities.None, plainWelcome.Capabilities);
        Assert.Equal(Capabilities.Headers | Capabilities.NoResponders, awareWelcome.Capabilities);
        Assert.Equal((64ul, 8192ul), (awareWelcome.Limits["max_headers"], awareWelcome.Limits["max_header_bytes"]));
        await plain.SubscribeAsync(1, "t.>");
        await aware.SubscribeAsync(2, "t.>");
        await plain.PingPongAsync();
        await aware.PingPongAsync();

        await publisher.PublishAsync("t.x", "same payload", Sample);

        Frame without = await plain.ReadMessageAsync();
        Frame with = await aware.ReadMessageAsync();
        Assert.Equal(("t.x", "same payload", 0x96), (without.Topic, without.Text, (int)without.Body![0]));
        Assert.Null(without.Headers);
        Assert.Equal(("t.x", "same payload", 0x97), (with.Topic, with.Text, (int)with.Body![0]));
        AssertSample(with.Headers);
        // Everything before the header block is the same bytes (only the sid differs, spec §4.6).
        Assert.Equal(Convert.ToHexString(without.Body[7..]), Convert.ToHexString(with.Body[7..without.Body.Length])); // body offset 7: after array, type and the uint32 sid
    }

    [Fact]
    public async Task The_zstd_form_carries_the_header_block_uncompressed_and_each_of_four_forms_reaches_its_subscribers()
    {
        await using var broker = await TestBroker.StartAsync();
        (Capabilities Caps, PayloadFlags Flags, bool Headers)[] kinds =
        [
            (Capabilities.Zstd | Capabilities.Headers, PayloadFlags.Zstd, true),
            (Capabilities.Zstd, PayloadFlags.Zstd, false),
            (Capabilities.Headers, PayloadFlags.None, true),
            (Capabilities.None, PayloadFlags.None, false),
        ];
        var subscribers = new List<ProtocolClient>();
        foreach ((Capabilities caps, _, _) in kinds)
        {
            ProtocolClient subscriber = await ProtocolClient.OpenAsync(broker.Port, capabilities: caps);
            await subscriber.SubscribeAsync(1, "big");
            await subscriber.PingPongAsync();
            subscribers.Add(subscriber);
        }

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        byte[] payload = Payloads.Simple(50_000);
        byte[] block = HeaderBlock.Encode(Sample);
        await publisher.SendAsync(w => FrameWriter.WritePublish(w, "big"u8, default, PayloadFlags.None, payload, block));

        for (int i = 0; i < kinds.Length; i++)
        {
            Frame f = await subscribers[i].ReadMessageAsync();
            Assert.Equal(kinds[i].Flags, f.Flags);
            Assert.Equal(payload, kinds[i].Flags == PayloadFlags.Zstd ? new ZstdSharp.Decompressor().Unwrap(f.Payload).ToArray() : f.Payload);
            if (kinds[i].Headers)
            {
                AssertSample(f.Headers);
                Assert.Equal(Convert.ToHexString(block), Convert.ToHexString(f.Body![^block.Length..]));
            }
            else
            {
                Assert.Null(f.Headers);
            }

            await subscribers[i].DisposeAsync();
        }
    }

    [Fact]
    public async Task Headers_reach_long_poll_binary_and_json_and_a_session_without_them_gets_none()
    {
        await using var broker = await TestBroker.StartAsync();
        LongPollClient binary = await LongPollClient.CreateAsync(broker.Http, new { headers = true });
        LongPollClient json = await LongPollClient.CreateAsync(broker.Http, new { headers = true, noResponders = true });
        LongPollClient plain = await LongPollClient.CreateAsync(broker.Http);
        Assert.True(binary.Created.GetProperty("headers").GetBoolean());
        Assert.False(binary.Created.GetProperty("noResponders").GetBoolean());
        Assert.True(json.Created.GetProperty("noResponders").GetBoolean());
        Assert.False(plain.Created.GetProperty("headers").GetBoolean());
        Assert.Equal(64, plain.Created.GetProperty("maxHeaders").GetInt32());
        foreach (LongPollClient session in (LongPollClient[])[binary, json, plain])
        {
            await session.SubscribeAsync(1, "feed.>");
        }

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await publisher.PublishAsync("feed.a", "hello", Sample);
        await publisher.PingPongAsync();

        AssertSample(Assert.Single((await binary.PollAsync(0)).Messages).Headers);
        PollResult asJson = await json.PollAsync(0, json: true);
        AssertSample(Assert.Single(asJson.Messages).Headers);
        Assert.Equal("""{"trace-ID":["0af7651916cd43dd"],"Accept-Language":["fr","en-GB"],"X-Note":["h\u00E9llo w\u00F6rld \u2713",""]}""", asJson.Json!.Value.GetProperty("messages")[0].GetProperty("headers").GetRawText());
        PollResult plainJson = await plain.PollAsync(0, json: true);
        Assert.False(plainJson.Json!.Value.GetProperty("messages")[0].TryGetProperty("headers", out _));
        Assert.Equal("hello", Assert.Single(plainJson.Messages).Text);
    }

    [Fact]
    public async Task Long_poll_publishes_headers_to_tcp_raw_from_the_query_and_in_frames()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await subscriber.SubscribeAsync(1, "in.>");
        await subscriber.PingPongAsync();
        LongPollClient session = await LongPollClient.CreateAsync(broker.Http, new { headers = true });

        string query = "&header=" + Uri.EscapeDataString("X-Tag:a") + "&header=" + Uri.EscapeDataString("x-tag:b:c") + "&header=" + Uri.EscapeDataString("Empty:")
            + "&header=" + Uri.EscapeDataString("Note:é");
        using (HttpResponseMessage raw = await broker.Http.PostAsync($"{session.Base}/publish?topic=in.raw{query}", new StringContent("r")))
        {
            Assert.Equal(HttpStatusCode.Accepted, raw.StatusCode);
        }

        Frame fromRaw = await subscriber.ReadMessageAsync();
        Assert.Equal(["X-Tag", "Empty", "Note"], fromRaw.Headers!.Select(h => h.Key));
        Assert.Equal(["a", "b:c"], fromRaw.Header("X-Tag"));
        Assert.Equal([""], fromRaw.Header("Empty"));
        Assert.Equal(["é"], fromRaw.Header("Note"));

        var frames = new System.Buffers.ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(frames, "in.frames"u8, default, PayloadFlags.None, "f"u8, HeaderBlock.Encode(Sample));
        using (var content = new ByteArrayContent(frames.WrittenSpan.ToArray()))
        {
            content.Headers.ContentType = new MediaTypeHeaderValue("application/vnd.herald.frames");
            using HttpResponseMessage posted = await broker.Http.PostAsync($"{session.Base}/publish", content);
            Assert.Equal(HttpStatusCode.Accepted, posted.StatusCode);
        }

        AssertSample((await subscriber.ReadMessageAsync()).Headers);

        // A session created without headers may not publish them (as a TCP client not granted them): only the request fails.
        LongPollClient plain = await LongPollClient.CreateAsync(broker.Http);
        using (HttpResponseMessage refused = await broker.Http.PostAsync($"{plain.Base}/publish?topic=in.raw&header=A:b", new StringContent("r")))
        {
            Assert.Equal(HttpStatusCode.BadRequest, refused.StatusCode);
            Assert.Contains("MalformedRequest", await refused.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        }

        // A one-shot publish may; a reserved key is InvalidHeaders.
        using (HttpResponseMessage oneShot = await broker.Http.PostAsync("/poll/publish?topic=in.one&header=K:v", new StringContent("o")))
        {
            Assert.Equal(HttpStatusCode.Accepted, oneShot.StatusCode);
        }

        Assert.Equal(["v"], (await subscriber.ReadMessageAsync()).Header("K"));
        using (HttpResponseMessage reserved = await broker.Http.PostAsync("/poll/publish?topic=in.one&header=Herald-Status:200", new StringContent("o")))
        {
            Assert.Equal(HttpStatusCode.BadRequest, reserved.StatusCode);
            Assert.Contains("InvalidHeaders", await reserved.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        }

        Assert.Empty(await subscriber.PingPongAsync());
    }

    public static TheoryData<string, ErrorCode> BadBlocks => new()
    {
        { "reserved", ErrorCode.InvalidHeaders },
        { "too-many", ErrorCode.InvalidHeaders },
        { "too-large", ErrorCode.InvalidHeaders },
        { "duplicate", ErrorCode.MalformedFrame },
        { "cr-in-value", ErrorCode.MalformedFrame },
        { "not-negotiated", ErrorCode.MalformedFrame },
    };

    [Theory]
    [MemberData(nameof(BadBlocks))]
    public async Task A_bad_header_block_ends_its_publisher_with_a_clear_error_and_a_bystander_carries_on(string kind, ErrorCode expected)
    {
        await using var broker = await TestBroker.StartAsync();
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await bystander.SubscribeAsync(1, "t.>");
        await bystander.PingPongAsync();
        await using var offender = await ProtocolClient.OpenAsync(broker.Port, capabilities: kind == "not-negotiated" ? Capabilities.None : WithHeaders);
        KeyValuePair<string, string[]>[] block = kind switch
        {
            "reserved" => [new("Herald-Status", ["200"])],
            "too-many" => [new("a", new string[40]), new("b", new string[25])], // 65 values, over the default 64
            "too-large" => [new("big", [new string('x', 8192)])], // over the default 8 KiB
            "duplicate" => [new("Key", ["1"]), new("kEY", ["2"])],
            "cr-in-value" => [new("Key", ["a\rb"])],
            _ => [new("Key", ["v"])],
        };
        foreach (KeyValuePair<string, string[]> header in block)
        {
            Array.Fill(header.Value, header.Value[0] ?? "");
        }

        await offender.PublishAsync("t.bad", "never", block);

        ErrorFrame error = await offender.ExpectClosedWithAsync(expected);
        Assert.False(string.IsNullOrEmpty(error.Message));
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await publisher.PublishAsync("t.good", "after", [new("Key", ["v"])]);
        Frame next = await bystander.ReadMessageAsync();
        Assert.Equal(("t.good", "after"), (next.Topic, next.Text)); // the bad one never reached it
    }

    [Fact]
    public async Task A_requester_with_no_responders_is_answered_at_once_and_only_on_its_own_inbox()
    {
        await using var broker = await TestBroker.StartAsync();
        BrokerMetrics metrics = broker.Services.GetRequiredService<BrokerMetrics>();
        await using var requester = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Headers | Capabilities.NoResponders);
        await using var other = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Headers | Capabilities.NoResponders);
        await requester.SubscribeAsync(7, "_INBOX.req.>");
        await other.SubscribeAsync(1, "_INBOX.>"); // anonymous: every inbox is reachable, yet the status is the requester's alone
        await requester.PingPongAsync();
        await other.PingPongAsync();

        await requester.PublishAsync("svc.nobody", "q", replyTo: "_INBOX.req.1");

        Frame status = await requester.ReadMessageAsync();
        Assert.Equal((7u, "_INBOX.req.1", (string?)null, 0), (status.Sid, status.Topic, status.ReplyTo, status.Payload!.Length));
        Assert.Equal(PayloadFlags.None, status.Flags);
        Assert.Equal(["Herald-Status", "Herald-Description"], status.Headers!.Select(h => h.Key));
        Assert.Equal(["503"], status.Header("Herald-Status"));
        Assert.Equal(["No responders"], status.Header("Herald-Description"));
        Assert.Equal(1, metrics.TotalNoResponders);
        Assert.Empty(await other.PingPongAsync()); // never someone else's status

        // A responder present: the request is delivered, no status.
        await using var responder = await ProtocolClient.OpenAsync(broker.Port);
        await responder.SubscribeAsync(1, "svc.echo");
        await responder.PingPongAsync();
        await requester.PublishAsync("svc.echo", "q", replyTo: "_INBOX.req.2");
        Assert.Equal("_INBOX.req.2", (await responder.ReadMessageAsync()).ReplyTo);
        Assert.Empty(await requester.PingPongAsync());

        // Only the requester's own no-echo subscription matches: that is no responder.
        await requester.SubscribeAsync(8, "svc.self", SubscribeOptions.NoEcho);
        await requester.PublishAsync("svc.self", "q", replyTo: "_INBOX.req.3");
        Assert.Equal("_INBOX.req.3", (await requester.ReadMessageAsync()).Topic);
        Assert.Equal(2, metrics.TotalNoResponders);
        Assert.Empty(await other.PingPongAsync());
    }

    [Fact]
    public async Task A_requester_without_the_capability_gets_nothing_and_a_long_poll_requester_gets_the_status_in_its_poll()
    {
        await using var broker = await TestBroker.StartAsync();
        BrokerMetrics metrics = broker.Services.GetRequiredService<BrokerMetrics>();
        await using var headersOnly = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Headers);
        await headersOnly.SubscribeAsync(1, "_INBOX.a.>");
        await headersOnly.PublishAsync("svc.nobody", "q", replyTo: "_INBOX.a.1");
        Assert.Empty(await headersOnly.PingPongAsync());
        Assert.Equal(0, metrics.TotalNoResponders);

        LongPollClient session = await LongPollClient.CreateAsync(broker.Http, new { headers = true, noResponders = true });
        await session.SubscribeAsync(3, "_INBOX.lp.>");
        using (HttpResponseMessage request = await broker.Http.PostAsync($"{session.Base}/publish?topic=svc.nobody&replyTo=_INBOX.lp.9", new StringContent("q")))
        {
            Assert.Equal(HttpStatusCode.Accepted, request.StatusCode);
        }

        Frame status = Assert.Single((await session.PollAsync(0)).Messages);
        Assert.Equal((3u, "_INBOX.lp.9"), (status.Sid, status.Topic));
        Assert.Equal(["503"], status.Header("Herald-Status"));
        Assert.Equal(1, metrics.TotalNoResponders);
    }

    private static void AssertSample(List<KeyValuePair<string, string[]>>? headers)
    {
        Assert.NotNull(headers);
        Assert.Equal(Sample.Select(h => h.Key), headers.Select(h => h.Key));
        for (int i = 0; i < Sample.Length; i++)
        {
            Assert.Equal(Sample[i].Value, headers[i].Value);
        }
    }
}
