using System.Globalization;

namespace Herald.Cli;

/// <summary>Durations on the command line: <c>500ms</c>, <c>5s</c>, <c>2m</c>, <c>1h</c>, or a number of seconds.</summary>
internal static class Durations
{
    public static bool TryParse(string text, out TimeSpan value)
    {
        value = default;
        (string number, double scale) = text switch
        {
            _ when text.EndsWith("ms", StringComparison.Ordinal) => (text[..^2], 0.001),
            _ when text.EndsWith('s') => (text[..^1], 1),
            _ when text.EndsWith('m') => (text[..^1], 60),
            _ when text.EndsWith('h') => (text[..^1], 3600),
            _ => (text, 1),
        };
        if (!double.TryParse(number, NumberStyles.AllowDecimalPoint, CultureInfo.InvariantCulture, out double amount) || amount <= 0 || amount * scale > int.MaxValue / 1000)
        {
            return false;
        }

        value = TimeSpan.FromSeconds(amount * scale);
        return true;
    }

    public static string Format(TimeSpan value) =>
        value.TotalSeconds >= 1 ? value.TotalSeconds.ToString("0.###", CultureInfo.InvariantCulture) + "s"
        : value.TotalMilliseconds.ToString("0.###", CultureInfo.InvariantCulture) + "ms";
}
