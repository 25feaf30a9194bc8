using System.Globalization;
using System.Text.Json;
using Herald.Protocol;

namespace Herald.LoadTest.Reporting;

/// <summary>The parts of a result every scenario prints and saves the same way.</summary>
internal static class Outcome
{
    public static void PrintFailures(IEnumerable<string> failures)
    {
        foreach (string failure in failures)
        {
            Console.WriteLine($"  FAILED              : {failure}");
        }
    }

    public static string FormatLimits(IReadOnlyDictionary<string, ulong> limits) =>
        limits.Count == 0 ? "(none)" : string.Join(", ", limits.Select(l => string.Create(CultureInfo.InvariantCulture, $"{l.Key}={l.Value}")));

    public static void WriteBroker(Utf8JsonWriter json, WelcomeFrame welcome)
    {
        json.WriteStartObject("broker");
        json.WriteString("serverName", welcome.ServerName);
        json.WriteNumber("version", welcome.Version);
        json.WriteStartObject("limits");
        foreach (KeyValuePair<string, ulong> limit in welcome.Limits)
        {
            json.WriteNumber(limit.Key, limit.Value);
        }

        json.WriteEndObject();
        json.WriteEndObject();
    }

    /// <summary>Writes ok, interrupted, the failures and, with a <paramref name="log"/>, the run's events.</summary>
    public static void Write(Utf8JsonWriter json, IReadOnlyCollection<string> failures, bool interrupted, RunLog? log)
    {
        json.WriteBoolean("ok", failures.Count == 0 && !interrupted);
        json.WriteBoolean("interrupted", interrupted);
        ResultFile.WriteStrings(json, "failures", failures);
        if (log is null)
        {
            return;
        }

        json.WriteNumber("eventCount", log.Count);
        ResultFile.WriteStrings(json, "events", log.Lines);
    }
}
