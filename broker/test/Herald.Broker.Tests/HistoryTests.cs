using System.Net.Http.Json;
using System.Text;
using Herald.Broker.History;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>
/// Topic history and resume (spec §13) on one node, over real sockets: positions stamped into the live stream,
/// a client that comes back gets what it missed and then the live stream with no gap and no duplicate, or a clear
/// "not recovered"; the bounds hold; another identity cannot read through a resume.
/// </summary>
public sealed class HistoryTests
{
    private const Capabilities WithHeaders = Capabilities.Headers;

    private static Task<TestBroker> StartAsync(int maxMessages = 1000, TimeSpan? maxAge = null, Action<HeraldOptions>? also = null) =>
        TestBroker.StartAsync(o =>
        {
            o.History.Topics.Add(new HistoryRule { Pattern = "orders.>", MaxMessages = maxMessages, MaxAge = maxAge ?? TimeSpan.FromMinutes(5) });
            also?.Invoke(o);
        });

    [Fact]
    public async Task Messages_on_a_history_topic_carry_their_offset_and_epoch_after_the_publishers_own_headers()
    {
        await using var broker = await StartAsync();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await using var plain = await ProtocolClient.OpenAsync(broker.Port);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await subscriber.SubscribeAsync(1, ">");
        await plain.SubscribeAsync(1, "orders.>");
        await subscriber.PingPongAsync();
        await plain.PingPongAsync();

        await publisher.PublishAsync("orders.eu", "a", [new("X-Tag", ["first"])]);
        await publisher.PublishAsync("orders.eu", "b");
        await publisher.PublishAsync("orders.us", "c");
        await publisher.PublishAsync("prices.eu", "d");

        Frame a = await subscriber.ReadMessageAsync();
        Frame b = await subscriber.ReadMessageAsync();
        Frame c = await subscriber.ReadMessageAsync();
        Frame d = await subscriber.ReadMessageAsync();
        Assert.Equal(["X-Tag", StreamPosition.OffsetHeader, StreamPosition.EpochHeader], a.Headers!.Select(h => h.Key));
        Assert.Equal((1ul, 2ul), (a.Position!.Value.Offset, b.Position!.Value.Offset));
        Assert.Equal(a.Position.Value.Epoch, b.Position.Value.Epoch);
        Assert.Matches("^[0-9a-f]{16}$", a.Position.Value.Epoch);
        Assert.Equal(1ul, c.Position!.Value.Offset); // each topic counts its own
        Assert.NotEqual(a.Position.Value.Epoch, c.Position.Value.Epoch);
        Assert.Null(d.Position); // no rule for prices.>
        Assert.Null(d.Headers);

        Frame plainA = await plain.ReadMessageAsync();
        Assert.Null(plainA.Headers); // no headers negotiated: the six-element MESSAGE, no position
        Assert.Equal("a", plainA.Text);
    }

    [Fact]
    public async Task A_client_resuming_on_a_new_connection_gets_what_it_missed_then_the_live_stream()
    {
        await using var broker = await StartAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        StreamPosition last;
        await using (var first = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders))
        {
            await first.SubscribeAsync(1, "orders.eu");
            await first.PingPongAsync();
            for (int i = 1; i <= 3; i++)
            {
                await publisher.PublishAsync("orders.eu", $"m{i}");
            }

            Frame third = (await ReadMessagesAsync(first, 3))[^1];
            last = third.Position!.Value;
        }

        for (int i = 4; i <= 6; i++)
        {
            await publisher.PublishAsync("orders.eu", $"m{i}");
        }

        await publisher.PingPongAsync();
        await using var back = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await back.SubscribeAsync(9, "orders.eu", last);
        Frame status = await back.ReadMessageAsync();
        Assert.Equal((9u, "orders.eu", "200"), (status.Sid, status.Topic, status.Status));
        Assert.Equal(["Recovered"], status.Header(StreamPosition.DescriptionHeader));
        Assert.Equal(new StreamPosition(6, last.Epoch), status.Position);
        Assert.Empty(status.Payload!);

        List<Frame> missed = await ReadMessagesAsync(back, 3);
        Assert.Equal(["m4", "m5", "m6"], missed.Select(m => m.Text));
        Assert.Equal([4ul, 5ul, 6ul], missed.Select(m => m.Position!.Value.Offset));
        Assert.All(missed, m => Assert.Equal(9u, m.Sid));

