using System.Net;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using Herald.Broker.Delivery;
using Herald.Broker.History;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>
/// Server-Sent Events at <c>/sse</c> (protocol-spec/sse.md) over real HTTP connections: what TCP publishers send
/// arrives as events, in JSON or base64; a reconnect with <c>Last-Event-ID</c> resumes each topic's history or says
/// what was missed; bad requests are refused before the stream starts; another identity reads nothing it may not;
/// a stalled stream meets its slow-consumer policy while a TCP subscriber gets everything; shutdown ends it cleanly.
/// </summary>
public sealed class SseTests
{
    private static Task<TestBroker> StartAsync(Action<HeraldOptions>? also = null) =>
        TestBroker.StartAsync(o =>
        {
            o.History.Topics.Add(new HistoryRule { Pattern = "orders.>", MaxMessages = 1000, MaxAge = TimeSpan.FromMinutes(5) });
            also?.Invoke(o);
        });

    [Fact]
    public async Task Publications_from_tcp_arrive_as_json_events_for_each_topic_named_wildcards_included()
    {
        await using var broker = await StartAsync();
        await using SseClient stream = await SseClient.OpenAsync(broker.HttpPort, "topic=chat.room1&topic=prices.*");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Headers);

        await publisher.PublishAsync("chat.room1", "hello", [new("X-Tag", ["a", "b"])]);
        await publisher.PublishAsync("prices.eu", new byte[] { 0xff, 0x00, 0x01 });
        await publisher.PublishAsync("other.topic", "not named");
        await publisher.PublishAsync("chat.room1", "second");

        SseEvent first = await stream.ReadEventAsync();
        Assert.Equal("message", first.Type);
        JsonElement json = first.Json;
        Assert.Equal(1, json.GetProperty("sid").GetInt32());
        Assert.Equal("chat.room1", json.GetProperty("topic").GetString());
        Assert.Equal("hello", json.GetProperty("text").GetString());
        Assert.Equal("aGVsbG8=", json.GetProperty("payload").GetString());
        Assert.Equal(JsonValueKind.Null, json.GetProperty("replyTo").ValueKind);
        Assert.Equal(["a", "b"], json.GetProperty("headers").GetProperty("X-Tag").EnumerateArray().Select(v => v.GetString()));
        Assert.Equal("-,-", first.LastEventId); // neither topic keeps a history: no position, but a reconnect is told so

        JsonElement binary = (await stream.ReadEventAsync()).Json;
        Assert.Equal(2, binary.GetProperty("sid").GetInt32());
        Assert.Equal("prices.eu", binary.GetProperty("topic").GetString());
        Assert.Equal(Convert.ToBase64String([0xff, 0x00, 0x01]), binary.GetProperty("payload").GetString());
        Assert.False(binary.TryGetProperty("text", out _)); // not UTF-8: base64 only

