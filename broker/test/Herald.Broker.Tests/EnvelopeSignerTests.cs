using System.Text;
using Herald.Broker.Cluster;

namespace Herald.Broker.Tests;

/// <summary>
/// The signer's tags for records other than envelopes (spec cluster.md §3): each bound to its path and its secret,
/// checked as bytes or as text, and never one an envelope's check accepts.
/// </summary>
public sealed class EnvelopeSignerTests
{
    private const string Secret = "a-cluster-secret-of-some-length";

    [Fact]
    public void A_record_checks_with_its_path_and_secret_and_with_nothing_else()
    {
        using var signer = new EnvelopeSigner(Secret);
        using var other = new EnvelopeSigner(Secret + "!");
        byte[] data = Encoding.UTF8.GetBytes("a record");
        string tag = signer.Tag("lq", data);
        Span<byte> bytes = stackalloc byte[EnvelopeSigner.TagSize];
        signer.Tag("lq", data, bytes);

        Assert.Equal(32, tag.Length);
        Assert.Equal(Convert.ToHexStringLower(bytes), tag);
        Assert.True(signer.Check("lq", data, tag));
        Assert.True(signer.Check("lq", data, (ReadOnlySpan<byte>)bytes));
        Assert.False(signer.Check("lpc", data, tag));                              // another path
        Assert.False(other.Check("lq", data, tag));                                // another secret
        Assert.False(signer.Check("lq", Encoding.UTF8.GetBytes("a recorD"), tag)); // another record
        Assert.False(signer.Check("lq", data, tag[..^1]));                         // too short
        Assert.False(signer.Check("lq", data, (string?)null));
        Assert.False(signer.Check("lq", data, tag.ToUpperInvariant()[..^2] + "zz")); // not hex
        Assert.Throws<ArgumentException>(() => signer.Tag("", data));
        Assert.Throws<ArgumentException>(() => signer.Tag(new string('p', EnvelopeSigner.MaxPathBytes + 1), data));
    }
}
