using System.ComponentModel;
using System.Diagnostics;
using Herald.LoadTest.Client;

namespace Herald.LoadTest.Targets;

/// <summary>Starting a peer server executable and asking it for its version, with the install command when it is missing.</summary>
internal static class PeerServer
{
    /// <summary>The first line <c><paramref name="executable"/> <paramref name="argument"/></c> prints.</summary>
    /// <exception cref="TargetUnavailableException">The executable is not installed.</exception>
    public static async Task<string> ReadVersionAsync(string executable, string argument, string installHint, CancellationToken cancellationToken)
    {
        var start = new ProcessStartInfo(executable, argument)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        try
        {
            using Process process = Process.Start(start) ?? throw new TargetUnavailableException($"{executable} could not be started: {installHint}");
            Task<string> error = process.StandardError.ReadToEndAsync(cancellationToken);
            string output = await process.StandardOutput.ReadToEndAsync(cancellationToken);
            await process.WaitForExitAsync(cancellationToken);
            string text = output.Length > 0 ? output : await error;
            return text.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).FirstOrDefault() ?? executable;
        }
        catch (Win32Exception e)
        {
            throw new TargetUnavailableException($"{executable} is not installed (Debian/Ubuntu: {installHint}).", e);
        }
    }

    /// <summary><see cref="BrokerChild.StartExecutable"/>, with the install command when the executable (or taskset) is missing.</summary>
    public static BrokerChild Start(string executable, IReadOnlyList<string> arguments, string? cpus, string installHint)
    {
        try
        {
            string display = $"{executable} {string.Join(' ', arguments.Select(a => a.Length == 0 ? "\"\"" : a))}"; // as typed in a shell
            return BrokerChild.StartExecutable(executable, arguments, cpus, display: display);
        }
        catch (Win32Exception e)
        {
            throw new TargetUnavailableException($"could not start {executable}{(cpus is null ? "" : " under taskset")}: {e.Message} (Debian/Ubuntu: {installHint}).", e);
        }
    }
}