        Assert.Equal("second", (await stream.ReadEventAsync()).Json.GetProperty("text").GetString()); // other.topic was never sent
    }

    [Fact]
    public async Task Metrics_name_each_transport_a_websocket_publication_and_an_sse_delivery_are_their_own()
    {
        await using var broker = await StartAsync();
        using MetricsProbe metrics = broker.Metrics();
        await using SseClient stream = await SseClient.OpenAsync(broker.HttpPort, "topic=counted");
        await using ProtocolClient web = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await web.HelloAsync("web");
        await web.PublishAsync("counted", "one");
        await web.PingPongAsync();
        Assert.Equal("one", (await stream.ReadEventAsync()).Json.GetProperty("text").GetString());

        Assert.Equal(1, metrics["herald.messages.published", "herald.transport", "websocket"]);
        Assert.Equal(0, metrics["herald.messages.published", "herald.transport", "longpoll"]);
        Assert.Equal(1, metrics["herald.messages.sent", "herald.transport", "sse"]);
        Assert.Equal(0, metrics["herald.messages.sent", "herald.transport", "longpoll"]);
    }

    [Fact]
    public async Task Base64_format_sends_the_payload_alone()
    {
        await using var broker = await StartAsync();
        await using SseClient stream = await SseClient.OpenAsync(broker.HttpPort, "topic=bin&format=base64");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        byte[] payload = [0, 1, 2, 250, 10, 13];
        await publisher.PublishAsync("bin", payload);

        SseEvent e = await stream.ReadEventAsync();
        Assert.Equal(payload, Convert.FromBase64String(e.Data));
    }

    [Fact]
    public async Task A_reconnect_with_Last_Event_ID_gets_what_it_missed_then_the_live_stream_and_is_told_what_cannot_be_replayed()
    {
        await using var broker = await StartAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        const string Query = "topic=orders.eu&topic=chat.*&topic=news";
        string lastId;
        await using (SseClient first = await SseClient.OpenAsync(broker.HttpPort, Query))
        {
            SseEvent live = await first.ReadEventAsync(); // a topic with a history: its position before any message
            Assert.Equal("status", live.Type);
            Assert.Equal("Live", live.Json.GetProperty("description").GetString());
            Assert.Equal(200, live.Json.GetProperty("status").GetInt32());
            await publisher.PublishAsync("orders.eu", "m1");
            await publisher.PublishAsync("orders.eu", "m2");
            Assert.Equal("m1", (await first.ReadEventAsync()).Json.GetProperty("text").GetString());
            SseEvent m2 = await first.ReadEventAsync();
            Assert.Equal("m2", m2.Json.GetProperty("text").GetString());
            lastId = m2.LastEventId!;
            Assert.Matches("^2:[0-9a-f]{16},-,-$", lastId);
        }

        await publisher.PublishAsync("orders.eu", "m3"); // missed
        await publisher.PublishAsync("orders.eu", "m4");
        await publisher.PublishAsync("chat.lobby", "lost"); // missed, on a pattern: cannot be replayed
        await publisher.PingPongAsync();

        await using SseClient second = await SseClient.OpenAsync(broker.HttpPort, Query, lastEventId: lastId);
        var statuses = new Dictionary<string, JsonElement>();
        var texts = new List<string>();
        while (statuses.Count < 3 || texts.Count < 2)
        {
            SseEvent e = await second.ReadEventAsync();
            if (e.Type == "status")
            {
                statuses[e.Json.GetProperty("topic").GetString()!] = e.Json;
            }
            else
            {
                texts.Add(e.Json.GetProperty("text").GetString()!);
            }
        }

        Assert.Equal(["m3", "m4"], texts);
        Assert.Equal("Recovered", statuses["orders.eu"].GetProperty("description").GetString());
        Assert.Equal(410, statuses["chat.*"].GetProperty("status").GetInt32());
        Assert.Contains("wildcards", statuses["chat.*"].GetProperty("description").GetString(), StringComparison.Ordinal);
        Assert.Equal(410, statuses["news"].GetProperty("status").GetInt32());
        Assert.Contains("no history", statuses["news"].GetProperty("description").GetString(), StringComparison.Ordinal);
        Assert.StartsWith("4:", second.LastEventId, StringComparison.Ordinal);

        await publisher.PublishAsync("orders.eu", "m5"); // then the live stream, no gap, no duplicate
        SseEvent m5 = await second.ReadEventAsync();
        Assert.Equal("m5", m5.Json.GetProperty("text").GetString());
        Assert.StartsWith("5:", m5.LastEventId, StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_reconnect_naming_an_epoch_the_topic_does_not_have_is_told_the_history_is_lost_and_given_the_position()
    {
        await using var broker = await StartAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync("orders.us", "before");
        await publisher.PingPongAsync();

        await using SseClient stream = await SseClient.OpenAsync(broker.HttpPort, "topic=orders.us", lastEventId: "7:0123456789abcdef");
        SseEvent status = await stream.ReadEventAsync();
        Assert.Equal("status", status.Type);
        Assert.Equal(410, status.Json.GetProperty("status").GetInt32());
        Assert.Contains("History lost", status.Json.GetProperty("description").GetString(), StringComparison.Ordinal);
        Assert.Equal(1, status.Json.GetProperty("offset").GetInt32());
        Assert.Matches("^1:[0-9a-f]{16}$", status.LastEventId); // the stream goes on from the topic's position
    }

    [Theory]
    [InlineData("", "MalformedRequest")] // no topic
    [InlineData("topic=a..b", "InvalidTopic")]
    [InlineData("topic=a&format=xml", "MalformedRequest")]
    [InlineData("topic=a&topic=b&topic=c&topic=d", "MalformedRequest")] // over MaxTopics (3 here)
    public async Task A_bad_request_is_refused_with_its_code_before_the_stream_starts_and_a_bystander_carries_on(string query, string code)
    {
        await using var broker = await StartAsync(o => o.Sse.MaxTopics = 3);
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port);
        await bystander.SubscribeAsync(1, "a");
        await bystander.PingPongAsync();

        using HttpResponseMessage refused = await SseClient.SendAsync(broker.HttpPort, query);
        Assert.Equal(HttpStatusCode.BadRequest, refused.StatusCode);
        Assert.Equal(code, (await refused.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());

        await bystander.PublishAsync("a", "still here");
        Assert.Equal("still here", (await bystander.ReadMessageAsync()).Text);
        Assert.Equal(0, broker.Services.GetRequiredService<Sessions.SessionRegistry>().Sessions.Count(s => s.Transport == "sse"));
    }

    [Theory]
    [InlineData("garbage")]
    [InlineData("1:abc,-")] // two entries for one topic
    [InlineData("x:abc")]
    [InlineData("1:")]
    public async Task A_malformed_Last_Event_ID_is_refused(string id)
    {
        await using var broker = await StartAsync();
        using HttpResponseMessage refused = await SseClient.SendAsync(broker.HttpPort, "topic=orders.eu", lastEventId: id);
        Assert.Equal(HttpStatusCode.BadRequest, refused.StatusCode);
        Assert.Contains("Last-Event-ID", await refused.Content.ReadAsStringAsync(), StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_page_from_an_origin_not_allowed_is_refused_and_an_allowed_one_is_let_in_with_cors()
    {
        await using var broker = await StartAsync(o => o.Policy.AllowedDomains = ["good.example"]);
        using HttpResponseMessage refused = await SseClient.SendAsync(broker.HttpPort, "topic=a", origin: "https://evil.example");
        Assert.Equal(HttpStatusCode.Forbidden, refused.StatusCode);

        using HttpResponseMessage allowed = await SseClient.SendAsync(broker.HttpPort, "topic=a", origin: "https://good.example");
        Assert.Equal(HttpStatusCode.OK, allowed.StatusCode);
        Assert.Equal("https://good.example", allowed.Headers.GetValues("Access-Control-Allow-Origin").Single());
    }

    [Fact]
    public async Task Turned_off_it_is_not_served()
    {
        await using var broker = await StartAsync(o => o.Sse.Enabled = false);
        using HttpResponseMessage refused = await SseClient.SendAsync(broker.HttpPort, "topic=a");
        Assert.Equal(HttpStatusCode.NotFound, refused.StatusCode);
    }

    [Fact]
    public async Task With_authentication_a_stream_needs_a_credential_and_another_identity_reads_nothing_it_may_not()
    {
        const string Alice = "alice-token-0123456789";
        const string Mallory = "mallory-token-0123456789";
        await using var broker = await StartAsync(o =>
        {
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.FailureDelay = TimeSpan.FromMilliseconds(10);
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(Alice), Permissions = { Publish = { "alice.>" }, Subscribe = { "alice.>" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "mallory", Sha256 = TestTokens.Sha256(Mallory), Permissions = { Publish = { "mallory.>" }, Subscribe = { "mallory.>" } } });
        });

        using (HttpResponseMessage anonymous = await SseClient.SendAsync(broker.HttpPort, "topic=alice.inbox"))
        {
            Assert.Equal(HttpStatusCode.Unauthorized, anonymous.StatusCode);
        }

        using (HttpResponseMessage wrong = await SseClient.SendAsync(broker.HttpPort, "topic=alice.inbox&access_token=not-a-token"))
        {
            Assert.Equal(HttpStatusCode.Unauthorized, wrong.StatusCode);
        }

        using (HttpResponseMessage denied = await SseClient.SendAsync(broker.HttpPort, "topic=mallory.own&topic=alice.inbox", bearer: Mallory))
        {
            Assert.Equal(HttpStatusCode.Forbidden, denied.StatusCode); // one topic refused: no stream at all
            Assert.Equal("PermissionDenied", (await denied.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());
        }

        using (HttpResponseMessage everything = await SseClient.SendAsync(broker.HttpPort, $"topic=>&access_token={Mallory}"))
        {
            Assert.Equal(HttpStatusCode.Forbidden, everything.StatusCode);
        }

        // alice by query parameter (EventSource cannot set headers), mallory on her own topic by header.
        await using SseClient alice = await SseClient.OpenAsync(broker.HttpPort, $"topic=alice.inbox&access_token={Alice}");
        await using SseClient mallory = await SseClient.OpenAsync(broker.HttpPort, "topic=mallory.>", bearer: Mallory);
        await using var alicePublisher = await ProtocolClient.OpenAsync(broker.Port, "alice-pub", auth: Alice);
        await using var malloryPublisher = await ProtocolClient.OpenAsync(broker.Port, "mallory-pub", auth: Mallory);
        await malloryPublisher.SendAsync(w => FrameWriter.WritePublish(w, "alice.inbox"u8, default, PayloadFlags.None, "forged"u8));
        Frame refusal = await malloryPublisher.ReadAsync(); // the forgery was handled (refused, routed nowhere) before alice publishes
        Assert.Equal(ErrorCode.PermissionDenied, refusal.Error!.Value.Code);
        await alicePublisher.PublishAsync("alice.inbox", "for alice");
        await alicePublisher.PublishAsync("alice.inbox", "marker"); // the barrier: nothing came between
        await malloryPublisher.PublishAsync("mallory.own", "for mallory");

        Assert.Equal("for alice", (await alice.ReadEventAsync()).Json.GetProperty("text").GetString());
        Assert.Equal("marker", (await alice.ReadEventAsync()).Json.GetProperty("text").GetString());
        Assert.Equal("for mallory", (await mallory.ReadEventAsync()).Json.GetProperty("text").GetString());
    }

    [Fact]
    public async Task A_stalled_stream_meets_its_slow_consumer_policy_and_a_tcp_subscriber_gets_everything()
    {
        await using StalledStream feed = await StalledStream.StartAsync(SlowConsumerPolicy.Disconnect);
        await feed.PublishPastTheLimitAsync();

        List<SseEvent> events = await feed.Stalled.ReadToEndAsync(); // it reads again: what was buffered, then the last event
        SseEvent last = events[^1];
        Assert.Equal("error", last.Type);
        Assert.Equal("SlowConsumer", last.Json.GetProperty("code").GetString());
        Assert.True(events.Count - 1 < StalledStream.Published, $"{events.Count - 1} of {StalledStream.Published} delivered to a stream that never read");
        Assert.Equal(1, feed.Metrics["herald.protocol.errors", "error.type", "SlowConsumer"]); // this broker's: the one stalled stream
    }

    [Fact]
    public async Task With_drop_oldest_a_stalled_stream_is_told_how_many_it_missed_and_stays()
    {
        await using StalledStream feed = await StalledStream.StartAsync(SlowConsumerPolicy.DropOldest);
        await feed.PublishPastTheLimitAsync();

        await feed.Publisher.PublishAsync("feed", "last");
        long dropped = 0;
        while (true)
        {
            SseEvent e = await feed.Stalled.ReadEventAsync();
            if (e.Type == "dropped")
            {
                dropped += e.Json.GetProperty("dropped").GetInt64();
            }
            else if (e.Json.TryGetProperty("text", out JsonElement text) && text.GetString() == "last")
            {
                break;
            }
        }

        Assert.True(dropped > 0, "a stalled stream past its limit dropped nothing");
    }

    /// <summary>A stream on "feed" that never reads (4 KiB receive buffer) beside a TCP subscriber that paces the publisher, under <paramref name="policy"/> with 256 KiB pending.</summary>
    private sealed class StalledStream : IAsyncDisposable
    {
        public const int Published = 400; // 400 x 16 KiB as base64 JSON: far past the stalled stream's limit and any socket buffer

        private StalledStream(TestBroker broker, SseClient stalled, ProtocolClient tcp, ProtocolClient publisher, MetricsProbe metrics)
        {
            Broker = broker;
            Stalled = stalled;
            Tcp = tcp;
            Publisher = publisher;
            Metrics = metrics;
        }

        public TestBroker Broker { get; }

        public SseClient Stalled { get; }

        public ProtocolClient Tcp { get; }

        public ProtocolClient Publisher { get; }

        public MetricsProbe Metrics { get; }

        public static async Task<StalledStream> StartAsync(SlowConsumerPolicy policy)
        {
            TestBroker broker = await SseTests.StartAsync(o =>
            {
                o.Limits.MaxFrameBytes = 64 * 1024;
                o.Limits.MaxPendingBytes = 256 * 1024;
                o.Limits.SlowConsumerPolicy = policy;
                o.Limits.ErrorFlushTimeout = TimeSpan.FromMinutes(1); // it reads again only after the whole publishing loop, however long a busy machine takes: its ERROR waits for it
            });
            SseClient stalled = await SseClient.OpenAsync(broker.HttpPort, "topic=feed", receiveBuffer: 4096);
            ProtocolClient tcp = await ProtocolClient.OpenAsync(broker.Port);
            await tcp.SubscribeAsync(1, "feed");
            await tcp.PingPongAsync();
            ProtocolClient publisher = await ProtocolClient.OpenAsync(broker.Port);
            return new StalledStream(broker, stalled, tcp, publisher, broker.Metrics());
        }

        /// <summary>Publishes <see cref="Published"/> messages of 16 KiB, each read by the TCP subscriber, who gets every one.</summary>
        public async Task PublishPastTheLimitAsync()
        {
            byte[] payload = new byte[16 * 1024];
            for (int i = 0; i < Published; i++)
            {
                await Publisher.PublishAsync("feed", payload);
                await Tcp.ReadMessageAsync();
            }
        }

        public async ValueTask DisposeAsync()
        {
            Metrics.Dispose();
            await Publisher.DisposeAsync();
            await Tcp.DisposeAsync();
            await Stalled.DisposeAsync();
            await Broker.DisposeAsync();
        }
    }

    [Fact]
    public async Task An_idle_stream_gets_heartbeats()
    {
        await using var broker = await StartAsync(o => o.Sse.HeartbeatInterval = TimeSpan.FromMilliseconds(200));
        await using SseClient stream = await SseClient.OpenAsync(broker.HttpPort, "topic=quiet");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await stream.ReadCommentsAsync(2); // nothing but comments while nothing is published

        await publisher.PublishAsync("quiet", "after the heartbeats");
        Assert.Equal("after the heartbeats", (await stream.ReadEventAsync()).Json.GetProperty("text").GetString());
    }

    [Fact]
    public async Task Streams_count_against_the_connection_limit_with_tcp_and_are_listed_in_connz()
    {
        await using var broker = await StartAsync(o => o.Limits.MaxConnections = 2);
        await using var tcp = await ProtocolClient.OpenAsync(broker.Port);
        await using SseClient stream = await SseClient.OpenAsync(broker.HttpPort, "topic=a&client=dashboard");

        using (HttpResponseMessage full = await SseClient.SendAsync(broker.HttpPort, "topic=a"))
        {
            Assert.Equal(HttpStatusCode.ServiceUnavailable, full.StatusCode);
            Assert.Equal("TooManyConnections", (await full.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());
        }

        JsonElement connz = await broker.Monitoring.GetFromJsonAsync<JsonElement>("/connz");
        JsonElement listed = connz.GetProperty("connections").EnumerateArray().Single(c => c.GetProperty("transport").GetString() == "sse");
        Assert.Equal("dashboard", listed.GetProperty("name").GetString());
        JsonElement status = await broker.Monitoring.GetFromJsonAsync<JsonElement>("/statusz"); // the status page's tiles
        Assert.Equal((1, 1), (status.GetProperty("connections").GetProperty("sse").GetInt32(), status.GetProperty("connections").GetProperty("tcp").GetInt32()));
    }

    [Fact]
    public async Task Shutdown_delivers_what_was_queued_then_ends_the_stream_with_ShuttingDown()
    {
        TestBroker broker = await StartAsync(o => o.Limits.ShutdownDrainTimeout = TimeSpan.FromSeconds(5));
        await using (broker)
        {
            await using SseClient stream = await SseClient.OpenAsync(broker.HttpPort, "topic=news");
            await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
            await publisher.PublishAsync("news", "one");
            await publisher.PingPongAsync();
            Assert.Equal("one", (await stream.ReadEventAsync()).Json.GetProperty("text").GetString());

            Task stopping = broker.StopAsync();
            List<SseEvent> rest = await stream.ReadToEndAsync();
            await stopping;
            Assert.Equal("error", rest[^1].Type);
            Assert.Equal("ShuttingDown", rest[^1].Json.GetProperty("code").GetString());
        }
    }
}
