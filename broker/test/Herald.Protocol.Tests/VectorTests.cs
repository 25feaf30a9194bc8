using System.Buffers;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>
/// Runs every case of <c>protocol-spec/vectors/</c> (spec §12) through <see cref="FrameReader"/> and
/// <see cref="FrameDecoder"/>, fed whole, split in two at every byte and one byte per segment.
/// </summary>
public class VectorTests
{
    [Fact]
    public void Every_frame_type_has_a_vector_file_with_all_three_kinds()
    {
        foreach (FrameType type in Enum.GetValues<FrameType>())
        {
            foreach (VectorKind kind in Enum.GetValues<VectorKind>())
            {
                Assert.Contains(VectorCatalog.All, v => v.Frame == type && v.Kind == kind);
            }

            Assert.Contains(VectorCatalog.All, v => v.Frame == type && v.Kind == VectorKind.Valid && v.Canonical);
            Assert.Contains(VectorCatalog.All, v => v.Frame == type && v.Kind == VectorKind.Valid && !v.Canonical);
        }
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.ValidIds), MemberType = typeof(VectorCatalog))]
    public void Valid_vector_decodes_to_its_fields(CaseName id)
    {
        Vector v = VectorCatalog.Get(id);
        var buffer = Sequences.Whole(v.Bytes);

        Assert.True(FrameReader.TryReadFrame(ref buffer, VectorCatalog.MaxFrame, out ReadOnlySequence<byte> body));
        Assert.True(buffer.IsEmpty);
        Assert.Equal(v.Bytes.Length - ProtocolConstants.LengthPrefixSize, body.Length);
        DecodedFrame decoded = FrameModel.Decode(body);
        Assert.Equal(v.Frame, decoded.Type);
        Assert.Equal(FrameModel.Describe(FrameModel.FromJson(v.Frame, v.Fields)), FrameModel.Describe(decoded));
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.CanonicalIds), MemberType = typeof(VectorCatalog))]
    public void Canonical_vector_is_exactly_what_FrameWriter_writes(CaseName id)
    {
        Vector v = VectorCatalog.Get(id);
        var output = new ArrayBufferWriter<byte>();

        FrameModel.Write(FrameModel.FromJson(v.Frame, v.Fields), output);

        Assert.Equal(v.Hex, Convert.ToHexStringLower(output.WrittenSpan));
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.NonCanonicalIds), MemberType = typeof(VectorCatalog))]
    public void Non_canonical_vector_is_not_what_FrameWriter_writes_but_means_the_same(CaseName id)
    {
        Vector v = VectorCatalog.Get(id);
        DecodedFrame expected = FrameModel.FromJson(v.Frame, v.Fields);

        byte[] written = FrameModel.Encode(expected);

        Assert.NotEqual(v.Hex, Convert.ToHexStringLower(written));
        var buffer = Sequences.Whole(written);
        Assert.True(FrameReader.TryReadFrame(ref buffer, VectorCatalog.MaxFrame, out ReadOnlySequence<byte> body));
        Assert.Equal(FrameModel.Describe(expected, emptyReplyToIsNil: true), FrameModel.Describe(FrameModel.Decode(body), emptyReplyToIsNil: true));
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.IncompleteIds), MemberType = typeof(VectorCatalog))]
    public void Incomplete_vector_needs_more_data_and_consumes_nothing(CaseName id)
    {
        Vector v = VectorCatalog.Get(id);
        var buffer = Sequences.Whole(v.Bytes);
        ReadOnlySequence<byte> before = buffer;

        Assert.False(FrameReader.TryReadFrame(ref buffer, VectorCatalog.MaxFrame, out _));
        Assert.Equal(before.Start, buffer.Start);
        Assert.Equal(before.End, buffer.End);
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.InvalidIds), MemberType = typeof(VectorCatalog))]
    public void Invalid_vector_fails_with_its_error_code(CaseName id)
    {
        Vector v = VectorCatalog.Get(id);

        var e = Assert.Throws<ProtocolException>(() =>
        {
            var buffer = Sequences.Whole(v.Bytes);
            if (FrameReader.TryReadFrame(ref buffer, VectorCatalog.MaxFrame, out ReadOnlySequence<byte> body))
            {
                FrameModel.Decode(body);
            }
        });

        Assert.Equal(v.Error, e.Code);
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.AllIds), MemberType = typeof(VectorCatalog))]
    public void Vector_gives_the_same_answer_split_at_every_byte(CaseName id)
    {
        Vector v = VectorCatalog.Get(id);
        string expected = Transcript.Expected(v);
        Assert.Equal(expected, Transcript.Of(Sequences.Whole(v.Bytes), VectorCatalog.MaxFrame));

        for (int at = 0; at <= v.Bytes.Length; at++)
        {
            string actual = Transcript.Of(Sequences.SplitAt(v.Bytes, at), VectorCatalog.MaxFrame);
            Assert.True(actual == expected, $"Split at byte {at}:\nexpected {expected}\nactual   {actual}");
        }
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.AllIds), MemberType = typeof(VectorCatalog))]
    public void Vector_gives_the_same_answer_one_byte_per_segment(CaseName id)
    {
        Vector v = VectorCatalog.Get(id);

        Assert.Equal(Transcript.Expected(v), Transcript.Of(Sequences.OneBytePerSegment(v.Bytes), VectorCatalog.MaxFrame));
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.ValidIds), MemberType = typeof(VectorCatalog))]
    public void Two_frames_back_to_back_are_both_read_in_order(CaseName id)
    {
        Vector first = VectorCatalog.Get(id);
        Vector second = NextValid(first);
        byte[] both = [.. first.Bytes, .. second.Bytes];
        string expected = Transcript.Frame(FrameModel.FromJson(first.Frame, first.Fields))
            + Transcript.Frame(FrameModel.FromJson(second.Frame, second.Fields))
            + Transcript.NeedMoreData(0);

        Assert.Equal(expected, Transcript.Of(Sequences.Whole(both), VectorCatalog.MaxFrame));
        Assert.Equal(expected, Transcript.Of(Sequences.OneBytePerSegment(both), VectorCatalog.MaxFrame));
        for (int at = 0; at <= both.Length; at++)
        {
            string actual = Transcript.Of(Sequences.SplitAt(both, at), VectorCatalog.MaxFrame);
            Assert.True(actual == expected, $"Split at byte {at}:\nexpected {expected}\nactual   {actual}");
        }
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.ValidIds), MemberType = typeof(VectorCatalog))]
    public void A_frame_followed_by_part_of_the_next_yields_the_first_and_keeps_the_rest(CaseName id)
    {
        Vector first = VectorCatalog.Get(id);
        Vector second = NextValid(first);
        byte[] partial = second.Bytes[..(second.Bytes.Length - 1)];
        byte[] input = [.. first.Bytes, .. partial];
        string expected = Transcript.Frame(FrameModel.FromJson(first.Frame, first.Fields)) + Transcript.NeedMoreData(partial.Length);

        Assert.Equal(expected, Transcript.Of(Sequences.Whole(input), VectorCatalog.MaxFrame));
        Assert.Equal(expected, Transcript.Of(Sequences.OneBytePerSegment(input), VectorCatalog.MaxFrame));
    }

    [Theory]
    [MemberData(nameof(VectorCatalog.MessageIds), MemberType = typeof(VectorCatalog))]
    public void Message_vector_carries_its_sid_as_uint32_at_offset_7(CaseName id)
    {
        Vector v = VectorCatalog.Get(id);
        var original = (PublishFrame)FrameModel.FromJson(v.Frame, v.Fields).Frame!;

        Assert.Equal((byte)FrameType.Message, v.Bytes[5]);
        Assert.Equal(MessagePack.MessagePackCode.UInt32, v.Bytes[6]);
        Assert.Equal(original.Sid, System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(v.Bytes.AsSpan(ProtocolConstants.MessageSidOffset)));

        byte[] copy = v.Bytes.ToArray();
        FrameWriter.StampSid(copy, 0xDEADBEEF);
        var buffer = Sequences.Whole(copy);
        Assert.True(FrameReader.TryReadFrame(ref buffer, VectorCatalog.MaxFrame, out ReadOnlySequence<byte> body));
        DecodedFrame stamped = FrameModel.Decode(body);
        Assert.Equal(FrameModel.Describe(new DecodedFrame(FrameType.Message, original with { Sid = 0xDEADBEEF })), FrameModel.Describe(stamped));
    }

    /// <summary>Another valid vector to pair with <paramref name="v"/>: the next one in the catalog, wrapping around.</summary>
    private static Vector NextValid(Vector v)
    {
        var valid = VectorCatalog.All.Where(x => x.Kind == VectorKind.Valid).ToList();
        return valid[(valid.IndexOf(v) + 1) % valid.Count];
    }
}
