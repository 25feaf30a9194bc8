using System.Diagnostics;
using System.Text;
using System.Text.Json;
using Herald.LoadTest.Reporting;

namespace Herald.LoadTest.Tests;

/// <summary>
/// The figures the reports print and save, from known samples: the percentiles and mean of
/// <see cref="Latencies"/>, and the median and spread of a <see cref="Headline"/> over repetitions.
/// </summary>
public class ReportTests
{
    [Fact]
    public void Latencies_of_1_to_1000_us_have_the_nearest_rank_percentiles()
    {
        var latencies = new Latencies();
        foreach (int us in Enumerable.Range(1, 1000).Reverse()) // order does not matter
        {
            latencies.RecordMicroseconds(us);
        }

        Assert.Equal(1000, latencies.Count);
        Assert.Equal(500, latencies.Percentile(50));
        Assert.Equal(900, latencies.Percentile(90));
        Assert.Equal(990, latencies.Percentile(99));
        Assert.Equal(999, latencies.Percentile(99.9));
        Assert.Equal(1000, latencies.Max);
        Assert.Equal(500.5, latencies.Mean, 6);
    }

    [Fact]
    public void A_skewed_sample_puts_p99_in_the_tail_and_the_median_in_the_body()
    {
        var latencies = new Latencies();
        for (int i = 0; i < 98; i++)
        {
            latencies.RecordMicroseconds(100);
        }

        latencies.RecordMicroseconds(5000);
        latencies.RecordMicroseconds(7000);

        Assert.Equal(100, latencies.Percentile(50));
        Assert.Equal(5000, latencies.Percentile(99), 0.001 * 5000); // 3 significant digits
        Assert.Equal(7000, latencies.Max, 0.001 * 7000);
        Assert.Equal(((98 * 100) + 5000 + 7000) / 100.0, latencies.Mean, 0.001 * 220);
    }

    [Fact]
    public void Latencies_from_stopwatch_ticks_are_microseconds_and_add_up_across_instances()
    {
        var first = new Latencies();
        var second = new Latencies();
        first.RecordTicks(0, Stopwatch.Frequency / 1000);     // 1 ms
        second.RecordTicks(0, 3 * Stopwatch.Frequency / 1000); // 3 ms

        first.Add(second);

        Assert.Equal(2, first.Count);
        Assert.Equal(1000, first.Percentile(50));
        Assert.Equal(3000, first.Max, 3.0); // 3 significant digits
        Assert.Equal(2000, first.Mean, 3.0);
    }

    [Fact]
    public void Latencies_write_their_percentiles_and_nothing_but_the_count_when_empty()
    {
        var latencies = new Latencies();
        foreach (int us in Enumerable.Range(1, 100))
        {
            latencies.RecordMicroseconds(us);
        }

        JsonElement written = WriteJson(json => latencies.Write(json, "latency")).GetProperty("latency");
        JsonElement empty = WriteJson(json => new Latencies().Write(json, "latency")).GetProperty("latency");

        Assert.Equal(100, written.GetProperty("count").GetInt64());
        Assert.Equal(50, written.GetProperty("medianUs").GetDouble());
        Assert.Equal(90, written.GetProperty("p90Us").GetDouble());
        Assert.Equal(99, written.GetProperty("p99Us").GetDouble());
        Assert.Equal(100, written.GetProperty("maxUs").GetDouble());
        Assert.Equal(50.5, written.GetProperty("meanUs").GetDouble());
        Assert.Equal(0, empty.GetProperty("count").GetInt64());
        Assert.False(empty.TryGetProperty("medianUs", out _));
        Assert.True(double.IsNaN(new Latencies().Percentile(50)));
    }

    [Theory]
    [InlineData(new[] { 30.0, 10, 20 }, 20, 10, 30)]
    [InlineData(new[] { 40.0, 10, 30, 20 }, 25, 10, 40)]
    [InlineData(new[] { 7.0 }, 7, 7, 7)]
    public void A_headline_is_the_median_of_its_repetitions_with_their_range(double[] values, double median, double min, double max)
    {
        Headline h = Headline.Of("calls/s", "calls/s", higherIsBetter: true, values);

        Assert.Equal(median, h.Value);
        Assert.Equal(min, h.Min);
        Assert.Equal(max, h.Max);
        Assert.Equal(values.Length, h.Repetitions);
        Assert.Equal(values.Length < 2 ? 0 : (max - min) / median, h.Spread);
    }

    [Fact]
    public void A_headline_without_repetitions_is_saved_as_null_and_read_back_as_not_a_number()
    {
        Headline[] headlines =
        [
            Headline.Of("p99 latency us", "us", higherIsBetter: false, []),
            Headline.Of("calls/s", "calls/s", higherIsBetter: true, [1.0, 3.0]),
        ];

        JsonElement root = WriteJson(json => Headline.WriteAll(json, headlines));
        List<Headline> read = Headline.ReadAll(root);

        Assert.Equal(JsonValueKind.Null, root.GetProperty("headlines")[0].GetProperty("value").ValueKind);
        Assert.True(double.IsNaN(read[0].Value));
        Assert.Equal(0, read[0].Repetitions);
        Assert.False(read[0].HigherIsBetter);
        Assert.Equal(headlines[1], read[1]);
    }

    private static JsonElement WriteJson(Action<Utf8JsonWriter> write)
    {
        using var stream = new MemoryStream();
        using (var json = new Utf8JsonWriter(stream))
        {
            json.WriteStartObject();
            write(json);
            json.WriteEndObject();
        }

        return JsonDocument.Parse(Encoding.UTF8.GetString(stream.ToArray())).RootElement.Clone();
    }
}
