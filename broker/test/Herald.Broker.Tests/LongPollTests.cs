using System.Buffers;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Sockets;
using System.Text;
using Herald.Broker.Routing;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

public sealed class LongPollTests
{
    [Fact]
    public async Task Session_life_cycle_create_subscribe_receive_close()
    {
        await using var broker = await TestBroker.StartAsync();
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(3, "chat.>");

        using (HttpResponseMessage published = await LongPollClient.PublishOneShotAsync(broker.Http, "chat.room1", "hello"))
        {
            Assert.Equal(HttpStatusCode.Accepted, published.StatusCode);
        }

        PollResult poll = await client.PollAsync(ack: 0);
        Assert.Equal((1L, 1), (poll.FirstSequence, poll.Count));
        Frame message = Assert.Single(poll.Messages);
        Assert.Equal((3u, "chat.room1", "hello"), (message.Sid, message.Topic, message.Text));

        using (HttpResponseMessage closed = await broker.Http.DeleteAsync(client.Base))
        {
            Assert.Equal(HttpStatusCode.NoContent, closed.StatusCode);
        }

        PollResult after = await client.PollAsync(ack: 1);
        Assert.Equal(HttpStatusCode.Gone, after.Status);
        Assert.Equal("SessionExpired", after.Code);
        Assert.Equal(0, broker.Services.GetRequiredService<TopicRouter>().SubscriptionCount);
    }

    [Fact]
    public async Task Binary_poll_body_is_the_same_bytes_tcp_subscribers_get()
    {
        await using var broker = await TestBroker.StartAsync();
        LongPollClient http = await LongPollClient.CreateAsync(broker.Http);
        await http.SubscribeAsync(7, "same.bytes");
        await using var tcp = await ProtocolClient.OpenAsync(broker.Port);
        await tcp.SubscribeAsync(7, "same.bytes");
        await tcp.PingPongAsync();

        await tcp.PublishAsync("same.bytes", "identical", replyTo: "_INBOX.x.1");

        Frame overTcp = await tcp.ReadMessageAsync();
        Frame overHttp = Assert.Single((await http.PollAsync(0)).Messages);
        Assert.Equal(overTcp.Body, overHttp.Body);
        Assert.Equal(("_INBOX.x.1", "identical", 7u), (overHttp.ReplyTo, overHttp.Text, overHttp.Sid));
    }

