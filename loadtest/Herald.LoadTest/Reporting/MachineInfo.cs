using System.Runtime;
using System.Runtime.InteropServices;
using System.Text.Json;

namespace Herald.LoadTest.Reporting;

/// <summary>Where a result was measured: printed and saved with every result, since on a small machine
/// the load tool and the broker compete for the same cores.</summary>
internal static class MachineInfo
{
    public static string Describe() =>
        $"{Environment.ProcessorCount} logical cores, {RuntimeInformation.OSDescription} ({RuntimeInformation.OSArchitecture}), " +
        $"{RuntimeInformation.FrameworkDescription}, {(GCSettings.IsServerGC ? "server" : "workstation")} GC (load tool)";

    public static void Write(Utf8JsonWriter json)
    {
        json.WriteStartObject("machine");
        json.WriteNumber("processorCount", Environment.ProcessorCount);
        json.WriteString("os", RuntimeInformation.OSDescription);
        json.WriteString("architecture", RuntimeInformation.OSArchitecture.ToString());
        json.WriteString("runtime", RuntimeInformation.FrameworkDescription);
        json.WriteString("machineName", Environment.MachineName);
        json.WriteBoolean("serverGc", GCSettings.IsServerGC);
        json.WriteBoolean("inlineSocketCompletions", Environment.GetEnvironmentVariable("DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS") == "1");
        json.WriteEndObject();
    }
}
