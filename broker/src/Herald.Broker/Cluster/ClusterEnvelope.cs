using System.Buffers;
using System.Buffers.Binary;
using Herald.Broker.Routing;
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
///  | 'H'  | 1       | the node's id      | per origin, rising |  payload(, headers)]  MessagePack   |
///  +------+---------+--------------------+--------------------+------------------------------------+
/// </code>
/// With <c>Herald:Cluster:Secret</c> the version is 2 and a 16-byte tag follows the sequence, before the body:
/// the first 16 bytes of HMAC-SHA256(secret, the whole envelope with the tag's bytes zero) (spec cluster.md §3).
/// A publication whose queue groups the origin gave to other nodes (spec cluster.md §11) is version 4 (5 signed),
/// its assignments between the header (and tag) and the body:
/// <code>
///  +-------------------+--------------+---------------------------------------------+------+
///  | header (18)       | [tag (16)]   | n: u8, 1-64 | n x (group: u64 BE, node: u64 BE) | body |
///  | 'H' 4|5 origin seq| version 5    |             | the group's id, the node delivering |      |
///  +-------------------+--------------+---------------------------------------------+------+
/// </code>
/// The receiving node reads the body with the same <see cref="FrameDecoder"/> as a client's PUBLISH.
/// </remarks>
internal static class ClusterEnvelope
{
    public const byte Magic = 0x48;
    public const byte Version = 1;
    public const byte SignedVersion = 2;
    public const byte AssignedVersion = 4;
    public const byte SignedAssignedVersion = 5;
    public const int HeaderSize = 18;
    public const int TagSize = 16;

    /// <summary>
    /// The envelope of <paramref name="publish"/>, sequence 0 (stamped by the sender, <see cref="Stamp"/>); with
    /// <paramref name="signed"/>, version 2 with room for the tag (set by <see cref="EnvelopeSigner.Sign"/>); with
    /// queue groups given to other nodes in <paramref name="groups"/>, version 4 (5 signed) carrying them.
    /// </summary>
    public static byte[] Write(in PublishFrame publish, ulong origin, bool signed = false, GroupAssignments? groups = null)
    {
        int envelope = (int)publish.Envelope.Length;
        int headers = (int)publish.Headers.Length;
        int assigned = groups?.Count ?? 0;
        int at = HeaderSize + (signed ? TagSize : 0);
        int start = at + (assigned == 0 ? 0 : 1 + (assigned * GroupAssignments.Size));
        byte[] bytes = GC.AllocateUninitializedArray<byte>(start + 2 + envelope + headers);
        bytes[0] = Magic;
        bytes[1] = (signed, assigned > 0) switch
        {
            (false, false) => Version,
            (true, false) => SignedVersion,
            (false, true) => AssignedVersion,
            (true, true) => SignedAssignedVersion,
        };
        BinaryPrimitives.WriteUInt64BigEndian(bytes.AsSpan(2), origin);
        bytes.AsSpan(10, at - 10).Clear(); // the sequence, and the tag's room
        if (assigned > 0)
        {
            bytes[at] = (byte)assigned;
            groups!.WriteTo(bytes.AsSpan(at + 1));
        }

        bytes[start] = headers == 0 ? (byte)0x95 : (byte)0x96; // fixarray of 5 or 6
        bytes[start + 1] = (byte)FrameType.Publish;             // positive fixint
        publish.Envelope.CopyTo(bytes.AsSpan(start + 2));
        if (headers > 0)
        {
            publish.Headers.CopyTo(bytes.AsSpan(start + 2 + envelope));
        }

        return bytes;
    }

    /// <summary>Bits of a sequence number that count envelopes; the bits above hold the origin's clock (Unix ms).</summary>
    public const int CountBits = 20;

    /// <summary>
    /// The sequence number after <paramref name="previous"/> (0 before the first) at <paramref name="unixMs"/> (spec
    /// cluster.md §3): the origin's clock in Unix milliseconds in the upper 44 bits (never back: the previous one's, if
    /// later), and a count of its envelopes modulo 2^20 in the lower 20, so each is greater than the one before, the
    /// count bits of consecutive ones are consecutive, and a receiver knows when it was stamped (<see cref="StampedAt"/>).
    /// </summary>
    public static ulong NextSequence(ulong previous, long unixMs)
    {
        const ulong mask = (1UL << CountBits) - 1;
        ulong count = (previous + 1) & mask;
        ulong before = previous >> CountBits;
        ulong at = Math.Max((ulong)Math.Max(unixMs, 0), before);
        if (count == 0 && at == before)
        {
            at++; // a million envelopes in one millisecond: the clock bits move on
        }

        return (at << CountBits) | count;
    }

    /// <summary>When the origin stamped <paramref name="sequence"/> (Unix ms, <see cref="NextSequence"/>).</summary>
    public static long StampedAt(ulong sequence) => (long)(sequence >> CountBits);

    /// <summary>Sets the sequence number: the sender does, in the order it hands envelopes to Redis.</summary>
    public static void Stamp(byte[] envelope, ulong sequence) => BinaryPrimitives.WriteUInt64BigEndian(envelope.AsSpan(10), sequence);

    /// <summary>As the other <see cref="TryRead(ReadOnlyMemory{byte}, EnvelopeSigner?, out ulong, out ulong, out ReadOnlyMemory{byte}, out ReadOnlyMemory{byte})"/>, the assignments left out: for what routes to no queue group.</summary>
    public static bool TryRead(ReadOnlyMemory<byte> bytes, EnvelopeSigner? signer, out ulong origin, out ulong sequence, out ReadOnlyMemory<byte> body) =>
        TryRead(bytes, signer, out origin, out sequence, out _, out body);

    /// <summary>
    /// Reads the header; false for anything that is not an envelope of an expected version (1 or 4, or 2 or 5 with
    /// a tag <paramref name="signer"/> verifies; 4 and 5 with 1 to 64 assignments): counted and skipped by the caller.
    /// </summary>
    /// <param name="assignments">Versions 4 and 5: the queue groups given to other nodes, <see cref="GroupAssignments.Size"/> bytes each; empty otherwise.</param>
    public static bool TryRead(ReadOnlyMemory<byte> bytes, EnvelopeSigner? signer, out ulong origin, out ulong sequence, out ReadOnlyMemory<byte> assignments, out ReadOnlyMemory<byte> body)
    {
        ReadOnlySpan<byte> span = bytes.Span;
        int start = HeaderSize + (signer is null ? 0 : TagSize);
        origin = sequence = 0;
        assignments = body = default;
        if (span.Length <= start || span[0] != Magic)
        {
            return false;
        }

        bool assigned = span[1] == (signer is null ? AssignedVersion : SignedAssignedVersion);
        if (!assigned && span[1] != (signer is null ? Version : SignedVersion))
        {
            return false;
        }

        if (assigned)
        {
            int count = span[start];
            int size = count * GroupAssignments.Size;
            if (count is 0 or > GroupAssignments.Max || span.Length <= start + 1 + size)
            {
                return false;
            }

            assignments = bytes.Slice(start + 1, size);
            start += 1 + size;
        }

        if (signer is not null && !signer.Verify(span))
        {
            assignments = default;
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
