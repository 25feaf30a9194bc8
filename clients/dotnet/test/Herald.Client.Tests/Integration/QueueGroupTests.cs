using System.Buffers;
using System.Collections.Concurrent;
using System.Globalization;
using System.Threading.Channels;
using Herald.Broker.History;
using Herald.Client.Protocol;
using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// Queue groups (spec §14) through the real broker: the members of a group share a topic's publications, each
/// delivered to exactly one of them, over TCP, long-poll and both at once, and again after a reconnect; a name
/// the spec forbids, a broker without groups and a group with a history position are refused before anything is sent.
/// </summary>
/// <remarks>
/// No test waits on a clock to know that nothing more will arrive. After the publications under test, the publisher
/// sends "end" marks, one at a time, until every member has received one: per publisher and topic, each subscriber gets
/// its messages in order (spec §4.5), so a member that has an "end" has everything of the run that was routed to it.
/// </remarks>
public class QueueGroupTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    /// <summary>Names the spec forbids (spec §4.3), by a readable case name (some hold control characters).</summary>
    private static readonly Dictionary<string, string> Invalid = new(StringComparer.Ordinal)
    {
        ["empty"] = "",
        ["a dot"] = "jobs.eu",
        ["a star inside"] = "work*",
        ["a star"] = "*",
        ["a greater-than"] = ">",
        ["a space"] = "has space",
        ["a tab"] = "tab\t",
        ["a NUL"] = "nul\0",
        ["DEL"] = "del\u007f",
        ["non-ASCII letters"] = "ünïcode",
        ["an emoji"] = "emoji🌍",
        ["a lone surrogate"] = "half\ud800",
        ["65 characters"] = new string('q', Topic.MaxQueueNameBytes + 1),
    };

    public static TheoryData<CaseName> InvalidNames => [.. Invalid.Keys.Select(k => new CaseName(k))];

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task Three_members_get_each_publication_exactly_once_between_them_and_a_plain_subscriber_gets_all(HeraldTransport memberTransport)
    {
        const int Count = 300;
        string topic = Topics.Unique("queue.work");
        await using HeraldClient first = fixture.Client(memberTransport);
        await using HeraldClient second = fixture.Client(memberTransport);
        await using HeraldClient third = fixture.Client(memberTransport);
        await using HeraldClient plainClient = fixture.Client(HeraldTransport.Tcp);
        await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp);
        var tally = new Tally(3);
        HeraldClient[] members = [first, second, third];
        for (int i = 0; i < members.Length; i++)
        {
            HeraldSubscription member = await members[i].SubscribeAsync(topic, tally.Member(i), new SubscriptionOptions { Queue = "workers" });
            Assert.Equal("workers", member.Queue);
            Assert.True(members[i].ServerInfo!.QueueGroups);
        }

        var plain = new ConcurrentQueue<string>();
        var plainDone = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        await plainClient.SubscribeAsync(topic, m =>
        {
            string text = m.GetString();
            if (Tally.IsEnd(text))
            {
                plainDone.TrySetResult();
            }
            else
            {
                plain.Enqueue(text);
            }
        });

        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync(topic, Text(i));
        }

        await tally.FenceAsync(k => publisher.PublishAsync(topic, Tally.End(k)).AsTask());
        await plainDone.Task.Within();

        Assert.Equal(Enumerable.Range(0, Count).Select(Text), plain); // the plain subscription: all of them, in order
        AssertSharedOnce(tally, Count);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task Two_responders_in_a_group_answer_each_of_50_requests_exactly_once(HeraldTransport responderTransport)
    {
        const int Count = 50;
        string topic = Topics.Unique("queue.svc");
        await using HeraldClient first = fixture.Client(responderTransport);
        await using HeraldClient second = fixture.Client(responderTransport);
        await using HeraldClient requester = fixture.Client(HeraldTransport.Tcp);
        var tally = new Tally(2);
        await first.SubscribeAsync(topic, tally.Member(0), new SubscriptionOptions { Queue = "responders" });
        await second.SubscribeAsync(topic, tally.Member(1), new SubscriptionOptions { Queue = "responders" });

        HeraldMessage[] replies = await Task.WhenAll(Enumerable.Range(0, Count).Select(i => requester.RequestAsync(topic, Text(i), TimeSpan.FromSeconds(10), Wait.Token())));
        await tally.FenceAsync(async k => await requester.RequestAsync(topic, Tally.End(k), TimeSpan.FromSeconds(10), Wait.Token()));

        for (int i = 0; i < Count; i++)
        {
            string reply = replies[i].GetString();
            Assert.EndsWith(":" + Text(i), reply, StringComparison.Ordinal); // its own answer
            int responder = int.Parse(reply[..reply.IndexOf(':', StringComparison.Ordinal)], CultureInfo.InvariantCulture);
            Assert.Contains(Text(i), tally.Of(responder)); // from the responder that handled it
        }

        // The 50 requests run concurrently (each waits for the client's inbox, then for the write), so they have no
        // publication order to keep: each once, and none twice, is the claim here.
        AssertSharedOnce(tally, Count, ordered: false);
    }

    [Fact]
    public async Task A_long_poll_member_and_a_TCP_member_of_one_group_get_each_publication_once_in_total()
    {
        const int Count = 200;
        string topic = Topics.Unique("queue.mixed");
        await using HeraldClient longPoll = fixture.Client(HeraldTransport.LongPoll);
        await using HeraldClient tcp = fixture.Client(HeraldTransport.Tcp);
        await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp);
        var tally = new Tally(2);
        await longPoll.SubscribeAsync(topic, tally.Member(0), new SubscriptionOptions { Queue = "mixed" });
        await tcp.SubscribeAsync(topic, tally.Member(1), new SubscriptionOptions { Queue = "mixed" });

        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync(topic, Text(i));
        }

        await tally.FenceAsync(k => publisher.PublishAsync(topic, Tally.End(k)).AsTask());

        Assert.True(longPoll.ServerInfo!.QueueGroups); // the session-create answer's queueGroups
        Assert.True(tcp.ServerInfo!.QueueGroups); // WELCOME's bit 4
        AssertSharedOnce(tally, Count);
    }

    [Fact]
    public async Task The_same_name_on_two_patterns_is_two_groups_and_a_64_character_name_is_accepted()
    {
        string topic = Topics.Unique("queue.two");
        string name = new('q', Topic.MaxQueueNameBytes);
        await using HeraldClient client = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription exact = await client.SubscribeAsync(topic, new SubscriptionOptions { Queue = name });
        await using HeraldSubscription wildcard = await client.SubscribeAsync(topic[..topic.LastIndexOf('.')] + ".>", new SubscriptionOptions { Queue = name });

        await client.PublishAsync(topic, "both");

        Assert.Equal("both", (await exact.ReadAsync(Wait.Token())).GetString()); // one group of one member each: a plain subscription
        Assert.Equal("both", (await wildcard.ReadAsync(Wait.Token())).GetString());
        Assert.Equal(ConnectionState.Connected, client.State);
    }

    [Theory]
    [MemberData(nameof(InvalidNames))]
    public async Task An_invalid_queue_name_is_an_ArgumentException_before_anything_is_sent(CaseName name)
    {
        string queue = Invalid[name.Value];
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url);

        // Not connected yet: refused before the client even connects.
        await Assert.ThrowsAsync<ArgumentException>(() => client.SubscribeAsync("jobs", new SubscriptionOptions { Queue = queue }));
        Assert.Equal(ConnectionState.Disconnected, client.State);

        // Connected: no SUBSCRIBE leaves the client; the flush's PING is the next frame, and its PONG completes it.
        await using FakeConnection connection = await broker.ConnectAsync(client);
        var refused = await Assert.ThrowsAsync<ArgumentException>(() => client.SubscribeAsync("jobs", m => { }, new SubscriptionOptions { Queue = queue }));
        Task flushed = client.FlushAsync(Wait.Token());

        Assert.Equal("options", refused.ParamName);
        Assert.Contains("queue", refused.Message, StringComparison.OrdinalIgnoreCase);
        Assert.Equal(FrameType.Ping, await connection.ReadAsync());
        await connection.SendAsync(FrameWriter.WritePong);
        await flushed.Within();
        Assert.Equal(ConnectionState.Connected, client.State);
    }

    [Fact]
    public async Task Against_a_broker_without_queue_groups_a_member_is_refused_and_never_sent_as_a_plain_subscription()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url);
        await using FakeConnection connection = await broker.ConnectAsync(client); // WELCOME grants nothing, as a broker before queue groups

        var refused = await Assert.ThrowsAsync<HeraldException>(() => client.SubscribeAsync("jobs", new SubscriptionOptions { Queue = "workers" }));
        Task flushed = client.FlushAsync(Wait.Token());

        Assert.True((connection.Hello.Capabilities & Capabilities.QueueGroups) != 0); // HELLO asked for them
        Assert.False(client.ServerInfo!.QueueGroups);
        Assert.Equal(ErrorCode.MalformedFrame, refused.ErrorCode);
        Assert.Contains("queue group", refused.Message, StringComparison.Ordinal);
        Assert.Equal(FrameType.Ping, await connection.ReadAsync()); // no SUBSCRIBE went out
        await connection.SendAsync(FrameWriter.WritePong);
        await flushed.Within();
    }

    [Fact]
    public async Task A_member_reconnecting_to_a_broker_without_queue_groups_ends_with_an_error_instead_of_subscribing_plain()
    {
        int port = TestBroker.FreePort();
        TestBroker real = await TestBroker.StartAsync(tcpPort: port);
        await using var client = new HeraldClient(real.TcpUrl, Fast());
        var watcher = new StateWatcher(client);
        var errors = new ConcurrentQueue<HeraldException>();
        client.Error += (_, e) => errors.Enqueue(e.Exception);
        HeraldSubscription member = await client.SubscribeAsync("jobs.eu", new SubscriptionOptions { Queue = "workers" });
        HeraldSubscription plain = await client.SubscribeAsync("jobs.us");

        await real.DisposeAsync();
        await watcher.WaitForAsync(ConnectionState.Reconnecting);
        using var old = new FakeBroker(port);
        await using FakeConnection connection = await old.AcceptAsync();
        var subscribes = new List<string>();
        Assert.Equal(FrameType.Hello, await connection.ReadAsync());
        await connection.SendAsync(w => FrameWriter.WriteWelcome(w, "old", 2, Capabilities.None, [new("max_frame", 65536), new("max_topic", 256)]));
        int pings = 0;
        while (pings < 3) // the plain subscription's two fence PINGs, then the reconnect's flush
        {
            FrameType type = await connection.ReadAsync(body => subscribes.Add(Describe(body)));
            if (type == FrameType.Ping)
            {
                pings++;
                await connection.SendAsync(FrameWriter.WritePong);
            }
        }

        await watcher.WaitForAsync(ConnectionState.Connected, 2);

        var ended = await Assert.ThrowsAsync<HeraldException>(async () => await member.ReadAsync(Wait.Token()));
        Assert.Equal(ErrorCode.MalformedFrame, ended.ErrorCode);
        Assert.False(member.IsActive);
        Assert.True(plain.IsActive);
        Assert.Equal(["PING", "SUBSCRIBE jobs.us queue=nil", "PING", "PING"], subscribes); // only the plain one was made again
        Assert.Contains(errors, e => ReferenceEquals(e, ended));
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task After_a_reconnect_the_member_is_subscribed_again_in_its_group(HeraldTransport transport)
    {
        const int Count = 100;
        int tcpPort = TestBroker.FreePort(), httpPort = TestBroker.FreePort();
        TestBroker first = await TestBroker.StartAsync(tcpPort: tcpPort, httpPort: httpPort);
        await using var returning = new HeraldClient(first.Url(transport), Fast());
        var watcher = new StateWatcher(returning);
        string topic = Topics.Unique("queue.back");
        var tally = new Tally(2);
        HeraldSubscription member = await returning.SubscribeAsync(topic, tally.Member(0), new SubscriptionOptions { Queue = "workers" });

        await first.DisposeAsync();
        await watcher.WaitForAsync(ConnectionState.Reconnecting);
        await using TestBroker second = await TestBroker.StartAsync(tcpPort: tcpPort, httpPort: httpPort);
        await watcher.WaitForAsync(ConnectionState.Connected, 2);
        await using var other = new HeraldClient(second.TcpUrl);
        await using var publisher = new HeraldClient(second.TcpUrl);
        await other.SubscribeAsync(topic, tally.Member(1), new SubscriptionOptions { Queue = "workers" });

        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync(topic, Text(i));
        }

        await tally.FenceAsync(k => publisher.PublishAsync(topic, Tally.End(k)).AsTask());

        // Subscribed again as a plain subscription, it would have had all of them, and the other member's share twice.
        Assert.True(member.IsActive);
        AssertSharedOnce(tally, Count);
    }

    [Fact]
    public async Task A_member_asking_to_resume_is_refused_and_one_left_at_the_default_sends_no_position()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.History.Topics.Add(new HistoryRule { Pattern = "qfeed.>", MaxMessages = 100 }));
        await using var client = new HeraldClient(broker.TcpUrl);
        await using var publisher = new HeraldClient(broker.TcpUrl);

        var refused = await Assert.ThrowsAsync<ArgumentException>(() => client.SubscribeAsync("qfeed.a", new SubscriptionOptions { Queue = "w", Resume = true }));
        Assert.Contains("resume", refused.Message, StringComparison.OrdinalIgnoreCase);

        // Resume left at its default gives way to the queue: with both, the broker would close the connection (spec §4.3).
        await using HeraldSubscription member = await client.SubscribeAsync("qfeed.a", new SubscriptionOptions { Queue = "w" });
        await publisher.PublishAsync("qfeed.a", "live");

        Assert.True(client.ServerInfo!.History);
        Assert.Equal("live", (await member.ReadAsync(Wait.Token())).GetString());
        Assert.Null(member.Position); // it keeps no position to resume from
        Assert.Equal(ConnectionState.Connected, client.State);
    }

    [Fact]
    public void The_encoder_refuses_a_SUBSCRIBE_with_both_a_queue_and_a_position()
    {
        var output = new ArrayBufferWriter<byte>();

        Assert.Throws<ArgumentException>(() => ClientFrames.Subscribe(output, 1, "feed.a"u8, SubscribeOptions.None, new StreamPosition(0, ""), "w"u8));

        Assert.Equal(0, output.WrittenCount);
    }

    /// <summary>Every publication of the run went to exactly one member, each member got some, each (when <paramref name="ordered"/>) in publication order.</summary>
    private static void AssertSharedOnce(Tally tally, int count, bool ordered = true)
    {
        int[] all = [.. Enumerable.Range(0, tally.Members).SelectMany(tally.Of).Select(t => int.Parse(t, CultureInfo.InvariantCulture)).Order()];
        Assert.Equal(Enumerable.Range(0, count), all); // none missing, none twice
        for (int i = 0; i < tally.Members; i++)
        {
            int[] got = [.. tally.Of(i).Select(t => int.Parse(t, CultureInfo.InvariantCulture))];
            Assert.True(got.Length > 0, $"Member {i} got none of {count}.");
            if (ordered)
            {
                Assert.Equal(got.Order(), got);
            }
        }
    }

    private static string Text(int i) => i.ToString(CultureInfo.InvariantCulture);

    /// <summary>A SUBSCRIBE body as the broker's decoder reads it; other frames by their type.</summary>
    private static string Describe(ReadOnlySequence<byte> body)
    {
        var reader = new MessagePack.MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
        if (type != FrameType.Subscribe)
        {
            return type.ToString().ToUpperInvariant();
        }

        SubscribeFrame subscribe = FrameDecoder.ReadSubscribe(ref reader, count);
        return $"SUBSCRIBE {subscribe.PatternString} queue={subscribe.QueueString ?? "nil"}";
    }

    private static HeraldClientOptions Fast() => new() { ReconnectDelay = TimeSpan.FromMilliseconds(20), MaxReconnectDelay = TimeSpan.FromMilliseconds(200) };

    /// <summary>What each member of a group received, and the "end" marks that say it has had all of a run.</summary>
    private sealed class Tally(int members)
    {
        private readonly ConcurrentQueue<string>[] _received = [.. Enumerable.Range(0, members).Select(_ => new ConcurrentQueue<string>())];
        private readonly int[] _ends = new int[members];
        private readonly Channel<int> _endSeen = Channel.CreateUnbounded<int>();

        public int Members => members;

        public static string End(int k) => "end" + k.ToString(CultureInfo.InvariantCulture);

        public static bool IsEnd(string text) => text.StartsWith("end", StringComparison.Ordinal);

        /// <summary>Member <paramref name="index"/>'s handler: records the message, answers a request with <c>index:payload</c>.</summary>
        public Func<HeraldMessage, Task> Member(int index) => async message =>
        {
            string text = message.GetString();
            if (IsEnd(text))
            {
                Interlocked.Increment(ref _ends[index]);
                _endSeen.Writer.TryWrite(index);
            }
            else
            {
                _received[index].Enqueue(text);
            }

            if (message.ReplyTo is not null)
            {
                await message.RespondAsync($"{index.ToString(CultureInfo.InvariantCulture)}:{text}");
            }
        };

        public IReadOnlyList<string> Of(int index) => [.. _received[index]];

        /// <summary>Sends "end" marks one at a time (each reaches one member) until every member has had one.</summary>
        public async Task FenceAsync(Func<int, Task> sendEnd)
        {
            for (int k = 0; !Enumerable.Range(0, members).All(i => Volatile.Read(ref _ends[i]) > 0); k++)
            {
                Assert.True(k < 500, "The end marks did not reach every member.");
                await sendEnd(k);
                await _endSeen.Reader.ReadAsync(Wait.Token()); // the hang guard fails it if the mark reached no member
            }
        }
    }
}
