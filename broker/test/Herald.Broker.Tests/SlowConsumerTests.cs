using Herald.Broker.Delivery;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// A subscriber that stops reading (its socket buffers fill, then its broker queue) against one that
/// keeps up. The publisher paces itself on the fast subscriber only, so the fast one never nears its
/// limit while the stalled one crosses it.
/// </summary>
public sealed class SlowConsumerTests
{
    private const int PayloadSize = 1024;
    private const int Chunk = 50;
    private const int Chunks = 200;          // 10,000 messages, ~10 MiB: far past socket buffers and the queue limit

    [Fact]
    public async Task Disconnect_policy_closes_the_stalled_subscriber_while_the_fast_one_gets_everything()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 64 * 1024;
            o.Limits.MaxPendingBytes = 256 * 1024;
            o.Limits.SlowConsumerPolicy = SlowConsumerPolicy.Disconnect;
            o.Limits.ErrorFlushTimeout = TimeSpan.FromMinutes(1); // it reads again only after the whole publishing loop, however long a busy machine takes: its ERROR waits for it
        });
        using MetricsProbe metrics = broker.Metrics();
        await using var stalled = await ProtocolClient.OpenAsync(broker.Port, "stalled", receiveBufferSize: 4096);
        await using var fast = await ProtocolClient.OpenAsync(broker.Port, "fast");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
        await stalled.SubscribeAsync(1, "feed");
        await fast.SubscribeAsync(1, "feed");
        await stalled.PingPongAsync();
        await fast.PingPongAsync();

        int received = await PublishPacedAsync(publisher, fast);

        Assert.Equal(Chunk * Chunks, received);
        // Once it reads again, the stalled subscriber finds the fatal ERROR after what it had buffered, then the end.
        List<Frame> frames = await stalled.ReadUntilClosedAsync();
        Assert.Equal(ErrorCode.SlowConsumer, frames[^1].Error!.Value.Code);
        Assert.True(frames.Count - 1 < Chunk * Chunks);
        Assert.Equal(1, metrics["herald.slow_consumers", "herald.slow_consumer.policy", "Disconnect"]); // this broker's one stalled subscriber, once
        Assert.Equal(1, metrics["herald.slow_consumers"]);
    }

    [Fact]
    public async Task Drop_oldest_policy_keeps_the_stalled_subscriber_and_tells_it_how_many_it_missed()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 64 * 1024;
            o.Limits.MaxPendingBytes = 256 * 1024;
            o.Limits.SlowConsumerPolicy = SlowConsumerPolicy.DropOldest;
        });
        using MetricsProbe metrics = broker.Metrics();
        await using var stalled = await ProtocolClient.OpenAsync(broker.Port, "stalled", receiveBufferSize: 4096);
        await using var fast = await ProtocolClient.OpenAsync(broker.Port, "fast");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
        await stalled.SubscribeAsync(1, "feed");
        await fast.SubscribeAsync(1, "feed");
        await stalled.PingPongAsync();
        await fast.PingPongAsync();

        int received = await PublishPacedAsync(publisher, fast);
        Assert.Equal(Chunk * Chunks, received);

        // The stalled subscriber now drains: every message is either received, in order, or counted as dropped.
        long dropped = 0;
        int delivered = 0;
        int last = -1;
        await stalled.SendAsync(FrameWriter.WritePing);
        while (true)
        {
            Frame f = await stalled.ReadAsync();
            if (f.Type == FrameType.Pong)
            {
                break;
            }

            if (f.Type == FrameType.Error)
            {
                Assert.Equal(ErrorCode.MessagesDropped, f.Error!.Value.Code);
                Assert.False(f.Error.Value.Fatal);
                dropped += (long)f.Error.Value.Count;
                continue;
            }

            int seq = BitConverter.ToInt32(f.Payload);
            Assert.True(seq > last, $"message {seq} after {last}");
            last = seq;
            delivered++;
        }

        Assert.True(dropped > 0);
        Assert.Equal(Chunk * Chunks, delivered + dropped);
        Assert.Equal(Chunk * Chunks - 1, last); // the newest message is never the one dropped
        Assert.Equal(dropped, metrics["herald.messages.dropped"]);
    }

    /// <summary>Publishes in chunks, waiting for the fast subscriber to receive each chunk before the next.</summary>
    private static async Task<int> PublishPacedAsync(ProtocolClient publisher, ProtocolClient fast)
    {
        byte[] payload = new byte[PayloadSize];
        int received = 0;
        for (int c = 0; c < Chunks; c++)
        {
            int first = c * Chunk;
            await publisher.SendAsync(w =>
            {
                for (int i = 0; i < Chunk; i++)
                {
                    BitConverter.TryWriteBytes(payload, first + i);
                    FrameWriter.WritePublish(w, "feed"u8, default, PayloadFlags.None, payload);
                }
            });

            for (int i = 0; i < Chunk; i++)
            {
                Frame f = await fast.ReadMessageAsync();
                Assert.Equal(received, BitConverter.ToInt32(f.Payload));
                received++;
            }
        }

        return received;
    }
}
