// Compiled for netstandard2.0 only (see Herald.Protocol.csproj): the part of .NET 8's System.Text.Ascii that
// Herald.Protocol uses. The net10.0 build (the broker's) uses the runtime's vectorised Ascii.
namespace System.Text;

[Microsoft.CodeAnalysis.Embedded]
internal static class Ascii
{
    /// <summary>Whether two byte spans hold the same ASCII text, letters compared without case.</summary>
    public static bool EqualsIgnoreCase(ReadOnlySpan<byte> left, ReadOnlySpan<byte> right)
    {
        if (left.Length != right.Length)
        {
            return false;
        }

        for (int i = 0; i < left.Length; i++)
        {
            if (left[i] != right[i] && (ToLower(left[i]) != ToLower(right[i]) || left[i] >= 0x80))
            {
                return false;
            }
        }
        return true;
    }

    private static byte ToLower(byte value) => value is >= (byte)'A' and <= (byte)'Z' ? (byte)(value | 0x20) : value;
}
