using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using Herald.Broker.Engines;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Broker.Transports.LongPoll;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Time.Testing;
using Xunit.Abstractions;

namespace Herald.Broker.Tests.Presence;

/// <summary>
/// Presence over HTTP (spec §15, longpoll.md §1.2 and §6, sse.md): long-poll and SSE sessions join through the same
/// session code as TCP, their events arrive in order with the topic's messages, they leave <c>expired</c> or
/// <c>disconnect</c>, and <c>GET /presence</c> answers what PRESENCE answers, with the same permissions and rate.
/// </summary>
public sealed class HttpPresenceTests(ITestOutputHelper output)
{
    private const Capabilities Caps = Capabilities.Headers | Capabilities.Presence;

    [Fact]
    public async Task A_long_poll_member_is_seen_by_a_tcp_PRESENCE_and_a_tcp_member_by_GET_presence()
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        LongPollClient member = await LongPollClient.CreateAsync(broker.Http, new { headers = true, info = "Polly" });
        Assert.True(member.Created.GetProperty("presence").GetBoolean(), "presence granted with headers");
        await SubscribeAsync(member, new { sid = 1, pattern = "room.1", join = true });

        await using ProtocolClient tcp = await ProtocolClient.ConnectAsync(broker.Port);
        await tcp.SendAsync(w => FrameWriter.WriteHello(w, "t", Caps, info: "Tess"));
        Assert.Equal(FrameType.Welcome, (await tcp.ReadAsync()).Type);
        PresenceReplyFrame seen = await tcp.PresenceAsync(1, "room.1", 10);
        Assert.Equal((1ul, "Polly", ""), (seen.Members, Assert.Single(seen.Entries).Info, seen.Entries[0].Identity));

        await tcp.SubscribeAsync(1, "room.2", SubscribeOptions.Join);
        await tcp.PingPongAsync();
        JsonElement page = await GetPresenceAsync(broker.Http, "room.2");
        Assert.Equal(1, page.GetProperty("members").GetInt64());
        Assert.Equal(1, page.GetProperty("identities").GetInt64());
        JsonElement entry = Assert.Single(page.GetProperty("entries").EnumerateArray());
        Assert.Equal(("Tess", ""), (entry.GetProperty("info").GetString(), entry.GetProperty("identity").GetString()));
        Assert.Equal(JsonValueKind.Null, page.GetProperty("next").ValueKind);
        Assert.Equal(seen.Entries[0].Client.Length, entry.GetProperty("client").GetString()!.Length); // the same kind of id