    [Fact]
    public async Task Messages_waiting_are_batched_and_split_by_the_per_poll_limit()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.MaxMessagesPerPoll = 2);
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(1, "batch");
        for (int i = 1; i <= 5; i++)
        {
            using HttpResponseMessage r = await client.PublishAsync("batch", $"m{i}");
        }

        var seen = new List<string>();
        long ack = 0;
        foreach (int expected in new[] { 2, 2, 1 })
        {
            PollResult poll = await client.PollAsync(ack);
            Assert.Equal(ack + 1, poll.FirstSequence);
            Assert.Equal(expected, poll.Count);
            seen.AddRange(poll.Messages.Select(m => m.Text));
            ack = poll.LastSequence;
        }

        Assert.Equal(["m1", "m2", "m3", "m4", "m5"], seen);
    }

    [Fact]
    public async Task A_poll_with_nothing_to_send_returns_empty_after_the_poll_timeout()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(200));
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);

        PollResult poll = await client.PollAsync(0);

        Assert.Equal(HttpStatusCode.OK, poll.Status);
        Assert.Equal(0, poll.Count);
        Assert.Empty(poll.Messages);
    }

    [Fact]
    public async Task A_held_poll_is_answered_by_the_next_message_from_any_transport()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.PollTimeout = TimeSpan.FromSeconds(30));
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(1, "wake.up");
        Task<PollResult> held = client.PollAsync(0);
        await using var tcp = await ProtocolClient.OpenAsync(broker.Port);
        await Until.True(() => broker.Services.GetRequiredService<Herald.Broker.Transports.LongPoll.PollSessionStore>().Find(client.Session)?.IsPolling == true, "the poll is held");

        await tcp.PublishAsync("wake.up", "now");

        PollResult poll = await held;
        Assert.Equal("now", Assert.Single(poll.Messages).Text);
    }

    [Fact]
    public async Task A_lost_poll_response_is_delivered_again_and_acked_messages_never_come_back()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(200));
        using MetricsProbe metrics = broker.Metrics();
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(1, "lossless");
        for (int i = 1; i <= 3; i++)
        {
            using HttpResponseMessage r = await client.PublishAsync("lossless", $"m{i}");
        }

        PollResult lost = await client.PollAsync(0);           // pretend this response never reached the client
        PollResult again = await client.PollAsync(0);          // so it polls with the same ack

        Assert.Equal(lost.Messages.Select(m => m.Text), again.Messages.Select(m => m.Text));
        Assert.Equal((1L, 3), (again.FirstSequence, again.Count));
        Assert.Equal(1, metrics["herald.longpoll.redeliveries"]); // the one poll that repeated an unacknowledged response

        using (HttpResponseMessage r = await client.PublishAsync("lossless", "m4"))
        {
        }

        PollResult next = await client.PollAsync(3);            // acks 1-3
        Assert.Equal(("m4", 4L), (Assert.Single(next.Messages).Text, next.FirstSequence));
        PollResult duplicateAck = await client.PollAsync(4);
        PollResult staleAck = await client.PollAsync(2);        // older than one already given: harmless
        Assert.Equal(0, duplicateAck.Count);
        Assert.Equal(0, staleAck.Count);
        Assert.Equal(0, staleAck.Dropped);                      // acknowledged is not dropped

        PollResult ahead = await client.PollAsync(99);
        Assert.Equal(HttpStatusCode.BadRequest, ahead.Status);
        Assert.Equal("MalformedRequest", ahead.Code);
    }

    [Fact]
    public async Task A_second_poll_replaces_the_held_one()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.PollTimeout = TimeSpan.FromSeconds(30));
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(1, "r");
        Task<PollResult> first = client.PollAsync(0);
        var store = broker.Services.GetRequiredService<Herald.Broker.Transports.LongPoll.PollSessionStore>();
        await Until.True(() => store.Find(client.Session)?.IsPolling == true, "the poll is held");

        Task<PollResult> second = client.PollAsync(0);

        PollResult replaced = await first;
        Assert.Equal(HttpStatusCode.Conflict, replaced.Status);
        Assert.Equal("PollReplaced", replaced.Code);
        using (HttpResponseMessage r = await client.PublishAsync("r", "for the second"))
        {
        }

        Assert.Equal("for the second", Assert.Single((await second).Messages).Text);
    }

    [Fact]
    public async Task An_inactive_session_expires_with_its_subscriptions()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(50);
            o.LongPoll.InactivityTimeout = TimeSpan.FromSeconds(1.5); // long enough for a slow CI machine to subscribe twice
        });
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(1, "a.>");
        await client.SubscribeAsync(2, "b");
        TopicRouter router = broker.Services.GetRequiredService<TopicRouter>();
        Assert.Equal(2, router.SubscriptionCount);

        await Until.True(() => router.SubscriptionCount == 0, "the router holds no subscription");

        PollResult poll = await client.PollAsync(0);
        Assert.Equal(HttpStatusCode.Gone, poll.Status);
        Assert.Equal("SessionExpired", poll.Code);
    }

    [Fact]
    public async Task Json_on_request_carries_sequence_payload_and_text()
    {
        await using var broker = await TestBroker.StartAsync();
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(9, "j");
        using (await LongPollClient.PublishOneShotAsync(broker.Http, "j", "text payload"))
        {
        }

        using (var binary = new ByteArrayContent([0xff, 0x00, 0xfe]))
        using (await broker.Http.PostAsync("/poll/publish?topic=j", binary))
        {
        }

        PollResult poll = await client.PollAsync(0, json: true);

        Assert.Equal(2, poll.Count);
        var messages = poll.Json!.Value.GetProperty("messages").EnumerateArray().ToList();
        Assert.Equal(1, messages[0].GetProperty("seq").GetInt64());
        Assert.Equal("text payload", messages[0].GetProperty("text").GetString());
        Assert.Equal(2, messages[1].GetProperty("seq").GetInt64());
        Assert.False(messages[1].TryGetProperty("text", out _)); // not UTF-8: base64 only
        Assert.Equal(new byte[] { 0xff, 0x00, 0xfe }, messages[1].GetProperty("payload").GetBytesFromBase64());
        Assert.Equal(2, poll.Json.Value.GetProperty("ack").GetInt64());
    }

    [Fact]
    public async Task Tcp_and_long_poll_clients_publish_to_each_other_and_no_echo_spans_the_session()
    {
        await using var broker = await TestBroker.StartAsync();
        LongPollClient http = await LongPollClient.CreateAsync(broker.Http);
        await http.SubscribeAsync(1, "mixed", noEcho: true);
        await using var tcp = await ProtocolClient.OpenAsync(broker.Port);
        await tcp.SubscribeAsync(1, "mixed");
        await tcp.PingPongAsync();

        using (await http.PublishAsync("mixed", "from http")) { }     // its own no-echo subscription skips it
        await tcp.PublishAsync("mixed", "from tcp");

        Assert.Equal("from http", (await tcp.ReadMessageAsync()).Text);
        Assert.Equal("from tcp", (await tcp.ReadMessageAsync()).Text); // TCP sub has echo on
        PollResult poll = await http.PollAsync(0);
        Assert.Equal(["from tcp"], poll.Messages.Select(m => m.Text));
    }

    [Fact]
    public async Task A_body_of_publish_frames_is_routed_in_order_or_not_at_all()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var tcp = await ProtocolClient.OpenAsync(broker.Port);
        await tcp.SubscribeAsync(1, "frames.>");
        await tcp.PingPongAsync();

        var good = new ArrayBufferWriter<byte>();
        for (int i = 0; i < 3; i++)
        {
            FrameWriter.WritePublish(good, Encoding.ASCII.GetBytes($"frames.{i}"), default, PayloadFlags.None, Encoding.ASCII.GetBytes($"f{i}"));
        }

        using (HttpResponseMessage ok = await PostFrames(broker.Http, good.WrittenSpan.ToArray()))
        {
            Assert.Equal(HttpStatusCode.Accepted, ok.StatusCode);
        }

        var bad = new ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(bad, "frames.never"u8, default, PayloadFlags.None, "x"u8);
        FrameWriter.WriteSubscribe(bad, 1, "frames.>"u8);
        using (HttpResponseMessage refused = await PostFrames(broker.Http, bad.WrittenSpan.ToArray()))
        {
            PollResult problem = await LongPollClient.ReadAsync(refused);
            Assert.Equal((HttpStatusCode.BadRequest, "MalformedRequest"), (problem.Status, problem.Code));
        }

        using (HttpResponseMessage truncated = await PostFrames(broker.Http, good.WrittenSpan[..^2].ToArray()))
        {
            Assert.Equal(HttpStatusCode.BadRequest, truncated.StatusCode);
        }

        Assert.Equal(["f0", "f1", "f2"], new[] { (await tcp.ReadMessageAsync()).Text, (await tcp.ReadMessageAsync()).Text, (await tcp.ReadMessageAsync()).Text });
        Assert.Empty(await tcp.PingPongAsync()); // nothing from the refused bodies

        static Task<HttpResponseMessage> PostFrames(HttpClient http, byte[] body)
        {
            var content = new ByteArrayContent(body);
            content.Headers.ContentType = new MediaTypeHeaderValue("application/vnd.herald.frames");
            return http.PostAsync("/poll/publish", content);
        }
    }

    [Fact]
    public async Task Held_polls_are_answered_when_the_broker_shuts_down()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.LongPoll.PollTimeout = TimeSpan.FromMinutes(5);
            o.LongPoll.InactivityTimeout = TimeSpan.FromMinutes(10);
        });
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        Task<PollResult> held = client.PollAsync(0);
        await Until.True(() => broker.Services.GetRequiredService<Herald.Broker.Transports.LongPoll.PollSessionStore>().Find(client.Session)?.IsPolling == true, "the poll is held");

        await broker.StopAsync();

        PollResult poll = await held;
        Assert.Equal(HttpStatusCode.ServiceUnavailable, poll.Status);
        Assert.Equal("ShuttingDown", poll.Code);
    }

    [Fact]
    public async Task Cross_origin_browsers_may_read_the_sequence_headers()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(50));
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        using var request = new HttpRequestMessage(HttpMethod.Get, $"{client.Base}/messages?ack=0");
        request.Headers.Add("Origin", "http://app.example");

        using HttpResponseMessage response = await broker.Http.SendAsync(request);

        Assert.Equal("*", response.Headers.GetValues("Access-Control-Allow-Origin").Single());
        Assert.Contains("Herald-First-Sequence", response.Headers.GetValues("Access-Control-Expose-Headers").Single(), StringComparison.OrdinalIgnoreCase);
    }
}
