using System.Buffers;
using System.Net;
using System.Text;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// What Redis carries for a shared long-poll session between nodes (cluster.md §10), written straight into a
/// test-owned <c>redis-server</c> by a client that is not a node: with <c>Herald:Cluster:Secret</c> a command, a
/// replayed command or a backlog entry not made by a node is neither carried out nor delivered, and is counted; a
/// command past its sender's deadline is not carried out; commands waiting on a session's owner are bounded. Each
/// with the real traffic carrying on, proved by a marker that comes after.
/// </summary>
public sealed class ClusterLongPollCommandTests(ITestOutputHelper output)
{

    [Fact]
    public async Task With_a_secret_a_forged_or_replayed_command_is_not_carried_out_and_is_counted()
    {
        await using TestCluster cluster = await TestCluster.StartSignedAsync(nodes: 2);
        using MetricsProbe metrics = cluster[0].Metrics();
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        LongPollClient session = await LongPollClient.CreateAsync(cluster[0].Http);
        LongPollClient on1 = session.Via(cluster[1].Http);
        await using var watcher = await ProtocolClient.OpenAsync(cluster[0].Port, "watcher");
        await watcher.SubscribeAsync(1, "chat.>");
        await watcher.PingPongAsync();
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");

        // A genuine publish through node 1, its command seen on node 0's channel as it passes.
        RedisChannel commands = RedisChannel.Literal("{herald}:.lpc:" + cluster[0].Engine().Sessions.Node);
        ChannelMessageQueue seen = await redis.GetSubscriber().SubscribeAsync(commands);
        using (HttpResponseMessage published = await on1.PublishAsync("chat.genuine", "genuine"))
        {
            Assert.Equal(HttpStatusCode.Accepted, published.StatusCode);
        }

        byte[] genuine = (byte[])(await seen.ReadAsync(new CancellationTokenSource(TimeSpan.FromSeconds(10)).Token)).Message!;
        Assert.Equal("genuine", (await watcher.ReadMessageAsync()).Text);

        // The same bytes again (a replay), and a command as a writer without the secret makes it.
        await redis.GetSubscriber().PublishAsync(commands, genuine);
        await redis.GetSubscriber().PublishAsync(commands, Command(session.Session, "publish", "forged-1", frames: Publish("chat.forged", "forged")));
        await Until.True(() => metrics[TestCluster.SessionsRefused, "reason", "replayed"] == 1 && metrics[TestCluster.SessionsRefused, "reason", "forged"] == 1, "the replay and the forgery refused", TimeSpan.FromSeconds(10));
        output.WriteLine($"refused on node 0: replayed {metrics[TestCluster.SessionsRefused, "reason", "replayed"]}, forged {metrics[TestCluster.SessionsRefused, "reason", "forged"]}");

        // The next message the bystander gets is the marker sent after them: neither was carried out.
        using (HttpResponseMessage marker = await on1.PublishAsync("chat.marker", "after"))
        {
            Assert.Equal(HttpStatusCode.Accepted, marker.StatusCode);
        }

        Frame next = await watcher.ReadMessageAsync();
        Assert.Equal(("chat.marker", "after"), (next.Topic, next.Text));
    }

