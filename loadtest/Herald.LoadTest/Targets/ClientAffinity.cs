using System.Diagnostics;
using System.Globalization;

namespace Herald.LoadTest.Targets;

/// <summary>Pins this tool to <c>--client-cpus</c> (a taskset-style list: <c>0</c>, <c>0,1</c>, <c>0-1</c>).</summary>
internal static class ClientAffinity
{
    public static void Apply(string? cpus)
    {
        if (cpus is null)
        {
            return;
        }

        long mask = 0;
        foreach (string part in cpus.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))
        {
            string[] bounds = part.Split('-');
            if (!int.TryParse(bounds[0], NumberStyles.None, CultureInfo.InvariantCulture, out int from)
                || !int.TryParse(bounds[^1], NumberStyles.None, CultureInfo.InvariantCulture, out int to)
                || bounds.Length > 2 || from > to || to >= 64)
            {
                throw new UsageException($"--client-cpus must look like 0, 0,1 or 0-1, got '{cpus}'.");
            }

            for (int cpu = from; cpu <= to; cpu++)
            {
                mask |= 1L << cpu;
            }
        }

        if (!OperatingSystem.IsLinux())
        {
            throw new UsageException("--client-cpus works on Linux only.");
        }

        using Process self = Process.GetCurrentProcess();
        self.ProcessorAffinity = (nint)mask;
    }
}
