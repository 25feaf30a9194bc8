using System.Globalization;

namespace Herald.LoadTest.Reporting;

/// <summary>
/// Busy CPU time of the whole machine (all processes, kernel included), from the first line of
/// <c>/proc/stat</c> (Linux; <c>null</c> elsewhere). Between two readings, machine busy time minus the
/// tool's and the broker's is what <em>other</em> processes took: on a shared machine that says whether a
/// figure was disturbed.
/// </summary>
internal static class MachineCpu
{
    private static readonly double TicksPerSecond = 100; // USER_HZ; 100 on every mainstream Linux build

    /// <summary>Seconds of CPU time every core spent busy since boot (user, nice, system, irq, softirq, steal).</summary>
    public static double? BusySeconds()
    {
        try
        {
            using var reader = new StreamReader("/proc/stat");
            string? line = reader.ReadLine();
            if (line is null || !line.StartsWith("cpu ", StringComparison.Ordinal))
            {
                return null;
            }

            string[] fields = line.Split(' ', StringSplitOptions.RemoveEmptyEntries);
            // cpu user nice system idle iowait irq softirq steal guest guest_nice
            long busy = 0;
            for (int i = 1; i < fields.Length && i <= 8; i++)
            {
                if (i is 4 or 5)
                {
                    continue; // idle, iowait
                }

                busy += long.Parse(fields[i], NumberStyles.None, CultureInfo.InvariantCulture);
            }

            return busy / TicksPerSecond;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException)
        {
            return null;
        }
    }
}
