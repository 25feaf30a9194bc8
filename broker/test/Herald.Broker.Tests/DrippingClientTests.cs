using System.Buffers;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>
/// A frame that has begun must complete in time (grace plus its length at a minimum rate), and the frames
/// all connections hold half-received are bounded together (spec §6.2): a client that drips bytes holds
/// neither a connection nor frame memory for ever.
/// </summary>
public sealed class DrippingClientTests
{
    private const int ClosedByBrokerEvent = 2003;

    [Fact]
    public async Task A_client_dripping_a_frame_is_closed_with_FrameTimeout_while_a_bystander_publishes_and_receives()
    {
        await using var broker = await TestBroker.StartAsync(
            o => (o.Limits.FrameGracePeriod, o.Limits.MinFrameDataRate) = (TimeSpan.FromMilliseconds(500), 1000),
            ["--Logging:LogLevel:Herald=Warning"]);
        LogCapture log = LogCapture.Attach(broker);
        using MetricsProbe metrics = broker.Metrics();
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander");
        await bystander.SubscribeAsync(1, "news");
        await bystander.PingPongAsync();
        await using var dripper = await ProtocolClient.OpenAsync(broker.Port, "dripper");

        // A 2,000-byte PUBLISH: its prefix, then one byte per 200 ms: 400 s to send it all, its deadline 2.5 s after its first byte.
        byte[] frame = Publish("news", new byte[2000]);
        await dripper.SendRawAsync(frame[..4]);
        using var stop = new CancellationTokenSource();
        Task drip = DripAsync(dripper, frame[4..], TimeSpan.FromMilliseconds(200), stop.Token);

        for (int i = 0; i < 5; i++) // the bystander is served the whole time
        {
            await bystander.PublishAsync("news", $"still here {i}");
            Assert.Equal($"still here {i}", (await bystander.ReadMessageAsync()).Text);
        }

        ErrorFrame error = await dripper.ExpectClosedWithAsync(ErrorCode.FrameTimeout);
        await stop.CancelAsync();
        await drip;
        Assert.Contains($"{frame.Length - 4} bytes", error.Message, StringComparison.Ordinal); // the frame it declared, body and all
        Assert.Equal(1, metrics["herald.protocol.errors", "error.type", "FrameTimeout"]);
        Assert.Single(log.Lines, l => l.StartsWith($"Warning {ClosedByBrokerEvent} ", StringComparison.Ordinal) && l.Contains("FrameTimeout", StringComparison.Ordinal));

        await bystander.PublishAsync("news", "after");
        Assert.Equal("after", (await bystander.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task A_client_dripping_a_length_prefix_is_closed_with_FrameTimeout_after_the_grace_period()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.FrameGracePeriod = TimeSpan.FromMilliseconds(300));
        await using var dripper = await ProtocolClient.OpenAsync(broker.Port);

        await dripper.SendRawAsync([0, 0]); // half a prefix, then nothing: the clock runs from its first byte

        ErrorFrame error = await dripper.ExpectClosedWithAsync(ErrorCode.FrameTimeout);
        Assert.Contains("length prefix", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_client_dripping_its_HELLO_is_closed_by_the_handshake_timeout()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.HandshakeTimeout = TimeSpan.FromMilliseconds(500);
            o.Limits.FrameGracePeriod = TimeSpan.FromMilliseconds(100); // shorter, yet before HELLO the handshake timeout rules
        });
        await using var dripper = await ProtocolClient.ConnectAsync(broker.Port);
        var hello = new ArrayBufferWriter<byte>();
        FrameWriter.WriteHello(hello, "dripper", Capabilities.None, null);
        using var stop = new CancellationTokenSource();
        Task drip = DripAsync(dripper, hello.WrittenSpan.ToArray(), TimeSpan.FromMilliseconds(200), stop.Token);

        await dripper.ExpectClosedWithAsync(ErrorCode.HandshakeTimeout);
        await stop.CancelAsync();
        await drip;
    }

