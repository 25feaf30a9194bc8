using System.Net.Http.Json;
using System.Text;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Queue groups (spec §4.3, §14) over real TCP and long-poll: each publication reaches every plain subscriber and
/// exactly one member of each group; the shape rules refuse a queue without the capability or beside a since, and
/// a bad name; another identity naming the same group cannot draw its publications away.
/// </summary>
public sealed class QueueGroupTests
{
    private const Capabilities Queues = Capabilities.QueueGroups;

    [Fact]
    public async Task Each_publication_reaches_one_member_of_the_group_and_every_plain_subscriber()
    {
        await using var broker = await TestBroker.StartAsync();
        ProtocolClient[] members = [await Member(broker, 1, "jobs.>", "workers"), await Member(broker, 1, "jobs.>", "workers"), await Member(broker, 1, "jobs.>", "workers")];
        await using var plain = await ProtocolClient.OpenAsync(broker.Port);
        await plain.SubscribeAsync(9, "jobs.>");
        await plain.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);

        const int count = 300;
        for (int i = 0; i < count; i++)
        {
            await publisher.PublishAsync("jobs.eu", $"job {i}");
        }

        await publisher.PingPongAsync(); // routed, every one of them

        var atPlain = new List<string>();
        for (int i = 0; i < count; i++)
        {
            atPlain.Add((await plain.ReadMessageAsync()).Text!);
        }