    [Fact]
    public async Task With_a_secret_a_backlog_entry_written_into_redis_by_another_hand_is_never_delivered()
    {
        await using TestCluster cluster = await TestCluster.StartSignedAsync(nodes: 2);
        using MetricsProbe metrics0 = cluster[0].Metrics();
        using MetricsProbe metrics1 = cluster[1].Metrics();
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        LongPollClient session = await LongPollClient.CreateAsync(cluster[0].Http);
        LongPollClient on1 = session.Via(cluster[1].Http);
        await on1.SubscribeAsync(1, "feed");
        await using var watcher = await ProtocolClient.OpenAsync(cluster[0].Port, "watcher");
        await watcher.SubscribeAsync(1, "feed");
        await watcher.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");

        await publisher.PublishAsync("feed", "m1");
        (List<string> first, long ack) = await ReceiveAsync([on1, session], 1, 0);
        Assert.Equal(["m1"], first);

        // An entry for the next sequence, written before the owner writes it: a well-formed MESSAGE, untagged.
        var frame = new ArrayBufferWriter<byte>();
        FrameWriter.WriteMessage(frame, 0, "feed"u8, default, PayloadFlags.None, "forged"u8);
        await redis.GetDatabase().ExecuteAsync("XADD", "{herald}:lq:" + session.Session, $"{ack + 1}-0", "s", "1", "c", "0", "m", frame.WrittenSpan.ToArray());
        await publisher.PublishAsync("feed", "m2");
        await publisher.PublishAsync("feed", "m3");

        (List<string> rest, _) = await ReceiveAsync([on1, session], 2, ack);
        long skipped = metrics0[TestCluster.SessionsRefused, "reason", "entry"] + metrics1[TestCluster.SessionsRefused, "reason", "entry"];
        output.WriteLine($"after the forged entry the session got [{string.Join(", ", rest)}]; entries skipped: {skipped}");
        Assert.Equal(["m2", "m3"], rest);
        Assert.True(skipped >= 1);
        Assert.Equal(["m1", "m2", "m3"], [(await watcher.ReadMessageAsync()).Text, (await watcher.ReadMessageAsync()).Text, (await watcher.ReadMessageAsync()).Text]);
    }

