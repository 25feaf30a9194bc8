using System.CommandLine;
using System.CommandLine.Parsing;
using System.Globalization;

namespace Herald.LoadTest;

/// <summary>
/// The kinds of option the load tool's commands take, each typed, with its default (shown by <c>--help</c>), its
/// range or its allowed values, and one message for a bad value that names the option. Numbers are read in the
/// invariant culture, as the scripts write them. A scenario declares its options with these once, and options
/// that several commands share are declared once where they belong (<see cref="Targets.TargetCommandOptions"/>,
/// <see cref="Scenarios.ScenarioOptions"/>) and added to each command that takes them.
/// </summary>
internal static class OptionKinds
{
    /// <summary>An integer from <paramref name="min"/> to <paramref name="max"/>.</summary>
    public static Option<int> Integer(string name, int defaultValue, int min, int max, string description) =>
        new("--" + name)
        {
            Description = description,
            HelpName = "N",
            DefaultValueFactory = _ => defaultValue,
            CustomParser = result => ParseInteger(result, name, min, max) ?? defaultValue,
        };

    /// <summary>An integer from <paramref name="min"/> to <paramref name="max"/>, null when not given.</summary>
    public static Option<int?> OptionalInteger(string name, int min, int max, string description) =>
        new("--" + name) { Description = description, HelpName = "N", CustomParser = result => ParseInteger(result, name, min, max) };

    /// <summary>A number of seconds (or another decimal quantity) from <paramref name="min"/> to <paramref name="max"/>.</summary>
    public static Option<double> Seconds(string name, double defaultValue, double min, double max, string description) =>
        new("--" + name)
        {
            Description = description,
            HelpName = "S",
            DefaultValueFactory = _ => defaultValue,
            CustomParser = result => ParseSeconds(result, name, min, max) ?? defaultValue,
        };

    /// <summary>A number of seconds (or another decimal quantity), null when not given.</summary>
    public static Option<double?> OptionalSeconds(string name, double min, double max, string description) =>
        new("--" + name) { Description = description, HelpName = "S", CustomParser = result => ParseSeconds(result, name, min, max) };

    /// <summary>A string, with a default.</summary>
    public static Option<string> Text(string name, string defaultValue, string helpName, string description) =>
        new("--" + name) { Description = description, HelpName = helpName, DefaultValueFactory = _ => defaultValue };

    /// <summary>A string, null when not given.</summary>
    public static Option<string?> OptionalText(string name, string helpName, string description) =>
        new("--" + name) { Description = description, HelpName = helpName };

    /// <summary>One of <paramref name="allowed"/>, which <c>[suggest]</c> completes and help lists.</summary>
    public static Option<string> Choice(string name, string defaultValue, string[] allowed, string description)
    {
        Option<string> option = new("--" + name) { Description = description, HelpName = string.Join('|', allowed), DefaultValueFactory = _ => defaultValue };
        option.CompletionSources.Add(allowed);
        option.Validators.Add(result =>
        {
            if (result.Tokens is [.., { Value: var text }] && Array.IndexOf(allowed, text) < 0)
            {
                result.AddError($"--{name} must be one of {string.Join(", ", allowed)}, got '{text}'.");
            }
        });
        return option;
    }

    /// <summary><c>--name</c>, <c>--name true</c> or <c>--name false</c>.</summary>
    public static Option<bool> Flag(string name, string description) => new("--" + name) { Description = description };

    /// <summary>Whether the command line names <paramref name="option"/> (a default does not count).</summary>
    public static bool Given(this ParseResult parsed, Option option) => parsed.GetResult(option) is { Implicit: false };

    private static int? ParseInteger(ArgumentResult result, string name, int min, int max)
    {
        if (result.Tokens.Count == 0)
        {
            return null; // the option's arity reports the missing value
        }

        string text = result.Tokens[^1].Value;
        if (int.TryParse(text, NumberStyles.Integer, CultureInfo.InvariantCulture, out int value) && value >= min && value <= max)
        {
            return value;
        }

        result.AddError(string.Create(CultureInfo.InvariantCulture, $"--{name} must be an integer from {min} to {max}, got '{text}'."));
        return null;
    }

    private static double? ParseSeconds(ArgumentResult result, string name, double min, double max)
    {
        if (result.Tokens.Count == 0)
        {
            return null; // the option's arity reports the missing value
        }

        string text = result.Tokens[^1].Value;
        if (double.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out double value) && value >= min && value <= max)
        {
            return value;
        }

        result.AddError(string.Create(CultureInfo.InvariantCulture, $"--{name} must be a number from {min} to {max}, got '{text}'."));
        return null;
    }
}
