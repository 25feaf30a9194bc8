using System.Buffers;
using System.Text;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>
/// <see cref="FrameDecoder.TryReadCommonPublish"/>, the broker's fast path for the common PUBLISH: it must take
/// the shape <see cref="FrameWriter"/> writes and give exactly what the general reader gives, and decline
/// everything else (so that the general reader answers it, with the spec's error where there is one).
/// </summary>
public class CommonPublishTests
{
    [Theory]
    [MemberData(nameof(VectorCatalog.AllIds), MemberType = typeof(VectorCatalog))]
    public void A_vector_taken_by_the_fast_path_decodes_as_the_general_reader_decodes_it(CaseName id)
    {
        Vector v = VectorCatalog.Get(id);
        if (BodyOf(v) is not { } body || !FrameDecoder.TryReadCommonPublish(body, out PublishFrame fast))
        {
            Assert.False(v.Kind == VectorKind.Valid && v.Frame == FrameType.Publish && v.Canonical && IsCommon(v), "a canonical PUBLISH without headers must take the fast path");
            return;
        }

        Assert.Equal(VectorKind.Valid, v.Kind); // never an invalid frame: the general reader reports those
        Assert.Equal(FrameType.Publish, v.Frame);
        AssertSame(FrameModel.Decode(body), fast);
    }

    [Fact]
    public void The_vectors_exercise_the_fast_path()
    {
        int taken = VectorCatalog.All.Count(v => BodyOf(v) is { } body && FrameDecoder.TryReadCommonPublish(body, out _));

        Assert.True(taken >= 2, $"{taken} vectors took the fast path");
    }

    [Theory]
    [InlineData(1, null, 0)]
    [InlineData(31, "r", 255)]
    [InlineData(32, "", 256)]
    [InlineData(255, "reply.to.a.long.inbox.name.of.forty.bytes", 65_535)]
    [InlineData(12, null, 65_536)]
    public void What_FrameWriter_writes_takes_the_fast_path_with_every_length_encoding(int topicLength, string? replyTo, int payloadLength)
    {
        byte[] topic = Encoding.ASCII.GetBytes(new string('t', topicLength));
        byte[] payload = [.. Enumerable.Range(0, payloadLength).Select(i => (byte)i)];
        ReadOnlySequence<byte> body = Body(w => FrameWriter.WritePublish(w, topic, replyTo is null ? default : Encoding.ASCII.GetBytes(replyTo), PayloadFlags.Zstd, payload));

        Assert.True(FrameDecoder.TryReadCommonPublish(body, out PublishFrame fast));

        AssertSame(FrameModel.Decode(body), fast);
        Assert.Equal(topic, fast.Topic.ToArray());
        Assert.Equal(string.IsNullOrEmpty(replyTo) ? null : replyTo, fast.ReplyToString); // FrameWriter writes an empty reply_to as nil
        Assert.Equal(payload, fast.Payload.ToArray());
    }

    [Fact]
    public void Other_shapes_are_left_to_the_general_reader()
    {
        byte[] topic = "t.x"u8.ToArray();
        ReadOnlySequence<byte> common = Body(w => FrameWriter.WritePublish(w, topic, default, PayloadFlags.None, "abc"u8.ToArray()));
        byte[] bytes = common.ToArray();
        Assert.True(FrameDecoder.TryReadCommonPublish(common, out _));

        // A header block; a topic of 256 bytes (str16); the body split in two segments; one byte short or over;
        // a reserved flag bit; invalid UTF-8 in the topic; a str payload.
        Assert.False(FrameDecoder.TryReadCommonPublish(Body(w => FrameWriter.WritePublish(w, topic, default, PayloadFlags.None, "abc"u8.ToArray(), HeaderBlock.Encode([new("k", ["v"])]))), out _));
        Assert.False(FrameDecoder.TryReadCommonPublish(Body(w => FrameWriter.WritePublish(w, new byte[256], default, PayloadFlags.None, "abc"u8.ToArray())), out _));
        Assert.False(FrameDecoder.TryReadCommonPublish(Sequences.SplitAt(bytes, 4), out _));
        Assert.False(FrameDecoder.TryReadCommonPublish(new ReadOnlySequence<byte>(bytes[..^1]), out _));
        Assert.False(FrameDecoder.TryReadCommonPublish(new ReadOnlySequence<byte>([.. bytes, 0]), out _));
        Assert.False(FrameDecoder.TryReadCommonPublish(new ReadOnlySequence<byte>(With(bytes, bytes.Length - 6, 0x02)), out _)); // flags: 2
        Assert.False(FrameDecoder.TryReadCommonPublish(new ReadOnlySequence<byte>(With(bytes, 3, 0xff)), out _)); // topic "\xff.x"
        Assert.False(FrameDecoder.TryReadCommonPublish(new ReadOnlySequence<byte>(With(bytes, bytes.Length - 5, 0xa3)), out _)); // payload as fixstr
    }

    private static void AssertSame(DecodedFrame general, PublishFrame fast)
    {
        var expected = (PublishFrame)general.Frame!;
        Assert.Equal(FrameModel.Describe(general), FrameModel.Describe(new DecodedFrame(FrameType.Publish, fast)));
        Assert.Equal(expected.ReplyTo.HasValue, fast.ReplyTo.HasValue);
        Assert.Equal(expected.Envelope.ToArray(), fast.Envelope.ToArray()); // what MESSAGE carries on
        Assert.False(fast.HasHeaders);
    }

    /// <summary>The vector's frame body; null where the frame reader needs more or refuses the length prefix (its own vectors).</summary>
    private static ReadOnlySequence<byte>? BodyOf(Vector v)
    {
        var buffer = Sequences.Whole(v.Bytes);
        try
        {
            return FrameReader.TryReadFrame(ref buffer, VectorCatalog.MaxFrame, out ReadOnlySequence<byte> body) ? body : null;
        }
        catch (ProtocolException)
        {
            return null;
        }
    }

    private static bool IsCommon(Vector v) => v.Bytes.Length > 5 && v.Bytes[4] == 0x95 && !v.Fields.TryGetProperty("headers", out _)
        && v.Fields.GetProperty("topic").GetString()!.Length < 256;

    private static byte[] With(byte[] bytes, int at, byte value)
    {
        byte[] copy = [.. bytes];
        copy[at] = value;
        return copy;
    }

    private static ReadOnlySequence<byte> Body(Action<IBufferWriter<byte>> write)
    {
        var output = new ArrayBufferWriter<byte>();
        write(output);
        var frame = new ReadOnlySequence<byte>(output.WrittenMemory);
        Assert.True(FrameReader.TryReadFrame(ref frame, int.MaxValue, out ReadOnlySequence<byte> body));
        return new ReadOnlySequence<byte>(body.ToArray());
    }
}