        await publisher.PublishAsync("orders.eu", "m7");
        Frame live = await back.ReadMessageAsync();
        Assert.Equal(("m7", 7ul), (live.Text, live.Position!.Value.Offset));
        Assert.Empty(await back.PingPongAsync());
        Assert.Equal(1, broker.Services.GetRequiredService<HistorySlot>().Store!.Recovered);
    }

    [Fact]
    public async Task A_resume_in_the_middle_of_a_busy_stream_has_no_gap_and_no_duplicate()
    {
        const int Total = 3000;
        await using var broker = await StartAsync(maxMessages: Total);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await using var watcher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await watcher.SubscribeAsync(1, "orders.eu");
        await watcher.PingPongAsync();
        Task publishing = Task.Run(async () =>
        {
            for (int i = 1; i <= Total; i++)
            {
                await publisher.PublishAsync("orders.eu", $"m{i}");
            }
        });

        // The watcher's 500th message is the position a client that left at that moment would hold.
        StreamPosition position = (await ReadMessagesAsync(watcher, 500))[^1].Position!.Value;
        await using var resumer = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await resumer.SubscribeAsync(2, "orders.eu", position); // while the publisher goes on
        await publishing;
        Frame status = await resumer.ReadMessageAsync();
        Assert.Equal("200", status.Status);

        List<Frame> rest = await ReadMessagesAsync(resumer, Total - 500);
        Assert.Equal(Enumerable.Range(501, Total - 500).Select(i => (ulong)i), rest.Select(m => m.Position!.Value.Offset));
        Assert.Equal(Enumerable.Range(501, Total - 500).Select(i => $"m{i}"), rest.Select(m => m.Text));
        Assert.Empty(await resumer.PingPongAsync()); // nothing twice
    }

    [Fact]
    public async Task A_position_of_another_epoch_is_answered_history_lost_and_the_live_stream_follows()
    {
        await using var broker = await StartAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync("orders.eu", "before");
        await publisher.PingPongAsync();
        await using var client = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);

        await client.SubscribeAsync(1, "orders.eu", new StreamPosition(41, "0123456789abcdef")); // a restarted broker's
        Frame status = await client.ReadMessageAsync();
        Assert.Equal("410", status.Status);
        Assert.StartsWith("History lost", status.Header(StreamPosition.DescriptionHeader)[0]);
        Assert.Equal(1ul, status.Position!.Value.Offset); // where live delivery starts: the client stores it
        Assert.NotEqual("0123456789abcdef", status.Position.Value.Epoch);

        await publisher.PublishAsync("orders.eu", "after");
        Frame live = await client.ReadMessageAsync();
        Assert.Equal(("after", 2ul), (live.Text, live.Position!.Value.Offset)); // nothing replayed, live goes on
        Assert.Equal(1, broker.Services.GetRequiredService<HistorySlot>().Store!.NotRecovered);
    }

    [Fact]
    public async Task A_position_older_than_what_is_kept_is_answered_too_old()
    {
        await using var broker = await StartAsync(maxMessages: 3);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await publisher.SubscribeAsync(1, "orders.eu");
        for (int i = 1; i <= 10; i++)
        {
            await publisher.PublishAsync("orders.eu", $"m{i}");
        }

        string epoch = (await ReadMessagesAsync(publisher, 10))[0].Position!.Value.Epoch;
        await using var client = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);

        await client.SubscribeAsync(1, "orders.eu", new StreamPosition(6, epoch)); // 7 is gone: 8..10 are kept
        Frame tooOld = await client.ReadMessageAsync();
        await client.SubscribeAsync(2, "orders.eu", new StreamPosition(7, epoch));
        Frame recovered = await client.ReadMessageAsync();
        List<Frame> replayed = await ReadMessagesAsync(client, 3);

        Assert.Equal("410", tooOld.Status);
        Assert.Equal("Too old: the history keeps offsets 8 to 10, and 7 was asked for", tooOld.Header(StreamPosition.DescriptionHeader)[0]);
        Assert.Equal((2u, "200"), (recovered.Sid, recovered.Status));
        Assert.Equal(["m8", "m9", "m10"], replayed.Select(m => m.Text));
        Assert.Empty(await client.PingPongAsync());
    }

    [Fact]
    public async Task Messages_older_than_max_age_are_not_replayed()
    {
        await using var broker = await StartAsync(maxAge: TimeSpan.FromSeconds(1));
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await publisher.SubscribeAsync(1, "orders.eu");
        await publisher.PublishAsync("orders.eu", "old");
        StreamPosition first = (await publisher.ReadMessageAsync()).Position!.Value;
        HistoryStore store = broker.Services.GetRequiredService<HistorySlot>().Store!;
        Assert.True(store.Bytes > 0);

        await Until.True(() => store.Bytes == 0, "the history store holds no bytes"); // the sweep drops it without any traffic

        await using var client = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await client.SubscribeAsync(1, "orders.eu", new StreamPosition(0, first.Epoch));
        Frame status = await client.ReadMessageAsync();
        Assert.Equal("410", status.Status);
        Assert.StartsWith("Too old", status.Header(StreamPosition.DescriptionHeader)[0]);
        await client.SubscribeAsync(2, "orders.eu", first);
        Assert.Equal("200", (await client.ReadMessageAsync()).Status); // nothing missed since the last it saw
        Assert.Empty(await client.PingPongAsync());
    }

    [Fact]
    public async Task Since_without_a_position_starts_live_and_says_where()
    {
        await using var broker = await StartAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync("orders.eu", "m1");
        await publisher.PublishAsync("orders.eu", "m2");
        await publisher.PingPongAsync();
        await using var client = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);

        await client.SubscribeAsync(1, "orders.eu", new StreamPosition(0, ""));
        Frame status = await client.ReadMessageAsync();
        Assert.Equal(("200", "Live", 2ul), (status.Status, status.Header(StreamPosition.DescriptionHeader)[0], status.Position!.Value.Offset));
        Assert.Empty(await client.PingPongAsync()); // nothing replayed

        await publisher.PublishAsync("orders.eu", "m3");
        Assert.Equal(3ul, (await client.ReadMessageAsync()).Position!.Value.Offset);
    }

    [Theory]
    [InlineData("orders.>", "A pattern with wildcards has no single history to resume")]
    [InlineData("prices.eu", "This topic keeps no history")]
    public async Task Since_where_there_is_no_history_is_answered_not_recovered_and_the_subscription_lives(string pattern, string why)
    {
        await using var broker = await StartAsync();
        await using var client = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);

        await client.SubscribeAsync(3, pattern, new StreamPosition(5, "0123456789abcdef"));
        Frame status = await client.ReadMessageAsync();
        await publisher.PublishAsync(pattern.Replace(">", "eu", StringComparison.Ordinal), "live");

        Assert.Equal((3u, "410", why), (status.Sid, status.Status, status.Header(StreamPosition.DescriptionHeader)[0]));
        Assert.Null(status.Position);
        Assert.Equal("live", (await client.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task Another_identity_cannot_read_a_topic_through_a_resume()
    {
        await using var broker = await StartAsync(also: o =>
        {
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256("alice-secret-token-1234"), Permissions = { Publish = { "orders.>" }, Subscribe = { "orders.>" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "eve", Sha256 = TestTokens.Sha256("eve-secret-token-12345678"), Permissions = { Publish = { "public.>" }, Subscribe = { "public.>" } } });
        });
        await using var alice = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders, auth: "alice-secret-token-1234");
        await alice.SubscribeAsync(1, "orders.eu");
        await alice.PublishAsync("orders.eu", "secret");
        StreamPosition position = (await alice.ReadMessageAsync()).Position!.Value;
        await using var eve = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders, auth: "eve-secret-token-12345678");

        await eve.SubscribeAsync(1, "orders.eu", new StreamPosition(0, position.Epoch));
        List<Frame> frames = [await eve.ReadAsync()];
        frames.AddRange(await eve.PingPongAsync());

        Frame refused = Assert.Single(frames);
        Assert.Equal(ErrorCode.PermissionDenied, refused.Error!.Value.Code); // no status, no replay, no position
        await alice.PublishAsync("orders.eu", "more");
        Assert.Empty(await eve.PingPongAsync());
        Assert.Equal("more", (await alice.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task Since_from_a_client_without_headers_is_refused_and_the_bystander_carries_on()
    {
        await using var broker = await StartAsync();
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await bystander.SubscribeAsync(1, "orders.eu");
        await bystander.PingPongAsync();
        await using var bad = await ProtocolClient.OpenAsync(broker.Port);

        await bad.SubscribeAsync(1, "orders.eu", new StreamPosition(0, ""));
        ErrorFrame error = await bad.ExpectClosedWithAsync(ErrorCode.MalformedFrame);
        Assert.Contains("without negotiating headers", error.Message, StringComparison.Ordinal);

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync("orders.eu", "still here");
        Assert.Equal("still here", (await bystander.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task A_malformed_since_is_refused_and_the_bystander_carries_on()
    {
        await using var broker = await StartAsync();
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await bystander.SubscribeAsync(1, "orders.eu");
        await bystander.PingPongAsync();
        await using var bad = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);

        await bad.SubscribeAsync(1, "orders.eu", new StreamPosition(1, new string('e', StreamPosition.MaxEpochBytes + 1)));
        ErrorFrame error = await bad.ExpectClosedWithAsync(ErrorCode.MalformedFrame);
        Assert.Contains("epoch is longer than 64 bytes", error.Message, StringComparison.Ordinal);

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync("orders.eu", "still here");
        Assert.Equal("still here", (await bystander.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task The_byte_budget_holds_and_the_newest_messages_stay()
    {
        const long Budget = 64 * 1024;
        await using var broker = await StartAsync(also: o => o.History.MaxBytes = Budget);
        HistoryStore store = broker.Services.GetRequiredService<HistorySlot>().Store!;
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await publisher.SubscribeAsync(1, "orders.b");
        string payload = new('x', 900);
        for (int i = 0; i < 200; i++)
        {
            await publisher.PublishAsync("orders.a", payload);
            await publisher.PublishAsync("orders.b", payload);
        }

        List<Frame> seen = await ReadMessagesAsync(publisher, 200);
        Assert.InRange(store.Bytes, 1, Budget);
        await using var client = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await client.SubscribeAsync(1, "orders.b", seen[^5].Position!.Value);
        Assert.Equal("200", (await client.ReadMessageAsync()).Status);
        Assert.Equal([197ul, 198ul, 199ul, 200ul], (await ReadMessagesAsync(client, 4)).Select(m => m.Position!.Value.Offset));
    }

    [Fact]
    public async Task Beyond_max_topics_the_least_recently_published_history_is_lost_and_a_resume_says_so()
    {
        await using var broker = await StartAsync(also: o => o.History.MaxTopics = 2);
        HistoryStore store = broker.Services.GetRequiredService<HistorySlot>().Store!;
        await using var client = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await client.SubscribeAsync(1, "orders.>");
        foreach (string topic in new[] { "orders.a", "orders.b", "orders.c", "orders.d" })
        {
            await client.PublishAsync(topic, topic);
        }

        List<Frame> seen = await ReadMessagesAsync(client, 4);
        Assert.Equal(2, store.TopicCount);
        Assert.Equal(2, store.EvictedTopics);

        await client.SubscribeAsync(2, "orders.a", seen[0].Position!.Value);
        Frame lost = await client.ReadMessageAsync();
        await client.SubscribeAsync(3, "orders.d", new StreamPosition(0, seen[3].Position!.Value.Epoch));
        Frame kept = await client.ReadMessageAsync();
        Frame replayed = await client.ReadMessageAsync();

        Assert.Equal(("410", "History lost"), (lost.Status, lost.Header(StreamPosition.DescriptionHeader)[0][..12]));
        Assert.Equal(("200", "orders.d", 3u), (kept.Status, replayed.Text, replayed.Sid));
        // Evicted: a and b for c and d; a's resume reads, and makes no history again.
        using var varz = System.Text.Json.JsonDocument.Parse(await broker.Monitoring.GetStringAsync("/varz"));
        System.Text.Json.JsonElement history = varz.RootElement.GetProperty("history");
        Assert.Equal((2, 2, 2, 1, 1), (history.GetProperty("topics").GetInt32(), history.GetProperty("max_topics").GetInt32(), history.GetProperty("evicted_topics").GetInt32(), history.GetProperty("resumes_recovered").GetInt32(), history.GetProperty("resumes_not_recovered").GetInt32()));
        Assert.InRange(history.GetProperty("bytes").GetInt64(), 1, history.GetProperty("max_bytes").GetInt64());
    }

    [Fact]
    public async Task A_message_kept_compressed_is_replayed_plain_to_a_client_without_zstd()
    {
        await using var broker = await StartAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Zstd);
        byte[] original = Encoding.UTF8.GetBytes(string.Concat(Enumerable.Repeat("compressible ", 400)));
        byte[] compressed = new ZstdSharp.Compressor().Wrap(original).ToArray();
        await publisher.SendAsync(w => FrameWriter.WritePublish(w, "orders.z"u8, default, PayloadFlags.Zstd, compressed));
        await publisher.PingPongAsync();
        await using var zstd = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders | Capabilities.Zstd);
        await using var plain = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        string epoch = broker.Services.GetRequiredService<HistorySlot>().Store!.Find("orders.z")!.Epoch;

        await zstd.SubscribeAsync(1, "orders.z", new StreamPosition(0, epoch));
        await plain.SubscribeAsync(1, "orders.z", new StreamPosition(0, epoch));
        await zstd.ReadMessageAsync();
        await plain.ReadMessageAsync();
        Frame asSent = await zstd.ReadMessageAsync();
        Frame decompressed = await plain.ReadMessageAsync();

        Assert.Equal(PayloadFlags.Zstd, asSent.Flags);
        Assert.Equal(compressed, asSent.Payload);
        Assert.Equal(PayloadFlags.None, decompressed.Flags);
        Assert.Equal(original, decompressed.Payload);
        Assert.Equal(1ul, decompressed.Position!.Value.Offset);
    }

    [Fact]
    public async Task A_long_poll_session_resumes_a_topic_a_tcp_client_published_with_the_same_status_and_positions()
    {
        await using var broker = await StartAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await publisher.SubscribeAsync(1, "orders.eu");
        for (int i = 1; i <= 4; i++)
        {
            await publisher.PublishAsync("orders.eu", $"m{i}");
        }

        StreamPosition second = (await ReadMessagesAsync(publisher, 4))[1].Position!.Value;
        LongPollClient session = await LongPollClient.CreateAsync(broker.Http, new { headers = true });

        using HttpResponseMessage subscribed = await broker.Http.PostAsJsonAsync($"{session.Base}/subscriptions", new { sid = 5, pattern = "orders.eu", since = new { offset = second.Offset, epoch = second.Epoch } });
        Assert.Equal(System.Net.HttpStatusCode.NoContent, subscribed.StatusCode);
        await publisher.PublishAsync("orders.eu", "m5");
        await publisher.ReadMessageAsync();
        PollResult poll = await session.PollAsync(0);

        Assert.Equal(["200", null, null, null], poll.Messages.Select(m => m.Status));
        Assert.Equal(["", "m3", "m4", "m5"], poll.Messages.Select(m => m.Text));
        Assert.Equal([4ul, 3ul, 4ul, 5ul], poll.Messages.Select(m => m.Position!.Value.Offset));
        Assert.All(poll.Messages, m => Assert.Equal(5u, m.Sid));

        LongPollClient plain = await LongPollClient.CreateAsync(broker.Http); // no headers: a resume has no answer it could read
        using HttpResponseMessage refused = await broker.Http.PostAsJsonAsync($"{plain.Base}/subscriptions", new { sid = 1, pattern = "orders.eu", since = new { offset = 0, epoch = "" } });
        Assert.Equal(System.Net.HttpStatusCode.BadRequest, refused.StatusCode);
        Assert.Contains("without negotiating headers", await refused.Content.ReadAsStringAsync(), StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_held_poll_is_answered_with_the_status_of_a_resume_made_meanwhile()
    {
        await using var broker = await StartAsync(also: o => o.LongPoll.PollTimeout = TimeSpan.FromSeconds(50));
        LongPollClient session = await LongPollClient.CreateAsync(broker.Http, new { headers = true });
        Task<PollResult> held = session.PollAsync(0);
        await Until.True(() => broker.Services.GetRequiredService<Herald.Broker.Transports.LongPoll.PollSessionStore>().Find(session.Session)?.IsPolling == true, "the poll is held");

        using HttpResponseMessage subscribed = await broker.Http.PostAsJsonAsync($"{session.Base}/subscriptions", new { sid = 1, pattern = "orders.eu", since = new { offset = 0, epoch = "" } });

        PollResult poll = await held.WaitAsync(TimeSpan.FromSeconds(30)); // not the 50 s of the poll timeout
        Assert.Equal("200", Assert.Single(poll.Messages).Status);
    }

    [Fact]
    public async Task A_publication_whose_stamped_message_would_pass_max_frame_is_refused_and_the_bystander_carries_on()
    {
        await using var broker = await StartAsync(also: o =>
        {
            o.Limits.MaxFrameBytes = 1024;
            o.Limits.MaxTopicLength = 64;
        });
        string topic = "orders." + new string('t', 57); // 64 bytes, the longest
        string replyTo = "_INBOX." + new string('r', 57);
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await bystander.SubscribeAsync(1, "orders.>");
        await bystander.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync(topic, new byte[865], replyTo); // max_payload: its MESSAGE is max_frame before the position

        ErrorFrame error = await publisher.ExpectClosedWithAsync(ErrorCode.FrameTooLarge);
        Assert.Contains("keeps a history", error.Message, StringComparison.Ordinal);
        await using var other = await ProtocolClient.OpenAsync(broker.Port);
        await other.PublishAsync(topic, "fits");
        Frame fits = await bystander.ReadMessageAsync();
        Assert.Equal(("fits", 1ul), (fits.Text, fits.Position!.Value.Offset)); // the refused one took no offset
    }

    [Fact]
    public async Task The_history_capability_is_granted_with_headers_and_only_by_a_broker_that_keeps_histories()
    {
        await using var keeping = await StartAsync();
        await using var plain = await TestBroker.StartAsync();
        const Capabilities Asked = Capabilities.Headers | Capabilities.History;

        await using var a = await ProtocolClient.ConnectAsync(keeping.Port);
        await using var b = await ProtocolClient.ConnectAsync(keeping.Port);
        await using var c = await ProtocolClient.ConnectAsync(plain.Port);
        Assert.Equal(Asked, (await a.HelloAsync("a", Asked)).Capabilities);
        Assert.Equal(Capabilities.None, (await b.HelloAsync("b", Capabilities.History)).Capabilities); // never without headers
        Assert.Equal(Capabilities.Headers, (await c.HelloAsync("c", Asked)).Capabilities); // nothing to resume there

        LongPollClient granted = await LongPollClient.CreateAsync(keeping.Http, new { headers = true, history = true });
        LongPollClient refused = await LongPollClient.CreateAsync(plain.Http, new { headers = true, history = true });
        Assert.True(granted.Created.GetProperty("history").GetBoolean());
        Assert.False(refused.Created.GetProperty("history").GetBoolean());
    }

    [Fact]
    public async Task A_resume_asking_for_more_than_the_pending_limit_meets_the_slow_consumer_policy_and_the_bystander_carries_on()
    {
        await using var broker = await StartAsync(also: o => o.Limits.MaxPendingMessages = 20);
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);
        await bystander.SubscribeAsync(1, "orders.eu");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        for (int i = 1; i <= 50; i++)
        {
            await publisher.PublishAsync("orders.eu", $"m{i}");
            if (i % 10 == 0)
            {
                await publisher.PingPongAsync(); // routed
                Assert.Equal(Enumerable.Range(i - 9, 10).Select(n => $"m{n}"), (await ReadMessagesAsync(bystander, 10)).Select(m => m.Text)); // the bystander keeps up, under its limit
            }
        }

        string epoch = broker.Services.GetRequiredService<HistorySlot>().Store!.Find("orders.eu")!.Epoch;
        await using var greedy = await ProtocolClient.OpenAsync(broker.Port, capabilities: WithHeaders);

        await greedy.SubscribeAsync(1, "orders.eu", new StreamPosition(0, epoch)); // 50 kept messages at once, over its 20

        await greedy.ExpectClosedWithAsync(ErrorCode.SlowConsumer);
        await publisher.PublishAsync("orders.eu", "m51");
        Frame live = await bystander.ReadMessageAsync();
        Assert.Equal(("m51", 51ul), (live.Text, live.Position!.Value.Offset));
    }

    private static async Task<List<Frame>> ReadMessagesAsync(ProtocolClient client, int count)
    {
        var frames = new List<Frame>(count);
        while (frames.Count < count)
        {
            frames.Add(await client.ReadMessageAsync());
        }

        return frames;
    }
}