        // Both forms read one engine: the long-poll member listed by GET /presence is the one PRESENCE listed.
        JsonElement room1 = await GetPresenceAsync(broker.Http, "room.1");
        Assert.Equal(seen.Entries[0].Client, Assert.Single(room1.GetProperty("entries").EnumerateArray()).GetProperty("client").GetString());
    }

    [Fact]
    public async Task Events_reach_a_long_poll_subscription_in_order_with_the_topics_messages_in_both_poll_forms()
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        LongPollClient watcher = await LongPollClient.CreateAsync(broker.Http, new { headers = true });
        await SubscribeAsync(watcher, new { sid = 4, pattern = "room.1", presence = true });

        await using ProtocolClient member = await ProtocolClient.ConnectAsync(broker.Port);
        await member.SendAsync(w => FrameWriter.WriteHello(w, "m", Caps, info: "Alice"));
        Assert.Equal(FrameType.Welcome, (await member.ReadAsync()).Type);
        await member.SubscribeAsync(7, "room.1", SubscribeOptions.Join);
        await member.PublishAsync("room.1", "hello");
        await member.UnsubscribeAsync(7);
        await member.PingPongAsync();

        List<Frame> binary = await PollAllAsync(watcher, 3, json: false);
        List<Frame> json = await PollAllAsync(watcher, 3, json: true); // nothing acknowledged yet: the same three again
        foreach (List<Frame> frames in new[] { binary, json })
        {
            Assert.Equal([4u, 4u, 4u], frames.Select(f => f.Sid));
            Assert.Equal(["join"], frames[0].Header("Herald-Presence"));
            Assert.Equal("Alice", frames[0].Text);
            Assert.Equal(["1"], frames[0].Header("Herald-Occupancy"));
            Assert.Equal("hello", frames[1].Text);
            Assert.Empty(frames[1].Header("Herald-Presence"));
            Assert.Equal(["leave"], frames[2].Header("Herald-Presence"));
            Assert.Equal(["unsubscribe"], frames[2].Header("Herald-Reason"));
            Assert.Equal(frames[0].Header("Herald-Client"), frames[2].Header("Herald-Client"));
        }
    }

    [Fact]
    public async Task An_sse_stream_joins_with_its_info_and_gets_presence_events_in_order_with_messages()
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(broker.Port, "w", capabilities: Caps);
        await watcher.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
        await watcher.PingPongAsync();

        SseClient stream = await SseClient.OpenAsync(broker.HttpPort, "topic=room.1&topic=news&join=room.1&presence=room.1&info=Sam");
        Frame joined = await watcher.ReadMessageAsync();
        Assert.Equal(("join", "Sam"), (joined.Header("Herald-Presence").Single(), joined.Text));

        ProtocolClient member = await ProtocolClient.ConnectAsync(broker.Port);
        await member.SendAsync(w => FrameWriter.WriteHello(w, "m", Caps, info: "Alice"));
        Assert.Equal(FrameType.Welcome, (await member.ReadAsync()).Type);
        await member.SubscribeAsync(7, "room.1", SubscribeOptions.Join);
        await member.PublishAsync("room.1", "hello");
        await member.DisposeAsync();

        SseEvent own = await stream.ReadEventAsync(); // its own join first (a stream has no no-echo, spec §15.2)
        Assert.Equal(("presence", "join", "Sam", 1), (own.Type, own.Json.GetProperty("presence").GetString(), own.Json.GetProperty("info").GetString(), own.Json.GetProperty("occupancy").GetInt32()));
        Assert.Equal(joined.Header("Herald-Client").Single(), own.Json.GetProperty("client").GetString());
        SseEvent join = await stream.ReadEventAsync();
        output.WriteLine($"{join.Type}: {join.Data}");
        Assert.Equal("presence", join.Type);
        JsonElement data = join.Json;
        Assert.Equal((1, "room.1", "join", "Alice", 2), (data.GetProperty("sid").GetInt32(), data.GetProperty("topic").GetString(), data.GetProperty("presence").GetString(), data.GetProperty("info").GetString(), data.GetProperty("occupancy").GetInt32()));
        string client = data.GetProperty("client").GetString()!;
        SseEvent message = await stream.ReadEventAsync();
        Assert.Equal(("message", "hello"), (message.Type, message.Json.GetProperty("text").GetString()));
        SseEvent leave = await stream.ReadEventAsync();
        Assert.Equal("presence", leave.Type);
        Assert.Equal(("leave", client, "disconnect", 1), (leave.Json.GetProperty("presence").GetString(), leave.Json.GetProperty("client").GetString(), leave.Json.GetProperty("reason").GetString(), leave.Json.GetProperty("occupancy").GetInt32()));
        Assert.False(leave.Json.TryGetProperty("info", out _));

        await stream.DisposeAsync(); // the stream's end is its leave
        Frame[] after = [.. (await ReadUntilAsync(watcher, f => f.Header("Herald-Presence") is ["leave"] && f.Text.Length == 0 && f.Header("Herald-Client").Single() == joined.Header("Herald-Client").Single()))];
        Assert.Equal(["disconnect"], after[^1].Header("Herald-Reason"));
    }

    [Fact]
    public async Task A_long_poll_member_leaves_expired_when_its_session_expires_and_disconnect_when_deleted()
    {
        var time = new FakeTimeProvider();
        TimeSpan inactivity = TimeSpan.FromMinutes(1);
        await using TestBroker broker = await TestBroker.StartAsync(
            o =>
            {
                o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(50);
                o.LongPoll.InactivityTimeout = inactivity;
            },
            time: time);
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(broker.Port, "w", capabilities: Caps);
        await watcher.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
        await watcher.PingPongAsync();

        LongPollClient deleted = await LongPollClient.CreateAsync(broker.Http, new { headers = true });
        await SubscribeAsync(deleted, new { sid = 1, pattern = "room.1", join = true });
        LongPollClient idle = await LongPollClient.CreateAsync(broker.Http, new { headers = true });
        await SubscribeAsync(idle, new { sid = 1, pattern = "room.1", join = true });
        Frame first = await watcher.ReadMessageAsync();
        Frame second = await watcher.ReadMessageAsync();
        Assert.Equal(("join", "join"), (first.Header("Herald-Presence").Single(), second.Header("Herald-Presence").Single()));

        using (HttpResponseMessage end = await broker.Http.DeleteAsync(deleted.Base))
        {
            Assert.Equal(HttpStatusCode.NoContent, end.StatusCode);
        }

        Frame left = await watcher.ReadMessageAsync();
        Assert.Equal((first.Header("Herald-Client").Single(), "leave", "disconnect", "1"), (left.Header("Herald-Client").Single(), left.Header("Herald-Presence").Single(), left.Header("Herald-Reason").Single(), left.Header("Herald-Occupancy").Single()));

        time.Advance(inactivity + TimeSpan.FromSeconds(1)); // the sweep (real time, a fraction of a second) finds it idle past its timeout
        Frame expired = await watcher.ReadMessageAsync();
        Assert.Equal((second.Header("Herald-Client").Single(), "leave", "expired", "0"), (expired.Header("Herald-Client").Single(), expired.Header("Herald-Presence").Single(), expired.Header("Herald-Reason").Single(), expired.Header("Herald-Occupancy").Single()));
        Assert.Equal("SessionExpired", (await idle.PollAsync(0)).Code);
        Assert.Equal(0, broker.Services.GetRequiredService<IPresence>().Counts.Entries);
    }

    [Fact]
    public async Task GET_presence_pages_by_client_with_the_occupancy_alone_for_limit_0_and_refuses_a_wildcard()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.Presence.MaxPageSize = 3);
        var members = new List<LongPollClient>();
        for (int i = 0; i < 5; i++)
        {
            LongPollClient m = await LongPollClient.CreateAsync(broker.Http, new { headers = true, info = $"member {i}" });
            await SubscribeAsync(m, new { sid = 1, pattern = "doc.42", join = true });
            members.Add(m);
        }

        JsonElement occupancy = await GetPresenceAsync(broker.Http, "doc.42", limit: 0);
        Assert.Equal((5, 1, 0), (occupancy.GetProperty("members").GetInt64(), occupancy.GetProperty("identities").GetInt64(), occupancy.GetProperty("entries").GetArrayLength()));

        JsonElement capped = await GetPresenceAsync(broker.Http, "doc.42", limit: 1000);
        Assert.Equal(3, capped.GetProperty("entries").GetArrayLength()); // served as MaxPageSize

        var seen = new List<string>();
        string? cursor = null;
        do
        {
            JsonElement page = await GetPresenceAsync(broker.Http, "doc.42", limit: 2, cursor);
            Assert.True(page.GetProperty("entries").GetArrayLength() <= 2);
            foreach (JsonElement e in page.GetProperty("entries").EnumerateArray())
            {
                seen.Add(e.GetProperty("client").GetString()!);
                Assert.StartsWith("member ", e.GetProperty("info").GetString(), StringComparison.Ordinal);
            }

            cursor = page.GetProperty("next").GetString();
        }
        while (cursor is not null);

        Assert.Equal(5, seen.Count);
        Assert.Equal(seen.Order(StringComparer.Ordinal), seen);
        Assert.Equal(5, seen.Distinct().Count());

        (HttpStatusCode status, JsonElement problem) = await TryGetPresenceAsync(broker.Http, "presence?topic=doc.*");
        Assert.Equal((HttpStatusCode.BadRequest, "InvalidTopic"), (status, problem.GetProperty("code").GetString()));
        (status, problem) = await TryGetPresenceAsync(broker.Http, "presence?topic=doc..x");
        Assert.Equal((HttpStatusCode.BadRequest, "InvalidTopic"), (status, problem.GetProperty("code").GetString()));
        (status, problem) = await TryGetPresenceAsync(broker.Http, "presence");
        Assert.Equal((HttpStatusCode.BadRequest, "MalformedRequest"), (status, problem.GetProperty("code").GetString()));
        (status, problem) = await TryGetPresenceAsync(broker.Http, "presence?topic=doc.42&limit=-1");
        Assert.Equal((HttpStatusCode.BadRequest, "MalformedRequest"), (status, problem.GetProperty("code").GetString()));
    }

    [Fact]
    public async Task Another_identity_without_the_presence_right_gets_403_and_not_even_the_count_and_cannot_join()
    {
        await using TestBroker broker = await PresenceIdentities.StartBrokerAsync();
        using HttpClient alice = Client(broker, "alice-token");
        using HttpClient eve = Client(broker, "eve-token");
        using HttpClient bob = Client(broker, "bob-token");
        LongPollClient aliceSession = await LongPollClient.CreateAsync(alice, new { headers = true, info = "Alice" });
        await SubscribeAsync(aliceSession, new { sid = 1, pattern = "room.1", join = true });

        foreach (string query in new[] { "presence?topic=room.1", "presence?topic=room.1&limit=0" })
        {
            using HttpResponseMessage refused = await eve.GetAsync(query);
            string body = await refused.Content.ReadAsStringAsync();
            output.WriteLine($"eve {query}: {(int)refused.StatusCode} {body}");
            Assert.Equal(HttpStatusCode.Forbidden, refused.StatusCode);
            Assert.Equal("application/problem+json", refused.Content.Headers.ContentType?.MediaType);
            using JsonDocument problem = JsonDocument.Parse(body);
            Assert.Equal("PermissionDenied", problem.RootElement.GetProperty("code").GetString());
            Assert.False(problem.RootElement.TryGetProperty("members", out _));
            Assert.False(problem.RootElement.TryGetProperty("entries", out _));
            Assert.DoesNotContain("Alice", body, StringComparison.Ordinal);
        }

        // Eve's own session may subscribe to the topic but neither join it nor read its events.
        LongPollClient eveSession = await LongPollClient.CreateAsync(eve, new { headers = true, info = "Mallory" });
        Assert.Equal((HttpStatusCode.Forbidden, "PermissionDenied"), await TrySubscribeAsync(eveSession, new { sid = 1, pattern = "room.1", join = true }));
        Assert.Equal((HttpStatusCode.Forbidden, "PermissionDenied"), await TrySubscribeAsync(eveSession, new { sid = 2, pattern = "room.1", presence = true }));
        (SseClient? stream, HttpStatusCode sse, JsonElement sseProblem) = await SseClient.TryOpenAsync(broker.HttpPort, "topic=room.1&join=room.1", bearer: "eve-token");
        Assert.Null(stream);
        Assert.Equal((HttpStatusCode.Forbidden, "PermissionDenied"), (sse, sseProblem.GetProperty("code").GetString()));
        await SubscribeAsync(eveSession, new { sid = 3, pattern = "room.1" }); // a plain subscription stays allowed

        JsonElement page = await GetPresenceAsync(bob, "room.1"); // the bystander reads on
        Assert.Equal(1, page.GetProperty("members").GetInt64());
        Assert.Equal(("alice", "Alice"), (page.GetProperty("entries")[0].GetProperty("identity").GetString(), page.GetProperty("entries")[0].GetProperty("info").GetString()));
    }

    [Fact]
    public async Task Info_over_MaxInfoBytes_and_presence_on_a_session_without_headers_are_refused_with_nothing_made()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.Presence.MaxInfoBytes = 16);
        PollSessionStore store = broker.Services.GetRequiredService<PollSessionStore>();
        using (HttpResponseMessage refused = await broker.Http.PostAsJsonAsync("/poll/sessions", new { headers = true, info = new string('x', 17) }))
        {
            string body = await refused.Content.ReadAsStringAsync();
            output.WriteLine(body);
            Assert.Equal(HttpStatusCode.BadRequest, refused.StatusCode);
            Assert.Contains("MaxInfoBytes", body, StringComparison.Ordinal);
        }

        Assert.Empty(store.Sessions);
        (SseClient? stream, HttpStatusCode status, JsonElement problem) = await SseClient.TryOpenAsync(broker.HttpPort, $"topic=room.1&join=room.1&info={new string('x', 17)}");
        Assert.Null(stream);
        Assert.Equal((HttpStatusCode.BadRequest, "MalformedRequest"), (status, problem.GetProperty("code").GetString()));
        (stream, status, problem) = await SseClient.TryOpenAsync(broker.HttpPort, "topic=room.1&join=room.2");
        Assert.Equal((HttpStatusCode.BadRequest, "MalformedRequest"), (status, problem.GetProperty("code").GetString()));
        Assert.Null(stream);

        LongPollClient plain = await LongPollClient.CreateAsync(broker.Http, new { info = "no headers" });
        Assert.False(plain.Created.GetProperty("presence").GetBoolean());
        using (HttpResponseMessage refused = await broker.Http.PostAsJsonAsync($"{plain.Base}/subscriptions", new { sid = 1, pattern = "room.1", join = true }))
        {
            string body = await refused.Content.ReadAsStringAsync();
            Assert.Equal(HttpStatusCode.BadRequest, refused.StatusCode);
            Assert.Contains("\"headers\": true", JsonDocument.Parse(body).RootElement.GetProperty("detail").GetString(), StringComparison.Ordinal);
        }

        LongPollClient wild = await LongPollClient.CreateAsync(broker.Http, new { headers = true });
        Assert.Equal((HttpStatusCode.BadRequest, "MalformedRequest"), await TrySubscribeAsync(wild, new { sid = 1, pattern = "room.*", presence = true }));
        Assert.Equal(0, broker.Services.GetRequiredService<IPresence>().Counts.Entries);
        Assert.Equal(0, broker.Services.GetRequiredService<IPresence>().Counts.Watchers);
    }

    [Fact]
    public async Task A_flood_of_GET_presence_is_held_to_the_identitys_rate_while_another_identity_and_a_bystander_carry_on()
    {
        const int Burst = 10;
        const int Flood = 40;
        await using TestBroker broker = await PresenceIdentities.StartBrokerAsync(o => (o.Limits.SubscriptionRatePerSecond, o.Limits.SubscriptionBurst) = (100, Burst)); // 30 past the burst are held about 0.3 s: their requests, however spread, cannot refill the bucket in time
        using MetricsProbe metrics = broker.Metrics();
        using HttpClient alice = Client(broker, "alice-token");
        using HttpClient bob = Client(broker, "bob-token");
        LongPollClient bystander = await LongPollClient.CreateAsync(bob, new { headers = true });
        await SubscribeAsync(bystander, new { sid = 1, pattern = "room.news" });

        Task<HttpResponseMessage>[] flood = [.. Enumerable.Range(0, Flood).Select(_ => alice.GetAsync("presence?topic=room.1&limit=0"))];
        bool bobNoticed;
        using (HttpResponseMessage bobs = await bob.GetAsync("presence?topic=room.1&limit=0")) // bob's bucket is his own
        {
            Assert.Equal(HttpStatusCode.OK, bobs.StatusCode);
            bobNoticed = bobs.Headers.Contains(LongPollEndpoints.NoticeHeader);
        }

        using (HttpResponseMessage sent = await LongPollClient.PublishOneShotAsync(bob, "room.news", "still flowing"))
        {
            Assert.Equal(HttpStatusCode.Accepted, sent.StatusCode);
        }

        PollResult news = await bystander.PollAsync(0);
        HttpResponseMessage[] answers = await Task.WhenAll(flood);
        int noticed = answers.Count(a => a.Headers.TryGetValues(LongPollEndpoints.NoticeHeader, out IEnumerable<string>? v) && v.Contains("RateLimited"));
        long rateLimited = metrics["herald.protocol.errors", "error.type", "RateLimited"];
        output.WriteLine($"flood {Flood} (burst {Burst}): {answers.Count(a => a.StatusCode == HttpStatusCode.OK)} answered 200, {noticed} with the RateLimited notice; broker counted RateLimited {rateLimited}; bob noticed {bobNoticed}; bystander got '{news.Messages.Single().Text}'");
        Assert.All(answers, a => Assert.Equal(HttpStatusCode.OK, a.StatusCode)); // carried out, held to the rate: nothing refused
        Assert.True(noticed >= 1, "an answer past the burst carries the notice");
        Assert.Equal(noticed, rateLimited); // each episode (alice's only) counted once, as it was told
        Assert.False(bobNoticed, "bob was not held by alice's flood");
        Assert.Equal("still flowing", news.Messages.Single().Text);
        foreach (HttpResponseMessage answer in answers)
        {
            answer.Dispose();
        }
    }

    private static async Task SubscribeAsync(LongPollClient client, object body)
    {
        using HttpResponseMessage response = await client.Http.PostAsJsonAsync($"{client.Base}/subscriptions", body);
        Assert.True(response.StatusCode == HttpStatusCode.NoContent, $"subscribe {JsonSerializer.Serialize(body)}: {(int)response.StatusCode} {await response.Content.ReadAsStringAsync()}");
    }

    private static async Task<(HttpStatusCode, string?)> TrySubscribeAsync(LongPollClient client, object body)
    {
        using HttpResponseMessage response = await client.Http.PostAsJsonAsync($"{client.Base}/subscriptions", body);
        string text = await response.Content.ReadAsStringAsync();
        return (response.StatusCode, text.Length == 0 ? null : JsonDocument.Parse(text).RootElement.GetProperty("code").GetString());
    }

    private static async Task<JsonElement> GetPresenceAsync(HttpClient http, string topic, ulong? limit = null, string? cursor = null)
    {
        string query = $"presence?topic={Uri.EscapeDataString(topic)}" + (limit is { } l ? $"&limit={l}" : "") + (cursor is null ? "" : $"&cursor={Uri.EscapeDataString(cursor)}");
        (HttpStatusCode status, JsonElement body) = await TryGetPresenceAsync(http, query);
        Assert.True(status == HttpStatusCode.OK, $"GET /{query}: {(int)status} {body}");
        return body;
    }

    private static async Task<(HttpStatusCode, JsonElement)> TryGetPresenceAsync(HttpClient http, string query)
    {
        using HttpResponseMessage response = await http.GetAsync(query);
        string text = await response.Content.ReadAsStringAsync();
        return (response.StatusCode, JsonDocument.Parse(text).RootElement.Clone());
    }

    /// <summary>Polls with ack 0 (acknowledging nothing: each poll gives every message again) until <paramref name="count"/> are waiting.</summary>
    private static async Task<List<Frame>> PollAllAsync(LongPollClient client, int count, bool json)
    {
        List<Frame> frames = [];
        await Until.True(async () =>
        {
            PollResult poll = await client.PollAsync(0, json);
            Assert.Equal(HttpStatusCode.OK, poll.Status);
            frames = poll.Messages;
            return frames.Count >= count;
        }, $"{count} messages waiting");
        return frames;
    }

    private static async Task<List<Frame>> ReadUntilAsync(ProtocolClient client, Func<Frame, bool> last)
    {
        var frames = new List<Frame>();
        do
        {
            frames.Add(await client.ReadMessageAsync());
        }
        while (!last(frames[^1]));

        return frames;
    }

    private static HttpClient Client(TestBroker broker, string token)
    {
        var http = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{broker.HttpPort}/") };
        http.DefaultRequestHeaders.Authorization = new AuthenticationHeaderValue("Bearer", token);
        return http;
    }
}
