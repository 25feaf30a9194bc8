using System.Net;
using System.Text.Json;
using Herald.Broker.Cluster;
using Herald.Broker.Hosting;
using Herald.Broker.Tests.Infrastructure;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// Shared long-poll sessions' frames in Redis (cluster.md §10): a node's append call writes each frame once, in a frame
/// hash (<c>lf:</c>), and each session's stream holds only references to it, given back when the session acknowledges,
/// drops or ends; so a message to many sessions costs Redis one copy, and a session pins frames only within its own
/// limits. Real nodes on a test-owned <c>redis-server</c>; asserted on what that Redis holds (key and field counts,
/// <c>MEMORY USAGE</c>), never on a time.
/// </summary>
public sealed class ClusterLongPollFramesTests(ITestOutputHelper output)
{

    [Fact]
    public async Task Fifty_sessions_given_one_64_KB_message_make_redis_hold_one_copy_and_their_acks_and_ends_give_it_back()
    {
        const int Sessions = 50, Size = 64 * 1024;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1, o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500));
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();
        var sessions = new List<LongPollClient>();
        for (int i = 0; i < Sessions; i++)
        {
            LongPollClient session = await LongPollClient.CreateAsync(cluster[0].Http);
            await session.SubscribeAsync(1, "wide");
            sessions.Add(session);
        }

        // Redis holds the node's writes until every session's append is handed in: a loaded machine runs the sessions' pumps
        // late, and an append that comes after every call of the message was answered writes its frame again (each call
        // writes a frame once; one in flight is referenced, one answered is not: its buffer may be another message's by then).
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        await Until.True(() => cluster[0].Engine().Sessions.AppendsUnanswered == 0, "the subscriptions' appends answered");
        await redis.GetServers()[0].ExecuteAsync("CLIENT", "PAUSE", "20000", "WRITE");
        try
        {
            await publisher.PublishAsync("wide", new string('x', Size));
            await Until.True(() => cluster[0].Engine().Sessions.AppendsUnanswered == Sessions, "every session's append handed in");
        }
        finally
        {
            await redis.GetServers()[0].ExecuteAsync("CLIENT", "UNPAUSE");
        }

        foreach (LongPollClient session in sessions)
        {
            await Until.True(async () => (long?)await db.HashGetAsync("{herald}:lp:" + session.Session, "seq") == 1, "the message appended to every session");
        }

        (long frames, long bytes, int keys) = await FramesAsync(redis);
        long streams = 0;
        foreach (LongPollClient session in sessions)
        {
            streams += (long?)await db.ExecuteAsync("MEMORY", "USAGE", "{herald}:lq:" + session.Session, "SAMPLES", "0") ?? 0;
        }

        output.WriteLine($"{Sessions} sessions, one {Size} B message: {frames} frames in {keys} frame hashes, {bytes} B; the {Sessions} streams {streams} B (one copy per session would be {Sessions * Size} B)");
        Assert.Equal(1, frames);
        Assert.True(bytes < 2 * Size, $"the frame hashes hold {bytes} B for one message of {Size} B to {Sessions} sessions");
        Assert.True(streams < Sessions * Size / 8, $"the streams hold {streams} B: more than references"); // a stream's own overhead, about 5 KB here, whatever its frames' size


        // Each gets it; half acknowledge it, half end: the frame stays while one still holds it, and then it is gone.
        for (int i = 0; i < Sessions; i++)
        {
            PollResult got = await sessions[i].PollAsync(0);
            Assert.Equal((HttpStatusCode.OK, Size), (got.Status, Assert.Single(got.Messages).Payload!.Length));
            if (i == Sessions - 1)
            {
                Assert.Equal(1, (await FramesAsync(redis)).Frames); // the last holder still has it
            }

            if (i % 2 == 0)
            {
                await AckAsync(db, sessions[i], 1);
            }
            else
            {
                using HttpResponseMessage ended = await cluster[0].Http.DeleteAsync(sessions[i].Base);
                Assert.True(ended.IsSuccessStatusCode);
            }
        }

        await Until.True(async () => (await FramesAsync(redis)).Keys == 0, "every reference given back, the frame deleted");
        output.WriteLine($"after {Sessions / 2} acks and {Sessions / 2} ends: {(await FramesAsync(redis)).Keys} frame hashes");
    }

    [Fact]
    public async Task A_session_that_never_polls_pins_no_more_frames_than_its_own_limit_and_a_bystander_gets_everything()
    {
        const int Limit = 4, Count = 20, Size = 16 * 1024;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1, o => DropOldest(o, Limit));
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();
        (LongPollClient idle, LongPollClient bystander) = await TwoSessionsAsync(cluster, "feed");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");

        // One at a time, the bystander taking and acknowledging each: only the idle session can keep a frame.
        long ack = 0, most = 0;
        var got = new List<string>();
        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync("feed", $"{i}:" + new string('x', Size));
            await Until.True(async () => (long?)await db.HashGetAsync("{herald}:lp:" + idle.Session, "seq") == i + 1, "appended to the idle session");
            PollResult next = await Until.Value(() => bystander.PollAsync(ack), p => p.Count > 0, "the bystander's message");
            got.AddRange(next.Messages.Select(m => m.Text.Split(':')[0]));
            ack = next.FirstSequence + next.Count - 1;
            await AckAsync(db, bystander, ack);
            (long frames, long bytes, _) = await FramesAsync(redis);
            most = Math.Max(most, frames);
            output.WriteLine($"after {i + 1} x {Size} B: {frames} frames held, {bytes} B");
        }

        output.WriteLine($"most frames held: {most} (the idle session's limit {Limit}); the bystander got {got.Count}");
        Assert.True(most <= Limit, $"{most} frames held for a session limited to {Limit}");
        Assert.Equal(Enumerable.Range(0, Count).Select(i => i.ToString(System.Globalization.CultureInfo.InvariantCulture)), got);

        // The idle session keeps its newest four, after the gap it is told of.
        PollResult kept = await idle.PollAsync(0);
        Assert.Equal((HttpStatusCode.OK, (long)(Count - Limit)), (kept.Status, kept.Dropped));
        Assert.Equal(["16", "17", "18", "19"], kept.Messages.Select(m => m.Text.Split(':')[0]));
    }

    [Fact]
    public async Task A_range_entry_read_and_acknowledged_a_message_at_a_time_keeps_its_frames_until_acknowledged_whole()
    {
        const int Count = 40;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o =>
        {
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
            o.LongPoll.MaxMessagesPerPoll = 3; // a poll takes part of an entry, and its ack gives back part of one
        });
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();
        (LongPollClient reader, LongPollClient other) = await TwoSessionsAsync(cluster, "burst");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");
        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync("burst", $"{i}");
        }

        await Until.True(async () => (long?)await db.HashGetAsync("{herald}:lp:" + reader.Session, "seq") == Count && (long?)await db.HashGetAsync("{herald}:lp:" + other.Session, "seq") == Count, "the burst appended to both");
        StreamEntry[] entries = await db.StreamRangeAsync("{herald}:lq:" + reader.Session);
        output.WriteLine($"the reader's stream: {entries.Length} entries of [{string.Join(", ", entries.Select(e => (string?)e["n"]))}] messages, ranged: {entries.Count(e => !e["a"].IsNull)}");
        Assert.Contains(entries, e => !e["a"].IsNull && (int)e["n"] > 1); // one sid, consecutive frames: a range, not a list

        // Through the other node, three at a time: every message once, in order; a part acknowledged keeps its entry.
        LongPollClient on1 = reader.Via(cluster[1].Http);
        var got = new List<string>();
        long ack = 0;
        bool partial = false;
        while (got.Count < Count)
        {
            PollResult poll = await on1.PollAsync(ack);
            Assert.Equal((HttpStatusCode.OK, 0L), (poll.Status, poll.Dropped));
            got.AddRange(poll.Messages.Select(m => m.Text));
            ack = poll.FirstSequence + poll.Count - 1;
            long acked = (long?)await db.HashGetAsync("{herald}:lp:" + reader.Session, "ack") ?? 0;
            StreamEntry? head = (await db.StreamRangeAsync("{herald}:lq:" + reader.Session, count: 1)).Cast<StreamEntry?>().FirstOrDefault();
            partial |= head is { } h && long.Parse(h.Id.ToString().Split('-')[0], System.Globalization.CultureInfo.InvariantCulture) <= acked;
        }

        Assert.Equal(Enumerable.Range(0, Count).Select(i => i.ToString(System.Globalization.CultureInfo.InvariantCulture)), got);
        Assert.True(partial, "no entry was ever acknowledged in part");
        Assert.True((await FramesAsync(redis)).Frames > 0); // the other session still holds every frame

        await AckAsync(db, reader, Count);
        await AckAsync(db, other, Count);
        await Until.True(async () => (await FramesAsync(redis)).Keys == 0, "every frame given back once both acknowledged all");
    }

    [Fact]
    public async Task Under_DropOldest_a_burst_past_the_limit_drops_inside_range_entries_and_a_bystander_gets_everything()
    {
        const int Limit = 5, Count = 30;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1, o => DropOldest(o, Limit));
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();
        (LongPollClient idle, LongPollClient bystander) = await TwoSessionsAsync(cluster, "burst");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[0].Port, "publisher");

        // In bursts of three, each waited for, so the bystander (limited too) keeps pace: the idle session's limit is
        // passed in the middle of its range entries, from its stream and from the batch being appended.
        var got = new List<string>();
        long ack = 0;
        for (int i = 0; i < Count; i += 3)
        {
            for (int j = i; j < i + 3; j++)
            {
                await publisher.PublishAsync("burst", $"{j}");
            }

            long n = i + 3;
            await Until.True(async () => (long?)await db.HashGetAsync("{herald}:lp:" + idle.Session, "seq") == n, "the burst appended");
            while (got.Count < n)
            {
                PollResult next = await bystander.PollAsync(ack);
                Assert.Equal(0L, next.Dropped);
                got.AddRange(next.Messages.Select(m => m.Text));
                ack = next.Count > 0 ? next.FirstSequence + next.Count - 1 : ack;
            }
        }

        Assert.Equal(Enumerable.Range(0, Count).Select(i => i.ToString(System.Globalization.CultureInfo.InvariantCulture)), got);
        Assert.True(await db.StreamLengthAsync("{herald}:lq:" + idle.Session) <= Limit);
        PollResult kept = await idle.PollAsync(0);
        Assert.Equal((HttpStatusCode.OK, (long)(Count - Limit)), (kept.Status, kept.Dropped));
        Assert.Equal(["25", "26", "27", "28", "29"], kept.Messages.Select(m => m.Text));
        Assert.Equal((long)(Count - Limit), (long?)await db.HashGetAsync("{herald}:lp:" + idle.Session, "gone"));

        // Both acknowledge all: nothing of the bursts is left (the dropped gave theirs back, in part or whole).
        await AckAsync(db, idle, Count);
        await AckAsync(db, bystander, Count);
        await Until.True(async () => (await FramesAsync(redis)).Keys == 0, "every frame given back");
        Assert.Equal(0L, (long)await db.HashGetAsync("{herald}:lp:" + idle.Session, "bin") - (long)await db.HashGetAsync("{herald}:lp:" + idle.Session, "bout"));
    }

    [Fact]
    public async Task A_session_that_never_polls_does_not_pin_the_frames_of_others_it_shares_an_append_call_with()
    {
        // The append script itself, on a test-owned redis-server: which sessions' appends a node's call gathers depends on
        // timing, so the call that pins is made here. Three large frames to a busy session and one small one to an idle
        // session, in one call: the busy session's range entry holds the frame hash whole (its frames are most of it),
        // the idle one's references its own frame only, so the busy session's ack frees everything but the small frame.
        const int Big = 64 * 1024;
        await using RedisServer server = await RedisServer.StartAsync();
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(server.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();
        string[] tokens = ["busy", "idle"];
        foreach (string token in tokens)
        {
            await db.HashSetAsync("{herald}:lp:" + token, [new("seq", 0), new("ack", 0), new("sent", 0), new("polls", 0)]);
        }

        RedisKey[] keys = ["{herald}:lf:n:1", .. tokens.SelectMany(t => new RedisKey[] { "{herald}:lp:" + t, "{herald}:lq:" + t, "{herald}:lo:" + t })];
        byte[] Frame(char c, int size) => System.Text.Encoding.ASCII.GetBytes(new string(c, size));
        RedisValue[] Session(string token, int count, string frames) => [token, 60_000, 10_000, 8 * 1024 * 1024, 0, 1, count, "*1", frames, "", 1, 0];
        RedisValue[] args =
        [
            "n", 30_000, 60_000, 4,
            Frame('a', Big), "", "", Frame('b', Big), "", "", Frame('c', Big), "", "", Frame('s', 100), "", "",
            .. Session("busy", 3, "=1"), .. Session("idle", 1, "=4"),
        ];
        var results = (RedisResult[])(await db.ScriptEvaluateAsync(SharedSessionScripts.Append, keys, args))!;
        Assert.Equal([0L, 0L], results.Select(r => (long)r));
        StreamEntry busy = Assert.Single(await db.StreamRangeAsync("{herald}:lq:busy")), idle = Assert.Single(await db.StreamRangeAsync("{herald}:lq:idle"));
        Assert.Equal(("1", "s"), ((string?)busy["w"], (string?)idle["w"])); // a whole reference, and the hash's end (its own frame alone)
        (long frames, long bytes, _) = await FramesAsync(redis);
        Assert.Equal(4, frames);

        // The busy session acknowledges its three (the poll script, as a node's poll would).
        _ = await db.ScriptEvaluateAsync(SharedSessionScripts.Poll, ["{herald}:lp:busy", "{herald}:lq:busy"], [3, 100, 60_000, "", "", "busy", 1024 * 1024, "n"]);
        (long left, long held, int hashes) = await FramesAsync(redis);
        output.WriteLine($"one call, 3 x {Big} B to a busy session and 100 B to an idle one: {frames} frames, {bytes} B; after the busy one acknowledged: {left} frames in {hashes} hash, {held} B");
        Assert.Equal(1, left);
        Assert.True(held < Big / 8, $"the idle session pins {held} B");
        Assert.Equal(0L, (long)await db.HashGetAsync("{herald}:lp:busy", "bin") - (long)await db.HashGetAsync("{herald}:lp:busy", "bout"));

        // Its end gives the last back.
        _ = await db.ScriptEvaluateAsync(SharedSessionScripts.End, ["{herald}:lp:idle", "{herald}:lq:idle", "{herald}:lo:idle"], ["Gone", 1000, "", "idle"]);
        Assert.Equal(0, (await FramesAsync(redis)).Keys);
    }

    [Fact]
    public async Task A_batch_reaching_the_end_of_an_earlier_calls_frames_holds_that_end_with_one_reference_and_frees_only_its_own()
    {
        // The append and poll scripts on a test-owned redis-server, as in the test above. Call 1 writes four frames for a
        // session that takes them all (it holds the hash whole); call 2, still in flight as far as the node knows,
        // references the last of them for a late session (its end: one reference, s4, not one per message) and the second
        // for another (a middle piece: its message's reference, r2). Each acknowledgement frees exactly what nothing else
        // holds, counted on the hash's fields.
        await using RedisServer server = await RedisServer.StartAsync();
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(server.Configuration + ",allowAdmin=true");
        IDatabase db = redis.GetDatabase();
        string[] tokens = ["first", "late", "middle"];
        foreach (string token in tokens)
        {
            await db.HashSetAsync("{herald}:lp:" + token, [new("seq", 0), new("ack", 0), new("sent", 0), new("polls", 0)]);
        }

        RedisKey[] Keys(string call, params string[] sessions) => [call, .. sessions.SelectMany(t => new RedisKey[] { "{herald}:lp:" + t, "{herald}:lq:" + t, "{herald}:lo:" + t })];
        RedisValue[] Session(string token, int count, string frames) => [token, 60_000, 10_000, 8 * 1024 * 1024, 0, 1, count, "*1", frames, "", 1, 0];
        RedisValue Frame(int i) => System.Text.Encoding.ASCII.GetBytes(new string((char)('a' + i), 100));
        _ = await db.ScriptEvaluateAsync(SharedSessionScripts.Append, Keys("{herald}:lf:n:1", "first"),
            ["n", 30_000, 60_000, 4, Frame(1), "", "", Frame(2), "", "", Frame(3), "", "", Frame(4), "", "", .. Session("first", 4, "=1")]);
        _ = await db.ScriptEvaluateAsync(SharedSessionScripts.Append, Keys("{herald}:lf:n:2", "late", "middle"),
            ["n", 30_000, 60_000, 2, Frame(2), "{herald}:lf:n:1", 2, Frame(4), "{herald}:lf:n:1", 4, .. Session("late", 1, "=2"), .. Session("middle", 1, "=1")]);
        StreamEntry late = Assert.Single(await db.StreamRangeAsync("{herald}:lq:late")), middle = Assert.Single(await db.StreamRangeAsync("{herald}:lq:middle"));
        Assert.Equal(("s", "0"), ((string?)late["w"], (string?)middle["w"])); // the end held, and a message's reference
        Assert.Equal(["1", "2", "3", "4", "b", "e", "r", "r2", "s4"], await FieldsAsync(db));

        async Task AckAsync(string token, int ack) =>
            await db.ScriptEvaluateAsync(SharedSessionScripts.Poll, ["{herald}:lp:" + token, "{herald}:lq:" + token], [ack, 100, 60_000, "", "", token, 1024 * 1024, "n"]);
        await AckAsync("first", 4); // frees 1 and 3; 2 is the middle one's, 4 the late one's end
        Assert.Equal(["2", "4", "b", "e", "r2", "s4"], await FieldsAsync(db));
        await AckAsync("late", 1); // its one reference given back frees its own frame, and nothing the middle one holds
        Assert.Equal(["2", "b", "e", "r2"], await FieldsAsync(db));
        _ = await db.ScriptEvaluateAsync(SharedSessionScripts.End, ["{herald}:lp:middle", "{herald}:lq:middle", "{herald}:lo:middle"], ["Gone", 1000, "", "middle"]);
        Assert.Equal(0, (await FramesAsync(redis)).Keys);
        Assert.False(await db.KeyExistsAsync("{herald}:le:n:1")); // the ends' sorted set goes with its hash
    }

    private static async Task<string[]> FieldsAsync(IDatabase db) =>
        [.. (await db.HashKeysAsync("{herald}:lf:n:1")).Select(f => (string)f!).Order(StringComparer.Ordinal)];

    [Fact]
    public async Task With_a_secret_a_reference_copied_into_another_sessions_stream_is_left_out_and_counted()
    {
        await using TestCluster cluster = await TestCluster.StartSignedAsync(nodes: 2);
        using MetricsProbe metrics0 = cluster[0].Metrics();
        using MetricsProbe metrics1 = cluster[1].Metrics();
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        IDatabase db = redis.GetDatabase();
        LongPollClient alice = await LongPollClient.CreateAsync(cluster[0].Http);
        await alice.SubscribeAsync(1, "private.alice");
        LongPollClient bob = await LongPollClient.CreateAsync(cluster[0].Http);
        await bob.SubscribeAsync(1, "feed");
        await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
        await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");

        await publisher.PublishAsync("private.alice", "for alice only");
        await Until.True(async () => (long?)await db.HashGetAsync("{herald}:lp:" + alice.Session, "seq") == 1, "appended to alice");
        StreamEntry reference = Assert.Single(await db.StreamRangeAsync("{herald}:lq:" + alice.Session));

        // Alice's reference, tag and all, written into Bob's stream at his next sequence, before the owner writes it.
        object[] copied = ["{herald}:lq:" + bob.Session, "1-0", .. reference.Values.SelectMany(v => new object[] { (string)v.Name!, (byte[])v.Value! })];
        await db.ExecuteAsync("XADD", copied);
        await publisher.PublishAsync("feed", "for bob");

        PollResult got = await Until.Value(() => bob.Via(cluster[1].Http).PollAsync(0), p => p.Count > 0, "bob's message");
        long skipped = metrics0[TestCluster.SessionsRefused, "reason", "entry"] + metrics1[TestCluster.SessionsRefused, "reason", "entry"];
        output.WriteLine($"bob got [{string.Join(", ", got.Messages.Select(m => m.Text))}]; entries skipped {skipped}");
        Assert.Equal(["for bob"], got.Messages.Select(m => m.Text));
        Assert.True(skipped >= 1);
        Assert.Equal(["for alice only"], (await alice.Via(cluster[1].Http).PollAsync(0)).Messages.Select(m => m.Text));
    }

    [Fact]
    public async Task When_the_owner_is_killed_mid_stream_every_message_it_appended_is_delivered_through_another_node_in_order()
    {
        const int Sessions = 10;
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 1, o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500));
        await using var doomed = BrokerProcess.StartTcpAndHttp(
            $"--Herald:Cluster:Redis={cluster.Redis.Configuration}",
            "--Herald:Cluster:HeartbeatInterval=00:00:00.300", // its leases expire 0.9 s after it dies
            "--Herald:LongPoll:PollTimeout=00:00:00.500");
        using var doomedHttp = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{await doomed.HttpPortAsync()}") };
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        IDatabase db = redis.GetDatabase();

        // Sessions owned by the node that will die, on one topic (their appends share frames), fed through it.
        var sessions = new List<LongPollClient>();
        for (int i = 0; i < Sessions; i++)
        {
            LongPollClient session = await LongPollClient.CreateAsync(doomedHttp);
            await session.SubscribeAsync(1, "burst");
            sessions.Add(session);
        }

        LongPollClient feeder = await LongPollClient.CreateAsync(doomedHttp);
        Task feeding = Task.Run(async () =>
        {
            try
            {
                for (int i = 0; ; i++)
                {
                    using HttpResponseMessage sent = await feeder.PublishAsync("burst", i.ToString(System.Globalization.CultureInfo.InvariantCulture));
                }
            }
            catch (HttpRequestException)
            {
                // the node is gone
            }
        });
        await Until.True(async () => (long?)await db.HashGetAsync("{herald}:lp:" + sessions[0].Session, "seq") >= 100, "a hundred appended");
        doomed.Kill(); // mid-stream, without a word
        await feeding;

        // Each session, through the node that lives: every message its stream had, in order, none twice; then the loss told.
        foreach (LongPollClient session in sessions)
        {
            LongPollClient on0 = session.Via(cluster[0].Http);
            var texts = new List<string>();
            long ack = 0;
            while (true)
            {
                PollResult poll = await on0.PollAsync(ack, json: true);
                Assert.Equal((HttpStatusCode.OK, 0L), (poll.Status, poll.Dropped));
                texts.AddRange(poll.Messages.Select(m => m.Text));
                ack = poll.Json!.Value.GetProperty("ack").GetInt64();
                if (poll.Json.Value.TryGetProperty("gaps", out JsonElement gaps) && gaps.GetArrayLength() > 0)
                {
                    break; // the takeover's mark, after every message the stream had
                }
            }

            long appended = (long)await db.HashGetAsync("{herald}:lp:" + session.Session, "seq") - 1; // the takeover's mark after them
            output.WriteLine($"session {session.Session[..8]}: {texts.Count} messages, {appended} appended before the kill");
            Assert.Equal(Enumerable.Range(0, texts.Count).Select(i => i.ToString(System.Globalization.CultureInfo.InvariantCulture)), texts);
            Assert.Equal(appended, texts.Count);
        }
    }

    [Fact]
    public async Task On_two_shards_each_session_lives_on_its_tokens_shard_and_is_served_through_every_node()
    {
        const int Shards = 2, Sessions = 8;
        await using TestCluster cluster = await TestCluster.StartShardedAsync(Shards, nodes: 2, o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500));
        ConnectionMultiplexer[] redis = await Task.WhenAll(cluster.Shards.Select(shard => ConnectionMultiplexer.ConnectAsync(shard.Configuration)));
        try
        {
            var sessions = new List<LongPollClient>();
            for (int i = 0; i < Sessions; i++)
            {
                LongPollClient session = await LongPollClient.CreateAsync(cluster[i % 2].Http);
                await session.Via(cluster[(i + 1) % 2].Http).SubscribeAsync(1, "everywhere"); // a command to its owner, through its shard
                sessions.Add(session);
            }

            await using var publisher = await ProtocolClient.OpenAsync(cluster[1].Port, "publisher");
            await Until.True(() => cluster[0].Engine().IsSettled && cluster[1].Engine().IsSettled, "interest settled");
            await publisher.PublishAsync("everywhere", "to all");
            var placed = new int[Shards];
            foreach (LongPollClient session in sessions)
            {
                PollResult got = await Until.Value(() => session.Via(cluster[1].Http).PollAsync(0), p => p.Count > 0, "the session's message");
                Assert.Equal("to all", Assert.Single(got.Messages).Text);
                int shard = ClusterShards.ShardOf(System.Text.Encoding.UTF8.GetBytes(session.Session), Shards);
                placed[shard]++;
                Assert.True(await redis[shard].GetDatabase().KeyExistsAsync("{herald}:lp:" + session.Session));
                Assert.False(await redis[1 - shard].GetDatabase().KeyExistsAsync("{herald}:lp:" + session.Session));
            }

            output.WriteLine($"sessions per shard: {string.Join(", ", placed)}");
        }
        finally
        {
            foreach (ConnectionMultiplexer connection in redis)
            {
                await connection.DisposeAsync();
            }
        }
    }

    /// <summary>
    /// Acknowledges up to <paramref name="ack"/> with a poll that is not waited for (nothing more comes: it would be
    /// held), once Redis has recorded the ack.
    /// </summary>
    private static async Task AckAsync(IDatabase db, LongPollClient session, long ack)
    {
        using var stop = new CancellationTokenSource();
        Task<PollResult> poll = session.PollAsync(ack, cancellationToken: stop.Token);
        await Until.True(async () => (long?)await db.HashGetAsync("{herald}:lp:" + session.Session, "ack") >= ack, "the ack recorded");
        await stop.CancelAsync();
        try
        {
            await poll;
        }
        catch (OperationCanceledException)
        {
            // the held poll, let go
        }
    }

    /// <summary>Short polls, and at most <paramref name="limit"/> messages pending per session, the oldest dropped past it.</summary>
    private static void DropOldest(HeraldOptions options, int limit)
    {
        options.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
        options.LongPoll.MaxPendingMessagesPerSession = limit;
        options.LongPoll.SlowConsumerPolicy = Herald.Broker.Delivery.SlowConsumerPolicy.DropOldest;
    }

    /// <summary>Two sessions on the first node, each subscribed (sid 1) to <paramref name="topic"/>.</summary>
    private static async Task<(LongPollClient, LongPollClient)> TwoSessionsAsync(TestCluster cluster, string topic)
    {
        LongPollClient first = await LongPollClient.CreateAsync(cluster[0].Http);
        await first.SubscribeAsync(1, topic);
        LongPollClient second = await LongPollClient.CreateAsync(cluster[0].Http);
        await second.SubscribeAsync(1, topic);
        return (first, second);
    }

    /// <summary>The frames Redis holds for shared sessions: how many (each a frame and its references), their hashes' bytes, and how many hashes.</summary>
    private static async Task<(long Frames, long Bytes, int Keys)> FramesAsync(ConnectionMultiplexer redis)
    {
        IDatabase db = redis.GetDatabase();
        long frames = 0, bytes = 0;
        int keys = 0;
        foreach (RedisKey key in redis.GetServers()[0].Keys(pattern: "{herald}:lf:*"))
        {
            keys++;
            frames += (await db.HashKeysAsync(key)).Count(field => ((string)field!).All(char.IsAsciiDigit)); // a frame's field is its number
            bytes += (long?)await db.ExecuteAsync("MEMORY", "USAGE", key, "SAMPLES", "0") ?? 0;
        }

        return (frames, bytes, keys);
    }
}
