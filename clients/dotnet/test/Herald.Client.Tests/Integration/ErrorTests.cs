using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Integration;

/// <summary>A broker with small limits, to see each refusal surface as a <see cref="HeraldException"/> with the protocol's code.</summary>
public sealed class SmallLimitsBroker : IAsyncLifetime
{
    public const int MaxSubscriptions = 3;
    public const int MaxTopic = 32;
    public const int MaxFrame = 4096;

    public TestBroker Broker { get; private set; } = null!;

    public async Task InitializeAsync() => Broker = await TestBroker.StartAsync(o =>
    {
        o.Limits.MaxSubscriptionsPerConnection = MaxSubscriptions;
        o.Limits.MaxTopicLength = MaxTopic;
        o.Limits.MaxFrameBytes = MaxFrame;
        o.LongPoll.MaxBodyBytes = MaxFrame;
    });

    public async Task DisposeAsync() => await Broker.DisposeAsync();
}

public class ErrorTests(SmallLimitsBroker fixture) : IClassFixture<SmallLimitsBroker>
{
    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_refusal_by_the_broker_surfaces_as_HeraldException_with_its_code(HeraldTransport transport)
    {
        await using var client = new HeraldClient(fixture.Broker.Url(transport), new HeraldClientOptions { ReconnectDelay = TimeSpan.FromMilliseconds(20) });
        var watcher = new StateWatcher(client);
        var errors = new List<HeraldException>();
        client.Error += (_, e) => { lock (errors) { errors.Add(e.Exception); } };
        HeraldSubscription[] kept = [await client.SubscribeAsync("a.>"), await client.SubscribeAsync("b.>"), await client.SubscribeAsync("c.>")];

        // The client cannot know the broker's subscription limit: the broker says it (TCP: a fatal ERROR frame; long-poll: a 400 problem).
        var e = await Assert.ThrowsAsync<HeraldException>(() => client.SubscribeAsync("d.>"));

        Assert.Equal(ErrorCode.TooManySubscriptions, e.ErrorCode);
        if (transport != HeraldTransport.LongPoll)
        {
            Assert.True(e.IsFatal);
            await watcher.WaitForAsync(ConnectionState.Connected, 2); // the broker closed the connection; the client came back with the three it had
        }
        else
        {
            Assert.Equal(400, e.HttpStatus);
            Assert.Equal("TooManySubscriptions", e.ProblemCode);
        }

        await client.PublishAsync("a.still", "works");
        Assert.Equal("works", (await kept[0].ReadAsync(Wait.Token())).GetString());
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task What_the_broker_would_refuse_is_refused_before_sending_and_the_connection_stays(HeraldTransport transport)
    {
        await using var client = new HeraldClient(fixture.Broker.Url(transport));
        var watcher = new StateWatcher(client);
        await client.ConnectAsync(Wait.Token());

        Assert.Equal(ErrorCode.InvalidTopic, (await Assert.ThrowsAsync<HeraldException>(async () => await client.PublishAsync("bad..topic", "x"))).ErrorCode);
        Assert.Equal(ErrorCode.InvalidTopic, (await Assert.ThrowsAsync<HeraldException>(async () => await client.PublishAsync("wild.*", "x"))).ErrorCode);
        Assert.Equal(ErrorCode.ReservedTopic, (await Assert.ThrowsAsync<HeraldException>(async () => await client.PublishAsync("$SYS.x", "x"))).ErrorCode);
        Assert.Equal(ErrorCode.InvalidTopic, (await Assert.ThrowsAsync<HeraldException>(async () => await client.PublishAsync("ok", "x", replyTo: ""))).ErrorCode);
        Assert.Equal(ErrorCode.InvalidTopic, (await Assert.ThrowsAsync<HeraldException>(() => client.SubscribeAsync("a.>.b"))).ErrorCode);
        string tooLong = new('t', SmallLimitsBroker.MaxTopic + 1);
        Assert.Equal(ErrorCode.TopicTooLong, (await Assert.ThrowsAsync<HeraldException>(async () => await client.PublishAsync(tooLong, "x"))).ErrorCode);
        Assert.Equal(ErrorCode.TopicTooLong, (await Assert.ThrowsAsync<HeraldException>(() => client.SubscribeAsync(tooLong))).ErrorCode);
        Assert.Equal(ErrorCode.FrameTooLarge, (await Assert.ThrowsAsync<HeraldException>(async () => await client.PublishAsync("big", new byte[SmallLimitsBroker.MaxFrame]))).ErrorCode);
        if (transport != HeraldTransport.LongPoll)
        {
            // Within max_frame, over WELCOME's max_payload: its MESSAGE would not fit in max_frame (spec §4.2).
            int maxPayload = (int)client.ServerInfo!.Limits["max_payload"];
            Assert.Equal(ProtocolConstants.MaxPayload(SmallLimitsBroker.MaxFrame, SmallLimitsBroker.MaxTopic), maxPayload);
            Assert.Equal(ErrorCode.FrameTooLarge, (await Assert.ThrowsAsync<HeraldException>(async () => await client.PublishAsync("big", new byte[maxPayload + 1]))).ErrorCode);
        }

        await client.FlushAsync(Wait.Token()); // the same connection still answers
        Assert.Equal(ConnectionState.Connected, client.State);
        await watcher.WaitForAsync(ConnectionState.Connected);
        Assert.Equal([ConnectionState.Connecting, ConnectionState.Connected], watcher.History);
    }

    [Fact]
    public async Task Long_poll_publications_go_in_frames_bodies_no_larger_than_the_sessions_maxBodyBytes()
    {
        await using var publisher = new HeraldClient(fixture.Broker.HttpUrl);
        await using var subscriber = new HeraldClient(fixture.Broker.TcpUrl);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync("bulk");
        await publisher.ConnectAsync(Wait.Token());
        Assert.Equal((ulong)SmallLimitsBroker.MaxFrame, publisher.ServerInfo!.Limits["maxBodyBytes"]);

        // 40 publications of 1000 bytes queue up faster than one POST takes: the batch is split at frame boundaries.
        for (int i = 0; i < 40; i++)
        {
            await publisher.PublishAsync("bulk", new byte[1000].Select(_ => (byte)i).ToArray());
        }

        await publisher.FlushAsync(Wait.Token());
        for (int i = 0; i < 40; i++)
        {
            HeraldMessage message = await subscription.ReadAsync(Wait.Token());
            Assert.Equal(1000, message.Payload.Length);
            Assert.All(message.Payload.ToArray(), b => Assert.Equal((byte)i, b));
        }
    }

    [Fact]
    public void A_bad_address_or_option_is_an_ArgumentException_at_construction()
    {
        Assert.Throws<ArgumentException>(() => new HeraldClient("nats://localhost:4222"));
        Assert.Throws<ArgumentException>(() => new HeraldClient("tcp://localhost:4534-4502"));
        Assert.ThrowsAny<ArgumentException>(() => new HeraldClient(new HeraldClientOptions { Url = "tcp://localhost", PublishBufferSize = -1 }));
        Assert.ThrowsAny<ArgumentException>(() => new HeraldClient(new HeraldClientOptions { Url = "tcp://localhost", ClientName = new string('n', 129) }));
        Assert.ThrowsAny<ArgumentException>(() => new HeraldClient(new HeraldClientOptions()));
    }
}
