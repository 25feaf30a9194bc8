namespace Herald.LoadTest;

/// <summary>Process exit codes, documented in loadtest/README.md.</summary>
internal static class ExitCodes
{
    /// <summary>The run completed and every check passed.</summary>
    public const int Ok = 0;

    /// <summary>The run completed but failed a check: a connection was closed by the broker, a fatal
    /// ERROR arrived, messages were lost or reordered, a reply never came.</summary>
    public const int RunFailed = 1;

    /// <summary>The command line is wrong.</summary>
    public const int Usage = 2;

    /// <summary>The broker was unreachable, refused the handshake, or setup did not finish in time.</summary>
    public const int BrokerUnreachable = 3;

    /// <summary>Interrupted with Ctrl+C.</summary>
    public const int Interrupted = 130;
}
