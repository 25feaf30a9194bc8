using System.Text;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>
/// The Fossil delta codec (spec §11.2): what it creates applies back to the target, a delta is refused before
/// its target is allocated when it declares more than the limit, and every malformed delta is a
/// <see cref="ErrorCode.DecompressionFailed"/>, never another exception.
/// </summary>
public class FossilDeltaTests
{
    public static TheoryData<int, int> Sizes => new() { { 0, 0 }, { 5, 11 }, { 16, 17 }, { 17, 16 }, { 200, 210 }, { 3000, 2990 }, { 70_000, 70_100 } };

    [Theory]
    [MemberData(nameof(Sizes))]
    public void Created_delta_applies_back_to_the_target(int sourceLength, int targetLength)
    {
        var random = new Random(sourceLength + targetLength);
        byte[] source = new byte[sourceLength];
        random.NextBytes(source);
        byte[] target = new byte[targetLength];
        source.AsSpan(0, Math.Min(sourceLength, targetLength)).CopyTo(target);
        for (int i = 0; i < targetLength / 50; i++)
        {
            target[random.Next(targetLength)] = (byte)random.Next(256);
        }

        byte[] delta = Create(source, target);

        Assert.Equal(target, FossilDelta.Apply(source, delta, targetLength));
    }

    [Fact]
    public void A_json_update_of_a_few_fields_is_a_small_delta()
    {
        byte[] source = Encoding.UTF8.GetBytes("""{"symbol":"ACME","price":101.25,"volume":12345,"venue":"XPAR","bid":101.2,"ask":101.3,"ts":1700000000}""");
        byte[] target = Encoding.UTF8.GetBytes("""{"symbol":"ACME","price":101.30,"volume":12351,"venue":"XPAR","bid":101.2,"ask":101.3,"ts":1700000001}""");

        byte[] delta = Create(source, target);

        Assert.True(delta.Length < target.Length / 2, $"{delta.Length} of {target.Length}");
        Assert.Equal(target, FossilDelta.Apply(source, delta, target.Length));
    }

    [Fact]
    public void Create_reports_a_delta_that_does_not_fit()
    {
        byte[] source = new byte[100];
        byte[] target = new byte[100];
        new Random(1).NextBytes(target);

        Assert.False(FossilDelta.TryCreate(source, target, new byte[target.Length], out int written));
        Assert.Equal(0, written);
    }

    [Fact]
    public void A_declared_size_over_the_limit_is_refused_before_the_target_is_built()
    {
        // 64^4 - 1 bytes declared, one insert that would make them: refused on the size line.
        byte[] delta = Encoding.ASCII.GetBytes("~~~~\n1:x0;");

        var e = Assert.Throws<ProtocolException>(() => FossilDelta.Apply([], delta, 1 << 20));

        Assert.Equal(ErrorCode.DecompressionFailed, e.Code);
        Assert.Contains("over the limit", e.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("")]
    [InlineData("5")]
    [InlineData("5\n")]
    [InlineData("5\n5:hel")]
    [InlineData("5\n5:hello")]
    [InlineData("5\n5:hello0;")]
    [InlineData("5\n5@0,")]
    [InlineData("5\n5?hello")]
    [InlineData("5\n6:hello!")]
    [InlineData("5\n4:hell")]
    [InlineData("5\n4:hell1@99999,")]
    [InlineData("5\n~~~~~~~~:hello")]
    [InlineData("\n0;")]
    public void Malformed_delta_is_decompression_failed(string text)
    {
        byte[] source = Encoding.ASCII.GetBytes("a source of more than sixteen bytes");

        var e = Assert.Throws<ProtocolException>(() => FossilDelta.Apply(source, Encoding.ASCII.GetBytes(text), 1000));

        Assert.Equal(ErrorCode.DecompressionFailed, e.Code);
    }

    [Fact]
    public void Checksum_mismatch_is_decompression_failed()
    {
        byte[] source = Encoding.ASCII.GetBytes("a source of more than sixteen bytes");
        byte[] target = Encoding.ASCII.GetBytes("a source of more than sixteen bytes, changed");
        byte[] delta = Create(source, target);
        delta[delta.Length - 2] ^= 1; // the checksum's last digit

        var e = Assert.Throws<ProtocolException>(() => FossilDelta.Apply(source, delta, 1000));

        Assert.Equal(ErrorCode.DecompressionFailed, e.Code);
    }

    internal static byte[] Create(byte[] source, byte[] target)
    {
        byte[] buffer = new byte[target.Length + 64];
        Assert.True(FossilDelta.TryCreate(source, target, buffer, out int written));
        return buffer[..written];
    }
}
