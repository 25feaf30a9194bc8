using System.Diagnostics;
using System.Text.RegularExpressions;

namespace Herald.LoadTest.Reporting;

/// <summary>
/// What a result file says about the run that wrote it, so that a figure in a table can be traced back to
/// it and run again: the command line, when it started, the machine's load average then, and the commit of
/// the source tree the tool ran in. <see cref="Program.RunAsync"/> begins one per command; being async-local,
/// a scenario that <c>compare</c> runs in the same process has its own and <c>compare</c>'s is back after it.
/// </summary>
internal sealed partial record RunStamp(string CommandLine, DateTimeOffset StartedUtc, double[]? LoadBefore)
{
    private static readonly AsyncLocal<RunStamp?> CurrentRun = new();

    private static readonly Lazy<(string? Commit, bool Dirty)> Source = new(ReadSource);

    /// <summary>The run of this async flow, or null outside <see cref="Program.RunAsync"/>.</summary>
    public static RunStamp? Current => CurrentRun.Value;

    /// <summary>The commit checked out where the tool runs (<c>git rev-parse HEAD</c>), or null outside a git checkout.</summary>
    public static string? SourceCommit => Source.Value.Commit;

    /// <summary>
    /// True when tracked files differ from <see cref="SourceCommit"/>: the figures are of uncommitted code. The result
    /// files under <c>loadtest/results/</c> do not count: a runner rewrites them between its rows.
    /// </summary>
    public static bool SourceDirty => Source.Value.Dirty;

    /// <summary>Starts the stamp of a command run now with <paramref name="args"/> (as given after the tool's name).</summary>
    public static void Begin(IEnumerable<string> args)
    {
        _ = Source.Value; // asked now, on the command's own thread, before any socket is open
        CurrentRun.Value = new RunStamp("herald-loadtest " + string.Join(' ', args.Select(Quote)), DateTimeOffset.UtcNow, MachineInfo.LoadAverage());
    }

    /// <summary>An argument as a POSIX shell reads it back: bare when it is plain, else in single quotes.</summary>
    private static string Quote(string arg) => PlainArgument().IsMatch(arg) ? arg : "'" + arg.Replace("'", "'\\''", StringComparison.Ordinal) + "'";

    private static (string? Commit, bool Dirty) ReadSource()
    {
        string? commit = Git("rev-parse HEAD");
        return (commit, commit is not null && Git("status --porcelain --untracked-files=no -- :/ :(top,exclude)loadtest/results") is { Length: > 0 });
    }

    /// <summary>
    /// git's trimmed output, or null when git is missing, fails or takes over 10 s. Read synchronously, after git
    /// has exited: an async read of its pipe completes on the socket engine's threads, and with the tool's inline
    /// completions this may be called on one of them, which would then wait on itself.
    /// </summary>
    private static string? Git(string arguments)
    {
        try
        {
            using var git = Process.Start(new ProcessStartInfo("git", arguments) { RedirectStandardOutput = true, RedirectStandardError = true });
            if (git is null)
            {
                return null;
            }

            if (!git.WaitForExit(10_000))
            {
                git.Kill();
                return null;
            }

            return git.ExitCode == 0 ? git.StandardOutput.ReadToEnd().Trim() : null;
        }
        catch (Exception e) when (e is System.ComponentModel.Win32Exception or InvalidOperationException)
        {
            return null;
        }
    }

    [GeneratedRegex("^[A-Za-z0-9_./:,=+@%-]+$")]
    private static partial Regex PlainArgument();
}
