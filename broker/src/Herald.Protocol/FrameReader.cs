using System.Buffers;
using System.Buffers.Binary;
using System.Runtime.CompilerServices;

namespace Herald.Protocol;

/// <summary>
/// Splits a byte stream into frames (spec §2).
/// <code>
/// +-------------------------------+------------------------------------+
/// | body length: uint32 BE        | body: `length` bytes (MessagePack) |
/// +-------------------------------+------------------------------------+
/// </code>
/// A pure function: no I/O, no allocation, no logging. It returns <c>false</c> until a whole frame is
/// buffered and hands back the body as a slice of the input (no copy). The length prefix is checked
/// against the limit before the body is waited for, so an oversized frame fails after four bytes.
/// </summary>
public static class FrameReader
{
    /// <summary>
    /// Reads one frame from the front of <paramref name="buffer"/>. On success <paramref name="body"/> is
    /// the frame's body and <paramref name="buffer"/> is advanced past the frame; otherwise neither changes.
    /// </summary>
    /// <exception cref="ProtocolException"><c>FrameTooLarge</c> or <c>MalformedFrame</c> (zero length).</exception>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static bool TryReadFrame(ref ReadOnlySequence<byte> buffer, int maxBodySize, out ReadOnlySequence<byte> body)
    {
        if (buffer.Length < ProtocolConstants.LengthPrefixSize)
        {
            body = default;
            return false;
        }

        uint length = ReadLength(buffer);
        if (length > (uint)maxBodySize)
        {
            ThrowHelper.ThrowFrameTooLarge(length, maxBodySize);
        }

        if (length == 0)
        {
            ThrowHelper.ThrowMalformed("Frame body length is 0.");
        }

        if (buffer.Length - ProtocolConstants.LengthPrefixSize < length)
        {
            body = default;
            return false;
        }

        body = buffer.Slice(ProtocolConstants.LengthPrefixSize, length);
        buffer = buffer.Slice(body.End);
        return true;
    }

    /// <summary>
    /// The body length a frame at the front of <paramref name="buffer"/> declares, once its four prefix bytes
    /// are there (the body need not be): what a partial frame will cost. <c>false</c> with fewer than four bytes.
    /// </summary>
    public static bool TryReadLength(in ReadOnlySequence<byte> buffer, out uint length)
    {
        if (buffer.Length < ProtocolConstants.LengthPrefixSize)
        {
            length = 0;
            return false;
        }

        length = ReadLength(buffer);
        return true;
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private static uint ReadLength(in ReadOnlySequence<byte> buffer)
    {
        ReadOnlySpan<byte> first = buffer.FirstSpan;
        if (first.Length >= ProtocolConstants.LengthPrefixSize)
        {
            return BinaryPrimitives.ReadUInt32BigEndian(first);
        }

        Span<byte> prefix = stackalloc byte[ProtocolConstants.LengthPrefixSize];
        buffer.Slice(0, ProtocolConstants.LengthPrefixSize).CopyTo(prefix);
        return BinaryPrimitives.ReadUInt32BigEndian(prefix);
    }
}
