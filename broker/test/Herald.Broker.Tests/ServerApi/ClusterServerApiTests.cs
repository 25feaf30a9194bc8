using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Herald.Broker.History;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Herald.Testing;
using Xunit;

namespace Herald.Broker.Tests.ServerApi;

/// <summary>
/// The server API across a three-node cluster on a real redis-server: a publication through node A's API reaches a
/// subscriber on node C; its idempotency key repeated through node B is answered as a duplicate and not delivered
/// again (Redis holds the key on the topic's shard); any node reads a history topic's entries and the topic's presence.
/// </summary>
public sealed class ClusterServerApiTests
{
    private static async Task<JsonElement> PostAsync(TestBroker node, string path, object body)
    {
        using HttpResponseMessage response = await node.Api.SendAsync(TestApiKeys.Request(HttpMethod.Post, path, TestApiKeys.Admin, JsonContent.Create(body)));
        string text = await response.Content.ReadAsStringAsync();
        Assert.True(response.StatusCode == HttpStatusCode.OK, $"{path}: {(int)response.StatusCode} {text}");
        return JsonDocument.Parse(text).RootElement.Clone();
    }

    private static async Task<JsonElement> GetAsync(TestBroker node, string path)
    {
        using HttpResponseMessage response = await node.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, path, TestApiKeys.Admin));
        string text = await response.Content.ReadAsStringAsync();
        Assert.True(response.StatusCode == HttpStatusCode.OK, $"{path}: {(int)response.StatusCode} {text}");
        return JsonDocument.Parse(text).RootElement.Clone();
    }

    [Fact]
    public async Task A_publication_on_node_A_reaches_node_C_and_its_idempotency_key_repeated_on_node_B_is_not_delivered_twice()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3, configure: o =>
        {
            TestApiKeys.Configure(o);
            o.History.Topics.Add(new HistoryRule { Pattern = "kept.>", MaxMessages = 10, MaxAge = TimeSpan.FromMinutes(5) });
        });
        await using ProtocolClient subscriber = await ProtocolClient.OpenAsync(cluster[2].Port, "on-c", capabilities: Capabilities.Headers | Capabilities.Presence);
        await subscriber.SubscribeAsync(1, "orders.*");
        await subscriber.SubscribeAsync(2, "room.1", SubscribeOptions.Join);
        await subscriber.PingPongAsync(); // answered once Redis has the subscriptions

        var paid = new { topic = "orders.1", data = "paid", idempotency_key = "order-1-paid" };
        Assert.False((await PostAsync(cluster[0], "/api/v1/publish", paid)).GetProperty("duplicate").GetBoolean());
        Assert.True((await PostAsync(cluster[1], "/api/v1/publish", paid)).GetProperty("duplicate").GetBoolean());
        await PostAsync(cluster[1], "/api/v1/publish", new { topic = "orders.1", data = "marker" }); // after the repeat, from the same node and topic

        var received = new List<string>();
        while (!received.Contains("paid") || !received.Contains("marker"))
        {
            received.Add((await subscriber.ReadMessageAsync()).Text);
        }

        Assert.Equal(1, received.Count(text => text == "paid"));
        Assert.Equal(2, received.Count);

        for (int i = 1; i <= 3; i++)
        {
            await PostAsync(cluster[i % 3], "/api/v1/publish", new { topic = "kept.a", data = $"m{i}" });
        }

        JsonElement history = await Until.Value(
            () => GetAsync(cluster[2], "/api/v1/history?topic=kept.a&after=1"),
            page => page.GetProperty("entries").GetArrayLength() == 2,
            "node C reads the two entries after offset 1 from Redis");
        Assert.Equal(["m2", "m3"], history.GetProperty("entries").EnumerateArray().Select(e => System.Text.Encoding.UTF8.GetString(Convert.FromBase64String(e.GetProperty("data_base64").GetString()!))));

        JsonElement presence = await Until.Value(
            () => GetAsync(cluster[0], "/api/v1/presence?topic=room.1"),
            page => page.GetProperty("members").GetInt64() == 1,
            "node A sees node C's member");
        Assert.Single(presence.GetProperty("entries").EnumerateArray());

        JsonElement info = await Until.Value(() => GetAsync(cluster[1], "/api/v1/info"), i => i.GetProperty("nodes").GetArrayLength() == 3, "node B knows three nodes");
        Assert.False(string.IsNullOrEmpty(info.GetProperty("node").GetString()));
    }
}
