using System.Security.Cryptography;
using System.Text;

namespace Herald.Broker.Cluster;

/// <summary>
/// Signs and checks envelopes with the cluster's shared secret (<c>Herald:Cluster:Secret</c>, spec cluster.md §3):
/// the tag is the first 16 bytes of HMAC-SHA256 over the whole envelope with the tag's bytes zero. Without the
/// secret, access to Redis is enough to publish to any topic past every permission; with it, an envelope not
/// made by a node is skipped and counted (<c>herald.cluster.invalid</c>).
/// </summary>
/// <remarks>Not thread-safe: one for the sender, one per subscription's reader.</remarks>
internal sealed class EnvelopeSigner(string secret) : IDisposable
{
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

    private void Compute(ReadOnlySpan<byte> envelope, Span<byte> mac)
    {
        int body = ClusterEnvelope.HeaderSize + ClusterEnvelope.TagSize;
        _hmac.AppendData(envelope[..ClusterEnvelope.HeaderSize]);
        _hmac.AppendData(NoTag);
        _hmac.AppendData(envelope[body..]);
        _hmac.GetHashAndReset(mac);
    }

    public void Dispose() => _hmac.Dispose();
}