        List<string>[] atMembers = await Task.WhenAll(members.Select(ReadAllAsync));
        Assert.Equal(Enumerable.Range(0, count).Select(i => $"job {i}"), atPlain);
        Assert.Equal(Enumerable.Range(0, count).Select(i => $"job {i}").Order(), atMembers.SelectMany(m => m).Order()); // each exactly once
        Assert.All(atMembers, m => Assert.NotEmpty(m)); // at random among three: (2/3)^300 that one gets none
        foreach (ProtocolClient member in members)
        {
            await member.DisposeAsync();
        }
    }

    [Fact]
    public async Task A_request_to_a_group_of_responders_is_answered_once()
    {
        await using var broker = await TestBroker.StartAsync();
        ProtocolClient[] responders = [await Member(broker, 1, "svc.echo", "echo"), await Member(broker, 1, "svc.echo", "echo")];
        await using var caller = await ProtocolClient.OpenAsync(broker.Port);
        await caller.SubscribeAsync(1, "_INBOX.caller.>");
        await caller.PingPongAsync();

        const int calls = 50;
        for (int i = 0; i < calls; i++)
        {
            await caller.PublishAsync("svc.echo", $"call {i}", replyTo: $"_INBOX.caller.{i}");
        }

        await caller.PingPongAsync();
        int[] answered = await Task.WhenAll(responders.Select(async responder =>
        {
            List<Frame> requests = await responder.PingPongAsync();
            foreach (Frame request in requests)
            {
                await responder.PublishAsync(request.ReplyTo!, "re: " + request.Text);
            }

            await responder.PingPongAsync();
            return requests.Count;
        }));

        var replies = new List<string>();
        for (int i = 0; i < calls; i++)
        {
            replies.Add((await caller.ReadMessageAsync()).Text!);
        }

        Assert.Equal(calls, answered.Sum());
        Assert.Equal(Enumerable.Range(0, calls).Select(i => $"re: call {i}").Order(), replies.Order());
        Assert.Empty(await caller.PingPongAsync()); // no second answer to any call
        foreach (ProtocolClient responder in responders)
        {
            await responder.DisposeAsync();
        }
    }

    [Fact]
    public async Task A_group_spans_tcp_websocket_and_long_poll_and_each_publication_is_delivered_once_in_all()
    {
        await using var broker = await TestBroker.StartAsync();
        LongPollClient polling = await LongPollClient.CreateAsync(broker.Http);
        Assert.True(polling.Created.GetProperty("queueGroups").GetBoolean());
        using (HttpResponseMessage subscribed = await broker.Http.PostAsJsonAsync($"{polling.Base}/subscriptions", new { sid = 1, pattern = "mixed", queue = "q" }))
        {
            Assert.Equal(System.Net.HttpStatusCode.NoContent, subscribed.StatusCode);
        }

        await using ProtocolClient tcp = await Member(broker, 1, "mixed", "q");
        await using ProtocolClient web = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await web.HelloAsync("web", Queues);
        await web.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "mixed"u8, queue: "q"u8));
        Assert.Empty(await web.PingPongAsync());
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        const int count = 200;
        for (int i = 0; i < count; i++)
        {
            await publisher.PublishAsync("mixed", $"m{i}");
        }

        await publisher.PingPongAsync();
        List<string> atTcp = await ReadAllAsync(tcp);
        List<string> atWeb = await ReadAllAsync(web);
        var atPolling = new List<string>();
        long ack = 0;
        while (atTcp.Count + atWeb.Count + atPolling.Count < count)
        {
            PollResult poll = await polling.PollAsync(ack);
            atPolling.AddRange(poll.Messages.Select(m => m.Text!));
            ack = poll.Count > 0 ? poll.LastSequence : ack;
        }

        Assert.Equal(Enumerable.Range(0, count).Select(i => $"m{i}").Order(), atTcp.Concat(atWeb).Concat(atPolling).Order());
        Assert.NotEmpty(atTcp);
        Assert.NotEmpty(atWeb);
        Assert.NotEmpty(atPolling);
    }

    [Fact]
    public async Task A_member_that_leaves_gets_nothing_more_and_the_rest_of_the_group_gets_everything()
    {
        await using var broker = await TestBroker.StartAsync();
        await using ProtocolClient staying = await Member(broker, 1, "leave", "g");
        await using ProtocolClient leaving = await Member(broker, 2, "leave", "g");
        await leaving.UnsubscribeAsync(2);
        await leaving.PingPongAsync();

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        for (int i = 0; i < 50; i++)
        {
            await publisher.PublishAsync("leave", $"m{i}");
        }

        await publisher.PingPongAsync();
        Assert.Equal(50, (await ReadAllAsync(staying)).Count);
        Assert.Empty(await leaving.PingPongAsync());
    }

    [Fact]
    public async Task The_same_name_on_another_pattern_is_another_group()
    {
        await using var broker = await TestBroker.StartAsync();
        await using ProtocolClient exact = await Member(broker, 1, "orders.eu", "g");
        await using ProtocolClient wide = await Member(broker, 1, "orders.*", "g");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        for (int i = 0; i < 20; i++)
        {
            await publisher.PublishAsync("orders.eu", $"m{i}");
        }

        await publisher.PingPongAsync();
        Assert.Equal(20, (await ReadAllAsync(exact)).Count);
        Assert.Equal(20, (await ReadAllAsync(wide)).Count);
    }

    [Fact]
    public async Task A_no_echo_member_is_never_chosen_for_its_own_publications()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var self = await ProtocolClient.OpenAsync(broker.Port, capabilities: Queues);
        await self.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "room"u8, SubscribeOptions.NoEcho, queue: "g"u8));
        await using ProtocolClient other = await Member(broker, 1, "room", "g");
        await self.PingPongAsync();

        for (int i = 0; i < 40; i++)
        {
            await self.PublishAsync("room", $"m{i}");
        }

        Assert.Empty(await self.PingPongAsync());
        Assert.Equal(40, (await ReadAllAsync(other)).Count); // every one went to the member that may take it
    }

    [Fact]
    public async Task Another_identity_naming_the_group_is_in_a_group_of_its_own()
    {
        const string AliceToken = "queue-alice-token";
        const string MalloryToken = "queue-mallory-token";
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Publish = { "jobs.>" }, Subscribe = { "jobs.>" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "mallory", Sha256 = TestTokens.Sha256(MalloryToken), Permissions = { Publish = { "jobs.>" }, Subscribe = { "jobs.>" } } });
        });
        await using var worker = await ProtocolClient.OpenAsync(broker.Port, capabilities: Queues, auth: AliceToken);
        await worker.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "jobs.>"u8, queue: "workers"u8));
        await using var thief = await ProtocolClient.OpenAsync(broker.Port, capabilities: Queues, auth: MalloryToken);
        await thief.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "jobs.>"u8, queue: "workers"u8));
        await worker.PingPongAsync();
        await thief.PingPongAsync();

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, auth: AliceToken);
        for (int i = 0; i < 30; i++)
        {
            await publisher.PublishAsync("jobs.eu", $"m{i}");
        }

        await publisher.PingPongAsync();
        Assert.Equal(30, (await ReadAllAsync(worker)).Count); // alice's group lost nothing to mallory's
        Assert.Equal(30, (await ReadAllAsync(thief)).Count);  // who may read jobs.> anyway, as any subscriber of hers could
    }

    [Fact]
    public async Task A_queue_without_the_capability_or_beside_a_since_is_malformed_and_a_bystander_carries_on()
    {
        await using var broker = await TestBroker.StartAsync();
        await using ProtocolClient bystander = await Member(broker, 1, "by", "g");

        await using var unasked = await ProtocolClient.OpenAsync(broker.Port); // no queue_groups in HELLO
        await unasked.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "by"u8, queue: "g"u8));
        ErrorFrame error = await unasked.ExpectClosedWithAsync(ErrorCode.MalformedFrame);
        Assert.Contains("queue_groups", error.Message, StringComparison.Ordinal);

        await using var both = await ProtocolClient.OpenAsync(broker.Port, capabilities: Queues | Capabilities.Headers);
        await both.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "by"u8, since: new StreamPosition(0, ""), queue: "g"u8));
        error = await both.ExpectClosedWithAsync(ErrorCode.MalformedFrame);
        Assert.Contains("since", error.Message, StringComparison.Ordinal);

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync("by", "still here");
        Assert.Equal("still here", (await bystander.ReadMessageAsync()).Text);
    }

    [Theory]
    [InlineData("has.dot")]
    [InlineData("star*")]
    [InlineData("gt>")]
    [InlineData("with space")]
    [InlineData("tab\t")]
    [InlineData("é")]
    [InlineData("12345678901234567890123456789012345678901234567890123456789012345")] // 65 bytes
    public async Task A_bad_queue_name_is_an_invalid_topic(string name)
    {
        await using var broker = await TestBroker.StartAsync();
        await using var client = await ProtocolClient.OpenAsync(broker.Port, capabilities: Queues);
        await client.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "jobs"u8, queue: Encoding.UTF8.GetBytes(name)));
        ErrorFrame error = await client.ExpectClosedWithAsync(ErrorCode.InvalidTopic);
        Assert.Contains("Queue group name", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_queue_name_of_64_token_characters_is_taken()
    {
        await using var broker = await TestBroker.StartAsync();
        string name = new('q', 64);
        await using ProtocolClient member = await Member(broker, 1, "long", name);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await publisher.PublishAsync("long", "x");
        Assert.Equal("x", (await member.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task Welcome_grants_queue_groups_only_when_asked()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var asked = await ProtocolClient.ConnectAsync(broker.Port);
        Assert.Equal(Queues, (await asked.HelloAsync("q", Queues)).Capabilities & Queues);
        await using var notAsked = await ProtocolClient.ConnectAsync(broker.Port);
        Assert.Equal(Capabilities.None, (await notAsked.HelloAsync("q")).Capabilities & Queues);
    }

    [Fact]
    public async Task A_long_poll_subscribe_with_a_bad_queue_name_is_refused_and_the_session_stays()
    {
        await using var broker = await TestBroker.StartAsync();
        LongPollClient polling = await LongPollClient.CreateAsync(broker.Http);
        using (HttpResponseMessage refused = await broker.Http.PostAsJsonAsync($"{polling.Base}/subscriptions", new { sid = 1, pattern = "x", queue = "a.b" }))
        {
            Assert.Equal(System.Net.HttpStatusCode.BadRequest, refused.StatusCode);
            Assert.Contains("InvalidTopic", await refused.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        }

        await polling.SubscribeAsync(2, "x");
        using (await LongPollClient.PublishOneShotAsync(broker.Http, "x", "after"))
        {
        }

        PollResult poll = await polling.PollAsync(0);
        Assert.Equal("after", Assert.Single(poll.Messages).Text);
    }

    [Fact]
    public async Task A_stalled_member_is_a_slow_consumer_of_its_own_share_and_the_group_and_a_plain_subscriber_carry_on()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 64 * 1024;
            o.Limits.MaxPendingBytes = 256 * 1024;
            o.Limits.SlowConsumerPolicy = Herald.Broker.Delivery.SlowConsumerPolicy.Disconnect;
        });
        await using var stalled = await ProtocolClient.OpenAsync(broker.Port, "stalled", receiveBufferSize: 4096, capabilities: Queues);
        await stalled.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "feed"u8, queue: "g"u8));
        Assert.Empty(await stalled.PingPongAsync());
        await using ProtocolClient working = await Member(broker, 1, "feed", "g");
        await using var plain = await ProtocolClient.OpenAsync(broker.Port, "plain");
        await plain.SubscribeAsync(1, "feed");
        await plain.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");

        // Paced by the readers, not by the clock: after each publication the plain subscriber reads it and the
        // working member drains what it was sent (a PING's PONG comes after everything queued before it), so
        // only the stalled member ever has more than a message or two waiting, however loaded the machine is.
        const int count = 400; // 400 x 16 KiB: the stalled member's share alone is far past its pending limit
        byte[] payload = new byte[16 * 1024];
        int gotWorking = 0;
        for (int i = 0; i < count; i++)
        {
            await publisher.PublishAsync("feed", payload);
            await plain.ReadMessageAsync(); // the plain subscriber gets every one
            gotWorking += (await working.PingPongAsync()).Count;
        }

        List<Frame> atStalled = await stalled.ReadUntilClosedAsync(); // it reads again: what was buffered, the ERROR, the end
        Assert.Equal(ErrorCode.SlowConsumer, atStalled[^1].Error!.Value.Code);
        await publisher.PublishAsync("feed", "end"); // the group has one member left: it gets the marker
        while ((await working.ReadMessageAsync()).Text != "end") // a publication fanned out after its PING's PONG
        {
            gotWorking++;
        }

        int gotStalled = atStalled.Count(f => f.Type == FrameType.Message);
        Assert.True(gotWorking + gotStalled <= count, $"{gotWorking} + {gotStalled} of {count}: a publication went to two members");
        Assert.True(gotWorking >= (count / 2) - 50, $"the working member got {gotWorking} of {count}"); // about its half, and all once the stalled one was gone
    }

    /// <summary>A connection granted queue_groups with one subscription in <paramref name="queue"/>, in place once this returns.</summary>
    private static async Task<ProtocolClient> Member(TestBroker broker, uint sid, string pattern, string queue)
    {
        ProtocolClient client = await ProtocolClient.OpenAsync(broker.Port, capabilities: Queues);
        await client.SendAsync(w => FrameWriter.WriteSubscribe(w, sid, Encoding.UTF8.GetBytes(pattern), queue: Encoding.UTF8.GetBytes(queue)));
        Assert.Empty(await client.PingPongAsync());
        return client;
    }

    /// <summary>Every MESSAGE already routed to <paramref name="client"/> (a PING's PONG comes after them), as text.</summary>
    private static async Task<List<string>> ReadAllAsync(ProtocolClient client) =>
        [.. (await client.PingPongAsync()).Where(f => f.Type == FrameType.Message).Select(f => f.Text!)];
}
