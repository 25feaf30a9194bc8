using System.CommandLine;

namespace Herald.LoadTest.Scenarios;

/// <summary>One command of the load tool: <c>herald-loadtest &lt;Name&gt; [options]</c>.</summary>
internal interface IScenario
{
    /// <summary>The command, e.g. <c>fanout</c>.</summary>
    string Name { get; }

    /// <summary>What <c>--help</c> says above the options: one line first (the list of commands shows it), then the method and notes.</summary>
    string Description { get; }

    /// <summary>The options, each typed, with its default and description, in the order help lists them.</summary>
    IReadOnlyList<Option> Options { get; }

    /// <summary>What the parsed command line asks for, checked across options (the tests compare it).</summary>
    /// <exception cref="UsageException">Options that do not go together.</exception>
    CommandSettings Read(ParseResult parsed);

    /// <summary>Runs to completion, bounded in time, and returns the process exit code (<see cref="ExitCodes"/>).</summary>
    /// <exception cref="UsageException">Options that do not go together, or that the target cannot serve.</exception>
    Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken);

    /// <summary>The command: its options, and <see cref="RunAsync"/> as its action.</summary>
    Command CreateCommand()
    {
        var command = new Command(Name, Description);
        foreach (Option option in Options)
        {
            command.Add(option);
        }

        command.SetAction(RunAsync);
        return command;
    }
}
