using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

public sealed class ShutdownTests
{
    [Fact]
    public async Task Graceful_shutdown_delivers_what_was_queued_then_says_goodbye()
    {
        const int Messages = 4000;
        await using var broker = await TestBroker.StartAsync(o => o.Limits.ShutdownDrainTimeout = TimeSpan.FromSeconds(20));
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, "sub", receiveBufferSize: 4096);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "pub");
        await subscriber.SubscribeAsync(1, "work");
        await subscriber.PingPongAsync();

        // ~4 MiB: more than the stalled subscriber's socket buffers hold, so most of it waits in the broker's queue.
        byte[] payload = new byte[1024];
        await publisher.SendAsync(w =>
        {
            for (int i = 0; i < Messages; i++)
            {
                BitConverter.TryWriteBytes(payload, i);
                FrameWriter.WritePublish(w, "work"u8, default, PayloadFlags.None, payload);
            }
        });
        await publisher.PingPongAsync(); // all routed and queued before the stop begins

        Task stopping = broker.StopAsync();
        List<Frame> frames = await subscriber.ReadUntilClosedAsync();
        await stopping;

        Assert.Equal(Messages + 1, frames.Count);
        for (int i = 0; i < Messages; i++)
        {
            Assert.Equal(i, BitConverter.ToInt32(frames[i].Payload));
        }

        Assert.Equal(ErrorCode.ShuttingDown, frames[^1].Error!.Value.Code);
        Assert.True(frames[^1].Error!.Value.Fatal);
    }

    [Fact]
    public async Task An_idle_connection_does_not_hold_up_shutdown()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.ShutdownDrainTimeout = TimeSpan.FromMinutes(10));
        await using var idle = await ProtocolClient.OpenAsync(broker.Port);

        // A hang guard, not a timing assertion: an idle connection that held up shutdown would keep the
        // stop waiting for the whole 10 min drain timeout, far past this bound.
        await broker.StopAsync().WaitAsync(TimeSpan.FromSeconds(60));

        await idle.ExpectClosedWithAsync(ErrorCode.ShuttingDown);
    }
}
