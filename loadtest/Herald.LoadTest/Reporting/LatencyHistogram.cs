using System.Numerics;

namespace Herald.LoadTest.Reporting;

/// <summary>
/// A log-linear histogram of non-negative values (nanoseconds here), in the manner of HdrHistogram:
/// values below 128 each have their own bucket; above that, every power-of-two range [64·2^L, 128·2^L)
/// is cut into 64 equal buckets of width 2^L, so a bucket is never wider than 1/64 (1.6 %) of the values
/// in it. 3,712 counters cover the whole <see cref="long"/> range: fixed memory, O(1) recording, and
/// histograms of several callers merge by adding counters.
/// Not thread-safe: one recording task per histogram, merged after the run.
/// </summary>
internal sealed class LatencyHistogram
{
    private const int LinearBuckets = 128;
    private const int SubBuckets = 64;
    private const int SubBucketBits = 6;
    private const int Levels = 56; // L = 1..56 covers values up to 2^63 - 1

    private readonly long[] _counts = new long[LinearBuckets + (Levels * SubBuckets)];

    public long Count { get; private set; }

    public long Min { get; private set; } = long.MaxValue;

    public long Max { get; private set; }

    public double Sum { get; private set; }

    public double Mean => Count == 0 ? 0 : Sum / Count;

    public void Record(long value)
    {
        if (value < 0)
        {
            value = 0;
        }

        _counts[IndexOf(value)]++;
        Count++;
        Sum += value;
        if (value < Min) Min = value;
        if (value > Max) Max = value;
    }

    public void Add(LatencyHistogram other)
    {
        ArgumentNullException.ThrowIfNull(other);
        for (int i = 0; i < _counts.Length; i++)
        {
            _counts[i] += other._counts[i];
        }

        Count += other.Count;
        Sum += other.Sum;
        Min = Math.Min(Min, other.Min);
        Max = Math.Max(Max, other.Max);
    }

    /// <summary>
    /// The value at or below which <paramref name="percentile"/> % of the samples lie, reported as the
    /// upper edge of its bucket (never optimistic), capped at the exact maximum.
    /// </summary>
    public long ValueAtPercentile(double percentile)
    {
        if (Count == 0)
        {
            return 0;
        }

        long rank = Math.Max(1, (long)Math.Ceiling(percentile / 100.0 * Count));
        long seen = 0;
        for (int i = 0; i < _counts.Length; i++)
        {
            seen += _counts[i];
            if (seen >= rank)
            {
                return Math.Min(UpperEdgeOf(i), Max);
            }
        }

        return Max;
    }

    private static int IndexOf(long value)
    {
        if (value < LinearBuckets)
        {
            return (int)value;
        }

        int level = (63 - BitOperations.LeadingZeroCount((ulong)value)) - SubBucketBits; // >= 1
        int sub = (int)(value >> level) - SubBuckets; // 0..63
        return LinearBuckets + ((level - 1) * SubBuckets) + sub;
    }

    private static long UpperEdgeOf(int index)
    {
        if (index < LinearBuckets)
        {
            return index;
        }

        int level = ((index - LinearBuckets) / SubBuckets) + 1;
        long sub = ((index - LinearBuckets) % SubBuckets) + SubBuckets;
        return ((sub + 1) << level) - 1;
    }
}
