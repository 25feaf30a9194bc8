using System.Text;
using System.Threading.Channels;
using Herald.Broker.History;
using Herald.Broker.Delivery;
using Herald.Client.Tests.Infrastructure;
using Herald.Testing;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// Deltas (spec §11.2) against the real broker: a subscription that asks for them receives most messages as Fossil
/// deltas and the application always sees the full payload, every one compared with what was published, also when
/// the broker dropped messages of a stalled subscriber (DropOldest), after a reconnect and after a history resume,
/// where the delta's base never reached the subscriber and the broker must send the full message instead.
/// </summary>
public class DeltaTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    /// <summary>A price update: a JSON object of which a few fields change, its sequence first (how a reader finds what was published).</summary>
    private static byte[] Update(int seq) => Encoding.UTF8.GetBytes(
        $$"""{"seq":{{seq}},"symbol":"ACME","venue":"XPAR","currency":"EUR","bid":{{100 + (seq % 7)}}.25,"ask":{{101 + (seq % 5)}}.75,"volume":{{12_000 + (seq * 3)}},"status":"open","updated":"2026-11-29T20:00:{{seq % 60:D2}}Z"}""");

    private static int SeqOf(ReadOnlyMemory<byte> payload)
    {
        string text = Encoding.UTF8.GetString(payload.Span);
        int start = text.IndexOf(':', StringComparison.Ordinal) + 1;
        return int.Parse(text.AsSpan(start, text.IndexOf(',', StringComparison.Ordinal) - start), System.Globalization.CultureInfo.InvariantCulture);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_delta_subscription_gets_deltas_and_hands_the_application_every_full_payload(HeraldTransport transport)
    {
        string topic = Topics.Unique("prices");
        await using HeraldClient subscriber = fixture.Client(transport, o => o.Deltas = true);
        await using HeraldClient plainSubscriber = fixture.Client(transport);
        await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription deltas = await subscriber.SubscribeAsync(topic);
        await using HeraldSubscription plain = await plainSubscriber.SubscribeAsync(topic);
        await using HeraldSubscription wildcard = await subscriber.SubscribeAsync(topic[..topic.LastIndexOf('.')] + ".>");

        int sawDeltas = 0;
        for (int i = 0; i < 20; i++)
        {
            await publisher.PublishAsync(topic, Update(i));
            HeraldMessage message = await deltas.ReadAsync(Wait.Token());
            Assert.Equal(Update(i), message.Payload.ToArray());
            sawDeltas += message.WasDelta ? 1 : 0;
            HeraldMessage full = await plain.ReadAsync(Wait.Token());
            Assert.False(full.WasDelta); // it did not ask
            Assert.Equal(Update(i), full.Payload.ToArray());
            HeraldMessage matched = await wildcard.ReadAsync(Wait.Token());
            Assert.False(matched.WasDelta); // a pattern with wildcards gets full messages (spec §4.3)
            Assert.Equal(Update(i), matched.Payload.ToArray());
        }

        Assert.True(sawDeltas >= 15, $"{sawDeltas} of 20 came as deltas"); // the first is full, the rest pay
    }

    [Theory]
    [InlineData(HeraldTransport.Tcp)]
    [InlineData(HeraldTransport.LongPoll)]
    public async Task A_subscriber_whose_messages_the_broker_drops_gets_the_full_message_where_it_lost_the_base(HeraldTransport transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.SlowConsumerPolicy = SlowConsumerPolicy.DropOldest;
            o.Limits.MaxPendingMessages = 16;
            o.LongPoll.SlowConsumerPolicy = SlowConsumerPolicy.DropOldest;
            o.LongPoll.MaxPendingMessagesPerSession = 16; // a session that stops polling keeps its window: DropOldest evicts from it
        });
        var errors = Channel.CreateUnbounded<HeraldException>();
        await using var stalled = new HeraldClient(new HeraldClientOptions { Url = broker.Url(transport), Deltas = true, ReceiveBufferSize = 4096 });
        stalled.Error += (_, e) => errors.Writer.TryWrite(e.Exception);
        await using var publisher = new HeraldClient(broker.TcpUrl);
        string topic = Topics.Unique("prices");
        await using HeraldSubscription subscription = await stalled.SubscribeAsync(topic, new SubscriptionOptions { Capacity = 1, FullMode = BoundedChannelFullMode.Wait });

        // The subscriber reads nothing while 3 000 updates go out: its socket fills, then its broker queue, which
        // drops the oldest; many of the deltas left behind apply to a message dropped before it.
        const int Count = 3000;
        for (int i = 0; i < Count; i++)
        {
            await publisher.PublishAsync(topic, Update(i));
        }

        await publisher.FlushAsync(Wait.Token());
        int received = 0, asDeltas = 0, full = 0, last = -1;
        while (last < Count - 1)
        {
            HeraldMessage message = await subscription.ReadAsync(Wait.Token());
            int seq = SeqOf(message.Payload);
            Assert.True(seq > last, $"{seq} after {last}");
            Assert.Equal(Encoding.UTF8.GetString(Update(seq)), message.GetString());
            last = seq;
            received++;
            asDeltas += message.WasDelta ? 1 : 0;
            full += message.WasDelta ? 0 : 1;
        }

        Assert.True(received < Count, "the broker dropped nothing: the test did not stall the subscriber");
        Assert.True(asDeltas > 0, "no delta arrived");
        Assert.True(full > 1, "only the first message came full: a delta whose base was dropped would have been sent as is");
        Assert.Equal(ConnectionState.Connected, stalled.State);
        var told = new List<HeraldException>();
        while (errors.Reader.TryRead(out HeraldException? e))
        {
            told.Add(e);
        }

        Assert.DoesNotContain(told, e => e.ErrorCode == Herald.Protocol.ErrorCode.DecompressionFailed); // no delta failed to apply
        Assert.Contains(told, e => e.ErrorCode == Herald.Protocol.ErrorCode.MessagesDropped);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task After_a_reconnect_the_first_message_is_full_and_deltas_follow(HeraldTransport transport)
    {
        string topic = Topics.Unique("prices");
        await using HeraldClient subscriber = fixture.Client(transport, o => o.Deltas = true);
        await using HeraldClient other = fixture.Client(HeraldTransport.Tcp, o => o.Deltas = true); // keeps the topic's base on the broker
        await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic);
        await using HeraldSubscription stays = await other.SubscribeAsync(topic);
        var watcher = new StateWatcher(subscriber);
        for (int i = 0; i < 3; i++)
        {
            await publisher.PublishAsync(topic, Update(i));
            Assert.Equal(Update(i), (await subscription.ReadAsync(Wait.Token())).Payload.ToArray());
            Assert.Equal(Update(i), (await stays.ReadAsync(Wait.Token())).Payload.ToArray());
        }

        subscriber.CurrentConnection!.Fail(new HeraldConnectionException("cut by the test"));
        await watcher.WaitForAsync(ConnectionState.Connected); // the watcher came after the first connect: this is the reconnect
        for (int i = 3; i < 8; i++)
        {
            await publisher.PublishAsync(topic, Update(i));
            Assert.Equal(Update(i), (await stays.ReadAsync(Wait.Token())).Payload.ToArray());
        }

        HeraldMessage first = await subscription.ReadAsync(Wait.Token());
        int seq = SeqOf(first.Payload);
        Assert.False(first.WasDelta); // the new connection's subscription holds nothing yet
        Assert.Equal(Update(seq), first.Payload.ToArray());
        while (seq < 7)
        {
            HeraldMessage next = await subscription.ReadAsync(Wait.Token());
            seq = SeqOf(next.Payload);
            Assert.True(next.WasDelta);
            Assert.Equal(Update(seq), next.Payload.ToArray());
        }
    }

    [Fact]
    public async Task A_history_resume_replays_full_messages_and_the_live_deltas_apply_to_the_last_one()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.History.Topics.Add(new HistoryRule { Pattern = "feed.>", MaxMessages = 100 }));
        await using var link = new CuttableLink(broker.TcpPort);
        await using var client = new HeraldClient(new HeraldClientOptions
        {
            Url = $"tcp://127.0.0.1:{link.Port}",
            Deltas = true,
            ReconnectDelay = TimeSpan.FromMilliseconds(20),
            MaxReconnectDelay = TimeSpan.FromMilliseconds(200),
        });
        await using var other = new HeraldClient(new HeraldClientOptions { Url = broker.TcpUrl, Deltas = true });
        await using var publisher = new HeraldClient(broker.TcpUrl);
        var watcher = new StateWatcher(client);
        await using HeraldSubscription subscription = await client.SubscribeAsync("feed.a");
        await using HeraldSubscription stays = await other.SubscribeAsync("feed.a");
        int deltas = 0;
        for (int i = 0; i < 4; i++)
        {
            await publisher.PublishAsync("feed.a", Update(i));
            HeraldMessage message = await subscription.ReadAsync(Wait.Token());
            Assert.Equal(Update(i), message.Payload.ToArray());
            deltas += message.WasDelta ? 1 : 0;
            await stays.ReadAsync(Wait.Token());
        }

        Assert.True(deltas > 0, "a history topic's messages carry a header block, and still travel as deltas");
        link.Cut();
        await watcher.WaitForAsync(ConnectionState.Reconnecting);
        for (int i = 4; i < 8; i++)
        {
            await publisher.PublishAsync("feed.a", Update(i));
            await stays.ReadAsync(Wait.Token()); // the topic's delta stream goes on without the cut subscriber
        }

        link.Restore();
        await watcher.WaitForAsync(ConnectionState.Connected, 2);
        await publisher.PublishAsync("feed.a", Update(8));
        await publisher.PublishAsync("feed.a", Update(9));
        for (int i = 4; i < 10; i++)
        {
            HeraldMessage message = await subscription.ReadAsync(Wait.Token());
            Assert.Equal(Encoding.UTF8.GetString(Update(i)), message.GetString());
        }
    }
}
