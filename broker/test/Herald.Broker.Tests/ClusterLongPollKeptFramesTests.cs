using System.Net;
using System.Text.Json;
using Herald.Broker.Cluster;
using Herald.Broker.Delivery;
using Herald.Broker.Tests.Infrastructure;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// A node keeps the frames of its latest appends to shared long-poll sessions (cluster.md §10,
/// <c>Herald:Cluster:KeptFrameBytes</c>), so a poll on it takes them from memory instead of from the append call's frame
/// hash; a poll through another node, or on a node that took the session over, reads Redis. Asserted on the frames each
/// node counts as taken from memory or fetched, and on what the polls answer, never on a time.
/// </summary>
public sealed class ClusterLongPollKeptFramesTests(ITestOutputHelper output)
{
    private const int Count = 5;

    [Fact]
    public async Task A_poll_on_the_owner_is_answered_from_memory_with_what_a_poll_through_another_node_reads_from_redis()
    {
        await using TestCluster cluster = await TestCluster.StartSignedAsync(nodes: 2); // each frame's tag checked, whether from memory or from Redis
        LongPollClient owner = await PublishedAsync(cluster, "kept");
        KeptFrames kept0 = cluster[0].Engine().Sessions.Kept, kept1 = cluster[1].Engine().Sessions.Kept;
        (long found0, long fetched0, long found1, long fetched1) = (kept0.Found, kept0.Fetched, kept1.Found, kept1.Fetched);

        PollResult fromMemory = await owner.PollAsync(0);
        PollResult fromRedis = await owner.Via(cluster[1].Http).PollAsync(0); // nothing acknowledged: the same again
        output.WriteLine($"owner: {kept0.Found - found0} frames from memory, {kept0.Fetched - fetched0} fetched ({kept0.Bytes} B kept); other node: {kept1.Found - found1} from memory, {kept1.Fetched - fetched1} fetched");

        Assert.Equal(HttpStatusCode.OK, fromMemory.Status);
        Assert.Equal(Texts(), fromMemory.Messages.Select(m => m.Text));
        Assert.Equal(fromRedis.Messages.Select(m => (m.Sid, m.Text)), fromMemory.Messages.Select(m => (m.Sid, m.Text)));
        Assert.Equal((fromRedis.FirstSequence, fromRedis.Count), (fromMemory.FirstSequence, fromMemory.Count));
        Assert.Equal((Count, 0L), (kept0.Found - found0, kept0.Fetched - fetched0));
        Assert.Equal((0L, Count), (kept1.Found - found1, kept1.Fetched - fetched1));
        Assert.Equal(0L, cluster[0].Engine().Sessions.EntriesForged + cluster[1].Engine().Sessions.EntriesForged);
    }

