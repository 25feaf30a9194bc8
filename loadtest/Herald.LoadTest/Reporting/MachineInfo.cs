using System.Globalization;
using System.Runtime;
using System.Runtime.InteropServices;
using System.Text.Json;

namespace Herald.LoadTest.Reporting;

/// <summary>Where a result was measured: printed and saved with every result, since on a small machine
/// the load tool and the broker compete for the same cores. The CPU model, memory and load average come
/// from <c>/proc</c> (Linux; left out elsewhere), so a table built from result files can say what machine,
/// and how busy, each figure had.</summary>
internal static class MachineInfo
{
    public static string Describe() =>
        $"{Environment.ProcessorCount} logical cores{(CpuModel() is { } model ? $" ({model})" : "")}, {RuntimeInformation.OSDescription} ({RuntimeInformation.OSArchitecture}), " +
        $"{RuntimeInformation.FrameworkDescription}, {(GCSettings.IsServerGC ? "server" : "workstation")} GC (load tool)";

    /// <summary>Writes <c>"machine": { ... }</c>, with the load average when the run started (<paramref name="loadBefore"/>) and now.</summary>
    public static void Write(Utf8JsonWriter json, double[]? loadBefore)
    {
        json.WriteStartObject("machine");
        json.WriteNumber("processorCount", Environment.ProcessorCount);
        json.WriteString("cpuModel", CpuModel());
        ResultFile.WriteNumberOrNull(json, "memoryBytes", MemoryBytes());
        json.WriteString("os", RuntimeInformation.OSDescription);
        json.WriteString("architecture", RuntimeInformation.OSArchitecture.ToString());
        json.WriteString("runtime", RuntimeInformation.FrameworkDescription);
        json.WriteString("machineName", Environment.MachineName);
        json.WriteBoolean("serverGc", GCSettings.IsServerGC);
        json.WriteBoolean("inlineSocketCompletions", Environment.GetEnvironmentVariable("DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS") == "1");
        WriteLoad(json, "loadAverageBefore", loadBefore);
        WriteLoad(json, "loadAverageAfter", LoadAverage());
        json.WriteEndObject();
    }

    /// <summary>The 1, 5 and 15 minute load averages (<c>/proc/loadavg</c>), or null when unknown.</summary>
    public static double[]? LoadAverage()
    {
        string[]? fields = ProcLine("/proc/loadavg", "")?.Split(' ', StringSplitOptions.RemoveEmptyEntries);
        return fields is { Length: >= 3 }
            && double.TryParse(fields[0], NumberStyles.Float, CultureInfo.InvariantCulture, out double one)
            && double.TryParse(fields[1], NumberStyles.Float, CultureInfo.InvariantCulture, out double five)
            && double.TryParse(fields[2], NumberStyles.Float, CultureInfo.InvariantCulture, out double fifteen)
            ? [one, five, fifteen] : null;
    }

    /// <summary>The first CPU's model name (<c>/proc/cpuinfo</c>), e.g. <c>AMD EPYC 7763 64-Core Processor</c>.</summary>
    private static string? CpuModel() => ProcLine("/proc/cpuinfo", "model name")?.Split(':', 2) is [_, var model] ? model.Trim() : null;

    /// <summary>The machine's memory in bytes (<c>MemTotal</c> of <c>/proc/meminfo</c>, given there in KiB).</summary>
    private static long? MemoryBytes() =>
        ProcLine("/proc/meminfo", "MemTotal:")?.Split(' ', StringSplitOptions.RemoveEmptyEntries) is [_, var kib, ..]
        && long.TryParse(kib, NumberStyles.None, CultureInfo.InvariantCulture, out long value) ? value * 1024 : null;

    /// <summary>The first line of <paramref name="path"/> that starts with <paramref name="prefix"/>, or null (no such file or line).</summary>
    private static string? ProcLine(string path, string prefix)
    {
        try
        {
            return File.ReadLines(path).FirstOrDefault(line => line.StartsWith(prefix, StringComparison.Ordinal));
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return null;
        }
    }

    private static void WriteLoad(Utf8JsonWriter json, string name, double[]? load)
    {
        if (load is null)
        {
            json.WriteNull(name);
        }
        else
        {
            ResultFile.WriteNumbers(json, name, load);
        }
    }
}
