using System.CommandLine;
using System.CommandLine.Parsing;
using System.Globalization;
using System.Numerics;

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
    private static readonly NumberSyntax Integers = new(NumberStyles.Integer, "N", "an integer");

    private static readonly NumberSyntax Decimals = new(NumberStyles.Float, "S", "a number");

    /// <summary>An integer from <paramref name="min"/> to <paramref name="max"/>.</summary>
    public static Option<int> Integer(string name, int defaultValue, int min, int max, string description) =>
        Number(name, defaultValue, min, max, Integers, description);

    /// <summary>An integer from <paramref name="min"/> to <paramref name="max"/>, null when not given.</summary>
    public static Option<int?> OptionalInteger(string name, int min, int max, string description) =>
        OptionalNumber(name, min, max, Integers, description);

    /// <summary>A number of seconds (or another decimal quantity) from <paramref name="min"/> to <paramref name="max"/>.</summary>
    public static Option<double> Seconds(string name, double defaultValue, double min, double max, string description) =>
        Number(name, defaultValue, min, max, Decimals, description);

    /// <summary>A number of seconds (or another decimal quantity), null when not given.</summary>
    public static Option<double?> OptionalSeconds(string name, double min, double max, string description) =>
        OptionalNumber(name, min, max, Decimals, description);

    /// <summary>A string, with a default.</summary>
    public static Option<string> Text(string name, string defaultValue, string helpName, string description) =>
        new("--" + name) { Description = description, HelpName = helpName, DefaultValueFactory = _ => defaultValue };

    /// <summary>A string, null when not given.</summary>
    public static Option<string?> OptionalText(string name, string helpName, string description) =>
        new("--" + name) { Description = description, HelpName = helpName };

    /// <summary>One of <paramref name="allowed"/>.</summary>
    public static Option<string> Choice(string name, string defaultValue, string[] allowed, string description) =>
        AcceptOnly(new Option<string>("--" + name) { Description = description, DefaultValueFactory = _ => defaultValue }, name, allowed);

    /// <summary>One of <paramref name="allowed"/>, null when not given.</summary>
    public static Option<string?> OptionalChoice(string name, string[] allowed, string description) =>
        AcceptOnly(new Option<string?>("--" + name) { Description = description }, name, allowed);

    /// <summary><c>--name</c>, <c>--name true</c> or <c>--name false</c>.</summary>
    public static Option<bool> Flag(string name, string description) => new("--" + name) { Description = description };

    /// <summary>Whether the command line names <paramref name="option"/> (a default does not count).</summary>
    public static bool Given(this ParseResult parsed, Option option) => parsed.GetResult(option) is { Implicit: false };

    private static Option<T> Number<T>(string name, T defaultValue, T min, T max, NumberSyntax syntax, string description)
        where T : struct, INumber<T> =>
        new("--" + name)
        {
            Description = description,
            HelpName = syntax.HelpName,
            DefaultValueFactory = _ => defaultValue,
            CustomParser = result => ParseNumber(result, name, min, max, syntax) ?? defaultValue,
        };

    private static Option<T?> OptionalNumber<T>(string name, T min, T max, NumberSyntax syntax, string description)
        where T : struct, INumber<T> =>
        new("--" + name) { Description = description, HelpName = syntax.HelpName, CustomParser = result => ParseNumber(result, name, min, max, syntax) };

    /// <summary>The option's value as a <typeparamref name="T"/> in range, or null with the error added.</summary>
    private static T? ParseNumber<T>(ArgumentResult result, string name, T min, T max, NumberSyntax syntax)
        where T : struct, INumber<T>
    {
        if (result.Tokens.Count == 0)
        {
            return null; // the option's arity reports the missing value
        }

        string text = result.Tokens[^1].Value;
        if (T.TryParse(text, syntax.Style, CultureInfo.InvariantCulture, out T value) && value >= min && value <= max)
        {
            return value;
        }

        result.AddError(string.Create(CultureInfo.InvariantCulture, $"--{name} must be {syntax.Kind} from {min} to {max}, got '{text}'."));
        return null;
    }

    /// <summary>Refuses a value not among <paramref name="allowed"/>, which <c>[suggest]</c> completes and help lists.</summary>
    private static T AcceptOnly<T>(T option, string name, string[] allowed)
        where T : Option
    {
        option.HelpName = string.Join('|', allowed);
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

    /// <summary>How a kind of number is written, named in help and in the message for a bad value.</summary>
    private sealed record NumberSyntax(NumberStyles Style, string HelpName, string Kind);
}
