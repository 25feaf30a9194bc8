using System.Diagnostics;
using System.Text.Json;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Reporting;

/// <summary>What every scenario prints and saves about the target it ran against, and the server's memory.</summary>
internal static class TargetReport
{
    /// <summary>The lines printed before a run: machine, target, server version and command line.</summary>
    public static void Print(ITarget target, TextWriter output)
    {
        output.WriteLine($"machine: {MachineInfo.Describe()}");
        output.WriteLine($"target:  {target.Label}: {target.ServerDescription}");
        if (target.ServerCommandLine is { } command)
        {
            output.WriteLine($"server:  pid {target.ServerProcess?.Id.ToString(System.Globalization.CultureInfo.InvariantCulture) ?? "?"}: {command}");
        }
    }

    /// <summary>Writes <c>"target": { name, transport, label, server, commandLine, pid }</c>.</summary>
    public static void Write(Utf8JsonWriter json, ITarget target)
    {
        json.WriteStartObject("target");
        json.WriteString("name", target.Name);
        json.WriteString("transport", target.Transport);
        json.WriteString("label", target.Label);
        json.WriteString("server", target.ServerDescription);
        json.WriteString("commandLine", target.ServerCommandLine);
        if (target.ServerProcess is { } process)
        {
            json.WriteNumber("pid", process.Id);
        }

        json.WriteEndObject();
    }

    /// <summary>The server's resident set size in bytes (VmRSS; a cluster: the sum over its nodes), or null when it is unknown or gone.</summary>
    public static long? ServerRss(ITarget target)
    {
        long? sum = null;
        foreach (Process process in target.ServerProcesses)
        {
            if (Rss(process) is not { } rss)
            {
                return null;
            }

            sum = (sum ?? 0) + rss;
        }

        return sum;
    }

    public static long? Rss(Process? process)
    {
        if (process is null)
        {
            return null;
        }

        try
        {
            process.Refresh();
            return process.HasExited ? null : process.WorkingSet64;
        }
        catch (InvalidOperationException)
        {
            return null;
        }
    }
}
