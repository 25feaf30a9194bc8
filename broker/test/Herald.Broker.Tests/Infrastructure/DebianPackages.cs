using System.Collections.Concurrent;
using System.Diagnostics;

namespace Herald.Testing;

/// <summary>
/// Real peers and backplanes the tests run (<c>redis-server</c>, <c>nats-server</c>: Debian packages of the same
/// names), installed with apt-get when missing, once per test run (as root; CI's <c>.ci/run</c> does the same
/// up front), so the suite runs against the real servers on a fresh machine too. Shared by the broker's and
/// the load tool's tests (linked into both).
/// </summary>
internal static class DebianPackages
{
    private static readonly ConcurrentDictionary<string, Lazy<string?>> Installs = new(StringComparer.Ordinal);

    /// <summary>Null when every executable is on the PATH (installed now if it was not: each is also its package's name); else why not.</summary>
    public static string? Ensure(params string[] executables) =>
        Installs.GetOrAdd(string.Join(' ', executables.Order(StringComparer.Ordinal)), _ => new Lazy<string?>(() => Install(executables))).Value;

    private static string? Install(string[] executables)
    {
        string[] missing = [.. executables.Where(e => !OnPath(e))];
        if (missing.Length == 0)
        {
            return null;
        }

        try
        {
            using Process install = Process.Start(new ProcessStartInfo("bash")
            {
                ArgumentList =
                {
                    "-c",
                    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends " + string.Join(' ', missing)
                        + "; (service redis-server stop || systemctl stop redis-server) >/dev/null 2>&1; true", // the package's own service: nothing left on 6379
                },
                RedirectStandardOutput = true,
                RedirectStandardError = true,
            })!;
            install.StandardOutput.ReadToEnd();
            install.WaitForExit(TimeSpan.FromMinutes(5));
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            return $"could not run apt-get to install {string.Join(", ", missing)}: {e.Message}";
        }

        string[] still = [.. missing.Where(e => !OnPath(e))];
        return still.Length == 0 ? null : $"{string.Join(", ", still)} missing and apt-get could not install it (needs root and the Debian package)";
    }

    private static bool OnPath(string executable) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "").Split(':', StringSplitOptions.RemoveEmptyEntries).Any(d => File.Exists(Path.Combine(d, executable)));
}
