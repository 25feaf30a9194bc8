using System.Buffers;
using Herald.LoadTest.Client;
using Herald.Protocol;

namespace Herald.LoadTest.Tests;

/// <summary>The tool's fast MESSAGE reader agrees with the protocol library's writer on every size class, and declines what it does not handle.</summary>
public class FramePeekTests
{
    [Theory]
    [InlineData(1, 0, 0)]
    [InlineData(31, 5, 128)]
    [InlineData(32, 0, 255)]
    [InlineData(200, 40, 256)]
    [InlineData(300, 300, 70_000)]
    public void A_message_written_by_the_protocol_library_reads_back_field_for_field(int topicLength, int replyToLength, int payloadLength)
    {
        byte[] topic = [.. Enumerable.Repeat((byte)'t', topicLength)];
        byte[] replyTo = [.. Enumerable.Repeat((byte)'r', replyToLength)];
        byte[] payload = [.. Enumerable.Range(0, payloadLength).Select(i => (byte)i)];
        byte[] body = Body(w => FrameWriter.WriteMessage(w, 0xDEADBEEF, topic, replyTo, PayloadFlags.None, payload));

        Assert.True(FramePeek.TryReadMessage(body, out uint sid, out ReadOnlySpan<byte> readReplyTo, out ReadOnlySpan<byte> readPayload, out ReadOnlySpan<byte> readHeaders));

        Assert.Equal(0xDEADBEEFu, sid);
        Assert.Equal(replyTo, readReplyTo.ToArray());
        Assert.Equal(payload, readPayload.ToArray());
        Assert.True(readHeaders.IsEmpty);
    }

    [Fact]
    public void A_message_with_a_header_block_hands_back_the_block_as_published()
    {
        byte[] headers = HeaderBlock.Encode([new("traceparent", ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]), new("x-tag", ["a", "b"])]);
        byte[] body = Body(w => FrameWriter.WriteMessage(w, 7, "t"u8, "r"u8, PayloadFlags.None, [1, 2, 3], headers));

        Assert.True(FramePeek.TryReadMessage(body, out uint sid, out ReadOnlySpan<byte> replyTo, out ReadOnlySpan<byte> payload, out ReadOnlySpan<byte> readHeaders));

        Assert.Equal(7u, sid);
        Assert.Equal("r"u8.ToArray(), replyTo.ToArray());
        Assert.Equal([1, 2, 3], payload.ToArray());
        Assert.Equal(headers, readHeaders.ToArray());
    }

    [Fact]
    public void A_compressed_message_a_truncated_one_and_other_frames_are_left_to_the_decoder()
    {
        byte[] compressed = Body(w => FrameWriter.WriteMessage(w, 1, "t"u8, default, PayloadFlags.Zstd, [1, 2, 3]));
        byte[] plain = Body(w => FrameWriter.WriteMessage(w, 1, "t"u8, default, PayloadFlags.None, [1, 2, 3]));
        byte[] ping = Body(FrameWriter.WritePing);

        Assert.False(FramePeek.TryReadMessage(compressed, out _, out _, out _, out _));
        Assert.False(FramePeek.TryReadMessage(plain.AsSpan(0, plain.Length - 1), out _, out _, out _, out _));
        Assert.False(FramePeek.TryReadMessage(ping, out _, out _, out _, out _));
        Assert.Equal(PayloadFlags.Zstd, FramePeek.ReadMessageSlow(new ReadOnlySequence<byte>(compressed)).Flags);
    }

    private static byte[] Body(Action<IBufferWriter<byte>> write)
    {
        var buffer = new ArrayBufferWriter<byte>();
        write(buffer);
        return buffer.WrittenSpan[ProtocolConstants.LengthPrefixSize..].ToArray();
    }
}
