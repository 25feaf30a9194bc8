using System.Diagnostics;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.Broker.Delivery;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Broker.Transports.LongPoll;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using ZstdSharp;

namespace Herald.Broker.Tests;

/// <summary>
/// Long-poll under attack (issue 12 points 2, 3, 4, 8, 9, 10; issue 22 points 4 and 5), over real HTTP on
/// loopback. Each test reproduces the attack and has a bystander whose traffic carries on; a bystander on
/// another address connects from 127.0.0.2.
/// </summary>
public sealed class LongPollHardeningTests
{
    private const string Alice = "alice-token-0123456789";
    private const string Mallory = "mallory-token-0123456789";
    private static readonly IPAddress Elsewhere = IPAddress.Parse("127.0.0.2");

    [Fact]
    public async Task A_json_poll_writes_at_most_MaxBytesPerPoll_and_the_rest_comes_with_the_next_poll()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.MaxBytesPerPoll = 4096);
        LongPollClient reader = await LongPollClient.CreateAsync(broker.Http);
        await reader.SubscribeAsync(1, "text");
        LongPollClient bystander = await LongPollClient.CreateAsync(broker.Http);
        await bystander.SubscribeAsync(1, "text");
        string[] payloads = Enumerable.Range(0, 6).Select(i => new string((char)('a' + i), 1500)).ToArray();
        foreach (string payload in payloads)
        {
            using HttpResponseMessage published = await LongPollClient.PublishOneShotAsync(broker.Http, "text", payload);
            Assert.Equal(HttpStatusCode.Accepted, published.StatusCode);
        }

        // Each message's JSON form (base64 and text) is about 3.6 KB: one fits a 4 KiB poll, two would not,
        // although two frames (1.5 KB each) would fit the limit as frames.
        var received = new List<string>();
        long ack = 0;
        while (received.Count < payloads.Length)
        {
            using var request = new HttpRequestMessage(HttpMethod.Get, $"{reader.Base}/messages?ack={ack}");
            request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
            using HttpResponseMessage response = await broker.Http.SendAsync(request);
            byte[] body = await response.Content.ReadAsByteArrayAsync();
            Assert.InRange(body.Length, 1, 4096);
            Assert.Equal(body.Length, response.Content.Headers.ContentLength);
            JsonElement json = JsonDocument.Parse(body).RootElement;
            int count = json.GetProperty("messages").GetArrayLength();
            Assert.Equal(count.ToString(System.Globalization.CultureInfo.InvariantCulture), response.Headers.GetValues("Herald-Count").Single());
            Assert.Equal(1, count);
            received.AddRange(json.GetProperty("messages").EnumerateArray().Select(m => m.GetProperty("text").GetString()!));
            ack = json.GetProperty("ack").GetInt64();
        }

        Assert.Equal(payloads, received);
        var binary = new List<string>();
        for (long acked = 0; binary.Count < payloads.Length;)
        {
            PollResult frames = await bystander.PollAsync(acked);
            binary.AddRange(frames.Messages.Select(m => m.Text));
            acked = frames.LastSequence;
        }

        Assert.Equal(payloads, binary);
    }

    [Fact]
    public async Task A_json_poll_on_a_zstd_session_carries_a_compressed_payload_as_it_travelled_never_decompressed()
    {
        await using var broker = await TestBroker.StartAsync();
        using HttpResponseMessage created = await broker.Http.PostAsJsonAsync("/poll/sessions", new { zstd = true });
        string session = (await created.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("session").GetString()!;
        (await broker.Http.PostAsJsonAsync($"/poll/sessions/{session}/subscriptions", new { sid = 1, pattern = "lp" })).Dispose();
        byte[] payload = Payloads.Simple(50_000);
        (await broker.Http.PostAsync("/poll/publish?topic=lp", new ByteArrayContent(payload))).Dispose();

        using var request = new HttpRequestMessage(HttpMethod.Get, $"/poll/sessions/{session}/messages?ack=0");
        request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
        using HttpResponseMessage polled = await broker.Http.SendAsync(request);
        JsonElement message = Assert.Single((await polled.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("messages").EnumerateArray());
        Assert.True(message.GetProperty("zstd").GetBoolean());
        Assert.False(message.TryGetProperty("text", out _));
        byte[] compressed = message.GetProperty("payload").GetBytesFromBase64();
        Assert.True(compressed.Length < payload.Length / 5);
        Assert.Equal(payload, new Decompressor().Unwrap(compressed).ToArray());
    }

    [Fact]
    public async Task A_create_with_a_bad_credential_is_401_before_its_body_is_read_and_holds_no_pending_slot()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            Tokens(o);
            o.LongPoll.MaxPendingSessions = 1;
        });

        // Three attackers send their headers and part of a body, then stall.
        var attackers = new List<TcpClient>();
        for (int i = 0; i < 3; i++)
        {
            attackers.Add(await RawAsync(broker, "POST /poll/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"client\":"));
        }

        foreach (TcpClient attacker in attackers)
        {
            Assert.Equal("HTTP/1.1 401 Unauthorized", await StatusLineAsync(attacker)); // without the rest of its body
        }

        // The bystander's creation is not blocked by them.
        using HttpResponseMessage created = await CreateAsync(broker.Http, Alice);
        Assert.Equal(HttpStatusCode.Created, created.StatusCode);
        attackers.ForEach(a => a.Dispose());
    }

    [Fact]
    public async Task With_auth_on_the_session_token_alone_does_not_act_as_its_owner()
    {
        await using var broker = await TestBroker.StartAsync(Tokens);
        string session = await SessionOf(await CreateAsync(broker.Http, Alice));
        string mallorys = await SessionOf(await CreateAsync(broker.Http, Mallory));
        foreach (string? credential in new[] { null, Mallory, "wrong" })
        {
            using HttpResponseMessage subscribe = await SendAsync(broker.Http, HttpMethod.Post, $"/poll/sessions/{session}/subscriptions", credential, JsonContent.Create(new { sid = 1, pattern = "a" }));
            Assert.Equal(HttpStatusCode.Unauthorized, subscribe.StatusCode);
            using HttpResponseMessage poll = await SendAsync(broker.Http, HttpMethod.Get, $"/poll/sessions/{session}/messages?ack=0", credential);
            Assert.Equal(HttpStatusCode.Unauthorized, poll.StatusCode);
            using HttpResponseMessage close = await SendAsync(broker.Http, HttpMethod.Delete, $"/poll/sessions/{session}", credential);
            Assert.Equal(HttpStatusCode.Unauthorized, close.StatusCode);
        }

        // The owner's own requests, and the other identity's on its own session, carry on.
        using (HttpResponseMessage subscribe = await SendAsync(broker.Http, HttpMethod.Post, $"/poll/sessions/{session}/subscriptions", Alice, JsonContent.Create(new { sid = 1, pattern = "a" })))
        {
            Assert.Equal(HttpStatusCode.NoContent, subscribe.StatusCode);
        }

        using (HttpResponseMessage subscribe = await SendAsync(broker.Http, HttpMethod.Post, $"/poll/sessions/{mallorys}/subscriptions", Mallory, JsonContent.Create(new { sid = 1, pattern = "a" })))
        {
            Assert.Equal(HttpStatusCode.NoContent, subscribe.StatusCode);
        }

        using (HttpResponseMessage publish = await SendAsync(broker.Http, HttpMethod.Post, "/poll/publish?topic=a", Alice, new StringContent("hello")))
        {
            Assert.Equal(HttpStatusCode.Accepted, publish.StatusCode);
        }

        foreach ((string owned, string owner) in new[] { (session, Alice), (mallorys, Mallory) })
        {
            using HttpResponseMessage poll = await SendAsync(broker.Http, HttpMethod.Get, $"/poll/sessions/{owned}/messages?ack=0", owner);
            Assert.Equal(["hello"], (await LongPollClient.ReadAsync(poll)).Messages.Select(m => m.Text));
        }
    }

    [Fact]
    public async Task One_unpolled_session_holds_no_more_than_MaxPendingBytes_and_its_poll_reports_the_gap()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 4096;
            o.Limits.MaxPendingBytes = 16 * 1024;
            o.LongPoll.SlowConsumerPolicy = SlowConsumerPolicy.DropOldest;
        });
        LongPollClient hog = await LongPollClient.CreateAsync(broker.Http);
        await hog.SubscribeAsync(1, "t");
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(broker.Port);
        await bystander.SubscribeAsync(1, "t");
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(broker.Port);
        Assert.Equal(64, await PublishAsync(publisher, bystander, 64));

        // The bystander having all 64 says nothing of the session's backlog, which the router fills on its own path.
        SubscriberBacklog backlog = Store(broker).Find(hog.Session)!.Backlog;
        await Until.True(() => backlog.Pending.Messages + backlog.Dropped == 64, "all 64 reached the session's backlog, kept or dropped");
        Assert.InRange(backlog.Pending.Bytes, 1, 16 * 1024);
        PollResult poll = await hog.PollAsync(0);
        Assert.True(poll.Dropped > 0);
        Assert.Equal(64, poll.LastSequence);
    }

    [Fact]
    public async Task The_shared_pending_budget_squeezes_the_hogs_refuses_new_sessions_and_spares_a_tcp_bystander()
    {
        const int Budget = 24 * 1024;
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 4096;
            o.Limits.MaxPendingBytes = 16 * 1024;
            o.LongPoll.MaxPendingBytesTotal = Budget;
            o.LongPoll.SlowConsumerPolicy = SlowConsumerPolicy.DropOldest;
        });
        LongPollClient hogA = await LongPollClient.CreateAsync(broker.Http);
        LongPollClient hogB = await LongPollClient.CreateAsync(broker.Http);
        await hogA.SubscribeAsync(1, "t");
        await hogB.SubscribeAsync(1, "t");
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(broker.Port);
        await bystander.SubscribeAsync(1, "t");
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(broker.Port);
        Assert.Equal(40, await PublishAsync(publisher, bystander, 40));

        // The bystander having all 40 says nothing of the sessions' backlogs, which the router fills on its own path.
        PollSessionStore store = Store(broker);
        SubscriberBacklog[] hogs = [store.Find(hogA.Session)!.Backlog, store.Find(hogB.Session)!.Backlog];
        await Until.True(() => hogs.All(backlog => backlog.Pending.Messages + backlog.Dropped == 40), "all 40 reached each hog's backlog, kept or dropped");

        // Each hog alone may hold 16 KiB; together they are held within the 24 KiB budget (plus a frame each).
        Assert.InRange(store.Budget.Used, 1, Budget + (2 * 1100));
        Assert.True(store.Find(hogA.Session)!.Backlog.Pending.Bytes < 16 * 1024 - 1100);

        using (HttpResponseMessage refused = await broker.Http.PostAsync("/poll/sessions", null))
        {
            Assert.Equal(HttpStatusCode.ServiceUnavailable, refused.StatusCode);
            Assert.Equal("PendingBytesFull", (await refused.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());
            Assert.NotNull(refused.Headers.RetryAfter);
        }

        PollResult a = await hogA.PollAsync(0);
        Assert.True(a.Dropped > 0, "the squeezed hog is told its gap");
        Assert.Equal(40, a.LastSequence);
        foreach (LongPollClient hog in new[] { hogA, hogB })
        {
            (await broker.Http.DeleteAsync(hog.Base)).Dispose();
        }

        Assert.Equal(0, store.Budget.Used);
        using HttpResponseMessage created = await broker.Http.PostAsync("/poll/sessions", null);
        Assert.Equal(HttpStatusCode.Created, created.StatusCode);
    }

    [Fact]
    public async Task One_shot_publishes_share_the_rate_bucket_of_their_address_or_identity()
    {
        await using (var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.PublishRatePerSecond = 1;
            o.Limits.PublishBurst = 1;
        }))
        {
            using HttpResponseMessage first = await LongPollClient.PublishOneShotAsync(broker.Http, "t", "1");
            Assert.False(first.Headers.Contains(LongPollEndpoints.NoticeHeader));
            using HttpResponseMessage second = await LongPollClient.PublishOneShotAsync(broker.Http, "t", "2");
            Assert.Equal(HttpStatusCode.Accepted, second.StatusCode);
            Assert.Equal("RateLimited", second.Headers.GetValues(LongPollEndpoints.NoticeHeader).Single());

            using HttpClient bystander = From(broker, Elsewhere);
            using HttpResponseMessage other = await LongPollClient.PublishOneShotAsync(bystander, "t", "3");
            Assert.False(other.Headers.Contains(LongPollEndpoints.NoticeHeader));
        }

        await using (var broker = await TestBroker.StartAsync(o =>
        {
            Tokens(o);
            o.Limits.PublishRatePerSecond = 1;
            o.Limits.PublishBurst = 1;
        }))
        {
            using HttpClient elsewhere = From(broker, Elsewhere);
            using HttpResponseMessage first = await SendAsync(broker.Http, HttpMethod.Post, "/poll/publish?topic=t", Alice, new StringContent("1"));
            using HttpResponseMessage second = await SendAsync(elsewhere, HttpMethod.Post, "/poll/publish?topic=t", Alice, new StringContent("2"));
            Assert.Equal("RateLimited", second.Headers.GetValues(LongPollEndpoints.NoticeHeader).Single());
            using HttpResponseMessage other = await SendAsync(broker.Http, HttpMethod.Post, "/poll/publish?topic=t", Mallory, new StringContent("3"));
            Assert.False(other.Headers.Contains(LongPollEndpoints.NoticeHeader));
        }
    }

    [Fact]
    public async Task Session_creation_counts_against_MaxConnectionsPerAddress_with_tcp()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.MaxConnectionsPerAddress = 2);
        await using ProtocolClient tcp = await ProtocolClient.OpenAsync(broker.Port);
        await LongPollClient.CreateAsync(broker.Http);
        using (HttpResponseMessage refused = await broker.Http.PostAsync("/poll/sessions", null))
        {
            Assert.Equal(HttpStatusCode.ServiceUnavailable, refused.StatusCode);
            Assert.Equal("TooManyConnections", (await refused.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());
        }

        using HttpClient bystander = From(broker, Elsewhere);
        using HttpResponseMessage created = await bystander.PostAsync("/poll/sessions", null);
        Assert.Equal(HttpStatusCode.Created, created.StatusCode);
    }

    [Fact]
    public async Task Ended_tokens_are_remembered_in_bounded_number_and_for_a_bounded_time()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.LongPoll.MaxEndedSessions = 2;
            o.LongPoll.EndedSessionMemory = TimeSpan.FromSeconds(1);
        });
        var sessions = new List<LongPollClient>();
        for (int i = 0; i < 3; i++)
        {
            sessions.Add(await LongPollClient.CreateAsync(broker.Http));
        }

        LongPollClient live = await LongPollClient.CreateAsync(broker.Http);
        foreach (LongPollClient session in sessions)
        {
            (await broker.Http.DeleteAsync(session.Base)).Dispose();
        }

        Assert.Equal(HttpStatusCode.NotFound, (await sessions[0].PollAsync(0)).Status); // over the count: the oldest is forgotten
        Assert.Equal(HttpStatusCode.Gone, (await sessions[2].PollAsync(0)).Status);
        await Until.True(async () => (await sessions[2].PollAsync(0)).Status == HttpStatusCode.NotFound, "the third session is gone (404)"); // past the time
        (await live.PublishAsync("t", "x")).Dispose();
        Assert.Equal(HttpStatusCode.OK, (await live.PollAsync(0)).Status);
    }

    [Fact]
    public async Task A_slow_session_is_ended_on_its_own_account_while_the_publisher_carries_on()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.LongPoll.MaxPendingMessagesPerSession = 5;
            o.LongPoll.SlowConsumerPolicy = SlowConsumerPolicy.Disconnect;
        });
        TopicRouter router = broker.Services.GetRequiredService<TopicRouter>();
        LongPollClient victim = await LongPollClient.CreateAsync(broker.Http);
        await victim.SubscribeAsync(1, "t");
        for (uint sid = 2; sid <= 200; sid++)
        {
            await victim.SubscribeAsync(sid, $"many.{sid}.>");
        }

        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(broker.Port);
        await bystander.SubscribeAsync(1, "t");
        await bystander.PingPongAsync();
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(broker.Port);
        for (int i = 0; i < 10; i++)
        {
            await publisher.PublishAsync("t", $"m{i}");
        }

        Assert.Empty(await publisher.PingPongAsync());
        Assert.Equal(10, (await bystander.PingPongAsync()).Count(f => f.Type == FrameType.Message));
        PollResult ended = await victim.PollAsync(0);
        Assert.Equal(HttpStatusCode.Gone, ended.Status);
        Assert.Equal("SlowConsumer", ended.Problem!.Value.GetProperty("reason").GetString());
        await Until.True(() => router.SubscriptionCount == 1, "only the bystander's subscription is left"); // the victim's 200 are gone; the bystander's stays
    }

    /// <summary>Publishes 1 KiB messages to <c>t</c> four at a time (the TCP bystander's own byte limit is small); returns what it got.</summary>
    private static async Task<int> PublishAsync(ProtocolClient publisher, ProtocolClient bystander, int count)
    {
        int received = 0;
        for (int i = 0; i < count; i++)
        {
            await publisher.PublishAsync("t", new byte[1024]);
            if (i % 4 == 3 || i == count - 1)
            {
                await publisher.PingPongAsync();
                received += (await bystander.PingPongAsync()).Count(f => f.Type == FrameType.Message);
            }
        }

        return received;
    }

    internal static void Tokens(Hosting.HeraldOptions o)
    {
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.FromMilliseconds(10);
        foreach ((string name, string token) in new[] { ("alice", Alice), ("mallory", Mallory) })
        {
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = name, Sha256 = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(token))), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
        }
    }

    internal static PollSessionStore Store(TestBroker broker) => broker.Services.GetRequiredService<PollSessionStore>();

    /// <summary>An HTTP client whose connections come from <paramref name="local"/> (another remote address for the broker).</summary>
    internal static HttpClient From(TestBroker broker, IPAddress local) => new(new SocketsHttpHandler
    {
        ConnectCallback = async (context, cancellationToken) =>
        {
            var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            socket.Bind(new IPEndPoint(local, 0));
            await socket.ConnectAsync(IPAddress.Loopback, broker.HttpPort, cancellationToken);
            return new NetworkStream(socket, ownsSocket: true);
        },
    })
    { BaseAddress = broker.Http.BaseAddress };

    private static async Task<HttpResponseMessage> CreateAsync(HttpClient http, string credential) =>
        await SendAsync(http, HttpMethod.Post, "/poll/sessions", credential);

    private static async Task<string> SessionOf(HttpResponseMessage created)
    {
        using (created)
        {
            Assert.Equal(HttpStatusCode.Created, created.StatusCode);
            return (await created.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("session").GetString()!;
        }
    }

    private static async Task<HttpResponseMessage> SendAsync(HttpClient http, HttpMethod method, string path, string? credential, HttpContent? content = null)
    {
        using var request = new HttpRequestMessage(method, path) { Content = content };
        if (credential is not null)
        {
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", credential);
        }

        return await http.SendAsync(request);
    }

    internal static async Task<TcpClient> RawAsync(TestBroker broker, string request)
    {
        var client = new TcpClient();
        await client.ConnectAsync(IPAddress.Loopback, broker.HttpPort);
        await client.GetStream().WriteAsync(Encoding.ASCII.GetBytes(request));
        await client.GetStream().FlushAsync();
        return client;
    }

    internal static async Task<string?> StatusLineAsync(TcpClient client)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(15));
        var line = new StringBuilder();
        var one = new byte[1];
        while (await client.GetStream().ReadAsync(one, timeout.Token) == 1 && one[0] != (byte)'\n')
        {
            line.Append((char)one[0]);
        }

        return line.ToString().TrimEnd('\r');
    }
}

