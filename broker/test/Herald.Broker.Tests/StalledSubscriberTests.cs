using System.Text.Json;
using Herald.Broker.Delivery;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Issue 13, points 1-3: many subscribers that stop reading beside a few that read everything. A stalled
/// subscriber's cost is its own queue: the fast ones get every message, in order, never cut off or told of
/// a drop; what the broker holds for a stalled one stays within its limit plus a documented overhead; its
/// drops and its slow-consumer episode are counted while it stays stalled.
/// </summary>
public sealed class StalledSubscriberTests
{
    private const int Stalled = 200;
    private const int Fast = 3;
    private const int Messages = 1500;       // 1.5 MiB each: far past a stalled socket's buffers and its queue limit
    private const int PayloadSize = 1024;
    private const int Window = 64;           // the publisher runs at most this far ahead of the slowest fast subscriber
    private const int MaxPendingBytes = 256 * 1024;
    private const int SendBuffer = 32 * 1024;      // the broker's SO_SNDBUF per connection (the kernel reserves twice this)

    [Theory]
    [InlineData(SlowConsumerPolicy.DropOldest)]
    [InlineData(SlowConsumerPolicy.Disconnect)]
    public async Task Fast_subscribers_get_everything_in_order_however_many_others_are_stalled(SlowConsumerPolicy policy)
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 64 * 1024;
            o.Limits.MaxPendingBytes = MaxPendingBytes;
            o.Tcp.SendBufferBytes = SendBuffer;
            o.Limits.SlowConsumerPolicy = policy;
        });
        using MetricsProbe metrics = broker.Metrics();
        var stalled = new List<ProtocolClient>();
        var fast = new List<ProtocolClient>();
        try
        {
            for (int i = 0; i < Stalled; i++)
            {
                ProtocolClient client = await ProtocolClient.OpenAsync(broker.Port, "stalled", receiveBufferSize: 4096);
                stalled.Add(client);
                await client.SubscribeAsync(1, "feed");
                await client.PingPongAsync(); // subscribed; from now on it never reads
            }

            for (int i = 0; i < Fast; i++)
            {
                ProtocolClient client = await ProtocolClient.OpenAsync(broker.Port, "fast");
                fast.Add(client);
                await client.SubscribeAsync(1, "feed");
                await client.PingPongAsync();
            }

            await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
            var received = new int[Fast];
            Task[] readers = fast.Select((client, f) => ReadAllAsync(client, f, received)).ToArray();

            // A publisher at the fast subscribers' pace: each of them is always within Window messages of it,
            // far below its limit, so any drop, cut-off or slow-consumer notice to it is the stalled ones' doing.
            byte[] payload = new byte[PayloadSize];
            for (int seq = 0; seq < Messages; seq++)
            {
                while (seq - Slowest(received) >= Window)
                {
                    await Task.WhenAny(Task.WhenAny(readers), Task.Delay(5));
                    Assert.DoesNotContain(readers, r => r.IsFaulted);
                }

                BitConverter.TryWriteBytes(payload, seq);
                await publisher.SendAsync(w => FrameWriter.WritePublish(w, "feed"u8, default, PayloadFlags.None, payload));
            }

            await Task.WhenAll(readers).WaitAsync(TimeSpan.FromSeconds(60)); // a hang bound, not a speed
            Assert.All(received, r => Assert.Equal(Messages, r));
            foreach (ProtocolClient client in fast)
            {
                Assert.Empty(await client.PingPongAsync()); // still open, nothing more, no ERROR on the way
            }

            // The stalled ones, still not reading: counted now, not when (if ever) they read again.
            if (policy == SlowConsumerPolicy.DropOldest)
            {
                Assert.Equal(Stalled, metrics["herald.slow_consumers", "herald.slow_consumer.policy", "DropOldest"]); // one episode each, not one per drop
                JsonElement connz = await GetJsonAsync(broker, "/connz?limit=1000");
                List<JsonElement> rows = connz.GetProperty("connections").EnumerateArray().ToList();
                List<JsonElement> stalledRows = rows.Where(c => c.GetProperty("name").GetString() == "stalled").ToList();
                Assert.Equal(Stalled, stalledRows.Count);
                Assert.All(stalledRows, c => Assert.True(c.GetProperty("dropped").GetInt64() > 0));
                Assert.All(stalledRows, c => Assert.InRange(c.GetProperty("pending_bytes").GetInt64(), 1, MaxPendingBytes));
                Assert.All(rows.Where(c => c.GetProperty("name").GetString() == "fast"), c => Assert.Equal(0, c.GetProperty("dropped").GetInt64()));
                long dropped = stalledRows.Sum(c => c.GetProperty("dropped").GetInt64());
                Assert.Equal(dropped, metrics["herald.messages.dropped"]);
                JsonElement varz = await GetJsonAsync(broker, "/varz");
                Assert.Equal(dropped, varz.GetProperty("messages").GetProperty("dropped").GetInt64());
                Assert.Equal(Stalled, varz.GetProperty("slow_consumers").GetInt64());
            }
            else
            {
                Assert.Equal(Stalled, metrics["herald.slow_consumers", "herald.slow_consumer.policy", "Disconnect"]);
                // Each is closed (after at most ErrorFlushTimeout for its ERROR), though it never reads again.
                JsonElement varz = await Until.Value(() => GetJsonAsync(broker, "/varz"), v => v.GetProperty("connections").GetInt32() == Fast + 1, "/varz shows the fast subscribers and the publisher");
                Assert.Equal(Fast + 1, varz.GetProperty("connections").GetInt32());
                Assert.Equal(0, metrics["herald.messages.dropped"]);
            }
        }
        finally
        {
            foreach (ProtocolClient client in stalled.Concat(fast))
            {
                await client.DisposeAsync();
            }
        }
    }

    /// <summary>
    /// What a stalled connection holds beyond its queue is bounded: at most one write chunk and the output
    /// buffer in the broker (and the kernel's socket buffers), never a second copy of its queue.
    /// </summary>
    [Fact]
    public async Task A_stalled_connection_holds_at_most_its_limit_plus_the_write_buffers()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 64 * 1024;
            o.Limits.MaxPendingBytes = MaxPendingBytes;
            o.Tcp.SendBufferBytes = SendBuffer;
            o.Limits.SlowConsumerPolicy = SlowConsumerPolicy.DropOldest;
        });
        await using var stalled = await ProtocolClient.OpenAsync(broker.Port, "stalled", receiveBufferSize: 4096);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
        await stalled.SubscribeAsync(1, "feed");
        await stalled.PingPongAsync();

        // Bursts of a whole queue's worth in one write each: the broker routes a burst before the stalled
        // subscriber's writer runs, so a writer that took its whole queue at once would hold a second copy of it.
        const int PerBurst = MaxPendingBytes / PayloadSize;
        const int Bursts = 4;
        byte[] payload = new byte[PayloadSize];
        for (int b = 0; b < Bursts; b++)
        {
            int first = b * PerBurst;
            await publisher.SendAsync(w =>
            {
                for (int i = 0; i < PerBurst; i++)
                {
                    BitConverter.TryWriteBytes(payload, first + i);
                    FrameWriter.WritePublish(w, "feed"u8, default, PayloadFlags.None, payload);
                }
            });
            await publisher.PingPongAsync(); // routed
        }

        // Now it reads: everything the broker held for it arrives, then what it dropped is told.
        await stalled.SendAsync(FrameWriter.WritePing);
        long bytes = 0;
        long dropped = 0;
        int last = -1;
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
                dropped += (long)f.Error.Value.Count;
                continue;
            }

            int seq = BitConverter.ToInt32(f.Payload);
            Assert.True(seq > last, $"message {seq} after {last}");
            last = seq;
            bytes += PayloadSize;
        }

        Assert.Equal(PerBurst * Bursts - 1, last);
        Assert.True(dropped > 0, $"nothing dropped; {bytes} bytes of messages received");
        // Its queue, one chunk being written, Kestrel's output buffer (64 KiB), the kernel's: the broker's send
        // buffer (twice SO_SNDBUF) and this client's receive buffer (4 KiB asked; 32 KiB allowed).
        const long Bound = MaxPendingBytes + PipeDrain.WriteChunkBytes + (64 * 1024) + (2 * SendBuffer) + (32 * 1024);
        Assert.True(bytes <= Bound, $"{bytes} bytes of messages were held for a stalled subscriber; the bound is {Bound}.");
    }

    private static async Task ReadAllAsync(ProtocolClient client, int index, int[] received)
    {
        for (int expected = 0; expected < Messages; expected++)
        {
            Frame f = await client.ReadAsync(TimeSpan.FromSeconds(60));
            Assert.True(f.Type == FrameType.Message, $"fast subscriber {index} got {f} instead of message {expected}");
            Assert.Equal(expected, BitConverter.ToInt32(f.Payload));
            Volatile.Write(ref received[index], expected + 1);
        }
    }

    private static int Slowest(int[] received)
    {
        int slowest = int.MaxValue;
        for (int i = 0; i < received.Length; i++)
        {
            slowest = Math.Min(slowest, Volatile.Read(ref received[i]));
        }

        return slowest;
    }

    private static async Task<JsonElement> GetJsonAsync(TestBroker broker, string path)
    {
        string body = await broker.Monitoring.GetStringAsync(path);
        using JsonDocument document = JsonDocument.Parse(body);
        return document.RootElement.Clone();
    }
}
