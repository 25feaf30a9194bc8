using System.Buffers;
using System.Buffers.Binary;
using Herald.Protocol;

namespace Herald.Broker.Cluster;

/// <summary>
/// A publication as it travels between nodes through Redis (spec cluster.md §3): the publishing node's id
/// and sequence number, then the PUBLISH frame body as the client sent it (spec §4.5), topic, reply_to,
/// flags, payload and header block byte for byte; never re-encoded.
/// </summary>
/// <remarks>
/// <code>
///   0      1         2                    10                   18
///  +------+---------+--------------------+--------------------+------------------------------------+
///  | 0x48 | version | origin: u64 BE     | sequence: u64 BE   | [5, topic, reply_to, flags,         |
///  | 'H'  | 1       | the node's id      | per origin, from 1 |  payload(, headers)]  MessagePack   |
///  +------+---------+--------------------+--------------------+------------------------------------+
/// </code>
/// With <c>Herald:Cluster:Secret</c> the version is 2 and a 16-byte tag follows the sequence, before the body:
/// the first 16 bytes of HMAC-SHA256(secret, the whole envelope with the tag's bytes zero) (spec cluster.md §3).
/// The receiving node reads the body with the same <see cref="FrameDecoder"/> as a client's PUBLISH.
/// </remarks>
internal static class ClusterEnvelope
{
    public const byte Magic = 0x48;
    public const byte Version = 1;
    public const byte SignedVersion = 2;
    public const int HeaderSize = 18;
    public const int TagSize = 16;

    /// <summary>
    /// The envelope of <paramref name="publish"/>, sequence 0 (stamped by the sender, <see cref="Stamp"/>); with
    /// <paramref name="signed"/>, version 2 with room for the tag (set by <see cref="EnvelopeSigner.Sign"/>).
    /// </summary>
    public static byte[] Write(in PublishFrame publish, ulong origin, bool signed = false)
    {
        int envelope = (int)publish.Envelope.Length;
        int headers = (int)publish.Headers.Length;
        int start = HeaderSize + (signed ? TagSize : 0);
        byte[] bytes = GC.AllocateUninitializedArray<byte>(start + 2 + envelope + headers);
        bytes[0] = Magic;
        bytes[1] = signed ? SignedVersion : Version;
        BinaryPrimitives.WriteUInt64BigEndian(bytes.AsSpan(2), origin);
        bytes.AsSpan(10, start - 10).Clear(); // the sequence, and the tag's room
        bytes[start] = headers == 0 ? (byte)0x95 : (byte)0x96; // fixarray of 5 or 6
        bytes[start + 1] = (byte)FrameType.Publish;             // positive fixint
        publish.Envelope.CopyTo(bytes.AsSpan(start + 2));
        if (headers > 0)
        {
            publish.Headers.CopyTo(bytes.AsSpan(start + 2 + envelope));
        }

        return bytes;
    }

    /// <summary>Sets the sequence number: the sender does, in the order it hands envelopes to Redis.</summary>
    public static void Stamp(byte[] envelope, ulong sequence) => BinaryPrimitives.WriteUInt64BigEndian(envelope.AsSpan(10), sequence);

    /// <summary>
    /// Reads the header; false for anything that is not an envelope of the expected version (1, or 2 with a tag
    /// <paramref name="signer"/> verifies): counted and skipped by the caller.
    /// </summary>
    public static bool TryRead(ReadOnlyMemory<byte> bytes, EnvelopeSigner? signer, out ulong origin, out ulong sequence, out ReadOnlyMemory<byte> body)
    {
        ReadOnlySpan<byte> span = bytes.Span;
        int start = HeaderSize + (signer is null ? 0 : TagSize);
        origin = sequence = 0;
        body = default;
        if (span.Length <= start || span[0] != Magic || span[1] != (signer is null ? Version : SignedVersion) || (signer is not null && !signer.Verify(span)))
        {
            return false;
        }

        origin = BinaryPrimitives.ReadUInt64BigEndian(span[2..]);
        sequence = BinaryPrimitives.ReadUInt64BigEndian(span[10..]);
        body = bytes[start..];
        return true;
    }

    /// <summary>The PUBLISH of a body read by <see cref="TryRead"/>: <see cref="ProtocolException"/> when it is not one.</summary>
    public static PublishFrame ReadPublish(ReadOnlyMemory<byte> body)
    {
        var reader = new MessagePack.MessagePackReader(new ReadOnlySequence<byte>(body));
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
        if (type != FrameType.Publish)
        {
            throw new ProtocolException(ErrorCode.UnexpectedFrame, $"A cluster envelope holds a {type} frame, not PUBLISH.");
        }

        PublishFrame publish = FrameDecoder.ReadPublish(ref reader, count);
        if (!reader.End)
        {
            throw new ProtocolException(ErrorCode.MalformedFrame, "A cluster envelope has bytes after its PUBLISH.");
        }

        return publish;
    }
}
