using System.Buffers;
using System.Buffers.Binary;
using System.Text;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Every kind of bad input, over real sockets: the offender gets the documented fatal ERROR and is
/// closed; a bystander connected to the same broker keeps publishing and receiving throughout.
/// </summary>
public sealed class BadInputTests : IAsyncLifetime
{
    private TestBroker _broker = null!;

    public async Task InitializeAsync() => _broker = await TestBroker.StartAsync(o =>
    {
        o.Limits.MaxFrameBytes = 1024;
        o.Limits.MaxTopicLength = 32;
        o.Limits.MaxSubscriptionsPerConnection = 3;
    });

    public async Task DisposeAsync() => await _broker.DisposeAsync();

    public static TheoryData<string, bool, ErrorCode> Cases => new()
    {
        // name, send HELLO first, expected error
        { "http-request", false, ErrorCode.FrameTooLarge },      // "GET " read as a length prefix
        { "garbage", false, ErrorCode.MalformedFrame },
        { "zero-length", true, ErrorCode.MalformedFrame },
        { "oversized-prefix", true, ErrorCode.FrameTooLarge },
        { "body-not-array", true, ErrorCode.MalformedFrame },
        { "unknown-type", true, ErrorCode.UnknownFrameType },
        { "publish-before-hello", false, ErrorCode.HelloRequired },
        { "subscribe-before-hello", false, ErrorCode.HelloRequired },
        { "second-hello", true, ErrorCode.UnexpectedFrame },
        { "second-hello-malformed", true, ErrorCode.UnexpectedFrame },             // spec §8.1: state before fields
        { "unnegotiated-zstd-to-reserved-topic", true, ErrorCode.MalformedFrame }, // spec §8.1: fields before topic rules
        { "payload-over-max-payload", true, ErrorCode.FrameTooLarge },            // a frame within max_frame whose MESSAGE would not be
        { "client-sends-message", true, ErrorCode.UnexpectedFrame },
        { "unsupported-version", false, ErrorCode.UnsupportedVersion },
        { "publish-too-few-elements", true, ErrorCode.MalformedFrame },
        { "publish-wrong-types", true, ErrorCode.MalformedFrame },
        { "trailing-bytes", true, ErrorCode.MalformedFrame },
        { "invalid-topic", true, ErrorCode.InvalidTopic },
        { "wildcard-in-publish", true, ErrorCode.InvalidTopic },
        { "invalid-pattern", true, ErrorCode.InvalidTopic },
        { "topic-too-long", true, ErrorCode.TopicTooLong },
        { "reserved-topic", true, ErrorCode.ReservedTopic },
        { "invalid-reply-to", true, ErrorCode.InvalidTopic },
        { "duplicate-sid", true, ErrorCode.DuplicateSubscription },
        { "sid-zero", true, ErrorCode.DuplicateSubscription },
        { "too-many-subscriptions", true, ErrorCode.TooManySubscriptions },
        { "reserved-flag-bits", true, ErrorCode.MalformedFrame },
    };

    [Theory]
    [MemberData(nameof(Cases))]
    public async Task Bad_input_gets_its_error_and_a_closed_connection_while_others_carry_on(string name, bool hello, ErrorCode expected)
    {
        await using var bystander = await ProtocolClient.OpenAsync(_broker.Port, "bystander");
        await bystander.SubscribeAsync(1, "bystander.topic");
        await bystander.PingPongAsync();
        await using var offender = await ProtocolClient.ConnectAsync(_broker.Port);
        if (hello)
        {
            await offender.HelloAsync("offender");
        }

        await offender.SendRawAsync(BadFrame(name));
        ErrorFrame error = await offender.ExpectClosedWithAsync(expected);
        Assert.False(string.IsNullOrWhiteSpace(error.Message));

        await bystander.PublishAsync("bystander.topic", "still fine");
        Assert.Equal("still fine", (await bystander.ReadMessageAsync()).Text);
    }