    [Fact]
    public async Task Before_HELLO_no_frame_larger_than_the_partial_frame_allowance_is_taken()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.PartialFrameAllowance = 4096);
        await using var client = await ProtocolClient.ConnectAsync(broker.Port);

        await client.SendRawAsync([0, 0, 0x10, 0x01]); // 4,097 bytes declared: refused from the prefix, nothing held

        await client.ExpectClosedWithAsync(ErrorCode.FrameTooLarge);
    }

    [Fact]
    public async Task A_large_frame_sent_at_a_moderate_rate_completes_past_the_grace_period()
    {
        const int Size = 200 * 1024;
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 256 * 1024;
            o.Limits.FrameGracePeriod = TimeSpan.FromMilliseconds(500);
            o.Limits.MinFrameDataRate = 20 * 1024; // 10.5 s for this frame; it is sent at about 100 KiB/s
        });
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "big");
        await subscriber.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        byte[] payload = new byte[Size];
        new Random(7).NextBytes(payload);
        byte[] frame = Publish("big", payload);

        for (int sent = 0; sent < frame.Length; sent += 4096) // about 2 s: well past the grace period alone
        {
            await publisher.SendRawAsync(frame[sent..Math.Min(frame.Length, sent + 4096)]);
            await Task.Delay(40);
        }

        Assert.Equal(payload, (await subscriber.ReadMessageAsync()).Payload);
        await publisher.PingPongAsync(); // still connected
        Assert.Equal(0, broker.Services.GetRequiredService<BrokerCore>().PartialFrames.Used); // its budget given back
    }

    [Fact]
    public async Task The_shared_budget_refuses_one_large_partial_frame_too_many_while_small_frames_from_everyone_pass()
    {
        const int Large = 10_000; // above the allowance: each takes 10,004 bytes of the budget
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 16 * 1024;
            o.Limits.PartialFrameAllowance = 1024;
            o.Limits.MaxPartialFrameBytesTotal = 2 * (Large + 4); // room for two
            o.Limits.FrameGracePeriod = TimeSpan.FromMinutes(2); // the holders are not timed out during the test
        });
        PartialFrameBudget budget = broker.Services.GetRequiredService<BrokerCore>().PartialFrames;
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "t.>");
        await subscriber.PingPongAsync();
        ProtocolClient[] holders = await Task.WhenAll(Enumerable.Range(0, 3).Select(i => ProtocolClient.OpenAsync(broker.Port, $"holder{i}")));
        try
        {
            byte[][] frames = [.. Enumerable.Range(0, 3).Select(i => Publish($"t.large{i}", Filled(Large - 64, (byte)i)))];
            Assert.All(frames, f => Assert.True(f.Length - 4 > 1024 && f.Length - 4 <= Large, $"{f.Length}"));

            // Two large frames, half sent: they hold the budget.
            await holders[0].SendRawAsync(frames[0][..(frames[0].Length / 2)]);
            await holders[1].SendRawAsync(frames[1][..(frames[1].Length / 2)]);
            await Until.True(() => budget.Used == frames[0].Length + frames[1].Length, "both half-sent frames are charged to the budget");
            using (JsonDocument varz = JsonDocument.Parse(await broker.Monitoring.GetStringAsync("/varz")))
            {
                Assert.Equal(frames[0].Length + frames[1].Length, varz.RootElement.GetProperty("partial_frame_bytes").GetInt64());
            }

            // A small frame from anyone (the subscriber, a newcomer) passes meanwhile.
            await using var newcomer = await ProtocolClient.OpenAsync(broker.Port, "newcomer");
            await newcomer.PublishAsync("t.small", "small");
            Assert.Equal("small", (await subscriber.ReadMessageAsync()).Text);

            // The third large frame finds no room: told why, closed.
            await holders[2].SendRawAsync(frames[2][..(frames[2].Length / 2)]);
            ErrorFrame refused = await holders[2].ExpectClosedWithAsync(ErrorCode.FrameBudgetFull);
            Assert.Contains(broker.Services.GetRequiredService<LimitOptions>().MaxPartialFrameBytesTotal.ToString(CultureInfo.InvariantCulture), refused.Message, StringComparison.Ordinal);

            // The holders finish theirs: delivered, and the budget is free again for the next large frame.
            await holders[0].SendRawAsync(frames[0][(frames[0].Length / 2)..]);
            await holders[1].SendRawAsync(frames[1][(frames[1].Length / 2)..]);
            Frame[] delivered = [await subscriber.ReadMessageAsync(), await subscriber.ReadMessageAsync()];
            Assert.Equal(["t.large0", "t.large1"], delivered.Select(m => m.Topic).Order());
            await Until.True(() => budget.Used == 0, "the budget is empty");
            await newcomer.SendRawAsync(frames[2]);
            Assert.Equal("t.large2", (await subscriber.ReadMessageAsync()).Topic);
        }
        finally
        {
            foreach (ProtocolClient holder in holders)
            {
                await holder.DisposeAsync();
            }
        }
    }

    private static byte[] Publish(string topic, byte[] payload)
    {
        var writer = new ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(writer, Encoding.UTF8.GetBytes(topic), default, PayloadFlags.None, payload);
        return writer.WrittenSpan.ToArray();
    }

    private static byte[] Filled(int size, byte value) => Enumerable.Repeat(value, size).ToArray();

    /// <summary>Sends <paramref name="bytes"/> one byte per <paramref name="interval"/> until they are sent, the connection fails or the test stops it.</summary>
    private static async Task DripAsync(ProtocolClient client, byte[] bytes, TimeSpan interval, CancellationToken stop)
    {
        try
        {
            foreach (byte b in bytes)
            {
                await client.SendRawAsync([b], stop);
                await Task.Delay(interval, stop);
            }
        }
        catch (Exception e) when (e is OperationCanceledException or IOException or ObjectDisposedException)
        {
            // stopped, or the broker closed the connection
        }
    }
}
