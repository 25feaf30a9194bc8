using System.Buffers;
using System.Buffers.Binary;
using System.Net.Sockets;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// RFC 6455 as the broker reads it off the connection's own pipe, with frames written by hand on a raw socket:
/// every rule a server must enforce closes the offending client with the close code that says why, then its
/// socket, while a WebSocket bystander carries on; fragments, control frames between them and a Herald frame
/// spanning fragments are read as the one byte stream they are.
/// </summary>
public sealed class WebSocketFrameTests(ITestOutputHelper output)
{
    private const byte Fin = 0x80;

    /// <summary>The mask key of every client frame here (before <see cref="Broken"/>, whose frames it masks).</summary>
    private static readonly byte[] Key = [0x37, 0xFA, 0x21, 0x3D];

    /// <summary>Each bad client's frames and the close status the broker must answer with.</summary>
    private static readonly TheoryData<string, byte[], ushort> Broken = new()
    {
        { "unmasked binary frame", Frame(Fin | 0x2, [1, 2, 3], masked: false), 1002 },
        { "reserved bit RSV1 without an extension", Frame(Fin | 0x40 | 0x2, [1, 2, 3]), 1002 },
        { "reserved bits RSV2+RSV3", Frame(Fin | 0x30 | 0x2, [1]), 1002 },
        { "text frame", Frame(Fin | 0x1, "[1]"u8.ToArray()), 1003 },
        { "unknown data opcode 3", Frame(Fin | 0x3, [1]), 1002 },
        { "unknown control opcode 0xB", Frame(Fin | 0xB, []), 1002 },
        { "control frame over 125 bytes", Frame(Fin | 0x9, new byte[126]), 1002 },
        { "fragmented control frame", Frame(0x9, [1, 2]), 1002 },
        { "continuation with no message begun", Frame(Fin | 0x0, [1]), 1002 },
        { "new message inside a fragmented one", [.. Frame(0x2, [1]), .. Frame(Fin | 0x2, [2])], 1002 },
        { "64-bit length with its top bit set", [Fin | 0x2, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4], 1002 },
        { "Close with a one-byte payload", Frame(Fin | 0x8, [3]), 1002 },
        { "Close with status 1005, which is never sent", Frame(Fin | 0x8, [0x03, 0xED]), 1002 },
        { "Close whose reason is not UTF-8", Frame(Fin | 0x8, [0x03, 0xE8, 0xFF, 0xFE]), 1007 },
    };

