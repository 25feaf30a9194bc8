using System.Diagnostics;
using System.Text.Json;
using HdrHistogram;

namespace Herald.LoadTest.Reporting;

/// <summary>
/// Latencies in microseconds, recorded into an HdrHistogram (1 us to 1 hour, 3 significant digits) so
/// percentiles are exact to 0.1 % whatever the range. Record from one thread per instance (or
/// <see cref="Add"/> per-thread instances together at the end). Callers measure from the <b>intended</b>
/// send time where there is a schedule, so a stalled sender cannot hide its own stall (no coordinated omission).
/// </summary>
internal sealed class Latencies
{
    private static readonly double TicksPerMicrosecond = Stopwatch.Frequency / 1e6;

    private readonly LongHistogram _histogram = new(1, 3_600_000_000, 3);

    public long Count => _histogram.TotalCount;

    /// <summary>Records the time from <paramref name="startTimestamp"/> to <paramref name="endTimestamp"/> (<see cref="Stopwatch"/> ticks).</summary>
    public void RecordTicks(long startTimestamp, long endTimestamp) => RecordMicroseconds((endTimestamp - startTimestamp) / TicksPerMicrosecond);

    public void RecordMicroseconds(double microseconds) => _histogram.RecordValue(Math.Clamp((long)Math.Round(microseconds), 1, _histogram.HighestTrackableValue));

    public void Add(Latencies other) => _histogram.Add(other._histogram);

    public void Reset() => _histogram.Reset();

    public double Mean => Count == 0 ? double.NaN : _histogram.GetMean();

    public double StdDev => Count == 0 ? double.NaN : _histogram.GetStdDeviation();

    public double Max => Count == 0 ? double.NaN : _histogram.GetMaxValue();

    public double Percentile(double percentile) => Count == 0 ? double.NaN : _histogram.GetValueAtPercentile(percentile);

    /// <summary>One line: mean, median, stdev, p90, p99, p99.9 and max, in ms or us as fits.</summary>
    public string Describe()
    {
        if (Count == 0)
        {
            return "no samples";
        }

        bool ms = Percentile(50) >= 1000;
        string F(double us) => ms ? $"{us / 1000:F2} ms" : $"{us:F0} us";
        return $"mean {F(Mean)}, median {F(Percentile(50))}, stdev {F(StdDev)}, p90 {F(Percentile(90))}, p99 {F(Percentile(99))}, p99.9 {F(Percentile(99.9))}, max {F(Max)} ({Count:N0} samples)";
    }

    /// <summary>Writes <c>"name": { count, meanUs, medianUs, stdevUs, p90Us, p99Us, p999Us, maxUs }</c>.</summary>
    public void Write(Utf8JsonWriter json, string name)
    {
        json.WriteStartObject(name);
        json.WriteNumber("count", Count);
        if (Count > 0)
        {
            json.WriteNumber("meanUs", Math.Round(Mean, 1));
            json.WriteNumber("medianUs", Percentile(50));
            json.WriteNumber("stdevUs", Math.Round(StdDev, 1));
            json.WriteNumber("p90Us", Percentile(90));
            json.WriteNumber("p99Us", Percentile(99));
            json.WriteNumber("p999Us", Percentile(99.9));
            json.WriteNumber("maxUs", Max);
        }

        json.WriteEndObject();
    }
}
