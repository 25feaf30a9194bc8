using System.CommandLine;
using System.Text.Json;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// The options of a throughput scenario's time line (<c>fanout</c>, <c>rpc</c>): <c>--seconds</c> measured
/// after <c>--warmup</c>, the publishers' <c>--max-lead</c>, the <c>--topic</c>, <c>--grace</c> for what is in
/// flight at the end, and <c>--repeat</c>.
/// </summary>
internal sealed record WindowOptions(double Seconds, double Warmup, long MaxLead, string Topic, double Grace, int Repeat)
{
    public static readonly Option<double> SecondsOption = OptionKinds.Seconds("seconds", 10, 0.1, 24 * 3600, "measured window");

    public static readonly Option<double> WarmupOption = OptionKinds.Seconds("warmup", 5, 0, 24 * 3600, "warm-up before the window (5 s: the JIT's tier-1 code is in by then)");

    public static readonly Option<int> MaxLeadOption = OptionKinds.Integer("max-lead", 10_000, 1, int.MaxValue,
        "most messages the publisher may be ahead of the slowest subscriber; keep it under the server's per-subscriber queue limit");

    public static readonly Option<double> GraceOption = OptionKinds.Seconds("grace", 3, 0, 24 * 3600, "after the window: time allowed to deliver what is in flight");

    /// <summary>The window's options with the scenario's <paramref name="topic"/>.</summary>
    public static Option[] Options(Option<string> topic) => [SecondsOption, WarmupOption, MaxLeadOption, topic, GraceOption, ScenarioOptions.Repeat];

    public static WindowOptions Read(ParseResult options, Option<string> topic) => new(
        options.GetValue(SecondsOption),
        options.GetValue(WarmupOption),
        options.GetValue(MaxLeadOption),
        options.GetRequiredValue(topic),
        options.GetValue(GraceOption),
        options.GetValue(ScenarioOptions.Repeat));

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
