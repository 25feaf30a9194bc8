using System.Globalization;
using System.Net;
using Herald.Broker.History;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using StackExchange.Redis;
using Xunit.Abstractions;
using StreamPosition = Herald.Protocol.StreamPosition;

namespace Herald.Broker.Tests;

/// <summary>
/// What a resume may cost (spec §13, cluster.md §9), on real sockets and, for the cluster, a real redis-server this test
/// owns: a refused request makes nothing; a resume reads from Redis only what the connection may be sent; a topic named
/// twice in one stream is refused before anything is read; an entry written straight into Redis is not replayed.
/// </summary>
public sealed class HistoryBoundsTests(ITestOutputHelper output)
{
    private const string AliceToken = "alice-token-0123456789";
    private const string MalloryToken = "mallory-token-0123456789";
    private const int PayloadBytes = 256 * 1024;
    private const int Kept = 40;
    private const int MaxPendingBytes = 1024 * 1024;
    private const long CappedBytes = 3L * (PayloadBytes + 512); // three envelopes

    [Fact]
    public async Task Refused_sse_streams_create_no_history_and_alices_history_stays()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.History.Topics.Add(new HistoryRule { Pattern = "orders.>", MaxMessages = 100 });
            o.History.MaxTopics = 4;
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.FailureDelay = TimeSpan.Zero;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Publish = { "orders.>" }, Subscribe = { "orders.>" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "mallory", Sha256 = TestTokens.Sha256(MalloryToken) });
        });
        HistoryStore store = broker.Services.GetRequiredService<HistorySlot>().Store!;
        await using var alice = await ProtocolClient.OpenAsync(broker.Port, "alice", capabilities: Capabilities.Headers, auth: AliceToken);
        await alice.SubscribeAsync(1, "orders.important");
        await alice.PublishAsync("orders.important", "m1");
        StreamPosition kept = (await alice.ReadMessageAsync()).Position!.Value;

        for (int i = 0; i < 20; i++)
        {
            using HttpResponseMessage refused = await SseClient.SendAsync(broker.HttpPort, $"topic=orders.m{i}", lastEventId: i % 2 == 0 ? null : $"0:{kept.Epoch}", bearer: MalloryToken);
            Assert.Equal(HttpStatusCode.Forbidden, refused.StatusCode);
        }

        output.WriteLine($"after 20 refused streams: {store.TopicCount} histories, {store.EvictedTopics} evicted");
        Assert.Equal((1, 0L), (store.TopicCount, store.EvictedTopics));
        await alice.PublishAsync("orders.important", "m2");
        Assert.Equal("m2", (await alice.ReadMessageAsync()).Text); // the bystander carries on
        await using SseClient back = await SseClient.OpenAsync(broker.HttpPort, "topic=orders.important", lastEventId: $"{kept.Offset}:{kept.Epoch}", bearer: AliceToken);
        Assert.Equal("Recovered", (await back.ReadEventAsync()).Json.GetProperty("description").GetString());
        Assert.Equal("m2", (await back.ReadEventAsync()).Json.GetProperty("text").GetString());
    }

    [Fact]
    public async Task A_stream_naming_a_topic_twice_is_refused_before_its_history_is_read()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.History.Topics.Add(new HistoryRule { Pattern = "orders.>", MaxMessages = 100 }));
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher", capabilities: Capabilities.Headers);
        await publisher.SubscribeAsync(1, "orders.eu");
        await publisher.PublishAsync("orders.eu", "m1");
        StreamPosition at = (await publisher.ReadMessageAsync()).Position!.Value;
        HistoryStore store = broker.Services.GetRequiredService<HistorySlot>().Store!;

        using HttpResponseMessage twice = await SseClient.SendAsync(broker.HttpPort, "topic=orders.eu&topic=orders.eu", lastEventId: $"0:{at.Epoch},0:{at.Epoch}");

        Assert.Equal(HttpStatusCode.BadRequest, twice.StatusCode);
        Assert.Contains("more than once", await twice.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        Assert.Equal(0, store.Recovered + store.NotRecovered); // nothing was resumed, nothing read
        await publisher.PublishAsync("orders.eu", "m2");
        Assert.Equal("m2", (await publisher.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task A_resume_of_a_big_history_on_another_node_reads_from_redis_what_its_connection_may_hold_and_a_duplicated_topic_nothing()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configure: o =>
        {
            o.History.Topics.Add(new HistoryRule { Pattern = "feed.capped", MaxMessages = 1000, MaxBytes = CappedBytes });
            o.History.Topics.Add(new HistoryRule { Pattern = "feed.>", MaxMessages = 1000, MaxBytes = 64L * 1024 * 1024 });
            o.Limits.MaxFrameBytes = 2 * PayloadBytes;
            o.Limits.MaxPendingBytes = MaxPendingBytes;
        });
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IServer server = redis.GetServer(cluster.Redis.Configuration);
        await using var bystander = await ProtocolClient.OpenAsync(cluster[0].Port, "bystander", capabilities: Capabilities.Headers);
        await bystander.SubscribeAsync(1, "feed.other");
        await bystander.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        byte[] payload = new byte[PayloadBytes];
        for (int i = 0; i < Kept; i++)
        {
            payload[0] = (byte)i;
            await publisher.PublishAsync("feed.big", payload);
            await publisher.PingPongAsync();
        }

        await Until.True(async () => await redis.GetDatabase().StreamLengthAsync("{herald}:s:feed.big") == Kept, "the history is in Redis");

        // A rule's MaxBytes bounds what Redis keeps of a topic, as MaxMessages does.
        for (int i = 0; i < 10; i++)
        {
            await publisher.PublishAsync("feed.capped", payload);
        }

        await publisher.PingPongAsync();
        await Until.True(async () => (long)await redis.GetDatabase().HashGetAsync("{herald}:h:feed.capped", "o") == 10, "the capped topic's publications positioned");
        long cappedLength = await redis.GetDatabase().StreamLengthAsync("{herald}:s:feed.capped");
        long cappedBytes = (long)await redis.GetDatabase().HashGetAsync("{herald}:h:feed.capped", "b");
        long cappedMemory = (long)(await redis.GetDatabase().ExecuteAsync("MEMORY", "USAGE", "{herald}:s:feed.capped"));
        output.WriteLine($"feed.capped: 10 x {PayloadBytes} B published, MaxBytes {CappedBytes}: XLEN {cappedLength}, counted {cappedBytes} B, MEMORY USAGE {cappedMemory} B");
        Assert.Equal(3, cappedLength); // three envelopes fit, the fourth passes it
        Assert.InRange(cappedMemory, 1, (CappedBytes * 5 / 4) + (64 * 1024)); // its allocator rounds a 256 KiB value up to 320 KiB
        string epoch = (string)(await redis.GetDatabase().HashGetAsync("{herald}:h:feed.big", "e"))!;

        long before = await OutputBytesAsync(server);
        await using (var greedy = await ProtocolClient.OpenAsync(cluster[1].Port, "greedy", capabilities: Capabilities.Headers))
        {
            await greedy.SubscribeAsync(1, "feed.big", new StreamPosition(0, epoch)); // 10 MiB kept, 1 MiB the most it may have queued
            Frame status = await greedy.ReadMessageAsync();
            output.WriteLine($"the resume's status: {status.Status} {status.Header(StreamPosition.DescriptionHeader)[0]}");
            Assert.Equal(("410", "Too much to replay"), (status.Status, status.Header(StreamPosition.DescriptionHeader)[0][..18]));
            Assert.Empty(await greedy.PingPongAsync()); // nothing replayed; the connection stays
        }

        long resumeBytes = await OutputBytesAsync(server) - before;
        before = await OutputBytesAsync(server);
        string ids = string.Join(',', Enumerable.Repeat($"0:{epoch}", 8));
        using (HttpResponseMessage eight = await SseClient.SendAsync(cluster[1].HttpPort, string.Join('&', Enumerable.Repeat("topic=feed.big", 8)), lastEventId: ids))
        {
            output.WriteLine($"one stream naming feed.big 8 times: {(int)eight.StatusCode}");
            Assert.Equal(HttpStatusCode.BadRequest, eight.StatusCode);
        }

        long duplicateBytes = await OutputBytesAsync(server) - before;
        output.WriteLine($"history {Kept} x {PayloadBytes} B in Redis; Redis sent {resumeBytes} B for one TCP resume (pending limit {MaxPendingBytes} B), {duplicateBytes} B for the 8-times stream");
        Assert.InRange(resumeBytes, 1, MaxPendingBytes + (2 * PayloadBytes) + (64 * 1024));
        Assert.InRange(duplicateBytes, 0, 64 * 1024);

        await publisher.PublishAsync("feed.other", "still here");
        Assert.Equal("still here", (await bystander.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task With_a_cluster_secret_an_entry_written_into_redis_is_not_replayed()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configure: o =>
        {
            o.History.Topics.Add(new HistoryRule { Pattern = "feed.>", MaxMessages = 100 });
            o.Cluster.Secret = "our-cluster-secret-0123456789";
        });
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        IDatabase db = redis.GetDatabase();
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        await publisher.PublishAsync("feed.secret", "for the secret's readers only"); // signed by node 0, kept in its own stream
        await publisher.PublishAsync("feed.public", "p1");
        await publisher.PingPongAsync();
        await Until.True(async () => await db.StreamLengthAsync("{herald}:s:feed.public") == 1 && await db.StreamLengthAsync("{herald}:s:feed.secret") == 1, "both kept in Redis");
        string epoch = (string)(await db.HashGetAsync("{herald}:h:feed.public", "e"))!;

        // Whoever reaches Redis copies node 0's signed envelope of feed.secret into feed.public's stream, as offset 2.
        StreamEntry secret = (await db.StreamRangeAsync("{herald}:s:feed.secret"))[0];
        await db.HashIncrementAsync("{herald}:h:feed.public", "o");
        await db.StreamAddAsync("{herald}:s:feed.public", [new NameValueEntry("t", secret["t"]), new NameValueEntry("d", secret["d"])], "2-0");

        await using var reader = await ProtocolClient.OpenAsync(cluster[1].Port, "reader", capabilities: Capabilities.Headers);
        await reader.SubscribeAsync(1, "feed.public", new StreamPosition(0, epoch));
        Frame status = await reader.ReadMessageAsync();
        await publisher.PublishAsync("feed.public", "p3");
        var frames = new List<Frame>();
        while (frames.Count == 0 || frames[^1].Text != "p3")
        {
            frames.Add(await reader.ReadMessageAsync());
        }

        output.WriteLine($"status {status.Status} {status.Header(StreamPosition.DescriptionHeader)[0]}; replayed: {string.Join(", ", frames.Select(f => $"{f.Topic}:{f.Text}"))}");
        Assert.Equal(["feed.public:p1", "feed.public:p3"], frames.Select(f => $"{f.Topic}:{f.Text}"));
    }

    private static async Task<long> OutputBytesAsync(IServer server)
    {
        string stats = (await server.InfoRawAsync("stats"))!;
        foreach (string line in stats.Split('\n'))
        {
            if (line.StartsWith("total_net_output_bytes:", StringComparison.Ordinal))
            {
                return long.Parse(line.AsSpan("total_net_output_bytes:".Length).Trim(), CultureInfo.InvariantCulture);
            }
        }

        throw new InvalidOperationException("INFO stats has no total_net_output_bytes.");
    }
}
