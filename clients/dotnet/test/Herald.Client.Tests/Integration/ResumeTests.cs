using System.Text.Json;
using Herald.Broker.History;
using Herald.Client.Tests.Infrastructure;
using Herald.Testing;
using Herald.Protocol;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// The client resumes a topic's history by itself (spec §13, CLIENTS.md step 12) against the real broker, with the
/// network between them cut (the broker and its histories stay up): what was published while it was away arrives
/// after the reconnect, before the live stream, each message once; the broker's status MESSAGEs never reach the
/// application; a lost history is told.
/// </summary>
public class ResumeTests
{
    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    private static Task<TestBroker> StartAsync(Action<Herald.Broker.Hosting.HeraldOptions>? also = null) => TestBroker.StartAsync(o =>
    {
        o.History.Topics.Add(new HistoryRule { Pattern = "feed.>", MaxMessages = 1000 });
        o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
        o.LongPoll.InactivityTimeout = TimeSpan.FromSeconds(1); // a long-poll session behind a cut link is lost soon
        o.Monitoring.Port = 0; // /varz says when it is
        also?.Invoke(o);
    });

    /// <summary>Waits until the broker holds no long-poll session (its /varz says so): the proof that a session expired, where a sleep proves nothing on a busy machine.</summary>
    private static async Task SessionsEndedAsync(TestBroker broker)
    {
        using var http = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{broker.MonitoringPort}") };
        CancellationToken deadline = Wait.Token();
        while (true)
        {
            using JsonDocument varz = JsonDocument.Parse(await http.GetStringAsync("/varz", deadline));
            if (varz.RootElement.GetProperty("long_poll_sessions").GetInt32() == 0)
            {
                return;
            }

            await Task.Delay(20, deadline);
        }
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task After_a_network_cut_the_subscription_gets_what_it_missed_then_the_live_stream_once_each(HeraldTransport transport)
    {
        await using TestBroker broker = await StartAsync();
        await using var link = new CuttableLink(transport == HeraldTransport.Tcp ? broker.TcpPort : broker.HttpPort);
        string url = transport switch
        {
            HeraldTransport.Tcp => $"tcp://127.0.0.1:{link.Port}",
            HeraldTransport.WebSocket => $"ws://127.0.0.1:{link.Port}/ws",
            _ => $"http://127.0.0.1:{link.Port}",
        };
        await using var client = new HeraldClient(url, Fast());
        await using var publisher = new HeraldClient(broker.TcpUrl);
        var watcher = new StateWatcher(client);
        var resumes = new List<HeraldResumeEventArgs>();
        HeraldSubscription subscription = await client.SubscribeAsync("feed.a");
        subscription.Resumed += (_, e) => resumes.Add(e);
        if (transport != HeraldTransport.LongPoll)
        {
            Assert.Equal(0ul, subscription.Position!.Value.Offset); // the broker's answer to "from now", ahead of the PONG that confirmed the subscription
        }

        await publisher.PublishAsync("feed.a", "m1");
        HeraldMessage first = await subscription.ReadAsync(Wait.Token());
        Assert.Equal(("m1", 1ul), (first.GetString(), first.Position!.Value.Offset));

        link.Cut();
        await watcher.WaitForAsync(ConnectionState.Reconnecting);
        for (int i = 2; i <= 5; i++)
        {
            await publisher.PublishAsync("feed.a", $"m{i}");
        }

        await publisher.FlushAsync(Wait.Token());
        if (transport == HeraldTransport.LongPoll)
        {
            await SessionsEndedAsync(broker); // the session behind the cut expired: the client must resume on a new one
        }

        link.Restore();
        await watcher.WaitForAsync(ConnectionState.Connected, 2);
        await publisher.PublishAsync("feed.a", "m6");

        var texts = new List<string>();
        var offsets = new List<ulong>();
        for (int i = 2; i <= 6; i++)
        {
            HeraldMessage message = await subscription.ReadAsync(Wait.Token());
            texts.Add(message.GetString());
            offsets.Add(message.Position!.Value.Offset);
        }

        Assert.Equal(["m2", "m3", "m4", "m5", "m6"], texts);
        Assert.Equal([2ul, 3ul, 4ul, 5ul, 6ul], offsets);
        HeraldResumeEventArgs resumed = Assert.Single(resumes);
        Assert.True(resumed.Recovered, resumed.Description);
        Assert.Equal(first.Position.Value.Epoch, subscription.Position!.Value.Epoch);
        await publisher.PublishAsync("feed.a", "m7");
        Assert.Equal("m7", (await subscription.ReadAsync(Wait.Token())).GetString()); // nothing twice before it, no status as a message
    }

    [Fact]
    public async Task A_history_lost_while_away_is_told_and_the_live_stream_goes_on()
    {
        await using TestBroker broker = await StartAsync(o => o.History.MaxTopics = 1);
        await using var link = new CuttableLink(broker.TcpPort);
        await using var client = new HeraldClient($"tcp://127.0.0.1:{link.Port}", Fast());
        await using var publisher = new HeraldClient(broker.TcpUrl);
        var watcher = new StateWatcher(client);
        var resumes = new List<HeraldResumeEventArgs>();
        HeraldSubscription subscription = await client.SubscribeAsync("feed.a");
        subscription.Resumed += (_, e) => resumes.Add(e);
        await publisher.PublishAsync("feed.a", "kept");
        await subscription.ReadAsync(Wait.Token());

        link.Cut();
        await watcher.WaitForAsync(ConnectionState.Reconnecting);
        await publisher.PublishAsync("feed.a", "lost");
        await publisher.PublishAsync("feed.b", "evicts feed.a's history"); // MaxTopics 1: feed.a's goes (twice round the clock)
        await publisher.PublishAsync("feed.c", "and again");
        await publisher.FlushAsync(Wait.Token());
        link.Restore();
        await watcher.WaitForAsync(ConnectionState.Connected, 2);
        await publisher.PublishAsync("feed.a", "live");

        Assert.Equal("live", (await subscription.ReadAsync(Wait.Token())).GetString());
        HeraldResumeEventArgs resumed = Assert.Single(resumes);
        Assert.False(resumed.Recovered);
        Assert.StartsWith("History lost", resumed.Description, StringComparison.Ordinal);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_topic_without_history_and_a_wildcard_pattern_never_see_a_status_and_are_never_resumed(HeraldTransport transport)
    {
        await using TestBroker broker = await StartAsync();
        await using var client = new HeraldClient(broker.Url(transport), Fast());
        await using var publisher = new HeraldClient(broker.TcpUrl);
        var resumes = 0;
        HeraldSubscription plain = await client.SubscribeAsync("other.a");
        HeraldSubscription wide = await client.SubscribeAsync("feed.*");
        plain.Resumed += (_, _) => resumes++;
        wide.Resumed += (_, _) => resumes++;

        await publisher.PublishAsync("other.a", "x");
        await publisher.PublishAsync("feed.w", "y");

        HeraldMessage x = await plain.ReadAsync(Wait.Token());
        HeraldMessage y = await wide.ReadAsync(Wait.Token());
        Assert.Equal(("x", "y"), (x.GetString(), y.GetString())); // the 410 "no history" status was consumed, not delivered
        Assert.Null(x.Position);
        Assert.Equal(1ul, y.Position!.Value.Offset); // a wildcard subscription still sees positions
        Assert.Null(plain.Position);
        Assert.Equal(0, resumes);
    }

    [Fact]
    public async Task Resume_can_be_turned_off_per_subscription()
    {
        await using TestBroker broker = await StartAsync();
        await using var client = new HeraldClient(broker.TcpUrl, Fast());
        await using var publisher = new HeraldClient(broker.TcpUrl);
        HeraldSubscription subscription = await client.SubscribeAsync("feed.off", new SubscriptionOptions { Resume = false });

        await publisher.PublishAsync("feed.off", "m1");

        HeraldMessage message = await subscription.ReadAsync(Wait.Token());
        Assert.Equal("m1", message.GetString()); // no status before it: no since was sent
        Assert.Equal(1ul, message.Position!.Value.Offset);
    }

    [Fact]
    public async Task A_connection_lost_in_the_middle_of_a_replay_resumes_where_the_replay_stopped()
    {
        await using TestBroker broker = await StartAsync();
        await using var link = new CuttableLink(broker.TcpPort);
        await using var client = new HeraldClient($"tcp://127.0.0.1:{link.Port}", Fast());
        await using var publisher = new HeraldClient(broker.TcpUrl);
        var watcher = new StateWatcher(client);
        HeraldSubscription subscription = await client.SubscribeAsync("feed.r", new SubscriptionOptions { Capacity = 1 }); // a full buffer holds the reader: the replay stops mid-way
        await publisher.PublishAsync("feed.r", "m1");
        Assert.Equal("m1", (await subscription.ReadAsync(Wait.Token())).GetString());

        link.Cut();
        await watcher.WaitForAsync(ConnectionState.Reconnecting);
        for (int i = 2; i <= 6; i++)
        {
            await publisher.PublishAsync("feed.r", $"m{i}");
        }

        await publisher.FlushAsync(Wait.Token());
        link.Restore();
        Assert.Equal("m2", (await subscription.ReadAsync(Wait.Token())).GetString()); // the replay has begun (its PONG is still behind it)
        link.Cut(); // lost with part of the replay still unread, one message waiting for room in the buffer
        link.Restore();
        await publisher.PublishAsync("feed.r", "m7");

        var rest = new List<string>();
        while (rest.LastOrDefault() != "m7")
        {
            rest.Add((await subscription.ReadAsync(Wait.Token())).GetString());
        }

        Assert.Equal(["m3", "m4", "m5", "m6", "m7"], rest); // none skipped (a resume from the status's top would), none twice
    }

    [Fact]
    public async Task A_received_messages_headers_pass_on_without_the_brokers_keys()
    {
        await using TestBroker broker = await StartAsync();
        await using var client = new HeraldClient(broker.TcpUrl, Fast());
        HeraldSubscription feed = await client.SubscribeAsync("feed.in");
        HeraldSubscription copies = await client.SubscribeAsync("copies");
        await client.PublishAsync("feed.in", "x", HeraldHeaders.Empty.Add("X-Tag", "kept"));
        HeraldMessage received = await feed.ReadAsync(Wait.Token());
        Assert.NotNull(received.Position);

        await client.PublishAsync("copies", "x", received.Headers);

        HeraldMessage copy = await copies.ReadAsync(Wait.Token());
        Assert.Equal(["X-Tag"], copy.Headers.Keys);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_broker_without_history_is_told_and_subscribes_plainly(HeraldTransport transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500);
            o.LongPoll.InactivityTimeout = TimeSpan.FromSeconds(1);
        });
        await using var client = new HeraldClient(broker.Url(transport), Fast());
        await using var publisher = new HeraldClient(broker.TcpUrl);
        HeraldSubscription subscription = await client.SubscribeAsync("feed.plain");
        await publisher.PublishAsync("feed.plain", "m1");

        Assert.Equal("m1", (await subscription.ReadAsync(Wait.Token())).GetString());
        Assert.False(client.ServerInfo!.History);
        Assert.True(client.ServerInfo.Headers);
        Assert.Null(subscription.Position);
    }

    private static HeraldClientOptions Fast() =>
        new() { ReconnectDelay = TimeSpan.FromMilliseconds(20), MaxReconnectDelay = TimeSpan.FromMilliseconds(200) };
}
