using System.Globalization;
using System.Net;
using Herald.Broker.Tests.Infrastructure;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// What a shared long-poll session (cluster.md §10) may make Redis hold and send: its backlog in Redis is bounded in
/// bytes by the session's own <c>MaxPendingBytes</c>, charged before an entry is written, and a poll reads from Redis
/// only what its answer may carry. Real nodes on a test-owned <c>redis-server</c>; the bounds are asserted on what
/// that Redis counts (<c>MEMORY USAGE</c>, <c>XLEN</c>, <c>INFO stats</c>), never on a time.
/// </summary>
public sealed class ClusterLongPollBoundsTests(ITestOutputHelper output)
{
    private const int Payload = 1_000_000;

    [Fact]
    public async Task A_flood_to_a_shared_session_stays_within_its_pending_bytes_in_redis_and_ends_it_as_a_slow_consumer()
    {
        const long limit = 8 * 1024 * 1024;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
            o.Limits.MaxPendingBytes = (int)limit; // the default, said here: the session's own limit, locally and in Redis
        });
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();

        // The victim is owned by node 0 and driven through node 1; it never acknowledges anything.
        LongPollClient victim = await LongPollClient.CreateAsync(cluster[0].Http);
        LongPollClient victimOn1 = victim.Via(cluster[1].Http);
        await victimOn1.SubscribeAsync(1, "flood");
        LongPollClient bystander = await LongPollClient.CreateAsync(cluster[1].Http);
        await bystander.SubscribeAsync(1, "calm");
        await using var watcher = await ProtocolClient.OpenAsync(cluster[0].Port, "watcher");
        await watcher.SubscribeAsync(1, "flood");
        await watcher.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");

        // One publication at a time, each waited for in Redis (its stream grew, or the session ended): the owner's
        // own backlog never holds more than one, so only the Redis side can bound it.
        RedisKey stream = "{herald}:lq:" + victim.Session, hash = "{herald}:lp:" + victim.Session;
        string payload = new('x', Payload);
        long most = 0;
        int published = 0;
        for (int i = 1; i <= 24; i++)
        {
            await publisher.PublishAsync("flood", payload);
            published++;
            int n = i;
            await Until.True(async () => (long?)await db.HashGetAsync(hash, "seq") >= n || await db.HashExistsAsync(hash, "ended"), $"publication {n} reached the victim's stream");
            long bytes = await BacklogBytesAsync(redis, stream);
            most = Math.Max(most, bytes);
            output.WriteLine($"after {n} x {Payload} B: stream {bytes} B, {await db.StreamLengthAsync(stream)} entries, used_memory {await UsedMemoryAsync(db)} B");
            if (await db.HashExistsAsync(hash, "ended"))
            {
                break;
            }
        }

        output.WriteLine($"most the victim's stream held: {most} B (limit {limit} B); publications {published}");
        Assert.True(most <= limit + (64 * 1024), $"the victim's stream held {most} B, over its {limit} B");

        // Told as a local session is: 410 SlowConsumer, through either node; its stream is gone from Redis.
        await AssertEndedAsync(victimOn1, "SlowConsumer");
        await AssertEndedAsync(victim, "SlowConsumer");
        Assert.False(await db.KeyExistsAsync(stream));

        // The bystanders carry on: the TCP watcher got every publication, the other session its own message.
        for (int i = 0; i < published; i++)
        {
            Assert.Equal(Payload, (await watcher.ReadMessageAsync()).Payload!.Length);
        }

        await publisher.PublishAsync("calm", "still here");
        PollResult calm = await Until.Value(() => bystander.Via(cluster[0].Http).PollAsync(0), p => p.Status != HttpStatusCode.OK || p.Count > 0, "the bystander's message");
        Assert.Equal((HttpStatusCode.OK, "still here"), (calm.Status, Assert.Single(calm.Messages).Text));
    }

    [Fact]
    public async Task Under_DropOldest_a_flooded_shared_session_keeps_its_newest_within_its_pending_bytes_and_reports_the_gap()
    {
        const long limit = 4 * 1024 * 1024;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
            o.LongPoll.SlowConsumerPolicy = Herald.Broker.Delivery.SlowConsumerPolicy.DropOldest;
            o.Limits.MaxPendingBytes = (int)limit; // four messages of 1 MB, not five
        });
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();
        LongPollClient victim = await LongPollClient.CreateAsync(cluster[0].Http);
        LongPollClient victimOn1 = victim.Via(cluster[1].Http);
        await victimOn1.SubscribeAsync(1, "flood");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");

        const int Count = 12;
        RedisKey stream = "{herald}:lq:" + victim.Session, hash = "{herald}:lp:" + victim.Session;
        long most = 0;
        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync("flood", $"{i}:" + new string('x', Payload));
            long n = i + 1;
            await Until.True(async () => (long?)await db.HashGetAsync(hash, "seq") >= n, $"publication {n} appended");
            long bytes = await BacklogBytesAsync(redis, stream);
            most = Math.Max(most, bytes);
            output.WriteLine($"after {n} x {Payload} B: stream {bytes} B, {await db.StreamLengthAsync(stream)} entries");
        }

        Assert.True(most <= limit + (64 * 1024), $"the victim's stream held {most} B, over its {limit} B");

        // The newest four are there, after a gap of the eight dropped, which the first poll reports.
        PollResult first = await victimOn1.PollAsync(0);
        Assert.Equal((HttpStatusCode.OK, 9L, 8L), (first.Status, first.FirstSequence, first.Dropped));
        var numbers = new List<string>(first.Messages.Select(m => m.Text.Split(':')[0]));
        long ack = first.LastSequence;
        while (numbers.Count < 4)
        {
            PollResult next = await (numbers.Count % 2 == 0 ? victim : victimOn1).PollAsync(ack);
            Assert.Equal((HttpStatusCode.OK, 0L), (next.Status, next.Dropped));
            numbers.AddRange(next.Messages.Select(m => m.Text.Split(':')[0]));
            ack = next.Count > 0 ? next.LastSequence : ack;
        }

        Assert.Equal(["8", "9", "10", "11"], numbers);
    }

    [Fact]
    public async Task A_poll_reads_from_redis_only_what_its_answer_may_carry()
    {
        const int maxBytesPerPoll = 1024 * 1024;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
            o.LongPoll.MaxBytesPerPoll = maxBytesPerPoll; // the default, said here
        });
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();
        LongPollClient session = await LongPollClient.CreateAsync(cluster[0].Http);
        LongPollClient on1 = session.Via(cluster[1].Http);
        await on1.SubscribeAsync(1, "big");
        LongPollClient bystander = await LongPollClient.CreateAsync(cluster[1].Http);
        await bystander.SubscribeAsync(1, "small");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");

        // Six messages of 1 MB, under the session's 8 MiB: each poll's answer carries one of them (MaxBytesPerPoll 1 MiB).
        const int Count = 6;
        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync("big", i.ToString(CultureInfo.InvariantCulture) + new string('x', Payload));
        }

        RedisKey hash = "{herald}:lp:" + session.Session;
        await Until.True(async () => (long?)await db.HashGetAsync(hash, "seq") == Count, "the six are in the session's stream");

        long ack = 0;
        var texts = new List<char>();
        for (int poll = 0; texts.Count < Count; poll++)
        {
            long before = await OutputBytesAsync(db);
            PollResult answer = await (poll % 2 == 0 ? on1 : session).PollAsync(ack);
            long read = await OutputBytesAsync(db) - before;
            long body = answer.Messages.Sum(m => (long)m.Body!.Length);
            output.WriteLine($"poll {poll} (ack {ack}): answer {answer.Count} messages, {body} B; Redis sent {read} B meanwhile");
            Assert.Equal(HttpStatusCode.OK, answer.Status);
            Assert.True(body <= maxBytesPerPoll || answer.Count == 1);
            Assert.True(read <= body + (64 * 1024), $"Redis sent {read} B for an answer of {body} B");
            texts.AddRange(answer.Messages.Select(m => m.Text[0]));
            ack = answer.LastSequence;
        }

        Assert.Equal("012345", new string([.. texts]));
        await publisher.PublishAsync("small", "bystander");
        PollResult small = await Until.Value(() => bystander.Via(cluster[0].Http).PollAsync(0), p => p.Status != HttpStatusCode.OK || p.Count > 0, "the bystander's message");
        Assert.Equal("bystander", Assert.Single(small.Messages).Text);
    }

    /// <summary>A poll on <paramref name="via"/> is 410 SessionExpired with <paramref name="reason"/>.</summary>
    private static async Task AssertEndedAsync(LongPollClient via, string reason)
    {
        PollResult poll = await via.PollAsync(0);
        Assert.Equal((HttpStatusCode.Gone, "SessionExpired"), (poll.Status, poll.Code));
        Assert.Equal(reason, poll.Problem!.Value.GetProperty("reason").GetString());
    }

    /// <summary>What a session's backlog makes Redis hold: its stream, and every append's frames (<c>lf:</c>; here the session's, and a few bytes of a bystander's).</summary>
    internal static async Task<long> BacklogBytesAsync(ConnectionMultiplexer redis, RedisKey stream)
    {
        IDatabase db = redis.GetDatabase();
        long bytes = (long?)await db.ExecuteAsync("MEMORY", "USAGE", stream, "SAMPLES", "0") ?? 0;
        foreach (RedisKey frames in redis.GetServers()[0].Keys(pattern: "{herald}:lf:*"))
        {
            bytes += (long?)await db.ExecuteAsync("MEMORY", "USAGE", frames, "SAMPLES", "0") ?? 0;
        }

        return bytes;
    }

    private static async Task<long> OutputBytesAsync(IDatabase db) => long.Parse(Field(await InfoAsync(db, "stats"), "total_net_output_bytes"), CultureInfo.InvariantCulture);

    private static async Task<long> UsedMemoryAsync(IDatabase db) => long.Parse(Field(await InfoAsync(db, "memory"), "used_memory"), CultureInfo.InvariantCulture);

    private static async Task<string> InfoAsync(IDatabase db, string section) => (string)(await db.ExecuteAsync("INFO", section))!;

    private static string Field(string info, string name) =>
        info.Split('\n').Select(l => l.Trim()).First(l => l.StartsWith(name + ":", StringComparison.Ordinal))[(name.Length + 1)..];
}
