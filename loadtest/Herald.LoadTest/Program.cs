using System.CommandLine;
using System.CommandLine.Help;
using System.CommandLine.Invocation;
using System.CommandLine.Parsing;
using Herald.LoadTest.Peers.SignalR;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Scenarios;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest;

/// <summary>
/// Command dispatcher: <c>herald-loadtest &lt;scenario&gt; [options]</c>, parsed by System.CommandLine. Each
/// scenario lives in one file under Scenarios/, declares its options there and reaches the broker under test
/// through Targets/; adding one means adding it to <see cref="Scenarios"/>.
/// </summary>
internal static class Program
{
    /// <summary>Every subcommand, in the order the help lists them.</summary>
    public static IScenario[] Scenarios { get; } =
    [
        new FanoutScenario(),
        new RpcScenario(),
        new BroadcastScenario(),
        new CompressionScenario(),
        new CollabScenario(),
        new StreamScenario(),
        new ConnectionsScenario(),
        new StalledScenario(),
        new PresenceScenario(),
        new ShardsScenario(),
        new ApiScenario(),
        new DeltasScenario(),
        new CompareCommand(),
        new BroadcastChartCommand(),
        new AttacksCommand(),
        new HooksCommand(),
    ];

    public static async Task<int> Main(string[] args)
    {
        // Run socket continuations on the socket engine's own threads instead of queueing each one to the
        // thread pool: every continuation here is a short parse or a non-blocking send, and skipping the hop
        // costs the tool less CPU, which on a 2-core machine is CPU the broker gets (rpc: about +30 % calls/s,
        // -30 % tool CPU in our runs). Read once, on first socket use; a value set by the user wins.
        // Not for the SignalR hub this tool hosts as a server: it runs with ASP.NET Core's defaults.
        if (args is not [SignalRServer.Subcommand, ..] && Environment.GetEnvironmentVariable("DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS") is null)
        {
            Environment.SetEnvironmentVariable("DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS", "1");
        }

        using var interrupted = new CancellationTokenSource();
        Console.CancelKeyPress += (_, e) =>
        {
            e.Cancel = true; // stop the run and clean up instead of dying with connections half open
            interrupted.Cancel();
        };

        return await RunAsync(args, interrupted.Token);
    }

    /// <summary>
    /// The tool's command line: one command per scenario (and <c>compare</c>, <c>chart</c>, the hidden
    /// <c>signalr-server</c>), each with its typed options, help (<c>--help</c>) and completions (the <c>[suggest]</c>
    /// directive that <c>dotnet-suggest</c> calls).
    /// </summary>
    internal static RootCommand Root { get; } = CreateRoot();

    /// <summary>Runs one command with its options; the tests call this in-process.</summary>
    public static async Task<int> RunAsync(string[] args, CancellationToken cancellationToken)
    {
        RunStamp.Begin(args); // what its result file says ran it, and when
        ParseResult parsed = Root.Parse(args);
        if (parsed.Action is ParseErrorAction error)
        {
            error.ShowHelp = false; // the errors, each naming the option, and where the options are listed
            Console.Error.WriteLine($"`{string.Join(' ', CommandPath(parsed.CommandResult))} --help` lists the options.");
        }

        try
        {
            // The tool handles Ctrl+C itself (Main) and reports its own exceptions.
            int code = await parsed.InvokeAsync(new InvocationConfiguration { EnableDefaultExceptionHandler = false, ProcessTerminationTimeout = null }, cancellationToken);
            return parsed.Action is ParseErrorAction ? ExitCodes.Usage : code;
        }
        catch (UsageException e)
        {
            Console.Error.WriteLine(e.Message);
            Console.Error.WriteLine($"`{string.Join(' ', CommandPath(parsed.CommandResult))} --help` lists the options.");
            return ExitCodes.Usage;
        }
        catch (TargetUnavailableException e)
        {
            Console.Error.WriteLine($"error: {e.Message}");
            return ExitCodes.BrokerUnreachable;
        }
    }

    /// <summary>
    /// What a command line asks for, read and checked as the command reads it before it runs (nothing is started):
    /// the scenario's settings and its target's. The tests compare it across changes of the parser.
    /// </summary>
    /// <exception cref="UsageException">The command line is wrong.</exception>
    internal static CommandSettings ReadSettings(string[] args)
    {
        ParseResult parsed = Root.Parse(args);
        if (parsed.Errors.Count > 0)
        {
            throw new UsageException(string.Join(Environment.NewLine, parsed.Errors.Select(e => e.Message)));
        }

        IScenario scenario = parsed.CommandResult.Parent is CommandResult { Command.Name: "compare" }
            ? Array.Find(Scenarios, s => s is CompareCommand)!
            : Array.Find(Scenarios, s => s.Name == parsed.CommandResult.Command.Name) ?? throw new UsageException("No scenario named.");
        return scenario.Read(parsed);
    }

    private static RootCommand CreateRoot()
    {
        var root = new RootCommand("Herald load test: the seeds' scenarios against Herald and the brokers you would pick instead. See loadtest/README.md.");
        foreach (IScenario scenario in Scenarios)
        {
            root.Add(scenario.CreateCommand());
        }

        root.Add(SignalRServer.CreateCommand());
        root.SetAction(parsed =>
        {
            new HelpAction().Invoke(parsed); // no command: the list of them, as a usage error
            return ExitCodes.Usage;
        });
        return root;
    }

    private static IEnumerable<string> CommandPath(SymbolResult? result) =>
        result is CommandResult { Command: var command } ? [.. CommandPath(result.Parent), command is RootCommand ? "herald-loadtest" : command.Name] : [];
}

/// <summary>What a command line asks for (<see cref="Program.ReadSettings"/>): the scenario's options, and its target's when the scenario reads them apart.</summary>
internal sealed record CommandSettings(object Scenario, TargetOptions? Target)
{
    /// <summary>The scenario's options as the <typeparamref name="T"/> it reads, with its target's.</summary>
    public (T Options, TargetOptions Target) Of<T>() => ((T)Scenario, Target!);
}
