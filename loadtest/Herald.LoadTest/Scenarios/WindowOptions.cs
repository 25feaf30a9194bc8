using System.Text.Json;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// The options of a throughput scenario's time line (<c>fanout</c>, <c>rpc</c>): <c>--seconds</c> measured
/// after <c>--warmup</c>, the publishers' <c>--max-lead</c>, the <c>--topic</c>, <c>--grace</c> for what is in
/// flight at the end, and <c>--repeat</c>.
/// </summary>
internal sealed record WindowOptions(double Seconds, double Warmup, long MaxLead, string Topic, double Grace, int Repeat)
{
    public static WindowOptions Read(CommandLine options, string topic) => new(
        options.Seconds("seconds", 10, 0.1),
        options.Seconds("warmup", 5, 0),
        options.Int("max-lead", 10_000, 1),
        options.String("topic", topic),
        options.Seconds("grace", 3, 0),
        ScenarioClients.Repeat(options));

    /// <summary>Writes them into the result file's <c>"parameters"</c>.</summary>
    public void Write(Utf8JsonWriter json)
    {
        json.WriteNumber("seconds", Seconds);
        json.WriteNumber("warmupSeconds", Warmup);
        json.WriteNumber("maxLead", MaxLead);
        json.WriteString("topic", Topic);
        json.WriteNumber("graceSeconds", Grace);
        json.WriteNumber("repeat", Repeat);
    }
}
