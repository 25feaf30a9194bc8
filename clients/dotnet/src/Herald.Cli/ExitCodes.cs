namespace Herald.Cli;

/// <summary>
/// What <c>herald</c> exits with (README "The herald CLI"): scripts branch on these, so they never change
/// meaning.
/// </summary>
internal static class ExitCodes
{
    /// <summary>Done as asked.</summary>
    public const int Ok = 0;

    /// <summary>Anything else that went wrong: a broker error, a bad context file, a command that failed.</summary>
    public const int Failure = 1;

    /// <summary>The command line is wrong: an unknown command or option, a missing argument, a bad value.</summary>
    public const int Usage = 2;

    /// <summary>The broker (or its monitoring listener) cannot be reached: refused, unresolvable, TLS failed, lost.</summary>
    public const int CannotConnect = 3;

    /// <summary>The broker said no: authentication failed, permission denied, or the monitoring token is missing or wrong.</summary>
    public const int Refused = 4;

    /// <summary>No reply: a request timed out, or nobody subscribes to its topic.</summary>
    public const int NoReply = 5;

    /// <summary>Interrupted (Ctrl+C, SIGTERM) before a command that ends by itself was done, as shells count it.</summary>
    public const int Interrupted = 130;
}

/// <summary>An expected failure: its message is printed as it is (never a stack trace), and the CLI exits with <see cref="ExitCode"/>.</summary>
internal sealed class CliException(int exitCode, string message, Exception? inner = null) : Exception(message, inner)
{
    public int ExitCode { get; } = exitCode;
}
