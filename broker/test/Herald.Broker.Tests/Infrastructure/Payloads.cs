using System.Text;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>
/// Deterministic payloads for the adaptive-encoding seed's three message classes: simple (highly
/// redundant: Zstd ratio about 0.015 at the broker's levels), medium (about 0.5) and complex (random:
/// ratio about 1). The seed's gzip figures were 0.1 / 0.4 / 0.8-1.
/// </summary>
public static class Payloads
{
    private static readonly string[] Words = ["price", "quote", "order", "stock", "trade", "value", "limit", "market", "buy", "sell", "open", "close", "bid", "ask", "volume", "index"];

    public static byte[] Simple(int size, int seed = 1)
    {
        var random = new Random(seed);
        var text = new StringBuilder(size + 64);
        while (text.Length < size)
        {
            text.Append("{\"symbol\":\"ACME\",\"price\":").Append(100 + random.Next(3)).Append(",\"currency\":\"EUR\"},");
        }

        return Encoding.ASCII.GetBytes(text.ToString(0, size));
    }

    public static byte[] Medium(int size, int seed = 1)
    {
        var random = new Random(seed);
        var bytes = new byte[size];
        int i = 0;
        while (i < size)
        {
            // Words from a small vocabulary mixed with random numbers and, one run in four, random bytes.
            byte[] piece = random.Next(4) == 0
                ? RandomBytes(random, 6)
                : Encoding.ASCII.GetBytes(Words[random.Next(Words.Length)] + random.Next(100000).ToString(System.Globalization.CultureInfo.InvariantCulture) + " ");
            int n = Math.Min(piece.Length, size - i);
            piece.AsSpan(0, n).CopyTo(bytes.AsSpan(i));
            i += n;
        }

        return bytes;
    }

    public static byte[] Complex(int size, int seed = 1) => RandomBytes(new Random(seed), size);

    private static byte[] RandomBytes(Random random, int size)
    {
        var bytes = new byte[size];
        random.NextBytes(bytes);
        return bytes;
    }
}