/// <summary>Runs alone: it reads the process's console and allocation counters.</summary>
[Collection(nameof(Isolated))]
public sealed class LongPollIsolatedHardeningTests
{
    // Isolated: the slots are held by two half-sent bodies for as long as Kestrel's minimum body data rate
    // allows (5 s of grace); with the whole suite beside it, the probes could miss that window.
    [Fact]
    public async Task Requests_being_read_from_one_address_are_capped_while_another_address_carries_on()
    {
        await using var broker = await TestBroker.StartAsync(o => o.LongPoll.MaxPendingRequestsPerAddress = 2);
        // Two requests whose bodies are half sent hold the address's two slots once the broker has read their
        // headers; a third from the address is then refused. Kestrel ends a body that slow after its 5 s grace
        // (and gives the slots back), so on a busy machine the probes may miss that window: the holders are
        // then sent again, a few times at most. Without the cap no probe is ever refused.
        TcpClient? first = null, second = null;
        HttpResponseMessage? refused = null;
        for (int round = 0; round < 5 && refused is null; round++)
        {
            first?.Dispose();
            second?.Dispose();
            first = await LongPollHardeningTests.RawAsync(broker, "POST /poll/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"client\":");
            second = await LongPollHardeningTests.RawAsync(broker, "POST /poll/publish?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345");
            for (var until = DateTime.UtcNow.AddSeconds(3); refused is null && DateTime.UtcNow < until;)
            {
                HttpResponseMessage attempt = await broker.Http.PostAsync("/poll/sessions", null);
                if (attempt.StatusCode == HttpStatusCode.ServiceUnavailable)
                {
                    refused = attempt;
                }
                else
                {
                    attempt.Dispose();
                    await Task.Delay(10);
                }
            }
        }

        using TcpClient holderOne = first!;
        using TcpClient holderTwo = second!;
        Assert.NotNull(refused);
        Assert.Equal("TooManyPendingRequests", (await refused.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());
        Assert.NotNull(refused.Headers.RetryAfter);
        refused.Dispose();

        using (HttpClient bystander = LongPollHardeningTests.From(broker, IPAddress.Parse("127.0.0.2")))
        using (HttpResponseMessage created = await bystander.PostAsync("/poll/sessions", null))
        {
            Assert.Equal(HttpStatusCode.Created, created.StatusCode);
        }

        await holderOne.GetStream().WriteAsync("\"slow\"}"u8.ToArray());
        await holderTwo.GetStream().WriteAsync("67890"u8.ToArray());
        Assert.Equal("HTTP/1.1 201 Created", await LongPollHardeningTests.StatusLineAsync(holderOne));
        Assert.Equal("HTTP/1.1 202 Accepted", await LongPollHardeningTests.StatusLineAsync(holderTwo));
        using HttpResponseMessage now = await broker.Http.PostAsync("/poll/sessions", null);
        Assert.Equal(HttpStatusCode.Created, now.StatusCode);
    }

    [Fact]
    public async Task The_session_token_is_in_no_log_line_and_no_span()
    {
        using var captured = new CapturedRequestTelemetry();
        string session;
        await using (var broker = await TestBroker.StartAsync(
                o =>
                {
                    o.Telemetry.Otlp.Enabled = true;
                    o.Telemetry.Otlp.Traces = true;
                    o.Telemetry.Otlp.Endpoint = "http://127.0.0.1:9"; // nothing listens: the exporter drops them
                },
                ["--Logging:LogLevel:Microsoft.AspNetCore=Information"]))
        {
            LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
            session = client.Session;
            await client.SubscribeAsync(1, "t");
            (await client.PublishAsync("t", "x")).Dispose();
            Assert.Single((await client.PollAsync(0, json: true)).Messages);
            (await broker.Http.DeleteAsync(client.Base)).Dispose();
            await Until.True(() => captured.RequestSpans >= 5, "five request spans");
        }

        Assert.Contains("/poll/sessions/{session}/messages", captured.Logs, StringComparison.Ordinal); // the request lines were written, redacted
        Assert.Contains(captured.Spans, s => s.GetTagItem("url.path") as string == "/poll/sessions/{session}/messages");
        captured.AssertNowhere(session);
    }

    [Fact]
    public async Task An_sse_access_token_and_any_token_query_parameter_is_in_no_log_line_and_no_span()
    {
        const string Alice = "alice-sse-token-0123456789";
        const string Wrong = "wrong-sse-token-9876543210";
        const string Other = "other-query-secret-5555";
        using var captured = new CapturedRequestTelemetry();
        await using (var broker = await TestBroker.StartAsync(
                o =>
                {
                    o.Security.Auth.Mode = AuthMode.Token;
                    o.Security.Auth.FailureDelay = TimeSpan.FromMilliseconds(10);
                    o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(Alice), Permissions = { Publish = { "alice.>" }, Subscribe = { "alice.>" } } });
                    o.Telemetry.Otlp.Enabled = true;
                    o.Telemetry.Otlp.Traces = true;
                    o.Telemetry.Otlp.Endpoint = "http://127.0.0.1:9"; // nothing listens: the exporter drops them
                },
                ["--Logging:LogLevel:Microsoft.AspNetCore=Information", "--Logging:LogLevel:Microsoft.AspNetCore.Hosting.Diagnostics=Information"])) // ASP.NET's request log on: its lines carry the URL with its query
        {
            using (HttpResponseMessage refused = await SseClient.SendAsync(broker.HttpPort, $"topic=alice.inbox&access_token={Wrong}"))
            {
                Assert.Equal(HttpStatusCode.Unauthorized, refused.StatusCode);
            }

            await using (SseClient stream = await SseClient.OpenAsync(broker.HttpPort, $"topic=alice.inbox&access_token={Alice}"))
            {
                await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "alice-pub", auth: Alice);
                await publisher.PublishAsync("alice.inbox", "hello");
                Assert.Equal("hello", (await stream.ReadEventAsync()).Json.GetProperty("text").GetString()); // the stream works
            }

