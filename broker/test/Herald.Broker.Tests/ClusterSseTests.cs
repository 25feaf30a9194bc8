using System.Text.Json;
using Herald.Broker.History;
using Herald.Broker.Tests.Infrastructure;

namespace Herald.Broker.Tests;

/// <summary>
/// Server-Sent Events in a cluster (protocol-spec/sse.md §3, cluster.md §9) on real redis-server and real nodes:
/// a stream on one node gets what TCP clients of another publish, and a browser that reconnects to a third node
/// with its <c>Last-Event-ID</c> resumes from the cluster's history in Redis, with no gap and no duplicate.
/// </summary>
public sealed class ClusterSseTests
{
    [Fact]
    public async Task A_stream_gets_publications_from_another_node_and_resumes_on_a_third_from_the_clusters_history()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 3, configure: o => o.History.Topics.Add(new HistoryRule { Pattern = "feed.>", MaxMessages = 1000 }));
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        const string Query = "topic=feed.a&topic=chat.*";
        string lastId;
        await using (SseClient first = await SseClient.OpenAsync(cluster[1].HttpPort, Query)) // live on every node once open
        {
            SseEvent live = await first.ReadEventAsync();
            Assert.Equal(("status", "Live"), (live.Type, live.Json.GetProperty("description").GetString()));
            await publisher.PublishAsync("feed.a", "m1");
            await publisher.PublishAsync("chat.lobby", "hello");
            string[] two = [(await first.ReadEventAsync()).Json.GetProperty("text").GetString()!, (await first.ReadEventAsync()).Json.GetProperty("text").GetString()!];
            Assert.Equal(["hello", "m1"], two.Order()); // two topics: no order between them across nodes (cluster.md §4)
            lastId = first.LastEventId!;
            Assert.StartsWith("1:", lastId, StringComparison.Ordinal);
        }

        for (int i = 2; i <= 4; i++)
        {
            await publisher.PublishAsync("feed.a", $"m{i}");
        }

        await publisher.PingPongAsync(); // handed to Redis, in order, before the resume reads it
        await using SseClient back = await SseClient.OpenAsync(cluster[2].HttpPort, Query, lastEventId: lastId); // a node that never had this topic
        var texts = new List<string>();
        var statuses = new Dictionary<string, JsonElement>();
        while (texts.Count < 3 || statuses.Count < 2)
        {
            SseEvent e = await back.ReadEventAsync();
            if (e.Type == "status")
            {
                statuses[e.Json.GetProperty("topic").GetString()!] = e.Json;
            }
            else
            {
                texts.Add(e.Json.GetProperty("text").GetString()!);
            }
        }

        await publisher.PublishAsync("feed.a", "m5");
        texts.Add((await back.ReadEventAsync()).Json.GetProperty("text").GetString()!);
        Assert.Equal(["m2", "m3", "m4", "m5"], texts);
        Assert.Equal("Recovered", statuses["feed.a"].GetProperty("description").GetString());
        Assert.Equal(410, statuses["chat.*"].GetProperty("status").GetInt32());
        Assert.StartsWith("5:", back.LastEventId, StringComparison.Ordinal);
    }
}
