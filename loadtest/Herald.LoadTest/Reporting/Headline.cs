using System.Text.Json;

namespace Herald.LoadTest.Reporting;

/// <summary>
/// A scenario's main figures, written into every result file under <c>"headlines"</c> so that
/// <c>compare</c> (and anyone reading the JSON) finds them without knowing the scenario:
/// e.g. <c>deliveries/s</c> (higher is better) or <c>p50 latency us</c> (lower is better).
/// With repetitions, <see cref="Value"/> is the median and <see cref="Min"/>/<see cref="Max"/> the spread.
/// </summary>
internal sealed record Headline(string Name, string Unit, bool HigherIsBetter, double Value, double Min, double Max, int Repetitions)
{
    public static Headline Of(string name, string unit, bool higherIsBetter, IReadOnlyList<double> values)
    {
        if (values.Count == 0)
        {
            return new Headline(name, unit, higherIsBetter, double.NaN, double.NaN, double.NaN, 0);
        }

        double[] sorted = [.. values.Order()];
        double median = sorted.Length % 2 == 1 ? sorted[sorted.Length / 2] : (sorted[(sorted.Length / 2) - 1] + sorted[sorted.Length / 2]) / 2;
        return new Headline(name, unit, higherIsBetter, median, sorted[0], sorted[^1], sorted.Length);
    }

    /// <summary>(max - min) / median, the spread of the repetitions; 0 with one.</summary>
    public double Spread => Value == 0 || Repetitions < 2 ? 0 : (Max - Min) / Value;

    public static void WriteAll(Utf8JsonWriter json, IEnumerable<Headline> headlines)
    {
        json.WriteStartArray("headlines");
        foreach (Headline h in headlines)
        {
            json.WriteStartObject();
            json.WriteString("name", h.Name);
            json.WriteString("unit", h.Unit);
            json.WriteBoolean("higherIsBetter", h.HigherIsBetter);
            ResultFile.WriteNumberOrNull(json, "value", h.Value);
            ResultFile.WriteNumberOrNull(json, "min", h.Min);
            ResultFile.WriteNumberOrNull(json, "max", h.Max);
            json.WriteNumber("repetitions", h.Repetitions);
            json.WriteEndObject();
        }

        json.WriteEndArray();
    }

    public static List<Headline> ReadAll(JsonElement root)
    {
        List<Headline> all = [];
        if (!root.TryGetProperty("headlines", out JsonElement array))
        {
            return all;
        }

        foreach (JsonElement h in array.EnumerateArray())
        {
            all.Add(new Headline(
                h.GetProperty("name").GetString() ?? "",
                h.GetProperty("unit").GetString() ?? "",
                h.GetProperty("higherIsBetter").GetBoolean(),
                ReadNumber(h, "value"),
                ReadNumber(h, "min"),
                ReadNumber(h, "max"),
                h.GetProperty("repetitions").GetInt32()));
        }

        return all;
    }

    private static double ReadNumber(JsonElement h, string name) =>
        h.GetProperty(name).ValueKind == JsonValueKind.Number ? h.GetProperty(name).GetDouble() : double.NaN;
}
