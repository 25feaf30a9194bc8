using Herald.Broker.Routing;
using Microsoft.Extensions.DependencyInjection;
using Herald.Broker.Tests.Infrastructure;

namespace Herald.Broker.Tests;

[CollectionDefinition(nameof(Isolated), DisableParallelization = true)]
public sealed class Isolated;

/// <summary>Runs alone: it opens a thousand connections. Its counters are its broker's own (<see cref="MetricsProbe"/>).</summary>
[Collection(nameof(Isolated))]
public sealed class FanoutTests
{
    [Fact]
    public async Task Thousand_subscribers_receive_every_message_in_order_from_one_encode_per_publish()
    {
        const int Subscribers = 1000;
        const int Messages = 20;
        await using var broker = await TestBroker.StartAsync();
        using MetricsProbe metrics = broker.Metrics();
        var subscribers = new List<ProtocolClient>();
        try
        {
            for (int i = 0; i < Subscribers; i++)
            {
                ProtocolClient s = await ProtocolClient.OpenAsync(broker.Port);
                await s.SubscribeAsync((uint)(i + 1), "fan.out");
                subscribers.Add(s);
            }

            foreach (ProtocolClient s in subscribers)
            {
                await s.PingPongAsync();
            }

            await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
            await publisher.PingPongAsync();
            TopicRouter router = broker.Services.GetRequiredService<TopicRouter>();
            long encodedBefore = router.EncodedFrames;

            await publisher.SendAsync(w =>
            {
                for (int m = 0; m < Messages; m++)
                {
                    Herald.Protocol.FrameWriter.WritePublish(w, "fan.out"u8, default, Herald.Protocol.PayloadFlags.None, BitConverter.GetBytes(m));
                }
            });
            await publisher.PingPongAsync(); // every PUBLISH has been routed

            // One MESSAGE buffer per publication, whatever the number of subscribers.
            Assert.Equal(Messages, router.EncodedFrames - encodedBefore);
            Assert.Equal((long)Messages * Subscribers, metrics["herald.messages.delivered"]);

            await Task.WhenAll(subscribers.Select(async (s, index) =>
            {
                for (int m = 0; m < Messages; m++)
                {
                    Frame f = await s.ReadMessageAsync();
                    Assert.Equal((uint)(index + 1), f.Sid);
                    Assert.Equal(m, BitConverter.ToInt32(f.Payload));
                }
            }));
        }
        finally
        {
            foreach (ProtocolClient s in subscribers)
            {
                await s.DisposeAsync();
            }
        }
    }
}