    [Theory]
    [InlineData(10)]  // the last good topic is remembered as checked
    [InlineData(200)] // the last good topic is too long to remember, the one before it was not
    public async Task A_bad_topic_after_good_ones_is_refused_however_the_good_ones_were_checked(int goodLength)
    {
        await using var broker = await TestBroker.StartAsync(); // topics up to 256 bytes (this class's broker allows 32)
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander");
        await bystander.SubscribeAsync(1, "good.>");
        await bystander.PingPongAsync();
        await using var offender = await ProtocolClient.OpenAsync(broker.Port, "offender");
        string good = "good." + new string('x', goodLength - 5);
        await offender.PublishAsync("good.short", "one");
        await offender.PublishAsync(good, "two");
        await offender.PublishAsync(good, "three");
        Assert.Empty(await offender.PingPongAsync());

        await offender.SendAsync(w => FrameWriter.WritePublish(w, default, default, PayloadFlags.None, "empty topic"u8)); // "": not a topic
        await offender.ExpectClosedWithAsync(ErrorCode.InvalidTopic);

        Assert.Equal(["one", "two", "three"], (await bystander.PingPongAsync()).Select(f => f.Text));
    }

    [Fact]
    public async Task A_frame_cut_off_by_the_client_closing_is_counted_and_harms_nobody()
    {
        using MetricsProbe metrics = _broker.Metrics();
        await using var bystander = await ProtocolClient.OpenAsync(_broker.Port);
        await bystander.SubscribeAsync(1, "t");
        await bystander.PingPongAsync();
        await using (var offender = await ProtocolClient.OpenAsync(_broker.Port))
        {
            byte[] frame = Encode(w => FrameWriter.WritePublish(w, "t"u8, default, PayloadFlags.None, new byte[100]));
            await offender.SendRawAsync(frame[..50]);
            await offender.SendAsync(FrameWriter.WritePing); // no PONG: these are just more bytes of the cut frame
            offender.ShutdownSend();
            Assert.Null(await offender.TryReadAsync()); // closed, and nothing before: not even that PONG
        }

        await bystander.PublishAsync("t", "ok");
        Assert.Equal("ok", (await bystander.ReadMessageAsync()).Text);
        Assert.Equal(1, metrics["herald.protocol.errors", "error.type", "TruncatedFrame"]);
        Assert.Equal(1, metrics["herald.protocol.errors"]); // the cut frame is the only error this broker saw
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task A_frame_torn_by_a_close_or_a_reset_is_counted_as_truncated(bool reset)
    {
        using MetricsProbe metrics = _broker.Metrics();
        await using var bystander = await ProtocolClient.OpenAsync(_broker.Port);
        var offender = await ProtocolClient.OpenAsync(_broker.Port);
        byte[] frame = Encode(w => FrameWriter.WritePublish(w, "t"u8, default, PayloadFlags.None, new byte[100]));
        byte[] ping = Encode(FrameWriter.WritePing);

        // One write: a PING, then half a PUBLISH. Its PONG shows the broker has read that segment, so the
        // half frame sits in the broker's buffer (not the kernel's, which a reset would discard).
        await offender.SendRawAsync([.. ping, .. frame[..50]]);
        Assert.Equal(FrameType.Pong, (await offender.ReadAsync()).Type);
        if (reset)
        {
            offender.Reset(); // RST: the broker's read fails instead of completing
        }
        else
        {
            await offender.DisposeAsync(); // a whole close (FIN), not a half-close
        }

        await Until.True(() => metrics["herald.protocol.errors", "error.type", "TruncatedFrame"] > 0, "the torn frame is counted");

        Assert.Equal(1, metrics["herald.protocol.errors", "error.type", "TruncatedFrame"]);
        Assert.Equal(1, metrics["herald.protocol.errors"]);
        await bystander.PublishAsync("bystander.topic", "x");
        await bystander.PingPongAsync();
    }

    [Fact]
    public async Task An_oversized_frame_is_refused_from_its_length_prefix_alone()
    {
        await using var offender = await ProtocolClient.OpenAsync(_broker.Port);
        byte[] prefix = new byte[4];
        BinaryPrimitives.WriteUInt32BigEndian(prefix, 100_000_000);

        await offender.SendRawAsync(prefix); // no body follows: the broker must not wait for it

        ErrorFrame error = await offender.ExpectClosedWithAsync(ErrorCode.FrameTooLarge);
        Assert.Contains("1024", error.Message);
    }

    private static byte[] BadFrame(string name) => name switch
    {
        "http-request" => Encoding.ASCII.GetBytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        "garbage" => [0, 0, 0, 6, 0xff, 0xc1, 0x00, 0x13, 0x37, 0xde],
        "zero-length" => [0, 0, 0, 0],
        "oversized-prefix" => [0, 0, 0x10, 0],
        "body-not-array" => Body(0xa3, (byte)'a', (byte)'b', (byte)'c'),
        "unknown-type" => Body(0x91, 0x63),
        "publish-too-few-elements" => Body(0x93, 0x05, 0xa1, (byte)'t', 0xc0),
        "publish-before-hello" => Encode(w => FrameWriter.WritePublish(w, "t"u8, default, PayloadFlags.None, [1])),
        "subscribe-before-hello" => Encode(w => FrameWriter.WriteSubscribe(w, 1, "t"u8)),
        "second-hello" => Encode(w => FrameWriter.WriteHello(w, "again", Capabilities.None)),
        "second-hello-malformed" => Body(0x92, 0x01, 0xc0),                                    // HELLO of two elements, version nil
        "unnegotiated-zstd-to-reserved-topic" => Encode(w => FrameWriter.WritePublish(w, "$SYS.x"u8, default, PayloadFlags.Zstd, [1])),
        "payload-over-max-payload" => Encode(w => FrameWriter.WritePublish(w, "t"u8, default, PayloadFlags.None, new byte[ProtocolConstants.MaxPayload(1024, 32) + 1])),
        "client-sends-message" => Encode(w => FrameWriter.WriteMessage(w, 1, "t"u8, default, PayloadFlags.None, [1])),
        "unsupported-version" => Encode(w => FrameWriter.WriteHello(w, "future", Capabilities.None, version: 99)),
        "publish-wrong-types" => Body(0x95, 0x05, 0x01, 0xc0, 0x00, 0xc4, 0x00),               // topic is an int
        "trailing-bytes" => Body(0x91, 0x07, 0xff),                                            // PING + a stray byte
        "invalid-topic" => Encode(w => FrameWriter.WritePublish(w, "a..b"u8, default, PayloadFlags.None, [1])),
        "wildcard-in-publish" => Encode(w => FrameWriter.WritePublish(w, "a.*"u8, default, PayloadFlags.None, [1])),
        "invalid-pattern" => Encode(w => FrameWriter.WriteSubscribe(w, 1, "a.>.b"u8)),
        "topic-too-long" => Encode(w => FrameWriter.WritePublish(w, Encoding.ASCII.GetBytes(new string('x', 33)), default, PayloadFlags.None, [1])),
        "reserved-topic" => Encode(w => FrameWriter.WritePublish(w, "$SYS.x"u8, default, PayloadFlags.None, [1])),
        "invalid-reply-to" => Encode(w => FrameWriter.WritePublish(w, "ok"u8, "bad reply"u8, PayloadFlags.None, [1])),
        "duplicate-sid" => Encode(w =>
        {
            FrameWriter.WriteSubscribe(w, 5, "a"u8);
            FrameWriter.WriteSubscribe(w, 5, "b"u8);
        }),
        "sid-zero" => Encode(w => FrameWriter.WriteSubscribe(w, 0, "a"u8)),
        "too-many-subscriptions" => Encode(w =>
        {
            for (uint sid = 1; sid <= 4; sid++) FrameWriter.WriteSubscribe(w, sid, "a"u8);
        }),
        "reserved-flag-bits" => Encode(w => FrameWriter.WritePublish(w, "t"u8, default, (PayloadFlags)4, [1])),
        _ => throw new ArgumentOutOfRangeException(nameof(name)),
    };

    private static byte[] Body(params byte[] body)
    {
        byte[] frame = new byte[4 + body.Length];
        BinaryPrimitives.WriteUInt32BigEndian(frame, (uint)body.Length);
        body.CopyTo(frame, 4);
        return frame;
    }

    private static byte[] Encode(Action<IBufferWriter<byte>> write)
    {
        var buffer = new ArrayBufferWriter<byte>();
        write(buffer);
        return buffer.WrittenSpan.ToArray();
    }
}