    [Fact]
    public async Task A_command_that_reaches_the_owner_after_its_senders_deadline_is_not_carried_out()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500));
        using MetricsProbe metrics = cluster[0].Metrics();
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        LongPollClient session = await LongPollClient.CreateAsync(cluster[0].Http);
        LongPollClient on1 = session.Via(cluster[1].Http);
        await using var watcher = await ProtocolClient.OpenAsync(cluster[1].Port, "watcher");
        await watcher.SubscribeAsync(1, "chat.>");
        await watcher.PingPongAsync();
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");
        ChannelMessageQueue replies = await redis.GetSubscriber().SubscribeAsync(RedisChannel.Literal("{herald}:.lpr:" + FakeNode));

        // As a sender that gave up (answered 503) a second ago would have sent it.
        long deadline = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds() - 1000;
        await redis.GetSubscriber().PublishAsync(RedisChannel.Literal("{herald}:.lpc:" + cluster[0].Engine().Sessions.Node), Command(session.Session, "publish", "late-1", frames: Publish("chat.late", "late"), deadline: deadline));
        JsonElement reply = JsonDocument.Parse(await ReplyAsync(replies, () => $"node 0 counted {metrics[TestCluster.SessionsRefused, "reason", "expired"]} command(s) past their deadline")).RootElement;
        output.WriteLine($"the owner answered a command past its deadline: {reply}; refused as expired: {metrics[TestCluster.SessionsRefused, "reason", "expired"]}");
        Assert.Equal(503, reply.GetProperty("Status").GetInt32());
        Assert.Equal(1, metrics[TestCluster.SessionsRefused, "reason", "expired"]);

        using (HttpResponseMessage marker = await on1.PublishAsync("chat.marker", "after"))
        {
            Assert.Equal(HttpStatusCode.Accepted, marker.StatusCode);
        }

        Frame next = await watcher.ReadMessageAsync();
        Assert.Equal(("chat.marker", "after"), (next.Topic, next.Text));
    }

    [Fact]
    public async Task Commands_waiting_on_a_sessions_owner_are_bounded_and_past_the_bound_answered_503_at_once()
    {
        const int Bound = 2, Burst = 100;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
            o.Cluster.MaxSessionCommands = Bound;
        });
        using MetricsProbe metrics = cluster[0].Metrics();
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        LongPollClient session = await LongPollClient.CreateAsync(cluster[0].Http);
        LongPollClient bystander = await LongPollClient.CreateAsync(cluster[1].Http);
        ChannelMessageQueue replies = await redis.GetSubscriber().SubscribeAsync(RedisChannel.Literal("{herald}:.lpr:" + FakeNode));

        // A burst of subscribes for one session, each waiting for the one before it (a session runs one request at a time).
        RedisChannel commands = RedisChannel.Literal("{herald}:.lpc:" + cluster[0].Engine().Sessions.Node);
        await Task.WhenAll(Enumerable.Range(0, Burst).Select(i => redis.GetSubscriber().PublishAsync(commands, Command(session.Session, "subscribe", $"burst-{i}", sid: (uint)(100 + i), pattern: $"burst.{i}"))));
        var codes = new List<string>();
        for (int i = 0; i < Burst; i++)
        {
            JsonElement reply = JsonDocument.Parse((byte[])(await replies.ReadAsync(new CancellationTokenSource(TimeSpan.FromSeconds(30)).Token)).Message!).RootElement;
            codes.Add(reply.GetProperty("Status").GetInt32() + (reply.TryGetProperty("Code", out JsonElement code) ? " " + code.GetString() : ""));
        }

        int busy = codes.Count(c => c == "503 OwnerUnavailable");
        output.WriteLine($"{Burst} commands, bound {Bound}: {string.Join(", ", codes.GroupBy(c => c).Select(g => $"{g.Count()} x {g.Key}"))}; counted busy {metrics[TestCluster.SessionsRefused, "reason", "busy"]}");
        Assert.True(busy > 0, "none was refused");
        Assert.Equal(busy, metrics[TestCluster.SessionsRefused, "reason", "busy"]);
        Assert.Equal(Burst - busy, codes.Count(c => c == "204"));

        // The session and a bystander carry on through the other node.
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await session.Via(cluster[1].Http).SubscribeAsync(1, "after");
        await bystander.Via(cluster[0].Http).SubscribeAsync(1, "after");
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");
        await publisher.PublishAsync("after", "both");
        Assert.Equal(["both"], (await ReceiveAsync([session.Via(cluster[1].Http)], 1, 0)).Texts);
        Assert.Equal(["both"], (await ReceiveAsync([bystander], 1, 0)).Texts);
    }

    /// <summary>
    /// The next reply on the test's reply channel, within 30 s; if none comes, the failure says what the owner counted
    /// (<paramref name="counted"/>): whether the command reached it, to tell a lost message from a slow one.
    /// </summary>
    private static async Task<byte[]> ReplyAsync(ChannelMessageQueue replies, Func<string> counted)
    {
        using var wait = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        try
        {
            return (byte[])(await replies.ReadAsync(wait.Token)).Message!;
        }
        catch (OperationCanceledException)
        {
            Assert.Fail($"No reply within 30 s; {counted()}.");
            throw;
        }
    }

    /// <summary>The id of a node that does not exist: the sender of the test's own commands.</summary>
    private const string FakeNode = "00000000000000ff";

    /// <summary>A session command as a node writes it on the owner's channel (JSON, unsigned).</summary>
    private static byte[] Command(string token, string op, string nonce, byte[]? frames = null, uint sid = 0, string? pattern = null, long? deadline = null) =>
        JsonSerializer.SerializeToUtf8Bytes(new
        {
            Id = 1L,
            From = FakeNode,
            Token = token,
            Op = op,
            Nonce = nonce,
            Deadline = deadline ?? DateTimeOffset.UtcNow.ToUnixTimeMilliseconds() + 60_000,
            Sid = sid,
            Pattern = pattern,
            Frames = frames,
        });

    private static byte[] Publish(string topic, string payload)
    {
        var frames = new ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(frames, Encoding.UTF8.GetBytes(topic), default, PayloadFlags.None, Encoding.UTF8.GetBytes(payload));
        return frames.WrittenSpan.ToArray();
    }

    /// <summary>Polls through each of <paramref name="via"/> in turn from <paramref name="ack"/>, acknowledging, until <paramref name="count"/> messages came.</summary>
    private static async Task<(List<string> Texts, long Ack)> ReceiveAsync(LongPollClient[] via, int count, long ack)
    {
        var texts = new List<string>();
        DateTime deadline = DateTime.UtcNow.AddSeconds(30);
        for (int round = 0; texts.Count < count; round++)
        {
            Assert.True(DateTime.UtcNow < deadline, $"Timed out with [{string.Join(", ", texts)}], acknowledged up to {ack}");
            PollResult poll = await via[round % via.Length].PollAsync(ack);
            Assert.True(poll.Status == HttpStatusCode.OK, $"poll {round}: {(int)poll.Status} {poll.Problem}");
            if (poll.Count > 0)
            {
                texts.AddRange(poll.Messages.Where(m => m.Status is null).Select(m => m.Text));
                ack = poll.LastSequence;
            }
        }

        return (texts, ack);
    }
}
