using System.CommandLine;
using Herald.Cli.Settings;

namespace Herald.Cli.Commands;

/// <summary>What every command's action shares: its settings, its failures turned into exit codes.</summary>
internal static class CommandRun
{
    /// <summary>
    /// Runs <paramref name="body"/>; an exception becomes one line on stderr and its exit code, and an interruption
    /// (Ctrl+C, SIGTERM) that the body did not take as its normal end exits 130.
    /// </summary>
    public static async Task<int> RunAsync(Func<Task<int>> body, CancellationToken cancellationToken)
    {
        try
        {
            return await body();
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            return ExitCodes.Interrupted;
        }
        catch (Exception e)
        {
            return Failures.Report(e, Console.Error);
        }
    }

    public static ConnectionSettings Settings(ParseResult parse, GlobalOptions globals) =>
        ConnectionSettings.Resolve(parse, globals, ContextStore.ForUser(), Console.Error);

    /// <summary>One line on stderr: what the command did or noticed, kept off stdout, which carries only messages.</summary>
    public static void Notice(string text) => Console.Error.WriteLine(text);
}
