using System.Net;
using System.Net.Http.Json;
using System.Net.Sockets;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Broker.Tests.Infrastructure;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>Every long-poll limit and error status of protocol-spec/longpoll.md §3, over real HTTP.</summary>
public sealed class LongPollLimitTests
{
    [Fact]
    public async Task Over_max_sessions_is_503_with_retry_after()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.MaxSessions = 2);
        await LongPollClient.CreateAsync(broker.Http);
        await LongPollClient.CreateAsync(broker.Http);

        using HttpResponseMessage third = await broker.Http.PostAsync("/poll/sessions", null);

        await AssertProblem(third, HttpStatusCode.ServiceUnavailable, "TooManySessions");
        Assert.NotNull(third.Headers.RetryAfter);
    }

    [Fact]
    public async Task Over_max_pending_sessions_is_503_while_a_creation_is_in_flight()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.MaxPendingSessions = 1);
        // A creation whose body is still arriving holds the one pending slot.
        using var slow = new TcpClient();
        await slow.ConnectAsync(IPAddress.Loopback, broker.HttpPort);
        NetworkStream stream = slow.GetStream();
        await stream.WriteAsync(Encoding.ASCII.GetBytes("POST /poll/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"client\":"));
        await stream.FlushAsync();

        // Until the broker has taken that request in, a creation may still succeed; once it has, creations
        // are refused. Polled with a bounded deadline: the slot is taken when the headers are read.
        using HttpResponseMessage refused = await UntilRefusedAsync(broker.Http);
        await AssertProblem(refused, HttpStatusCode.ServiceUnavailable, "TooManyPendingSessions");

        await stream.WriteAsync(Encoding.ASCII.GetBytes("\"slow\"}"));
        using var reader = new StreamReader(stream);
        Assert.Equal("HTTP/1.1 201 Created", await reader.ReadLineAsync());
        using HttpResponseMessage now = await broker.Http.PostAsync("/poll/sessions", null);
        Assert.Equal(HttpStatusCode.Created, now.StatusCode);
    }

    [Fact]
    public async Task Over_max_pending_messages_ends_the_session_with_the_disconnect_policy()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.LongPoll.MaxPendingMessagesPerSession = 3;
            o.LongPoll.SlowConsumerPolicy = SlowConsumerPolicy.Disconnect;
        });
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(1, "flood");
        for (int i = 0; i < 4; i++)
        {
            using HttpResponseMessage r = await LongPollClient.PublishOneShotAsync(broker.Http, "flood", $"m{i}");
        }

        PollResult poll = await client.PollAsync(0);

        Assert.Equal((HttpStatusCode.Gone, "SessionExpired"), (poll.Status, poll.Code));
    }

    [Fact]
    public async Task Over_max_pending_messages_drops_the_oldest_and_reports_the_gap_with_drop_oldest()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.LongPoll.MaxPendingMessagesPerSession = 3;
            o.LongPoll.SlowConsumerPolicy = SlowConsumerPolicy.DropOldest;
        });
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(1, "flood");
        for (int i = 1; i <= 5; i++)
        {
            using HttpResponseMessage r = await LongPollClient.PublishOneShotAsync(broker.Http, "flood", $"m{i}");
        }

        PollResult poll = await client.PollAsync(0);
        PollResult json = await client.PollAsync(0, json: true);

        Assert.Equal((3L, 3, 2L), (poll.FirstSequence, poll.Count, poll.Dropped));
        Assert.Equal(["m3", "m4", "m5"], poll.Messages.Select(m => m.Text));
        Assert.Equal(2, json.Json!.Value.GetProperty("dropped").GetInt64());
    }

    [Fact]
    public async Task Over_max_concurrent_polls_is_503()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.LongPoll.MaxConcurrentPolls = 1;
            o.LongPoll.PollTimeout = TimeSpan.FromSeconds(30);
        });
        LongPollClient a = await LongPollClient.CreateAsync(broker.Http);
        LongPollClient b = await LongPollClient.CreateAsync(broker.Http);
        Task<PollResult> held = a.PollAsync(0);
        var store = broker.Services.GetRequiredService<Herald.Broker.Transports.LongPoll.PollSessionStore>();
        await Until.True(() => store.Find(a.Session)?.IsPolling == true, "a's poll is held");

        PollResult refused = await b.PollAsync(0);

        Assert.Equal((HttpStatusCode.ServiceUnavailable, "TooManyPolls"), (refused.Status, refused.Code));
        using (HttpResponseMessage closed = await broker.Http.DeleteAsync(a.Base))
        {
        }

        Assert.Equal(HttpStatusCode.Gone, (await held).Status);
    }

    [Fact]
    public async Task Over_max_body_is_413()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.MaxBodyBytes = 100);

        // Kestrel closes a connection whose refused body it did not read: one connection per request, so
        // the second request never lands on a connection the broker is closing.
        using var tooBig = new HttpRequestMessage(HttpMethod.Post, "/poll/publish?topic=t") { Content = new ByteArrayContent(new byte[101]) };
        tooBig.Headers.ConnectionClose = true;
        using HttpResponseMessage declared = await broker.Http.SendAsync(tooBig);
        using var chunked = new StreamContent(new MemoryStream(new byte[500]));   // no Content-Length: caught while reading
        chunked.Headers.ContentLength = null;
        using var request = new HttpRequestMessage(HttpMethod.Post, "/poll/publish?topic=t") { Content = chunked };
        request.Headers.TransferEncodingChunked = true;
        request.Headers.ConnectionClose = true;
        using HttpResponseMessage streamed = await broker.Http.SendAsync(request);

        await AssertProblem(declared, HttpStatusCode.RequestEntityTooLarge, "BodyTooLarge");
        await AssertProblem(streamed, HttpStatusCode.RequestEntityTooLarge, "BodyTooLarge");
    }

    [Theory]
    [InlineData("{\"sid\": 1", HttpStatusCode.BadRequest, "MalformedRequest")]
    [InlineData("{\"sid\": \"one\", \"pattern\": \"a\"}", HttpStatusCode.BadRequest, "MalformedRequest")]
    [InlineData("{\"pattern\": \"a\"}", HttpStatusCode.BadRequest, "MalformedRequest")]
    [InlineData("{\"sid\": 1, \"pattern\": \"\"}", HttpStatusCode.BadRequest, "InvalidTopic")]
    [InlineData("{\"sid\": 0, \"pattern\": \"a\"}", HttpStatusCode.BadRequest, "DuplicateSubscription")]
    [InlineData("{\"sid\": 1}", HttpStatusCode.BadRequest, "MalformedRequest")]
    [InlineData("{\"sid\": 1, \"pattern\": \"a..b\"}", HttpStatusCode.BadRequest, "InvalidTopic")]
    [InlineData("{\"sid\": 1, \"pattern\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}", HttpStatusCode.BadRequest, "TopicTooLong")]
    public async Task Bad_subscribe_bodies_get_problem_details(string body, HttpStatusCode status, string code)
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.MaxTopicLength = 32);
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);

        using HttpResponseMessage response = await broker.Http.PostAsync($"{client.Base}/subscriptions", new StringContent(body, Encoding.UTF8, "application/json"));

        await AssertProblem(response, status, code);
    }

    [Fact]
    public async Task Unknown_session_and_subscription_are_404_bad_topics_are_400()
    {
        await using var broker = await TestBroker.StartAsync();
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);

        using HttpResponseMessage unknownSession = await broker.Http.GetAsync("/poll/sessions/not-a-session/messages?ack=0");
        using HttpResponseMessage unknownSid = await broker.Http.DeleteAsync($"{client.Base}/subscriptions/42");
        using HttpResponseMessage reserved = await LongPollClient.PublishOneShotAsync(broker.Http, "$SYS.x", "no");
        using HttpResponseMessage noTopic = await broker.Http.PostAsync("/poll/publish", new StringContent("x"));
        using HttpResponseMessage badAck = await broker.Http.GetAsync($"{client.Base}/messages?ack=abc");

        await AssertProblem(unknownSession, HttpStatusCode.NotFound, "SessionNotFound");
        await AssertProblem(unknownSid, HttpStatusCode.NotFound, "UnknownSubscription");
        await AssertProblem(reserved, HttpStatusCode.BadRequest, "ReservedTopic");
        await AssertProblem(noTopic, HttpStatusCode.BadRequest, "MalformedRequest");
        await AssertProblem(badAck, HttpStatusCode.BadRequest, "MalformedRequest");
    }

    [Fact]
    public async Task A_slowloris_client_is_cut_off_and_others_are_served()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Http.RequestHeadersTimeout = TimeSpan.FromMilliseconds(500));
        using var slow = new TcpClient();
        await slow.ConnectAsync(IPAddress.Loopback, broker.HttpPort);
        NetworkStream stream = slow.GetStream();
        await stream.WriteAsync(Encoding.ASCII.GetBytes("GET /poll/sessions/x/messages HTTP/1.1\r\nHost: x\r\n"));

        using HttpResponseMessage meanwhile = await broker.Http.PostAsync("/poll/sessions", null);
        Assert.Equal(HttpStatusCode.Created, meanwhile.StatusCode);

        // The broker answers the unfinished request with 408 and closes the connection.
        using var reader = new StreamReader(stream);
        string? status = await reader.ReadLineAsync().WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal("HTTP/1.1 408 Request Timeout", status);
    }

    /// <summary>Creates sessions one at a time until one is refused (10 s at most); returns the refusal.</summary>
    private static Task<HttpResponseMessage> UntilRefusedAsync(HttpClient http) =>
        Until.Value(
            async () =>
            {
                HttpResponseMessage response = await http.PostAsync("/poll/sessions", null);
                if (response.StatusCode == HttpStatusCode.Created)
                {
                    response.Dispose(); // created, not refused: asked again
                }

                return response;
            },
            response => response.StatusCode != HttpStatusCode.Created,
            "a session creation is refused",
            TimeSpan.FromSeconds(10));

    private static async Task AssertProblem(HttpResponseMessage response, HttpStatusCode status, string code)
    {
        Assert.Equal(status, response.StatusCode);
        Assert.Equal("application/problem+json", response.Content.Headers.ContentType?.MediaType);
        var problem = await response.Content.ReadFromJsonAsync<System.Text.Json.JsonElement>();
        Assert.Equal(code, problem.GetProperty("code").GetString());
        Assert.Equal((int)status, problem.GetProperty("status").GetInt32());
    }
}