    [Fact]
    public async Task After_a_takeover_the_new_owner_reads_redis_for_what_the_old_one_appended_and_memory_for_its_own()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500));
        LongPollClient owner = await PublishedAsync(cluster, "moved");
        await cluster[0].StopAsync(); // its leases given up: the next request on node 1 takes the session over
        KeptFrames kept1 = cluster[1].Engine().Sessions.Kept;

        LongPollClient on1 = owner.Via(cluster[1].Http);
        PollResult taken = await on1.PollAsync(0);
        output.WriteLine($"new owner, old owner's frames: {kept1.Found} from memory, {kept1.Fetched} fetched");
        Assert.Equal((HttpStatusCode.OK, 1L), (taken.Status, taken.FirstSequence));
        Assert.Equal(Texts(), taken.Messages.Select(m => m.Text));
        Assert.Equal((long)Count, kept1.Fetched); // every frame the old owner appended, from Redis
        Assert.True(kept1.Found <= 1, $"{kept1.Found} frames from memory"); // at most the takeover's loss mark, which node 1 appended itself

        // What node 1 appends now, it answers from memory: once it has recorded the append. Redis has the entry a moment
        // before (the script's answer still on its way), and a poll in that moment, which a loaded machine widens, reads
        // Redis for it, as it should.
        long found = kept1.Found;
        KeptEntries entries = cluster[1].Engine().Sessions.Entries;
        int recorded = entries.MessagesOf(owner.Session);
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await publisher.PublishAsync("moved", "after");
        await Until.True(() => entries.MessagesOf(owner.Session) > recorded, "node 1 recorded what it appended");
        PollResult next = await Until.Value(() => on1.PollAsync(taken.LastSequence), p => p.Messages.Any(m => m.Text == "after"), "the message appended by the new owner");
        output.WriteLine($"new owner, its own frames: {kept1.Found} from memory, {kept1.Fetched} fetched");
        Assert.True(kept1.Found > found);
        Assert.Equal((long)Count, kept1.Fetched);
    }

    [Fact]
    public async Task With_no_bytes_to_keep_a_poll_on_the_owner_reads_redis_and_gets_the_same()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1, o =>
        {
            o.Cluster.KeptFrameBytes = 0;
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
        });
        LongPollClient owner = await PublishedAsync(cluster, "unkept");
        KeptFrames kept = cluster[0].Engine().Sessions.Kept;

        PollResult got = await owner.PollAsync(0);
        Assert.Equal(Texts(), got.Messages.Select(m => m.Text));
        Assert.Equal((0L, (long)Count, 0L), (kept.Found, kept.Fetched, kept.Bytes));
    }

    [Fact]
    public async Task The_owner_keeps_at_most_a_sessions_pending_messages_of_what_it_appended_whoever_polls_and_a_bystander_carries_on()
    {
        const int Pending = 8, Rounds = 10, PerRound = 4;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            o.LongPoll.MaxPendingMessagesPerSession = Pending;
            o.LongPoll.SlowConsumerPolicy = SlowConsumerPolicy.DropOldest;
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
        });
        KeptEntries entries = cluster[0].Engine().Sessions.Entries;
        LongPollClient idle = await LongPollClient.CreateAsync(cluster[0].Http); // never polls: Redis drops its oldest
        LongPollClient elsewhere = (await LongPollClient.CreateAsync(cluster[0].Http)).Via(cluster[1].Http); // acknowledges on node 1 only: the owner never hears of it
        LongPollClient bystander = await LongPollClient.CreateAsync(cluster[0].Http);
        foreach (LongPollClient session in (LongPollClient[])[idle, elsewhere, bystander])
        {
            await session.SubscribeAsync(1, "feed");
        }

        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        long answered = entries.Answered;
        var got = new Dictionary<LongPollClient, List<string>> { [elsewhere] = [], [bystander] = [] };
        var acks = new Dictionary<LongPollClient, long> { [elsewhere] = 0, [bystander] = 0 };
        int most = 0;
        for (int round = 0; round < Rounds; round++)
        {
            for (int i = 0; i < PerRound; i++)
            {
                await publisher.PublishAsync("feed", $"m{(round * PerRound) + i}");
            }

            foreach (LongPollClient session in (LongPollClient[])[elsewhere, bystander])
            {
                while (got[session].Count < (round + 1) * PerRound)
                {
                    PollResult poll = await session.PollAsync(acks[session]);
                    Assert.Equal((HttpStatusCode.OK, 0L), (poll.Status, poll.Dropped));
                    got[session].AddRange(poll.Messages.Select(m => m.Text));
                    acks[session] = poll.Count > 0 ? poll.LastSequence : acks[session];
                }
            }

            most = Math.Max(most, Math.Max(entries.MessagesOf(idle.Session), entries.MessagesOf(elsewhere.Session)));
        }

        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        long idleSeq = (long)await redis.GetDatabase().HashGetAsync("{herald}:lp:" + idle.Session, "seq");
        long idleHeld = await redis.GetDatabase().StreamLengthAsync("{herald}:lq:" + idle.Session);
        output.WriteLine($"owner keeps: idle {entries.MessagesOf(idle.Session)}, acknowledged elsewhere {entries.MessagesOf(elsewhere.Session)}, bystander {entries.MessagesOf(bystander.Session)} messages (at most {most} seen; all sessions {entries.Messages}); idle in Redis: seq {idleSeq}, {idleHeld} entries; polls answered from memory {entries.Answered - answered}");
        Assert.True(most <= Pending, $"the owner kept {most} messages of one session");
        Assert.True(entries.Messages <= 3 * Pending, $"the owner keeps {entries.Messages} messages");
        Assert.Equal(Rounds * PerRound, idleSeq); // it was appended to all along (its oldest dropped in Redis)
        IEnumerable<string> all = Enumerable.Range(0, Rounds * PerRound).Select(i => $"m{i}");
        Assert.Equal(all, got[bystander]);
        Assert.Equal(all, got[elsewhere]);
        Assert.True(entries.Answered - answered >= Rounds, $"{entries.Answered - answered} polls answered from memory"); // the bystander's, on the owner

        // /varz says what the owner keeps, against its bounds (read when quiet: every append answered).
        using JsonDocument varz = JsonDocument.Parse(await cluster[0].Monitoring.GetStringAsync("/varz"));
        JsonElement kept = varz.RootElement.GetProperty("cluster").GetProperty("sessions_kept");
        output.WriteLine($"/varz cluster.sessions_kept: {kept}");
        Assert.Equal((3, 3 * Pending), (kept.GetProperty("owned").GetInt32(), kept.GetProperty("max_messages").GetInt64()));
        Assert.Equal((entries.Messages, entries.Appends, entries.Bytes), (kept.GetProperty("messages").GetInt64(), kept.GetProperty("appends").GetInt64(), kept.GetProperty("bytes").GetInt64()));
        Assert.InRange(kept.GetProperty("messages").GetInt64(), 1, kept.GetProperty("max_messages").GetInt64());
        Assert.InRange(kept.GetProperty("frame_bytes").GetInt64(), 1, kept.GetProperty("max_frame_bytes").GetInt64());
        Assert.Equal(new ClusterOptions().KeptFrameBytes, kept.GetProperty("max_frame_bytes").GetInt64());
    }

    /// <summary>A session on node 0 subscribed to <paramref name="topic"/>, and <see cref="Count"/> messages published on node 0 and appended to it.</summary>
    private static async Task<LongPollClient> PublishedAsync(TestCluster cluster, string topic)
    {
        LongPollClient session = await LongPollClient.CreateAsync(cluster[0].Http);
        await session.SubscribeAsync(1, topic);
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        foreach (string text in Texts())
        {
            await publisher.PublishAsync(topic, text);
        }

        await Until.True(async () => (long?)await redis.GetDatabase().HashGetAsync("{herald}:lp:" + session.Session, "seq") == Count, "every message appended");
        return session;
    }

    private static IEnumerable<string> Texts() => Enumerable.Range(0, Count).Select(i => $"m{i}");
}
