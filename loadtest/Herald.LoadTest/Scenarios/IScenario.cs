namespace Herald.LoadTest.Scenarios;

/// <summary>One subcommand of the load tool: <c>herald-loadtest &lt;Name&gt; [options]</c>.</summary>
internal interface IScenario
{
    /// <summary>The subcommand, e.g. <c>fanout</c>.</summary>
    string Name { get; }

    /// <summary>One line for the list of subcommands.</summary>
    string Summary { get; }

    /// <summary>The options, with their defaults, for <c>&lt;Name&gt; --help</c>.</summary>
    string Usage { get; }

    /// <summary>Runs to completion, bounded in time, and returns the process exit code (<see cref="ExitCodes"/>).</summary>
    /// <exception cref="UsageException">An option is missing, unknown or out of range.</exception>
    Task<int> RunAsync(CommandLine options, CancellationToken cancellationToken);
}
