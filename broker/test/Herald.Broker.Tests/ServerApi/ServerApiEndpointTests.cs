using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Herald.Broker.History;
using Microsoft.Extensions.DependencyInjection;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Xunit;

namespace Herald.Broker.Tests.ServerApi;

/// <summary>
/// Each server API endpoint over real HTTP against the real broker, with TCP clients as the subscribers: what a
/// publication reaches (proved with a PING/PONG barrier), idempotency, the batch's order and per-item results, the
/// caps (413, 400), and what the read endpoints answer.
/// </summary>
public sealed class ServerApiEndpointTests
{
    private static readonly string[] BroadcastTopics = ["b.x", "b.y", "b.z"];
    private static readonly string[] ThreeTopics = ["a", "b", "c"];

    private static async Task<HttpResponseMessage> PostAsync(TestBroker broker, string path, object body, string key = TestApiKeys.Publisher) =>
        await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Post, path, key, JsonContent.Create(body)));

    private static async Task<JsonElement> GetJsonAsync(TestBroker broker, string path, string key = TestApiKeys.Reader)
    {
        using HttpResponseMessage response = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, path, key));
        string text = await response.Content.ReadAsStringAsync();
        Assert.True(response.StatusCode == HttpStatusCode.OK, $"{path}: {(int)response.StatusCode} {text}");
        return JsonDocument.Parse(text).RootElement.Clone();
    }

    [Fact]
    public async Task A_publication_reaches_a_tcp_subscriber_once_and_its_idempotency_key_repeated_is_not_delivered_again()
    {
        await using TestBroker broker = await TestBroker.StartAsync(TestApiKeys.Configure);
        await using ProtocolClient subscriber = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Headers);
        await subscriber.SubscribeAsync(1, "orders.*");
        await subscriber.PingPongAsync();

        var publication = new { topic = "orders.1", data = "paid", headers = new Dictionary<string, string> { ["k"] = "v" }, idempotency_key = "order-1-paid" };
        using HttpResponseMessage first = await PostAsync(broker, "/api/v1/publish", publication);
        Assert.Equal(HttpStatusCode.OK, first.StatusCode);
        Assert.False((await first.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("duplicate").GetBoolean());
        using HttpResponseMessage repeat = await PostAsync(broker, "/api/v1/publish", publication);
        Assert.Equal(HttpStatusCode.OK, repeat.StatusCode);
        Assert.True((await repeat.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("duplicate").GetBoolean());
        using HttpResponseMessage marker = await PostAsync(broker, "/api/v1/publish", new { topic = "orders.marker", data_base64 = Convert.ToBase64String([1, 2, 3]) });
        Assert.Equal(HttpStatusCode.OK, marker.StatusCode);

        Frame paid = await subscriber.ReadMessageAsync();
        Assert.Equal(("orders.1", "paid"), (paid.Topic, paid.Text));
        Assert.Equal(["v"], paid.Header("k"));
        Frame last = await subscriber.ReadMessageAsync(); // the marker was published after the repeat: nothing came between
        Assert.Equal("orders.marker", last.Topic);
        Assert.Equal([1, 2, 3], last.Payload!);
        Assert.Empty(await subscriber.PingPongAsync());
    }

    [Fact]
    public async Task A_publication_is_held_to_a_clients_rules()
    {
        await using TestBroker broker = await TestBroker.StartAsync(TestApiKeys.Configure);
        using HttpResponseMessage badTopic = await PostAsync(broker, "/api/v1/publish", new { topic = "orders.*", data = "x" });
        Assert.Equal(HttpStatusCode.BadRequest, badTopic.StatusCode);
        using HttpResponseMessage tooLarge = await PostAsync(broker, "/api/v1/publish", new { topic = "a", data = new string('x', broker.Services.GetRequiredService<Herald.Broker.Sessions.LimitOptions>().MaxPayloadBytes + 1) });
        Assert.Equal(HttpStatusCode.BadRequest, tooLarge.StatusCode);
        Assert.Contains("max_payload", await tooLarge.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        using HttpResponseMessage reserved = await PostAsync(broker, "/api/v1/publish", new { topic = "a", data = "x", headers = new Dictionary<string, string> { ["Herald-Offset"] = "1" } });
        Assert.Equal(HttpStatusCode.BadRequest, reserved.StatusCode);
        using HttpResponseMessage both = await PostAsync(broker, "/api/v1/publish", new { topic = "a", data = "x", data_base64 = "eA==" });
        Assert.Equal(HttpStatusCode.BadRequest, both.StatusCode);
    }

    [Fact]
    public async Task A_batch_is_applied_in_order_with_a_result_per_item_and_a_broadcast_reaches_every_topic()
    {
        await using TestBroker broker = await TestBroker.StartAsync(TestApiKeys.Configure);
        await using ProtocolClient subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "b.>");
        await subscriber.PingPongAsync();

        using HttpResponseMessage batch = await PostAsync(broker, "/api/v1/batch", new
        {
            items = new object[] { new { topic = "b.1", data = "one" }, new { topic = "b.*", data = "bad" }, new { topic = "b.2", data = "two", idempotency_key = "k" }, new { topic = "b.2", data = "two", idempotency_key = "k" } },
        });
        Assert.Equal(HttpStatusCode.OK, batch.StatusCode);
        JsonElement[] results = [.. (await batch.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("results").EnumerateArray()];
        Assert.Equal([200, 400, 200, 200], results.Select(r => r.GetProperty("status").GetInt32()));
        Assert.True(results[3].GetProperty("duplicate").GetBoolean());
        Assert.False(string.IsNullOrEmpty(results[1].GetProperty("detail").GetString()));

        using HttpResponseMessage broadcast = await PostAsync(broker, "/api/v1/broadcast", new { topics = BroadcastTopics, data = "all" });
        Assert.Equal(HttpStatusCode.OK, broadcast.StatusCode);

        var received = new List<string>();
        for (int i = 0; i < 5; i++)
        {
            Frame message = await subscriber.ReadMessageAsync();
            received.Add($"{message.Topic}={message.Text}");
        }

        Assert.Equal(["b.1=one", "b.2=two", "b.x=all", "b.y=all", "b.z=all"], received);
        Assert.Empty(await subscriber.PingPongAsync());
    }

    [Fact]
    public async Task The_caps_are_answered_413_and_400_before_anything_is_published()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            TestApiKeys.Configure(o);
            o.Api.MaxBodyBytes = 4096;
            o.Api.MaxBatchItems = 2;
            o.Api.MaxBroadcastTopics = 2;
        });
        await using ProtocolClient subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, ">");
        await subscriber.PingPongAsync();

        using HttpResponseMessage body = await PostAsync(broker, "/api/v1/publish", new { topic = "a", data = new string('x', 5000) });
        Assert.Equal(HttpStatusCode.RequestEntityTooLarge, body.StatusCode);
        Assert.Contains("BodyTooLarge", await body.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        using HttpResponseMessage items = await PostAsync(broker, "/api/v1/batch", new { items = new[] { new { topic = "a" }, new { topic = "b" }, new { topic = "c" } } });
        Assert.Equal(HttpStatusCode.BadRequest, items.StatusCode);
        Assert.Contains("TooManyItems", await items.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        using HttpResponseMessage topics = await PostAsync(broker, "/api/v1/broadcast", new { topics = ThreeTopics, data = "x" });
        Assert.Equal(HttpStatusCode.BadRequest, topics.StatusCode);
        Assert.Contains("TooManyTopics", await topics.Content.ReadAsStringAsync(), StringComparison.Ordinal);

        Assert.Empty(await subscriber.PingPongAsync()); // none of them published anything
    }

    [Fact]
    public async Task A_publish_only_key_cannot_read_and_a_read_key_cannot_publish()
    {
        await using TestBroker broker = await TestBroker.StartAsync(TestApiKeys.Configure);
        foreach (string path in new[] { "/api/v1/history?topic=a", "/api/v1/presence?topic=a", "/api/v1/topics", "/api/v1/info" })
        {
            using HttpResponseMessage read = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, path, TestApiKeys.Publisher));
            Assert.Equal(HttpStatusCode.Forbidden, read.StatusCode);
        }

        using HttpResponseMessage publish = await PostAsync(broker, "/api/v1/publish", new { topic = "a", data = "x" }, TestApiKeys.Reader);
        Assert.Equal(HttpStatusCode.Forbidden, publish.StatusCode);
    }

    [Fact]
    public async Task History_presence_topics_and_info_are_read()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            TestApiKeys.Configure(o);
            o.History.Topics.Add(new HistoryRule { Pattern = "kept.>", MaxMessages = 10, MaxAge = TimeSpan.FromMinutes(5) });
        });
        await using ProtocolClient member = await ProtocolClient.OpenAsync(broker.Port, "member", capabilities: Capabilities.Headers | Capabilities.Presence);
        await member.SubscribeAsync(1, "room.1", SubscribeOptions.Join);
        await member.SubscribeAsync(2, "kept.>");
        await member.PingPongAsync();
        for (int i = 1; i <= 3; i++)
        {
            using HttpResponseMessage published = await PostAsync(broker, "/api/v1/publish", new { topic = "kept.a", data = $"m{i}" });
            Assert.Equal(HttpStatusCode.OK, published.StatusCode);
        }

        JsonElement history = await GetJsonAsync(broker, "/api/v1/history?topic=kept.a&after=1&limit=1");
        Assert.Equal(3ul, history.GetProperty("last").GetUInt64());
        JsonElement entry = Assert.Single(history.GetProperty("entries").EnumerateArray());
        Assert.Equal((2ul, "m2"), (entry.GetProperty("offset").GetUInt64(), System.Text.Encoding.UTF8.GetString(Convert.FromBase64String(entry.GetProperty("data_base64").GetString()!))));
        Assert.Equal(2ul, history.GetProperty("next").GetUInt64());
        JsonElement rest = await GetJsonAsync(broker, "/api/v1/history?topic=kept.a&after=2");
        Assert.Equal(["m3"], rest.GetProperty("entries").EnumerateArray().Select(e => System.Text.Encoding.UTF8.GetString(Convert.FromBase64String(e.GetProperty("data_base64").GetString()!))));
        using HttpResponseMessage none = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/history?topic=plain", TestApiKeys.Reader));
        Assert.Equal(HttpStatusCode.NotFound, none.StatusCode);

        JsonElement presence = await GetJsonAsync(broker, "/api/v1/presence?topic=room.1");
        Assert.Equal(1, presence.GetProperty("members").GetInt64());
        Assert.Single(presence.GetProperty("entries").EnumerateArray());

        JsonElement topics = await GetJsonAsync(broker, "/api/v1/topics?prefix=kept");
        Assert.Equal(["kept.>"], topics.GetProperty("entries").EnumerateArray().Select(t => t.GetProperty("pattern").GetString()));
        Assert.Equal((1, 0), (topics.GetProperty("nodes").GetArrayLength(), topics.GetProperty("silent").GetArrayLength())); // this node alone, nobody silent
        JsonElement paged = await GetJsonAsync(broker, "/api/v1/topics?limit=1");
        Assert.Equal("kept.>", paged.GetProperty("next").GetString());
        JsonElement second = await GetJsonAsync(broker, "/api/v1/topics?limit=1&after=kept.%3E");
        Assert.Equal(["room.1"], second.GetProperty("entries").EnumerateArray().Select(t => t.GetProperty("pattern").GetString()));

        JsonElement info = await GetJsonAsync(broker, "/api/v1/info");
        Assert.Equal(1, info.GetProperty("connections").GetInt32());
        Assert.True(info.GetProperty("published").GetInt64() >= 3);
    }

    [Fact]
    public async Task A_full_idempotency_table_is_answered_503_with_Retry_After_and_publications_without_a_key_carry_on()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            TestApiKeys.Configure(o);
            o.Api.MaxIdempotencyKeys = 2;
        });
        for (int i = 0; i < 2; i++)
        {
            using HttpResponseMessage kept = await PostAsync(broker, "/api/v1/publish", new { topic = "a", data = "x", idempotency_key = $"k{i}" });
            Assert.Equal(HttpStatusCode.OK, kept.StatusCode);
        }

        using HttpResponseMessage full = await PostAsync(broker, "/api/v1/publish", new { topic = "a", data = "x", idempotency_key = "k2" });
        Assert.Equal(HttpStatusCode.ServiceUnavailable, full.StatusCode);
        Assert.Contains("IdempotencyFull", await full.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        Assert.True(full.Headers.Contains("Retry-After"));
        using HttpResponseMessage repeat = await PostAsync(broker, "/api/v1/publish", new { topic = "a", data = "x", idempotency_key = "k0" });
        Assert.True((await repeat.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("duplicate").GetBoolean()); // still remembered
        using HttpResponseMessage plain = await PostAsync(broker, "/api/v1/publish", new { topic = "a", data = "x" });
        Assert.Equal(HttpStatusCode.OK, plain.StatusCode);
    }
}
