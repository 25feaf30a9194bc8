using System.Globalization;
using System.Text;

namespace Herald.LoadTest.Scenarios;

/// <summary>The realistic streams of the <c>deltas</c> scenario: what real-time applications publish to one topic.</summary>
internal enum DeltaStream
{
    /// <summary>A JSON document (an order's state, about 300 B) of which a few fields change with each publication.</summary>
    Json,

    /// <summary>A price tick (about 90 B of JSON): bid, ask, sizes and a timestamp that move with each publication.</summary>
    Ticker,

    /// <summary>The control: random bytes (256 B), nothing shared between publications, nothing to compress.</summary>
    Random,
}

/// <summary>The publications of each <see cref="DeltaStream"/>, made from a seed so every run and mode sends the same bytes.</summary>
internal static class DeltaStreams
{
    private static readonly CultureInfo C = CultureInfo.InvariantCulture;

    public static string Name(DeltaStream stream) => stream.ToString().ToLowerInvariant();

    /// <summary><paramref name="count"/> consecutive publications of <paramref name="stream"/>.</summary>
    public static byte[][] Generate(DeltaStream stream, int count, int seed)
    {
        var random = new Random(seed);
        return stream switch
        {
            DeltaStream.Json => Json(count, random),
            DeltaStream.Ticker => Ticker(count, random),
            _ => [.. Enumerable.Range(0, count).Select(_ => RandomBytes(random, 256))],
        };
    }

    /// <summary>An order filling over time: price and average move, the filled quantity grows, the status changes once in a while, the time and sequence always.</summary>
    private static byte[][] Json(int count, Random random)
    {
        var payloads = new byte[count][];
        double price = 101.25, average = 101.25;
        int filled = 0;
        long time = 1_796_068_800_000;
        string[] statuses = ["open", "partial", "partial", "partial", "amended", "partial"];
        for (int i = 0; i < count; i++)
        {
            price = Math.Round(price + ((random.Next(5) - 2) * 0.01), 2);
            filled = (filled + random.Next(0, 40)) % 10_000;
            average = Math.Round(((average * 9) + price) / 10, 4);
            time += random.Next(5, 250);
            string status = i % 50 == 0 ? statuses[random.Next(statuses.Length)] : "partial";
            payloads[i] = Encoding.UTF8.GetBytes(string.Create(C,
                $$"""{"id":"ord-7f3a9c21","account":"acct-20419","symbol":"ACME","side":"buy","type":"limit","quantity":10000,"price":{{price:F2}},"filled":{{filled}},"avgPrice":{{average:F4}},"status":"{{status}}","venue":"XPAR","tif":"day","trader":"desk-7","updated":"{{DateTimeOffset.FromUnixTimeMilliseconds(time):yyyy-MM-ddTHH:mm:ss.fffZ}}","seq":{{i}}}"""));
        }

        return payloads;
    }

    /// <summary>A quote: bid and ask walk a cent at a time, sizes change, the timestamp always.</summary>
    private static byte[][] Ticker(int count, Random random)
    {
        var payloads = new byte[count][];
        double bid = 101.25;
        long time = 1_796_068_800_000;
        for (int i = 0; i < count; i++)
        {
            bid = Math.Round(bid + ((random.Next(3) - 1) * 0.01), 2);
            double ask = Math.Round(bid + (0.01 * random.Next(1, 4)), 2);
            time += random.Next(1, 50);
            payloads[i] = Encoding.UTF8.GetBytes(string.Create(C,
                $$"""{"s":"ACME","bid":{{bid:F2}},"ask":{{ask:F2}},"bs":{{100 * random.Next(1, 40)}},"as":{{100 * random.Next(1, 40)}},"ts":{{time}}}"""));
        }

        return payloads;
    }

    private static byte[] RandomBytes(Random random, int length)
    {
        byte[] bytes = new byte[length];
        random.NextBytes(bytes);
        return bytes;
    }
}