    [Fact]
    public async Task Every_broken_rule_closes_its_client_with_the_code_that_says_why_and_a_bystander_carries_on()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.MaxFrameBytes = 4096);
        await using ProtocolClient bystander = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await bystander.HelloAsync("bystander");
        await bystander.SubscribeAsync(1, "by");
        await bystander.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");

        int round = 0;
        foreach (object[] row in Broken)
        {
            (string rule, byte[] frames, ushort expected) = ((string)row[0], (byte[])row[1], (ushort)row[2]);
            await using NetworkStream bad = await ProtocolClient.UpgradeAsync(broker.HttpPort);
            await bad.WriteAsync(HelloFrame()); // a session that has begun: the rule, not the handshake, ends it
            await bad.WriteAsync(frames);
            (ushort status, string reason) = await ReadCloseAsync(bad);
            output.WriteLine($"{rule}: closed with {status} \"{reason}\"");
            Assert.True(status == expected, $"{rule}: closed with {status} ({reason}), not {expected}");
            Assert.Equal(0, await ReadToEndAsync(bad)); // then the socket: nothing more comes

            string said = $"still here {++round}";
            await publisher.PublishAsync("by", said);
            Assert.Equal(said, (await bystander.ReadMessageAsync()).Text);
        }
    }

    [Fact]
    public async Task A_frame_across_fragments_with_a_ping_between_them_is_read_whole_and_the_ping_answered()
    {
        await using var broker = await TestBroker.StartAsync();
        await using ProtocolClient subscriber = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await subscriber.HelloAsync("subscriber");
        await subscriber.SubscribeAsync(1, "split");
        await subscriber.PingPongAsync();

        await using NetworkStream raw = await ProtocolClient.UpgradeAsync(broker.HttpPort);
        var publish = new ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(publish, "split"u8, default, PayloadFlags.None, "across three fragments"u8);
        byte[] bytes = publish.WrittenSpan.ToArray();
        // One write: the HELLO, then the PUBLISH over three fragments with a Ping (and a Pong) between them, so the
        // broker meets the headers inside a Herald frame it has partly read.
        byte[] all = [.. HelloFrame(), .. Frame(0x2, bytes[..7]), .. Frame(Fin | 0x9, "are you there"u8.ToArray()), .. Frame(0x0, bytes[7..12]), .. Frame(Fin | 0xA, []), .. Frame(Fin | 0x0, bytes[12..])];
        await raw.WriteAsync(all);

        Assert.Equal("across three fragments", (await subscriber.ReadMessageAsync()).Text);
        Assert.Equal("are you there", await ReadPongAsync(raw));

        // Its Close is answered with the broker's, then the socket ends.
        await raw.WriteAsync(Frame(Fin | 0x8, [0x03, 0xE8]));
        Assert.Equal(1000, (await ReadCloseAsync(raw)).Status);
        Assert.Equal(0, await ReadToEndAsync(raw));
    }

    [Fact]
    public async Task A_message_of_any_size_is_read_as_the_frames_it_carries_and_the_broker_holds_at_most_one_partial_frame()
    {
        const int MaxFrame = 64 * 1024;
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = MaxFrame;
            o.Limits.PartialFrameAllowance = 1024; // a larger frame half-received is charged to the shared budget
            o.Limits.FrameGracePeriod = TimeSpan.FromMinutes(2);
        });
        PartialFrameBudget budget = broker.Services.GetRequiredService<BrokerCore>().PartialFrames;
        await using ProtocolClient bystander = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await bystander.HelloAsync("bystander");
        await bystander.SubscribeAsync(1, "big.>");
        await bystander.PingPongAsync();

        // One unfragmented message of over 15 times max_frame: 32 frames of 30 KiB, then one of 40 KiB sent in two halves.
        // Every whole frame reaches the bystander while the message goes on, and the broker holds the half frame only.
        await using NetworkStream raw = await ProtocolClient.UpgradeAsync(broker.HttpPort);
        await raw.WriteAsync(HelloFrame());
        byte[][] frames = [.. Enumerable.Range(0, 32).Select(i => PublishFrame($"big.{i}", 30 * 1024))];
        byte[] large = PublishFrame("big.large", 40 * 1024);
        long length = frames.Sum(f => (long)f.Length) + large.Length;
        Assert.True(length > 15L * (MaxFrame + 4), $"{length}");
        await raw.WriteAsync(Head(Fin | 0x2, length));
        long at = 0;
        for (int i = 0; i < frames.Length; i++)
        {
            await raw.WriteAsync(Masked(frames[i], at));
            at += frames[i].Length;
            Assert.Equal($"big.{i}", (await bystander.ReadMessageAsync()).Topic);
        }

        await raw.WriteAsync(Masked(large[..(large.Length / 2)], at));
        await Until.True(() => budget.Used == large.Length, "the half-sent frame is charged to the budget");
        output.WriteLine($"{at + (large.Length / 2):N0} bytes into one WebSocket frame of {length:N0}: the broker holds {budget.Used:N0} bytes of it (one partial Herald frame; max_frame {MaxFrame:N0})");
        await raw.WriteAsync(Masked(large[(large.Length / 2)..], at + (large.Length / 2)));
        Assert.Equal("big.large", (await bystander.ReadMessageAsync()).Topic);
        await Until.True(() => budget.Used == 0, "the budget is given back");

        // A fragmented message whose fragments before its final one carry 3 x 30 KiB, over max_frame + 4: the same stream of frames.
        byte[] fragment = PublishFrame("big.fragment", 30 * 1024);
        byte[] fragmented = [.. Frame(0x2, fragment), .. Frame(0x0, fragment), .. Frame(0x0, fragment), .. Frame(Fin | 0x0, PingFrame())];
        Assert.True(3 * fragment.Length > MaxFrame + 4, $"{fragment.Length}");
        await raw.WriteAsync(fragmented);
        for (int i = 0; i < 3; i++)
        {
            Assert.Equal("big.fragment", (await bystander.ReadMessageAsync()).Topic);
        }

        await bystander.PingPongAsync(); // the bystander carries on
        await raw.WriteAsync(Frame(Fin | 0x8, [0x03, 0xE8]));
        Assert.Equal(1000, (await ReadCloseAsync(raw)).Status); // the raw client was never refused
    }

    [Fact]
    public async Task A_message_larger_than_one_buffer_reaches_a_websocket_subscriber_whole()
    {
        await using var broker = await TestBroker.StartAsync();
        await using ProtocolClient subscriber = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await subscriber.HelloAsync("subscriber");
        await subscriber.SubscribeAsync(1, "big");
        await subscriber.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");

        foreach (int size in new[] { 100, 126, 4000, 70_000, 300_000 })
        {
            byte[] payload = new byte[size];
            Random.Shared.NextBytes(payload);
            await publisher.PublishAsync("big", payload);
            Assert.Equal(payload, (await subscriber.ReadMessageAsync()).Payload);
        }
    }

    [Fact]
    public async Task A_client_that_pings_while_it_stops_reading_is_still_closed_as_a_slow_consumer_and_its_slot_freed()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 64 * 1024;
            o.Limits.MaxPendingBytes = 256 * 1024;
            o.Limits.SlowConsumerPolicy = Herald.Broker.Delivery.SlowConsumerPolicy.Disconnect;
            o.Limits.ErrorFlushTimeout = TimeSpan.FromMilliseconds(200); // its last words cannot go: it reads nothing
        });
        SessionRegistry registry = broker.Services.GetRequiredService<SessionRegistry>();
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander");
        await bystander.SubscribeAsync(1, "by");
        await bystander.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");

        // A subscriber with a small receive buffer that reads nothing once subscribed.
        await using NetworkStream stalled = await ProtocolClient.UpgradeAsync(broker.HttpPort, receiveBufferSize: 8 * 1024);
        var subscribe = new ArrayBufferWriter<byte>();
        FrameWriter.WriteHello(subscribe, "stalled", Capabilities.None, null);
        FrameWriter.WriteSubscribe(subscribe, 1, "feed"u8);
        await stalled.WriteAsync(Frame(Fin | 0x2, subscribe.WrittenSpan.ToArray()));
        ProtocolSession session = (await Until.Value(() => Task.FromResult(registry.Sessions.FirstOrDefault(s => s.Transport == "websocket")), s => s is not null, "the stalled session registered"))!;

        // Flood it until the broker's send to it is blocked (a backlog beyond what one drained batch takes), then
        // it pings: the Pong waits behind that send, and must not hold the session's reading.
        byte[] payload = new byte[16 * 1024];
        await Until.True(
            async () =>
            {
                await publisher.PublishAsync("feed", payload);
                await publisher.PingPongAsync();
                return session.Backlog.Pending.Bytes > 96 * 1024 || session.IsClosing;
            },
            "the stalled subscriber's send blocked");
        await stalled.WriteAsync(Frame(Fin | 0x9, "still there?"u8.ToArray()));
        await bystander.PingPongAsync(); // the Ping has had time to be read; more publications make it a slow consumer

        await Until.True(
            async () =>
            {
                await publisher.PublishAsync("feed", payload);
                await publisher.PingPongAsync();
                return !registry.Sessions.Contains(session);
            },
            "the slow consumer closed and uncounted though a Pong waits for it");
        output.WriteLine($"after: registry {registry.Count} ({string.Join(", ", registry.Sessions.Select(s => s.Transport))}), the stalled session closed with {session.CloseCode}");
        Assert.Equal(Herald.Protocol.ErrorCode.SlowConsumer, session.CloseCode);
        Assert.Equal(2, registry.Count); // the bystander and the publisher

        await publisher.PublishAsync("by", "still here");
        Assert.Equal("still here", (await bystander.ReadMessageAsync()).Text);
    }

    /// <summary>A client frame: <paramref name="first"/> (FIN, RSV, opcode), the length in as few bytes as it takes, a mask key and the masked payload.</summary>
    private static byte[] Frame(int first, byte[] payload, bool masked = true) =>
        [.. Head(first, payload.Length, masked), .. masked ? Masked(payload, 0) : payload];

    /// <summary>A client frame's header: <paramref name="first"/>, the length in as few bytes as it takes, the mask key when masked.</summary>
    private static byte[] Head(int first, long length, bool masked = true)
    {
        var head = new List<byte> { (byte)first };
        byte maskBit = masked ? (byte)0x80 : (byte)0;
        if (length <= 125)
        {
            head.Add((byte)(maskBit | length));
        }
        else if (length <= ushort.MaxValue)
        {
            head.Add((byte)(maskBit | 126));
            head.Add((byte)(length >> 8));
            head.Add((byte)length);
        }
        else
        {
            head.Add((byte)(maskBit | 127));
            byte[] wide = new byte[8];
            BinaryPrimitives.WriteUInt64BigEndian(wide, (ulong)length);
            head.AddRange(wide);
        }

        if (masked)
        {
            head.AddRange(Key);
        }

        return [.. head];
    }

    /// <summary><paramref name="payload"/> masked as the bytes of a frame's payload from offset <paramref name="at"/> on.</summary>
    private static byte[] Masked(byte[] payload, long at)
    {
        byte[] masked = new byte[payload.Length];
        for (int i = 0; i < payload.Length; i++)
        {
            masked[i] = (byte)(payload[i] ^ Key[(at + i) % 4]);
        }

        return masked;
    }

    private static byte[] PublishFrame(string topic, int payloadBytes)
    {
        var publish = new ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(publish, System.Text.Encoding.UTF8.GetBytes(topic), default, PayloadFlags.None, new byte[payloadBytes]);
        return publish.WrittenSpan.ToArray();
    }

    private static byte[] PingFrame() => Pings(1);

    /// <summary>Herald PINGs, at least <paramref name="bytes"/> of them: valid frames, so only a message's size can be wrong.</summary>
    private static byte[] Pings(int bytes)
    {
        var pings = new ArrayBufferWriter<byte>();
        while (pings.WrittenCount < bytes)
        {
            FrameWriter.WritePing(pings);
        }

        return pings.WrittenSpan.ToArray();
    }

    private static byte[] HelloFrame()
    {
        var hello = new ArrayBufferWriter<byte>();
        FrameWriter.WriteHello(hello, "raw", Capabilities.None, null);
        return Frame(Fin | 0x2, hello.WrittenSpan.ToArray());
    }

    /// <summary>Reads server frames (never masked) until one with <paramref name="opcode"/>; its payload.</summary>
    private static async Task<byte[]> ReadFrameAsync(NetworkStream stream, int opcode)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(15));
        while (true)
        {
            byte[] head = new byte[2];
            await stream.ReadExactlyAsync(head, timeout.Token);
            Assert.True((head[1] & 0x80) == 0, "A server frame is never masked.");
            long length = head[1] & 0x7F;
            if (length >= 126)
            {
                byte[] extended = new byte[length == 126 ? 2 : 8];
                await stream.ReadExactlyAsync(extended, timeout.Token);
                length = extended.Length == 2 ? BinaryPrimitives.ReadUInt16BigEndian(extended) : (long)BinaryPrimitives.ReadUInt64BigEndian(extended);
            }

            byte[] payload = new byte[length];
            await stream.ReadExactlyAsync(payload, timeout.Token);
            if ((head[0] & 0x0F) == opcode)
            {
                return payload;
            }
        }
    }

    private static async Task<(ushort Status, string Reason)> ReadCloseAsync(NetworkStream stream)
    {
        byte[] payload = await ReadFrameAsync(stream, 0x8);
        Assert.True(payload.Length >= 2, "The broker's Close carries a status.");
        return (BinaryPrimitives.ReadUInt16BigEndian(payload), System.Text.Encoding.UTF8.GetString(payload, 2, payload.Length - 2));
    }

    private static async Task<string> ReadPongAsync(NetworkStream stream) => System.Text.Encoding.UTF8.GetString(await ReadFrameAsync(stream, 0xA));

    /// <summary>Reads until the broker closes the socket; the bytes that came meanwhile.</summary>
    private static async Task<int> ReadToEndAsync(NetworkStream stream)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(15));
        byte[] buffer = new byte[4096];
        int total = 0;
        int read;
        while ((read = await stream.ReadAsync(buffer, timeout.Token)) > 0)
        {
            total += read;
        }

        return total;
    }
}
