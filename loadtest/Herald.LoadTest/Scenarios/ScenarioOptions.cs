using System.CommandLine;

namespace Herald.LoadTest.Scenarios;

/// <summary>Options several scenarios take with one meaning, declared once and added to each.</summary>
internal static class ScenarioOptions
{
    public static readonly Option<string?> Out = OptionKinds.OptionalText("out", "FILE", "also write the result as JSON");

    public static readonly Option<int> Repeat = OptionKinds.Integer("repeat", 1, 1, 1000, "repetitions (fresh connections each); headlines are the median");

    /// <summary><c>--topic</c>, with the scenario's own default.</summary>
    public static Option<string> Topic(string defaultTopic) => OptionKinds.Text("topic", defaultTopic, "NAME", "topic");
}
