using System.Buffers;
using Herald.Protocol;
using ZstdSharp;

namespace Herald.Client.Compression;

/// <summary>
/// Zstd payloads (spec §11) through ZstdSharp, one compressor and one decompressor per thread (they are
/// not thread-safe and costly to create). Decompression is bounded: a payload that is not Zstd, or that
/// would grow past the limit, fails with <see cref="ErrorCode.DecompressionFailed"/>.
/// </summary>
internal static class ZstdCodec
{
    /// <summary>Level of the publications the client compresses: Zstd's default, a good ratio at a low cost.</summary>
    public const int Level = 3;

    [ThreadStatic]
    private static Compressor? _compressor;

    [ThreadStatic]
    private static Decompressor? _decompressor;

    /// <summary>One Zstd frame (with its content size) of <paramref name="payload"/>, or <c>null</c> when that is not smaller.</summary>
    public static byte[]? TryCompress(ReadOnlySpan<byte> payload)
    {
        _compressor ??= new Compressor(Level);
        byte[] rented = ArrayPool<byte>.Shared.Rent(Compressor.GetCompressBound(payload.Length));
        try
        {
            int length = _compressor.Wrap(payload, rented);
            return length < payload.Length ? rented.AsSpan(0, length).ToArray() : null;
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(rented);
        }
    }

    /// <exception cref="ProtocolException"><see cref="ErrorCode.DecompressionFailed"/>.</exception>
    public static byte[] Decompress(in ReadOnlySequence<byte> source, int maxLength)
    {
        ReadOnlySpan<byte> input = source.IsSingleSegment ? source.FirstSpan : source.ToArray();
        ulong declared;
        try
        {
            declared = Decompressor.GetDecompressedSize(input);
        }
        catch (ZstdException e)
        {
            throw new ProtocolException(ErrorCode.DecompressionFailed, $"A payload flagged Zstd is not a Zstd frame: {e.Message}", e);
        }

        const ulong Unknown = ulong.MaxValue;     // ZSTD_CONTENTSIZE_UNKNOWN: the frame does not say
        const ulong Invalid = ulong.MaxValue - 1; // ZSTD_CONTENTSIZE_ERROR
        if (declared == Invalid)
        {
            throw new ProtocolException(ErrorCode.DecompressionFailed, "A payload flagged Zstd is not a Zstd frame.");
        }

        if (declared != Unknown && declared > (ulong)maxLength)
        {
            throw new ProtocolException(ErrorCode.DecompressionFailed, $"A Zstd payload would decompress to {declared} bytes, over the limit of {maxLength}.");
        }

        _decompressor ??= new Decompressor();
        if (declared != Unknown)
        {
            byte[] exact = GC.AllocateUninitializedArray<byte>((int)declared);
            try
            {
                int written = _decompressor.Unwrap(input, exact);
                return written == exact.Length ? exact : exact.AsSpan(0, written).ToArray();
            }
            catch (ZstdException e)
            {
                throw new ProtocolException(ErrorCode.DecompressionFailed, $"A Zstd payload is corrupt: {e.Message}", e);
            }
        }

        // The frame does not declare its size: decompress into the limit and let Zstd refuse to go past it.
        byte[] rented = ArrayPool<byte>.Shared.Rent(maxLength);
        try
        {
            int written = _decompressor.Unwrap(input, rented.AsSpan(0, maxLength));
            return rented.AsSpan(0, written).ToArray();
        }
        catch (ZstdException e)
        {
            throw new ProtocolException(ErrorCode.DecompressionFailed, $"A Zstd payload is corrupt or decompresses past {maxLength} bytes: {e.Message}", e);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(rented);
        }
    }
}
