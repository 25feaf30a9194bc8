using System.Diagnostics;
using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Reporting;

/// <summary>
/// CPU and GC figures of the load tool itself (and optionally of the broker process) at one instant.
/// Two snapshots bracket the measured window, so a client-bound run shows up as the tool using most of
/// the machine.
/// </summary>
internal readonly record struct ResourceSnapshot(long Timestamp, TimeSpan ToolCpu, TimeSpan? BrokerCpu, int Gen0, int Gen1, int Gen2, long AllocatedBytes)
{
    public static ResourceSnapshot Take(Process? broker) => Take(broker is null ? [] : [broker]);

    /// <summary>A snapshot whose broker CPU is the sum over <paramref name="servers"/> (a cluster's nodes); null when there are none or one has exited.</summary>
    public static ResourceSnapshot Take(IReadOnlyList<Process> servers)
    {
        TimeSpan? brokerCpu = servers.Count > 0 ? TimeSpan.Zero : null;
        foreach (Process server in servers)
        {
            try
            {
                server.Refresh();
                brokerCpu += server.TotalProcessorTime;
            }
            catch (InvalidOperationException)
            {
                brokerCpu = null; // a broker exited: no sum
                break;
            }
        }

        return new ResourceSnapshot(
            Stopwatch.GetTimestamp(),
            Environment.CpuUsage.TotalTime,
            brokerCpu,
            GC.CollectionCount(0),
            GC.CollectionCount(1),
            GC.CollectionCount(2),
            GC.GetTotalAllocatedBytes(precise: false));
    }
}

/// <summary>What happened between two <see cref="ResourceSnapshot"/>s.</summary>
internal readonly record struct ResourceUsage(double WallSeconds, double ToolCpuSeconds, double? BrokerCpuSeconds, int Gen0, int Gen1, int Gen2, long AllocatedBytes)
{
    public static ResourceUsage Between(ResourceSnapshot start, ResourceSnapshot end) => new(
        Stopwatch.GetElapsedTime(start.Timestamp, end.Timestamp).TotalSeconds,
        (end.ToolCpu - start.ToolCpu).TotalSeconds,
        start.BrokerCpu is { } b0 && end.BrokerCpu is { } b1 ? (b1 - b0).TotalSeconds : null,
        end.Gen0 - start.Gen0,
        end.Gen1 - start.Gen1,
        end.Gen2 - start.Gen2,
        end.AllocatedBytes - start.AllocatedBytes);

    /// <summary>Cores the load tool kept busy on average (1.0 = one core fully).</summary>
    public double ToolCores => WallSeconds > 0 ? ToolCpuSeconds / WallSeconds : 0;

    public double? BrokerCores => BrokerCpuSeconds is { } b && WallSeconds > 0 ? b / WallSeconds : null;

    /// <summary>True when the tool used half the machine or more: the broker was short of CPU.</summary>
    public bool LikelyClientBound => ToolCores >= Environment.ProcessorCount * 0.5;

    public void Print(TextWriter output)
    {
        int cores = Environment.ProcessorCount;
        output.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"  load tool CPU       : {ToolCpuSeconds:F2} s in {WallSeconds:F2} s = {ToolCores:F2} cores ({100 * ToolCores / cores:F0}% of {cores}); GC gen0/1/2 {Gen0}/{Gen1}/{Gen2}, allocated {AllocatedBytes / 1e6:F1} MB"));
        if (BrokerCores is { } broker)
        {
            output.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"  broker CPU          : {BrokerCpuSeconds:F2} s = {broker:F2} cores ({100 * broker / cores:F0}% of {cores})"));
        }

        if (LikelyClientBound)
        {
            output.WriteLine("  note                : the load tool used half the machine's CPU or more; the broker was starved, so this result is at least partly client-bound.");
        }
    }

    public void Write(Utf8JsonWriter json)
    {
        json.WriteStartObject("resources");
        json.WriteNumber("wallSeconds", WallSeconds);
        json.WriteNumber("toolCpuSeconds", ToolCpuSeconds);
        json.WriteNumber("toolCores", ToolCores);
        if (BrokerCpuSeconds is { } b)
        {
            json.WriteNumber("brokerCpuSeconds", b);
            json.WriteNumber("brokerCores", BrokerCores ?? 0);
        }

        json.WriteNumber("toolGen0", Gen0);
        json.WriteNumber("toolGen1", Gen1);
        json.WriteNumber("toolGen2", Gen2);
        json.WriteNumber("toolAllocatedBytes", AllocatedBytes);
        json.WriteBoolean("likelyClientBound", LikelyClientBound);
        json.WriteEndObject();
    }
}