            (await broker.Http.GetAsync($"/sse?topic=alice.inbox&api%5Fkey=1&Auth={Other}")).Dispose();
            await Until.True(() => captured.RequestSpans >= 3, "three request spans");
        }

        Assert.Contains("access_token={redacted}", captured.Logs, StringComparison.Ordinal); // the request lines were written, redacted
        Assert.Contains(captured.Spans, s => s.GetTagItem("url.query") as string == "topic=alice.inbox&access_token={redacted}");
        foreach (string secret in new[] { Alice, Wrong, Other })
        {
            captured.AssertNowhere(secret);
        }
    }

    [Fact]
    public async Task A_body_of_zstd_bombs_is_refused_from_the_declared_sizes_and_tcp_decompresses_one_frame_at_a_time()
    {
        await using var broker = await TestBroker.StartAsync();
        byte[] bomb = new Compressor(19).Wrap(new byte[ProtocolConstants.MaxPayload(1024 * 1024, 256)]).ToArray(); // as large as the defaults allow
        Assert.InRange(bomb.Length, 1, 100);
        var frames = new System.Buffers.ArrayBufferWriter<byte>();
        for (int i = 0; i < 3000; i++)
        {
            FrameWriter.WritePublish(frames, "bomb"u8, default, PayloadFlags.Zstd, bomb);
        }

        byte[] body = frames.WrittenSpan.ToArray();
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(broker.Port);
        await bystander.SubscribeAsync(1, "other");
        await bystander.PingPongAsync();

        // A session that negotiated Zstd: refused from the sizes the frames declare, before any is decompressed.
        using HttpResponseMessage created = await broker.Http.PostAsJsonAsync("/poll/sessions", new { zstd = true });
        string session = (await created.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("session").GetString()!;
        long before = GC.GetTotalAllocatedBytes(precise: true);
        using (HttpResponseMessage refused = await broker.Http.PostAsync($"/poll/sessions/{session}/publish", Frames(body)))
        {
            Assert.Equal(HttpStatusCode.BadRequest, refused.StatusCode);
            Assert.Equal("DecompressionFailed", (await refused.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());
        }

        // Without a session, Zstd was never negotiated: refused too.
        using (HttpResponseMessage refused = await broker.Http.PostAsync("/poll/publish", Frames(body)))
        {
            Assert.Equal(HttpStatusCode.BadRequest, refused.StatusCode);
        }

        long http = GC.GetTotalAllocatedBytes(precise: true) - before;
        Assert.True(http < 32L * body.Length, $"two {body.Length}-byte requests allocated {http} bytes");

        // Over TCP each frame is decompressed, routed (to nobody) and released before the next is read.
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Zstd);
        before = GC.GetTotalAllocatedBytes(precise: true);
        await publisher.SendRawAsync(body);
        await publisher.PingPongAsync();
        long tcp = GC.GetTotalAllocatedBytes(precise: true) - before;
        Assert.True(tcp < 32L * body.Length, $"{body.Length} bytes over TCP allocated {tcp} bytes");

        await publisher.PublishAsync("other", "still here");
        await publisher.PingPongAsync();
        Assert.Equal(["still here"], (await bystander.PingPongAsync()).Select(f => f.Text));
    }

    private static ByteArrayContent Frames(byte[] body) =>
        new(body) { Headers = { ContentType = new MediaTypeHeaderValue(LongPollEndpoints.FramesMediaType) } };
}

