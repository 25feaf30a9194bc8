using System.Buffers;
using Herald.Protocol;
using ZstdSharp;

namespace Herald.Broker.Compression;

/// <summary>
/// Zstd through ZstdSharp, with one compressor per level and one decompressor per thread (they are
/// not thread-safe and are costly to create). Decompression is bounded: a payload that would grow past
/// the limit, or that is not valid Zstd, fails with <see cref="ErrorCode.DecompressionFailed"/>.
/// </summary>
internal static class Zstd
{
    [ThreadStatic]
    private static Dictionary<int, Compressor>? _compressors;

    [ThreadStatic]
    private static Decompressor? _decompressor;

    /// <summary>Compresses into a rented array (return it to <see cref="ArrayPool{T}.Shared"/>); returns the compressed length.</summary>
    public static int Compress(ReadOnlySpan<byte> source, int level, out byte[] rented)
    {
        _compressors ??= [];
        if (!_compressors.TryGetValue(level, out Compressor? compressor))
        {
            compressor = new Compressor(level);
            _compressors[level] = compressor;
        }

        rented = ArrayPool<byte>.Shared.Rent(Compressor.GetCompressBound(source.Length));
        return compressor.Wrap(source, rented);
    }

    /// <summary>
    /// The bytes a decompression of <paramref name="source"/> will take, read from the frame header before
    /// any buffer is taken: its declared content size, or <paramref name="maxLength"/> when it declares none.
    /// </summary>
    /// <exception cref="ProtocolException"><see cref="ErrorCode.DecompressionFailed"/>: not Zstd, or declared over the limit.</exception>
    public static int DecompressedCapacity(in ReadOnlySequence<byte> source, int maxLength)
    {
        ulong declared;
        try
        {
            declared = Decompressor.GetDecompressedSize(source.IsSingleSegment ? source.FirstSpan : source.ToArray());
        }
        catch (ZstdException e)
        {
            throw new ProtocolException(ErrorCode.DecompressionFailed, $"The payload is flagged Zstd but is not a Zstd frame: {e.Message}", e);
        }

        const ulong Unknown = ulong.MaxValue;      // ZSTD_CONTENTSIZE_UNKNOWN: the frame does not say
        const ulong Invalid = ulong.MaxValue - 1;  // ZSTD_CONTENTSIZE_ERROR
        return declared switch
        {
            Invalid => throw new ProtocolException(ErrorCode.DecompressionFailed, "The payload is flagged Zstd but is not a Zstd frame."),
            Unknown => maxLength, // a frame may omit its size: decompressed into the limit, Zstd refuses to go past it
            > int.MaxValue => throw new ProtocolException(ErrorCode.DecompressionFailed, $"The payload would decompress to {declared} bytes, over the limit of {maxLength}."),
            _ when (int)declared > maxLength => throw new ProtocolException(ErrorCode.DecompressionFailed, $"The payload would decompress to {declared} bytes, over the limit of {maxLength}."),
            _ => (int)declared,
        };
    }

    /// <summary>Decompresses into a rented array of at most <paramref name="maxLength"/> bytes (checked before it is taken); returns the length.</summary>
    /// <exception cref="ProtocolException"><see cref="ErrorCode.DecompressionFailed"/>.</exception>
    public static int Decompress(in ReadOnlySequence<byte> source, int maxLength, out byte[] rented)
    {
        int capacity = DecompressedCapacity(source, maxLength);
        ReadOnlySpan<byte> input = source.IsSingleSegment ? source.FirstSpan : source.ToArray();
        rented = ArrayPool<byte>.Shared.Rent(Math.Max(capacity, 1));
        try
        {
            _decompressor ??= new Decompressor();
            return _decompressor.Unwrap(input, rented.AsSpan(0, capacity));
        }
        catch (ZstdException e)
        {
            ArrayPool<byte>.Shared.Return(rented);
            rented = [];
            throw new ProtocolException(ErrorCode.DecompressionFailed, $"The Zstd payload is corrupt or decompresses past {maxLength} bytes: {e.Message}", e);
        }
    }
}
