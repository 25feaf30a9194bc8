using System.Text;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Client.Tests.Integration;

/// <summary>Zstd (spec §11): negotiated in HELLO or the session, decompressed on arrival, optionally used for large publications.</summary>
public class CompressionTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    /// <summary>8 KiB of text that compresses well (a JSON-ish record, repeated).</summary>
    private static readonly string Compressible = string.Concat(Enumerable.Range(0, 400).Select(i => $"{{\"id\":{i % 10},\"name\":\"sensor\"}}\n"))[..8192];

    public static TheoryData<HeraldTransport, HeraldTransport> TransportPairs => PubSubTests.TransportPairs;

    [Theory]
    [MemberData(nameof(TransportPairs))]
    public async Task A_large_publication_travels_compressed_and_arrives_decompressed(HeraldTransport publisherTransport, HeraldTransport subscriberTransport)
    {
        string topic = Topics.Unique("logs");
        await using HeraldClient subscriber = fixture.Client(subscriberTransport);
        await using HeraldClient plainSubscriber = fixture.Client(subscriberTransport, o => o.EnableCompression = false);
        await using HeraldClient publisher = fixture.Client(publisherTransport, o => o.CompressPublishesAbove = 1024);
        await using HeraldSubscription zstd = await subscriber.SubscribeAsync(topic);
        await using HeraldSubscription plain = await plainSubscriber.SubscribeAsync(topic);
        await publisher.ConnectAsync(Wait.Token());
        Assert.True(publisher.ServerInfo!.Compression);
        Assert.True(subscriber.ServerInfo!.Compression);
        Assert.False(plainSubscriber.ServerInfo!.Compression);

        await publisher.PublishAsync(topic, Compressible);

        // Published compressed: a Zstd subscriber gets it as sent, the others decompressed by the broker (spec §11).
        HeraldMessage compressed = await zstd.ReadAsync(Wait.Token());
        HeraldMessage uncompressed = await plain.ReadAsync(Wait.Token());
        Assert.True(compressed.WasCompressed);
        Assert.Equal(Compressible, compressed.GetString());
        Assert.False(uncompressed.WasCompressed);
        Assert.Equal(Compressible, uncompressed.GetString());
    }

    [Theory]
    [InlineData(HeraldTransport.Tcp)]
    [InlineData(HeraldTransport.LongPoll)]
    [InlineData(HeraldTransport.WebSocket)]
    public async Task The_broker_compresses_a_large_plain_publication_for_a_subscriber_that_negotiated_Zstd(HeraldTransport subscriberTransport)
    {
        string topic = Topics.Unique("metrics");
        await using HeraldClient subscriber = fixture.Client(subscriberTransport);
        await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp, o => o.EnableCompression = false);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic);

        // The broker decides per publication (size, its CPU, the topic's ratio); the fixture keeps CPU out of it,
        // and a few publications leave room for the decision anyway. Every one must arrive intact.
        bool sawCompressed = false;
        for (int i = 0; i < 10 && !sawCompressed; i++)
        {
            await publisher.PublishAsync(topic, Encoding.UTF8.GetBytes(Compressible));
            HeraldMessage message = await subscription.ReadAsync(Wait.Token());
            Assert.Equal(Compressible, message.GetString());
            sawCompressed = message.WasCompressed;
        }

        Assert.True(sawCompressed, "The broker never sent the compressible payload compressed.");
    }

    [Fact]
    public async Task A_small_or_incompressible_publication_is_sent_plain()
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(HeraldTransport.Tcp, o => o.CompressPublishesAbove = 16);
        await using HeraldSubscription subscription = await client.SubscribeAsync(topic);
        byte[] random = new byte[4096];
        Random.Shared.NextBytes(random);

        await client.PublishAsync(topic, random);

        HeraldMessage message = await subscription.ReadAsync(Wait.Token());
        Assert.False(message.WasCompressed); // compressing random bytes does not make them smaller: sent as they are
        Assert.Equal(random, message.Payload.ToArray());
    }
}
