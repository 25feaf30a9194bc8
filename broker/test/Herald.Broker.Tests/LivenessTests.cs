using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

public sealed class LivenessTests
{
    [Fact]
    public async Task A_client_that_never_says_hello_is_closed_with_handshake_timeout()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.HandshakeTimeout = TimeSpan.FromMilliseconds(200));
        await using var silent = await ProtocolClient.ConnectAsync(broker.Port);

        await silent.ExpectClosedWithAsync(ErrorCode.HandshakeTimeout);
    }

    [Fact]
    public async Task An_idle_client_is_pinged_and_closed_as_stale_when_it_never_answers()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.PingInterval = TimeSpan.FromMilliseconds(100);
            o.Limits.MaxPingsOutstanding = 2;
        });
        await using var mute = await ProtocolClient.OpenAsync(broker.Port);

        List<Frame> frames = await mute.ReadUntilClosedAsync();

        Assert.Equal([FrameType.Ping, FrameType.Ping, FrameType.Error], frames.Select(f => f.Type));
        Assert.Equal(ErrorCode.StaleConnection, frames[^1].Error!.Value.Code);
    }

    [Fact]
    public async Task A_client_that_answers_pings_stays_connected()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.PingInterval = TimeSpan.FromMilliseconds(250); // short, yet longer than a busy 2-core machine takes to answer
            o.Limits.MaxPingsOutstanding = 1;
        });
        await using var alive = await ProtocolClient.OpenAsync(broker.Port);

        for (int i = 0; i < 6; i++) // well past MaxPingsOutstanding: each answer resets the count
        {
            Assert.Equal(FrameType.Ping, (await alive.ReadAsync()).Type);
            await alive.SendAsync(FrameWriter.WritePong);
        }

        await alive.SubscribeAsync(1, "t");
        await alive.PublishAsync("t", "alive");
        Frame next;
        while ((next = await alive.ReadAsync()).Type == FrameType.Ping)
        {
            await alive.SendAsync(FrameWriter.WritePong); // still answering while the message comes
        }

        Assert.Equal("alive", next.Text);
    }
}
