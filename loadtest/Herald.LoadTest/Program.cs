using Herald.LoadTest.Peers.SignalR;
using Herald.LoadTest.Scenarios;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest;

/// <summary>
/// Subcommand dispatcher: <c>herald-loadtest &lt;scenario&gt; [options]</c>. Each scenario lives in one
/// file under Scenarios/ and reaches the broker under test through Targets/; adding one means adding it
/// to <see cref="Scenarios"/>.
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
        new CompareCommand(),
        new BroadcastChartCommand(),
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

    /// <summary>Runs one subcommand (<c>args[0]</c>) with its options; the tests call this in-process.</summary>
    public static async Task<int> RunAsync(string[] args, CancellationToken cancellationToken)
    {
        if (args.Length == 0 || args[0] is "help" or "--help" or "-h")
        {
            PrintHelp();
            return args.Length == 0 ? ExitCodes.Usage : ExitCodes.Ok;
        }

        if (args[0] == SignalRServer.Subcommand)
        {
            return await RunSignalRServerAsync(args[1..], cancellationToken); // hidden: the SignalR target's server
        }

        IScenario? scenario = Array.Find(Scenarios, s => s.Name == args[0]);
        if (scenario is null)
        {
            Console.Error.WriteLine($"Unknown scenario '{args[0]}'.");
            PrintHelp();
            return ExitCodes.Usage;
        }

        if (args.Skip(1).Any(a => a is "--help" or "-h"))
        {
            Console.WriteLine(scenario.Usage);
            return ExitCodes.Ok;
        }

        try
        {
            CommandLine options = scenario is CompareCommand ? CompareCommand.Parse(args[1..]) : CommandLine.Parse(args[1..]);
            return await scenario.RunAsync(options, cancellationToken);
        }
        catch (UsageException e)
        {
            Console.Error.WriteLine(e.Message);
            Console.Error.WriteLine();
            Console.Error.WriteLine(scenario.Usage);
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
        CommandLine options = args[0] == "compare" ? CompareCommand.Parse(args[1..]) : CommandLine.Parse(args[1..]);
        CommandSettings settings = args[0] switch
        {
            "fanout" => FanoutScenario.FanoutOptions.Read(options) is var fanout ? new(fanout, TargetOptions.Read(options) with { Headers = fanout.HeaderBytes > 0 }) : null!,
            "rpc" => new(RpcScenario.RpcOptions.Read(options), TargetOptions.Read(options)),
            "broadcast" => new(BroadcastOptions.Read(options), null),
            "compression" => new(CompressionScenarioOptions.Read(options), null),
            "collab" => new(CollabOptions.Read(options), TargetOptions.Read(options)),
            "stream" => StreamOptions.Read(options) is var stream ? new(stream, TargetOptions.Read(options) with { Headers = stream.HeaderBytes > 0 }) : null!,
            "connections" => new(ConnectionsOptions.Read(options), null),
            "stalled" => new(StalledScenario.StalledOptions.Read(options), TargetOptions.Read(options)),
            "compare" => new(CompareCommand.Read(options), null),
            "chart" => new(BroadcastChartCommand.Read(options), null),
            _ => throw new UsageException($"Unknown scenario '{args[0]}'."),
        };
        options.RejectUnused();
        return settings;
    }

    private static async Task<int> RunSignalRServerAsync(string[] args, CancellationToken cancellationToken)
    {
        try
        {
            return await SignalRServer.RunAsync(args, cancellationToken);
        }
        catch (UsageException e)
        {
            Console.Error.WriteLine(e.Message);
            Console.Error.WriteLine($"usage: {SignalRServer.Subcommand} --host IP --port N");
            return ExitCodes.Usage;
        }
    }

    private static void PrintHelp()
    {
        Console.WriteLine("Herald load test. See loadtest/README.md, then:");
        Console.WriteLine();
        Console.WriteLine("  dotnet run -c Release --project loadtest/Herald.LoadTest -- <scenario> [options]");
        Console.WriteLine();
        Console.WriteLine("Scenarios:");
        foreach (IScenario s in Scenarios)
        {
            Console.WriteLine($"  {s.Name,-12} {s.Summary}");
        }

        Console.WriteLine();
        Console.WriteLine("`<scenario> --help` lists a scenario's options.");
    }
}

/// <summary>What a command line asks for (<see cref="Program.ReadSettings"/>): the scenario's options, and its target's when the scenario reads them apart.</summary>
internal sealed record CommandSettings(object Scenario, TargetOptions? Target);
