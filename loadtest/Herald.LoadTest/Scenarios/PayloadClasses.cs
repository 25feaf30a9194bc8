using System.Globalization;
using System.Text;

namespace Herald.LoadTest.Scenarios;

/// <summary>The adaptive-encoding seed's three message classes, by how well Zstd compresses them.</summary>
internal enum PayloadClass
{
    /// <summary>Highly redundant JSON-like text: compressed/original about 0.1.</summary>
    Simple,

    /// <summary>Words from a small vocabulary, numbers, and one run in four of random bytes: about 0.4.</summary>
    Medium,

    /// <summary>Random bytes (like already-compressed images or documents): about 1.</summary>
    Complex,
}

/// <summary>
/// Deterministic payloads for the three classes and the seed's size distribution. The generators are
/// the same as the broker tests' <c>Payloads</c> (broker/test/Herald.Broker.Tests/Infrastructure), copied
/// because the load tool must not reference test projects: keep the two in step.
/// </summary>
internal static class PayloadClasses
{
    /// <summary>The seed's range: "random message sizes ranging between 0.6KB to 250KB on a distribution with most messages close to 150KB".</summary>
    public const int MinSize = 600;
    public const int MaxSize = 250_000;
    public const int BandLow = 120_000;
    public const int BandHigh = 180_000;

    /// <summary>Share of messages in the band around 150 KB; the rest are spread evenly over the whole range.</summary>
    public const double BandShare = 0.8;

    private static readonly string[] Words = ["price", "quote", "order", "stock", "trade", "value", "limit", "market", "buy", "sell", "open", "close", "bid", "ask", "volume", "index"];

    public static string Name(PayloadClass payloadClass) => payloadClass.ToString().ToLowerInvariant();

    public static bool TryParse(string text, out PayloadClass payloadClass) =>
        Enum.TryParse(text, ignoreCase: true, out payloadClass) && Enum.IsDefined(payloadClass) && !int.TryParse(text, out _);

    public static byte[] Generate(PayloadClass payloadClass, int size, int seed) => payloadClass switch
    {
        PayloadClass.Simple => Simple(size, seed),
        PayloadClass.Medium => Medium(size, seed),
        _ => Complex(size, seed),
    };

    /// <summary>
    /// <paramref name="count"/> sizes from the seed's distribution, deterministic for a given
    /// <paramref name="seed"/>: round(<see cref="BandShare"/> x count) of them uniform in
    /// [<see cref="BandLow"/>, <see cref="BandHigh"/>], the others uniform in [<see cref="MinSize"/>,
    /// <see cref="MaxSize"/>], in a shuffled order.
    /// </summary>
    public static int[] Sizes(int count, int seed)
    {
        var random = new Random(seed);
        int inBand = (int)Math.Round(count * BandShare);
        var sizes = new int[count];
        for (int i = 0; i < count; i++)
        {
            sizes[i] = i < inBand ? random.Next(BandLow, BandHigh + 1) : random.Next(MinSize, MaxSize + 1);
        }

        random.Shuffle(sizes);
        return sizes;
    }

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
                : Encoding.ASCII.GetBytes(Words[random.Next(Words.Length)] + random.Next(100000).ToString(CultureInfo.InvariantCulture) + " ");
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
