using System.Globalization;

namespace Herald.LoadTest.Client;

/// <summary>
/// Per-process figures read from <c>/proc</c> (Linux only; <c>null</c> elsewhere): the open-file limit
/// that bounds how many sockets a process may hold, and how many descriptors it holds now.
/// </summary>
internal static class ProcessLimits
{
    /// <summary>
    /// The soft RLIMIT_NOFILE of <paramref name="pid"/> (this process when <c>null</c>). The .NET runtime
    /// raises its own soft limit to the hard limit at start-up, so for this process it is what
    /// <c>ulimit -Hn</c> was in the shell that started it.
    /// </summary>
    public static long? OpenFileLimit(int? pid = null)
    {
        try
        {
            foreach (string line in File.ReadLines($"/proc/{(pid is { } p ? p.ToString(CultureInfo.InvariantCulture) : "self")}/limits"))
            {
                if (!line.StartsWith("Max open files", StringComparison.Ordinal))
                {
                    continue;
                }

                string[] fields = line["Max open files".Length..].Split(' ', StringSplitOptions.RemoveEmptyEntries);
                if (fields.Length > 0 && fields[0] == "unlimited")
                {
                    return long.MaxValue;
                }

                return fields.Length > 0 && long.TryParse(fields[0], NumberStyles.None, CultureInfo.InvariantCulture, out long soft) ? soft : null;
            }
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // not Linux, or the process is gone
        }

        return null;
    }

    /// <summary>Open descriptors of <paramref name="pid"/> (sockets included), or <c>null</c> when unknown.</summary>
    public static int? OpenFiles(int pid)
    {
        try
        {
            return Directory.EnumerateFileSystemEntries($"/proc/{pid.ToString(CultureInfo.InvariantCulture)}/fd").Count();
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return null;
        }
    }
}
