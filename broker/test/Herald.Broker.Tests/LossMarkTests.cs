using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// A long-poll session never loses messages silently (longpoll.md §2, cluster.md §10): a takeover marks every
/// subscription it could not resume (<c>Herald-Gaps</c>, <c>"gaps"</c>), messages shed on their way in from another
/// node are counted in <c>Herald-Dropped</c>, and either mark comes again until the client acks past it, through any
/// node. Real nodes on a real <c>redis-server</c>; the owner that dies is a real broker process, SIGKILLed.
/// </summary>
public sealed class LossMarkTests(ITestOutputHelper output)
{

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task A_session_whose_node_is_killed_is_told_which_subscriptions_may_have_lost_messages_until_it_acks_past(bool headers)
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            o.Cluster.HeartbeatInterval = TimeSpan.FromSeconds(1);
            o.LongPoll.PollTimeout = TimeSpan.FromSeconds(1);
        });
        await using var doomed = BrokerProcess.StartTcpAndHttp(
            $"--Herald:Cluster:Redis={cluster.Redis.Configuration}",
            "--Herald:Cluster:HeartbeatInterval=00:00:01",
            "--Herald:LongPoll:PollTimeout=00:00:01");
        using var doomedHttp = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{await doomed.HttpPortAsync()}"), Timeout = TimeSpan.FromSeconds(60) };
        await Until.True(async () => (await NodesAsync(cluster[0])).Length == 3, "node 0 lists the doomed node");

        // The session (no history anywhere) is held by the node that will die; the bystander's by node 0.
        LongPollClient session = await LongPollClient.CreateAsync(doomedHttp, headers ? new { headers = true } : new { });
        await SubscribeAsync(session, 1, "news.lp");
        await SubscribeAsync(session, 2, "news.other");
        LongPollClient bystander = await LongPollClient.CreateAsync(cluster[0].Http);
        await bystander.SubscribeAsync(1, "news.lp");
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await publisher.PublishAsync("news.lp", "before");
        Poll before = await UntilMessagesAsync(session.Via(cluster[0].Http), 0);
        Assert.Equal(["before"], before.Texts);

        doomed.Kill();
        await publisher.PublishAsync("news.lp", "meanwhile"); // nobody holds the session's subscriptions now

        // Polled through node 1 until the takeover answers: both subscriptions marked, nothing counted.
        Poll marked = await UntilAsync(session.Via(cluster[1].Http), before.Ack, p => p.Gaps.Length > 0 || p.Texts.Count > 0);
        output.WriteLine($"after the takeover: gaps [{string.Join(",", marked.Gaps)}], dropped {marked.Dropped}, messages [{string.Join(",", marked.Texts)}], first {marked.First}");
        Assert.Equal([1u, 2u], marked.Gaps);
        Assert.Equal(0, marked.Dropped);
        Assert.DoesNotContain("meanwhile", marked.Texts);

        // Its answer lost: the same ack through node 0 (as JSON) brings the mark again.
        Poll again = await PollAsync(session.Via(cluster[0].Http), before.Ack, json: true);
        Assert.Equal([1u, 2u], again.Gaps);
        Assert.Equal(marked.Ack, again.Ack);

        // Acked past it: gone; what is published from now on comes, unmarked.
        await publisher.PublishAsync("news.lp", "after");
        Poll after = await UntilMessagesAsync(session.Via(cluster[0].Http), again.Ack);
        Assert.Equal(["after"], after.Texts);
        Assert.Equal(0, after.Dropped);
        Assert.Empty(after.Gaps);

        // The bystander, on a node that lived, got everything.
        Poll watched = await UntilMessagesAsync(bystander, 0, count: 3);
        Assert.Equal(["before", "meanwhile", "after"], watched.Texts);
        Assert.Empty(watched.Gaps);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Messages_shed_on_their_way_in_from_another_node_are_reported_to_a_long_poll_session_as_dropped(bool shared)
    {
        const int Flood = InboundFlood.Publications, Calm = InboundFlood.Calm;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configureNode: (node, o) =>
        {
            o.Cluster.MaxInboundMessages = node == 0 ? 8 : 10_000;
            o.Cluster.ShareLongPollSessions = shared;
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
        });

        // On node 0, the victim (a long-poll session that takes Zstd: small frames) and a TCP bystander; the publisher on node 1.
        LongPollClient victim = await LongPollClient.CreateAsync(cluster[0].Http, new { zstd = true });
        await victim.SubscribeAsync(1, "flood");
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(cluster[0].Port, "bystander");
        await bystander.SubscribeAsync(1, "calm");
        await bystander.PingPongAsync();
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");

        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher", capabilities: Capabilities.Zstd);
        Herald.Broker.Cluster.ClusterMetrics metrics = cluster[0].Engine().Metrics;
        await InboundFlood.SendAsync(publisher, metrics); // node 0 cannot keep up
        await publisher.PublishAsync("flood", "end");

        long received = 0, told = 0, ack = 0;
        LongPollClient via = shared ? victim.Via(cluster[1].Http) : victim;
        for (bool ended = false; !ended;)
        {
            Poll poll = await PollAsync(via, ack);
            Assert.Equal(HttpStatusCode.OK, poll.Status);
            Assert.Empty(poll.Gaps);
            told += poll.Dropped;
            received += poll.Texts.Count(t => t != "end");
            ended = poll.Texts.Contains("end");
            ack = poll.Ack;
        }

        output.WriteLine($"{Flood} publications from node 1 ({(shared ? "shared" : "local")} session): node 0 shed {metrics.InboundShed}, routed {metrics.Received}; the session received {received} and was told of {told} dropped");
        Assert.True(metrics.InboundShed > 0, "node 0 shed nothing");
        Assert.Equal(metrics.InboundShed, told); // each shed publication told to its one subscriber
        Assert.Equal(Flood, received + told);    // nothing lost silently
        for (int i = 0; i < Calm; i++)
        {
            Assert.Equal($"calm {i}", (await bystander.ReadMessageAsync()).Text);
        }
    }

    [Fact]
    public async Task A_takeovers_mark_rewritten_in_redis_is_not_believed_and_what_it_held_is_still_reported_as_a_loss()
    {
        await using TestCluster cluster = await TestCluster.StartSignedAsync(nodes: 3);
        using MetricsProbe metrics1 = cluster[1].Metrics();
        using MetricsProbe metrics2 = cluster[2].Metrics();
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        IDatabase db = redis.GetDatabase();
        LongPollClient on0 = await LongPollClient.CreateAsync(cluster[0].Http);
        await on0.SubscribeAsync(1, "plain.t");
        LongPollClient on1 = on0.Via(cluster[1].Http);
        LongPollClient bystander = await LongPollClient.CreateAsync(cluster[2].Http);
        await bystander.SubscribeAsync(1, "plain.t");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[2].Port, "publisher");
        await publisher.PublishAsync("plain.t", "m1");
        Poll first = await UntilMessagesAsync(on1, 0);
        Assert.Equal(["m1"], first.Texts);

        // Node 0 stops (its lease given up); the next request, a subscription through node 1, takes the session over
        // and writes the mark for sid 1. A writer to Redis replaces that mark by one naming no subscription, with its tag.
        await cluster[0].StopAsync();
        using (HttpResponseMessage subscribed = await cluster[1].Http.PostAsJsonAsync($"{on0.Base}/subscriptions", new { sid = 2, pattern = "plain.u" }))
        {
            Assert.Equal(HttpStatusCode.NoContent, subscribed.StatusCode);
        }

        RedisKey stream = "{herald}:lq:" + on0.Session;
        StreamEntry mark = (await db.StreamRangeAsync(stream)).Single(e => e["u"] == "0"); // one message, of sid 0: a range entry
        string? frame = await db.HashGetAsync((string)mark["f"]!, (string)mark["a"]!); // its frame, in its append's frame hash
        output.WriteLine($"the takeover's mark: {mark.Id} frame={frame}");
        Assert.Equal("0;1", frame);
        await db.StreamDeleteAsync(stream, [mark.Id]);
        string sequence = mark.Id.ToString().Split('-')[0]; // the same sequence (a stream takes no id twice): its tag, another frame
        await db.ExecuteAsync("XADD", stream, sequence + "-1", "s", "0", "m", "0;", "t", (byte[])mark["t"]!);

        // Not believed: the poll skips it, and the sequence it held is reported as one dropped message, never silence.
        await publisher.PublishAsync("plain.t", "m2");
        Poll after = await UntilMessagesAsync(on0.Via(cluster[2].Http), first.Ack);
        long skipped = metrics1[TestCluster.SessionsRefused, "reason", "entry"] + metrics2[TestCluster.SessionsRefused, "reason", "entry"];
        output.WriteLine($"after the rewrite: dropped {after.Dropped}, gaps [{string.Join(",", after.Gaps)}], messages [{string.Join(",", after.Texts)}]; entries skipped {skipped}");
        Assert.Equal(["m2"], after.Texts);
        Assert.Equal(1, after.Dropped);
        Assert.True(skipped >= 1);
        Assert.Equal(["m1", "m2"], (await UntilMessagesAsync(bystander, 0, count: 2)).Texts);
    }

    [Fact]
    public async Task A_mark_written_into_redis_by_a_writer_that_is_not_a_node_is_never_reported()
    {
        await using TestCluster cluster = await TestCluster.StartSignedAsync(nodes: 2);
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        LongPollClient session = await LongPollClient.CreateAsync(cluster[0].Http);
        await session.SubscribeAsync(1, "feed");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");
        await publisher.PublishAsync("feed", "m1");
        Poll first = await UntilMessagesAsync(session.Via(cluster[1].Http), 0);

        // A mark for the next sequence, written before the owner writes it, untagged: the message after it comes, unmarked.
        await redis.GetDatabase().ExecuteAsync("XADD", "{herald}:lq:" + session.Session, $"{first.Ack + 1}-0", "s", "0", "c", "0", "m", "0;1");
        await publisher.PublishAsync("feed", "m2");
        Poll after = await UntilMessagesAsync(session.Via(cluster[1].Http), first.Ack);
        Assert.Equal(["m2"], after.Texts);
        Assert.Equal(0, after.Dropped);
        Assert.Empty(after.Gaps);
    }

    [Fact]
    public async Task The_tcp_websocket_and_sse_clients_of_a_killed_node_see_their_disconnect_while_a_bystander_carries_on()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1);
        await using var doomed = BrokerProcess.StartTcpAndHttp($"--Herald:Cluster:Redis={cluster.Redis.Configuration}");
        int tcpPort = (await doomed.WaitForEventAsync(1001)).GetProperty("First").GetInt32();
        int httpPort = await doomed.HttpPortAsync();
        await using ProtocolClient tcp = await ProtocolClient.OpenAsync(tcpPort, "tcp-on-the-doomed-node");
        await tcp.SubscribeAsync(1, "feed");
        await tcp.PingPongAsync();
        await using ProtocolClient ws = await ProtocolClient.ConnectWebSocketAsync(httpPort);
        await ws.HelloAsync("ws-on-the-doomed-node");
        await ws.SubscribeAsync(1, "feed");
        await ws.PingPongAsync();
        await using SseClient sse = await SseClient.OpenAsync(httpPort, "topic=feed");
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(cluster[0].Port, "bystander");
        await bystander.SubscribeAsync(1, "feed");
        await bystander.PingPongAsync();

        doomed.Kill();

        // Each sees its connection end (closed or reset), not a silence: the read returns instead of timing out.
        Assert.Null(await EndAsync(tcp));
        Assert.Null(await EndAsync(ws));
        Assert.Null(await SseEndAsync(sse));
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        await publisher.PublishAsync("feed", "still here");
        Assert.Equal("still here", (await bystander.ReadMessageAsync()).Text);
    }

    /// <summary>The next frame, or null once the connection ended or was reset.</summary>
    private static async Task<Frame?> EndAsync(ProtocolClient client)
    {
        try
        {
            return await client.TryReadAsync(TimeSpan.FromSeconds(30));
        }
        catch (System.Net.WebSockets.WebSocketException)
        {
            return null; // reset under the WebSocket
        }
    }

    /// <summary>The next SSE event, or null once the stream ended or was reset.</summary>
    private static async Task<SseEvent?> SseEndAsync(SseClient sse)
    {
        try
        {
            return await sse.ReadEventOrEndAsync(TimeSpan.FromSeconds(30));
        }
        catch (Exception e) when (e is IOException or HttpRequestException)
        {
            return null; // reset
        }
    }

    /// <summary>Subscribes as a client does: again after a 503 (the interest not yet confirmed by Redis on a loaded host, with Retry-After).</summary>
    private static async Task SubscribeAsync(LongPollClient session, uint sid, string pattern)
    {
        await Until.True(
            async () =>
            {
                using HttpResponseMessage response = await session.Http.PostAsJsonAsync($"{session.Base}/subscriptions", new { sid, pattern });
                Assert.True(response.StatusCode is HttpStatusCode.NoContent or HttpStatusCode.ServiceUnavailable, $"subscribe: {(int)response.StatusCode}");
                return response.StatusCode == HttpStatusCode.NoContent;
            },
            $"sid {sid} subscribed");
    }

    /// <summary>One poll's answer: status, first sequence, messages' texts, dropped, the sids marked, and the next ack.</summary>
    private sealed record Poll(HttpStatusCode Status, long First, List<string> Texts, long Dropped, uint[] Gaps, long Ack);

    private static async Task<Poll> PollAsync(LongPollClient via, long ack, bool json = false)
    {
        using var request = new HttpRequestMessage(HttpMethod.Get, $"{via.Base}/messages?ack={ack}");
        if (json)
        {
            request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
        }

        using HttpResponseMessage response = await via.Http.SendAsync(request);
        uint[] header = response.Headers.TryGetValues("Herald-Gaps", out IEnumerable<string>? values)
            ? [.. values.Single().Split(',').Select(uint.Parse)]
            : [];
        PollResult poll = await LongPollClient.ReadAsync(response);
        if (poll.Status != HttpStatusCode.OK)
        {
            return new Poll(poll.Status, 0, [], 0, [], ack);
        }

        if (poll.Json is { } body)
        {
            uint[] gaps = body.TryGetProperty("gaps", out JsonElement g) ? [.. g.EnumerateArray().Select(s => s.GetUInt32())] : [];
            Assert.Equal(header, gaps); // the header and the field say one thing
            return new Poll(poll.Status, poll.FirstSequence, [.. poll.Messages.Select(m => m.Text)], body.GetProperty("dropped").GetInt64(), gaps, body.GetProperty("ack").GetInt64());
        }

        return new Poll(poll.Status, poll.FirstSequence, [.. poll.Messages.Select(m => m.Text)], poll.Dropped, header, poll.LastSequence);
    }

    /// <summary>Polls (acking as it goes, as longpoll §2 says: first + count - 1) until <paramref name="until"/> holds of an answer.</summary>
    private static async Task<Poll> UntilAsync(LongPollClient via, long ack, Func<Poll, bool> until)
    {
        DateTime deadline = DateTime.UtcNow.AddSeconds(60);
        while (true)
        {
            Assert.True(DateTime.UtcNow < deadline, $"Timed out, acknowledged up to {ack}");
            Poll poll = await PollAsync(via, ack);
            Assert.True(poll.Status == HttpStatusCode.OK, $"poll (ack {ack}): {(int)poll.Status}");
            if (until(poll))
            {
                return poll;
            }

            ack = Math.Max(ack, poll.Ack);
        }
    }

    /// <summary>Polls until <paramref name="count"/> messages came; their texts, what was dropped and marked on the way, and the last ack.</summary>
    private static async Task<Poll> UntilMessagesAsync(LongPollClient via, long ack, int count = 1)
    {
        var texts = new List<string>();
        var gaps = new List<uint>();
        long dropped = 0;
        while (texts.Count < count)
        {
            Poll poll = await UntilAsync(via, ack, p => p.Texts.Count > 0 || p.Dropped > 0 || p.Gaps.Length > 0);
            texts.AddRange(poll.Texts);
            gaps.AddRange(poll.Gaps);
            dropped += poll.Dropped;
            ack = poll.Ack;
        }

        return new Poll(HttpStatusCode.OK, 0, texts, dropped, [.. gaps], ack);
    }

    private static async Task<string[]> NodesAsync(TestBroker node)
    {
        using JsonDocument varz = JsonDocument.Parse(await node.Monitoring.GetStringAsync("/varz"));
        return [.. varz.RootElement.GetProperty("cluster").GetProperty("nodes").EnumerateArray().Select(n => n.GetProperty("id").GetString()!)];
    }
}
