using System.Buffers;
using System.Buffers.Binary;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>
/// <see cref="FrameWriter"/> computes the body length before it writes the body; these check that the prefix
/// it writes always equals the body that follows, across MessagePack's header size boundaries.
/// </summary>
public class FrameSizeTests
{
    /// <summary>String and payload lengths on both sides of every MessagePack str/bin header change.</summary>
    public static TheoryData<int> BoundaryLengths => new() { 0, 1, 15, 16, 31, 32, 33, 127, 128, 129, 255, 256, 257, 65535, 65536, 65537 };

    private static readonly ulong[] BoundaryNumbers =
    [
        0, 1, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0xFFFF_FFFF, 0x1_0000_0000, ulong.MaxValue,
    ];

    [Theory]
    [MemberData(nameof(BoundaryLengths))]
    public void Prefix_matches_body_for_strings_and_payloads_of_boundary_length(int length)
    {
        var random = new Random(length);
        foreach (DecodedFrame frame in Frames(random, length))
        {
            CheckPrefixAndRoundTrip(frame);
        }
    }

    [Fact]
    public void Prefix_matches_body_for_random_field_values()
    {
        var random = new Random(1729);
        for (int i = 0; i < 300; i++)
        {
            int length = random.Next(32) switch
            {
                < 16 => random.Next(40),
                < 24 => random.Next(120, 300),
                < 31 => random.Next(2_000),
                _ => random.Next(65_530, 65_540),
            };
            foreach (DecodedFrame frame in Frames(random, length))
            {
                CheckPrefixAndRoundTrip(frame);
            }
        }
    }

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(15)]
    [InlineData(16)]
    [InlineData(17)]
    [InlineData(256)]
    public void Prefix_matches_body_for_welcome_limits_maps_of_boundary_size(int count)
    {
        var random = new Random(count);
        var limits = new OrderedDictionary<string, ulong>(StringComparer.Ordinal);
        for (int i = 0; i < count; i++)
        {
            limits.Add($"limit_{i}_" + Ascii(random, random.Next(40)), Number(random));
        }

        CheckPrefixAndRoundTrip(new DecodedFrame(FrameType.Welcome, new WelcomeFrame(1, "herald", Number(random), Capabilities.Zstd, limits)));
    }

    private static void CheckPrefixAndRoundTrip(DecodedFrame frame)
    {
        byte[] written = FrameModel.Encode(frame);
        uint prefix = BinaryPrimitives.ReadUInt32BigEndian(written);
        Assert.True(written.Length == ProtocolConstants.LengthPrefixSize + (long)prefix, $"{frame.Type}: prefix says {prefix}, body is {written.Length - ProtocolConstants.LengthPrefixSize} bytes");

        var buffer = Sequences.Whole(written);
        Assert.True(FrameReader.TryReadFrame(ref buffer, int.MaxValue, out ReadOnlySequence<byte> body));
        Assert.True(buffer.IsEmpty);
        if (frame.Frame is HelloFrame h && System.Text.Encoding.UTF8.GetByteCount(h.ClientName) > ProtocolConstants.MaxClientNameBytes)
        {
            Assert.Equal(ErrorCode.MalformedFrame, Assert.Throws<ProtocolException>(() => FrameModel.Decode(body)).Code);
            return;
        }

        Assert.Equal(FrameModel.Describe(frame), FrameModel.Describe(FrameModel.Decode(body)));
    }

    /// <summary>One frame of every type, with every string and payload <paramref name="length"/> bytes long.</summary>
    private static IEnumerable<DecodedFrame> Frames(Random random, int length)
    {
        string text = Utf8Text(random, length);
        string other = Ascii(random, length);
        byte[] payload = new byte[length];
        random.NextBytes(payload);
        var topic = new ReadOnlySequence<byte>(System.Text.Encoding.UTF8.GetBytes(text));
        ReadOnlySequence<byte>? replyTo = length == 0 ? null : new ReadOnlySequence<byte>(System.Text.Encoding.UTF8.GetBytes(other));

        yield return new DecodedFrame(FrameType.Hello, new HelloFrame((uint)Number(random), text, (Capabilities)(uint)Number(random), random.Next(2) == 0 ? null : other)
        {
            Info = random.Next(2) == 0 || length > ProtocolConstants.DefaultMaxPresenceInfoBytes ? null : text,
        });
        yield return new DecodedFrame(FrameType.Welcome, new WelcomeFrame(
            (uint)Number(random), text, Number(random), (Capabilities)(uint)Number(random),
            new OrderedDictionary<string, ulong> { [other] = Number(random), ["max_frame"] = Number(random) }));
        yield return new DecodedFrame(FrameType.Subscribe, new SubscribeFrame((uint)Number(random), topic, (SubscribeOptions)(uint)Number(random)));
        yield return new DecodedFrame(FrameType.Unsubscribe, new UnsubscribeFrame((uint)Number(random)));
        var flags = (PayloadFlags)random.Next(2);
        yield return new DecodedFrame(FrameType.Publish, new PublishFrame(0, topic, replyTo, flags, new ReadOnlySequence<byte>(payload), default));
        yield return new DecodedFrame(FrameType.Message, new PublishFrame((uint)Number(random), topic, replyTo, flags, new ReadOnlySequence<byte>(payload), default));
        yield return new DecodedFrame(FrameType.Ping, null);
        yield return new DecodedFrame(FrameType.Pong, null);
        yield return new DecodedFrame(FrameType.Error, new ErrorFrame((ErrorCode)(uint)Number(random), random.Next(2) == 0, text, Number(random)));
        yield return new DecodedFrame(FrameType.Presence, new PresenceFrame((uint)Number(random), topic, Number(random), random.Next(2) == 0 ? null : other));
        PresenceEntry[] entries = [.. Enumerable.Range(0, random.Next(4)).Select(i => new PresenceEntry(other, text, i % 2 == 0 ? null : text))];
        yield return new DecodedFrame(FrameType.PresenceReply, new PresenceReplyFrame((uint)Number(random), (ErrorCode)(uint)Number(random), Number(random), Number(random), entries, random.Next(2) == 0 ? null : other));
        yield return new DecodedFrame(FrameType.Subscribed, new SubscribedFrame(Math.Max(1, (uint)Number(random)), text, (SubscribeOptions)(uint)Number(random)));
    }

    /// <summary>A boundary value, or one next to it, or anything.</summary>
    private static ulong Number(Random random) => random.Next(3) switch
    {
        0 => BoundaryNumbers[random.Next(BoundaryNumbers.Length)],
        1 => BoundaryNumbers[random.Next(1, BoundaryNumbers.Length)] - 1,
        _ => (ulong)random.NextInt64() >> random.Next(64),
    };

    /// <summary>A string of exactly <paramref name="byteLength"/> UTF-8 bytes mixing one-, two- and three-byte characters.</summary>
    private static string Utf8Text(Random random, int byteLength)
    {
        var sb = new System.Text.StringBuilder(byteLength);
        for (int left = byteLength; left > 0;)
        {
            int width = random.Next(1, Math.Min(3, left) + 1);
            sb.Append(width switch
            {
                1 => (char)random.Next(0x21, 0x7F),
                2 => (char)random.Next(0xA1, 0x800),
                _ => (char)random.Next(0x800, 0xD800),
            });
            left -= width;
        }

        return sb.ToString();
    }

    private static string Ascii(Random random, int length) => string.Create(length, random, static (span, r) =>
    {
        for (int i = 0; i < span.Length; i++)
        {
            span[i] = (char)r.Next(0x21, 0x7F);
        }
    });
}
