using System.Globalization;
using System.Text.Json;
using ScottPlot;

namespace Herald.LoadTest.Scenarios;

/// <summary>One target's broadcast results: the largest M on time at each period P it was searched at.</summary>
internal sealed record BroadcastSeries(string Label, IReadOnlyList<BroadcastPoint> Points);

/// <summary>The largest M with every burst on time (0: none was) at period P, in seconds.</summary>
internal readonly record struct BroadcastPoint(double PeriodSeconds, double LargestGood);

/// <summary>
/// The broadcast chart: M (largest number of subscribers with every burst on time) against P (seconds
/// between bursts), one line per target, drawn with ScottPlot and saved as SVG and PNG side by side.
/// </summary>
internal static class BroadcastChart
{
    private const int Width = 900;
    private const int Height = 560;

    /// <summary>Writes <c>path.svg</c> and <c>path.png</c> (the directory is created); returns the two paths.</summary>
    public static (string Svg, string Png) Write(string pathWithoutExtension, IReadOnlyList<BroadcastSeries> series)
    {
        ArgumentNullException.ThrowIfNull(series);
        string? directory = Path.GetDirectoryName(Path.GetFullPath(pathWithoutExtension));
        if (directory is not null)
        {
            Directory.CreateDirectory(directory);
        }

        var plot = new Plot();
        foreach (BroadcastSeries s in series)
        {
            BroadcastPoint[] points = [.. s.Points.OrderBy(p => p.PeriodSeconds)];
            var scatter = plot.Add.Scatter(points.Select(p => p.PeriodSeconds).ToArray(), points.Select(p => p.LargestGood).ToArray());
            scatter.LegendText = s.Label;
            scatter.MarkerSize = 8;
            scatter.LineWidth = 2;
        }

        plot.Title("broadcast: largest M with every burst on time");
        plot.XLabel("P: seconds between bursts");
        plot.YLabel("M: subscribers");
        plot.ShowLegend(Alignment.UpperLeft);
        // Both axes from 0, so lines of different targets compare by height and slope at a glance.
        double maxM = series.SelectMany(s => s.Points).Select(p => p.LargestGood).DefaultIfEmpty(0).Max();
        double maxP = series.SelectMany(s => s.Points).Select(p => p.PeriodSeconds).DefaultIfEmpty(1).Max();
        plot.Axes.SetLimitsX(0, maxP * 1.1);
        plot.Axes.SetLimitsY(0, Math.Max(maxM, 1) * 1.15);
        string svg = pathWithoutExtension + ".svg";
        string png = pathWithoutExtension + ".png";
        plot.SaveSvg(svg, Width, Height);
        plot.SavePng(png, Width, Height);
        return (svg, png);
    }

    /// <summary>
    /// Reads one broadcast result file (<c>broadcast --out</c>): the target label and, per period, the
    /// largest good M (the median over repetitions, as in its headlines).
    /// </summary>
    /// <exception cref="UsageException">The file is missing or not a broadcast result.</exception>
    public static BroadcastSeries Read(string path)
    {
        JsonElement root;
        try
        {
            using JsonDocument document = JsonDocument.Parse(File.ReadAllText(path));
            root = document.RootElement.Clone();
        }
        catch (Exception e) when (e is IOException or JsonException or UnauthorizedAccessException)
        {
            throw new UsageException($"cannot read '{path}': {e.Message}");
        }

        if (!root.TryGetProperty("scenario", out JsonElement scenario) || scenario.GetString() != "broadcast"
            || !root.TryGetProperty("periods", out JsonElement periods) || periods.ValueKind != JsonValueKind.Array)
        {
            throw new UsageException($"'{path}' is not a broadcast result with periods (written by broadcast --out).");
        }

        string label = root.TryGetProperty("target", out JsonElement target) && target.TryGetProperty("label", out JsonElement l)
            ? l.GetString() ?? Path.GetFileNameWithoutExtension(path)
            : Path.GetFileNameWithoutExtension(path);
        var points = new List<BroadcastPoint>();
        foreach (JsonElement period in periods.EnumerateArray())
        {
            JsonElement value = period.GetProperty("largestGoodMedian");
            points.Add(new BroadcastPoint(
                period.GetProperty("periodSeconds").GetDouble(),
                value.ValueKind == JsonValueKind.Number ? value.GetDouble() : 0));
        }

        return new BroadcastSeries(label, points);
    }

    /// <summary>"0.5 s: 12,000; 1 s: 25,000" for the console.</summary>
    public static string Describe(BroadcastSeries series) =>
        string.Join("; ", series.Points.Select(p => string.Create(CultureInfo.InvariantCulture, $"{p.PeriodSeconds} s: {p.LargestGood:N0}")));
}
