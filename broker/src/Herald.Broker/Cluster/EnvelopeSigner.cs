using System.Security.Cryptography;
using System.Text;

namespace Herald.Broker.Cluster;

/// <summary>
/// Signs and checks what nodes leave in Redis with the cluster's shared secret (<c>Herald:Cluster:Secret</c>, spec
/// cluster.md §3). An envelope's tag is the first 16 bytes of HMAC-SHA256 over the whole envelope with the tag's bytes
/// zero (<see cref="Sign"/>, <see cref="Verify"/>). Any other record a node writes to Redis (a key's value, a stream
/// entry, a command on a channel) is tagged for its <i>path</i>, a short name saying what the record is
/// (<see cref="Tag(string, ReadOnlySpan{byte}, Span{byte})"/>, <see cref="Check"/>): the HMAC covers the path's length,
/// the path and the data, so a record tagged for one path is refused on every other, and never verifies as an envelope
/// (a path's length byte, 1 to 64, is never an envelope's first byte, 'H'). Without the secret, access to Redis is
/// enough to publish to any topic past every permission; with it, what no node made is skipped and counted
/// (<c>herald.cluster.invalid</c>).
/// </summary>
/// <remarks>Not thread-safe: one per writer or reader (the sender's, one per subscription's reader, one per store).</remarks>
internal sealed class EnvelopeSigner(string secret) : IDisposable
{
    /// <summary>The bytes of a tag, for an envelope and for any other record (<see cref="ClusterEnvelope.TagSize"/>).</summary>
    public const int TagSize = ClusterEnvelope.TagSize;

    /// <summary>The longest path, in UTF-8 bytes.</summary>
    public const int MaxPathBytes = 64;

    private static readonly byte[] NoTag = new byte[ClusterEnvelope.TagSize];

    private readonly IncrementalHash _hmac = IncrementalHash.CreateHMAC(HashAlgorithmName.SHA256, Encoding.UTF8.GetBytes(secret));

    /// <summary>Writes the tag of a version-2 envelope already stamped with its sequence.</summary>
    public void Sign(byte[] envelope)
    {
        Span<byte> mac = stackalloc byte[32];
        Compute(envelope, mac);
        mac[..ClusterEnvelope.TagSize].CopyTo(envelope.AsSpan(ClusterEnvelope.HeaderSize));
    }

    /// <summary>Whether a version-2 envelope's tag is the one the secret gives (compared in constant time).</summary>
    public bool Verify(ReadOnlySpan<byte> envelope)
    {
        if (envelope.Length < ClusterEnvelope.HeaderSize + ClusterEnvelope.TagSize)
        {
            return false;
        }

        Span<byte> mac = stackalloc byte[32];
        Compute(envelope, mac);
        return CryptographicOperations.FixedTimeEquals(mac[..ClusterEnvelope.TagSize], envelope.Slice(ClusterEnvelope.HeaderSize, ClusterEnvelope.TagSize));
    }

    /// <summary>
    /// Writes into <paramref name="tag"/> (<see cref="TagSize"/> bytes) the tag of <paramref name="data"/> as a record of
    /// <paramref name="path"/> (1 to <see cref="MaxPathBytes"/> bytes of ASCII, such as <c>"lq"</c> or <c>"history"</c>):
    /// the first 16 bytes of HMAC-SHA256(secret, path length: u8, path, data).
    /// </summary>
    public void Tag(string path, ReadOnlySpan<byte> data, Span<byte> tag)
    {
        Span<byte> mac = stackalloc byte[32];
        Compute(path, data, mac);
        mac[..TagSize].CopyTo(tag);
    }

    /// <summary>The tag of <paramref name="data"/> as a record of <paramref name="path"/>, as 32 lowercase hex digits: for a record kept as text.</summary>
    public string Tag(string path, ReadOnlySpan<byte> data)
    {
        Span<byte> tag = stackalloc byte[TagSize];
        Tag(path, data, tag);
        return Convert.ToHexStringLower(tag);
    }

    /// <summary>Whether <paramref name="tag"/> is the one <see cref="Tag(string, ReadOnlySpan{byte}, Span{byte})"/> gives (compared in constant time).</summary>
    public bool Check(string path, ReadOnlySpan<byte> data, ReadOnlySpan<byte> tag)
    {
        Span<byte> mac = stackalloc byte[32];
        Compute(path, data, mac);
        return tag.Length == TagSize && CryptographicOperations.FixedTimeEquals(mac[..TagSize], tag);
    }

    /// <summary>As <see cref="Check(string, ReadOnlySpan{byte}, ReadOnlySpan{byte})"/>, the tag as the text <see cref="Tag(string, ReadOnlySpan{byte})"/> gives.</summary>
    public bool Check(string path, ReadOnlySpan<byte> data, string? tag)
    {
        Span<byte> bytes = stackalloc byte[TagSize];
        return tag is { Length: TagSize * 2 }
            && Convert.FromHexString(tag, bytes, out _, out int written) == System.Buffers.OperationStatus.Done
            && written == TagSize
            && Check(path, data, (ReadOnlySpan<byte>)bytes);
    }

    private void Compute(ReadOnlySpan<byte> envelope, Span<byte> mac)
    {
        int body = ClusterEnvelope.HeaderSize + ClusterEnvelope.TagSize;
        _hmac.AppendData(envelope[..ClusterEnvelope.HeaderSize]);
        _hmac.AppendData(NoTag);
        _hmac.AppendData(envelope[body..]);
        _hmac.GetHashAndReset(mac);
    }

    private void Compute(string path, ReadOnlySpan<byte> data, Span<byte> mac)
    {
        Span<byte> name = stackalloc byte[1 + MaxPathBytes];
        if (path.Length is 0 or > MaxPathBytes || !Ascii.IsValid(path))
        {
            throw new ArgumentException($"A record's path is 1 to {MaxPathBytes} ASCII characters.", nameof(path));
        }

        name[0] = (byte)path.Length;
        Encoding.ASCII.GetBytes(path, name[1..]);
        _hmac.AppendData(name[..(1 + path.Length)]);
        _hmac.AppendData(data);
        _hmac.GetHashAndReset(mac);
    }

    public void Dispose() => _hmac.Dispose();
}
