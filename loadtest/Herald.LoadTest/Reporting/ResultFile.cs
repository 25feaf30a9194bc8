using System.Text.Json;

namespace Herald.LoadTest.Reporting;

/// <summary>
/// Writes a run's result as JSON (<c>--out result.json</c>) for comparing runs: the scenario, when it ran,
/// the command line and source commit that ran it (<see cref="RunStamp"/>), where it ran (machine, with the
/// load average before and after), then the scenario's own sections.
/// </summary>
internal static class ResultFile
{
    public static void Write(string path, string scenario, Action<Utf8JsonWriter> writeBody)
    {
        ArgumentNullException.ThrowIfNull(writeBody);
        string? directory = Path.GetDirectoryName(Path.GetFullPath(path));
        if (directory is not null)
        {
            Directory.CreateDirectory(directory);
        }

        using FileStream file = File.Create(path);
        using var json = new Utf8JsonWriter(file, new JsonWriterOptions { Indented = true });
        json.WriteStartObject();
        RunStamp? run = RunStamp.Current;
        json.WriteString("scenario", scenario);
        if (run is not null)
        {
            json.WriteString("startedUtc", run.StartedUtc);
        }

        json.WriteString("finishedUtc", DateTimeOffset.UtcNow);
        json.WriteString("commandLine", run?.CommandLine);
        json.WriteString("sourceCommit", RunStamp.SourceCommit);
        json.WriteBoolean("sourceDirty", RunStamp.SourceDirty);
        MachineInfo.Write(json, run?.LoadBefore);
        writeBody(json);
        json.WriteEndObject();
    }

    /// <summary>Writes <c>"name": [ "a", "b", ... ]</c>.</summary>
    public static void WriteStrings(Utf8JsonWriter json, string name, IEnumerable<string> values)
    {
        json.WriteStartArray(name);
        foreach (string value in values)
        {
            json.WriteStringValue(value);
        }

        json.WriteEndArray();
    }

    /// <summary>Writes <c>"name": [ 1, 2.5, ... ]</c>.</summary>
    public static void WriteNumbers(Utf8JsonWriter json, string name, IEnumerable<double> values)
    {
        json.WriteStartArray(name);
        foreach (double value in values)
        {
            json.WriteNumberValue(value);
        }

        json.WriteEndArray();
    }

    /// <summary>Writes <c>"name": value</c>, or <c>"name": null</c> when it is unknown (null, NaN or infinite).</summary>
    public static void WriteNumberOrNull(Utf8JsonWriter json, string name, double? value)
    {
        if (value is { } v && double.IsFinite(v))
        {
            json.WriteNumber(name, v);
        }
        else
        {
            json.WriteNull(name);
        }
    }

    /// <inheritdoc cref="WriteNumberOrNull(Utf8JsonWriter, string, double?)"/>
    public static void WriteNumberOrNull(Utf8JsonWriter json, string name, long? value)
    {
        if (value is { } v)
        {
            json.WriteNumber(name, v);
        }
        else
        {
            json.WriteNull(name);
        }
    }
}