/// <summary>
/// While alive, what the process writes to the console (the brokers' log lines) and ASP.NET Core's request spans, for
/// the tests that look for a credential in them. The console is the process's: the tests using this run in
/// <see cref="LongPollIsolatedHardeningTests"/>'s collection, alone.
/// </summary>
internal sealed class CapturedRequestTelemetry : IDisposable
{
    private readonly List<Activity> _spans = [];
    private readonly ActivityListener _listener;
    private readonly TextWriter _console = Console.Out;
    private readonly StringWriter _captured = new();

    public CapturedRequestTelemetry()
    {
        _listener = new ActivityListener
        {
            ShouldListenTo = source => source.Name.StartsWith("Microsoft.AspNetCore", StringComparison.Ordinal),
            Sample = (ref ActivityCreationOptions<ActivityContext> _) => ActivitySamplingResult.AllDataAndRecorded,
            ActivityStopped = activity =>
            {
                lock (_spans)
                {
                    _spans.Add(activity);
                }
            },
        };
        ActivitySource.AddActivityListener(_listener);
        Console.SetOut(TextWriter.Synchronized(_captured));
    }

    public string Logs => _captured.ToString();

    /// <summary>The spans stopped so far (a copy).</summary>
    public List<Activity> Spans
    {
        get
        {
            lock (_spans)
            {
                return [.. _spans];
            }
        }
    }

    public int RequestSpans => Spans.Count(s => s.OperationName.Contains("HttpRequestIn", StringComparison.Ordinal));

    /// <summary>Fails if <paramref name="secret"/> is in a log line, a span's tag or a span's name.</summary>
    public void AssertNowhere(string secret)
    {
        Assert.DoesNotContain(secret, Logs, StringComparison.Ordinal);
        foreach (Activity span in Spans)
        {
            Assert.DoesNotContain(span.TagObjects, tag => tag.Value?.ToString()?.Contains(secret, StringComparison.Ordinal) == true);
            Assert.DoesNotContain(secret, span.DisplayName, StringComparison.Ordinal);
        }
    }

    public void Dispose()
    {
        Console.SetOut(_console);
        _listener.Dispose();
    }
}
