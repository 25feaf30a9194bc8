using Herald.LoadTest;
using Herald.LoadTest.Scenarios;

// Subcommand dispatcher: `herald-loadtest <scenario> [options]`. Each scenario lives in one file under
// Scenarios/ and shares the protocol client under Client/; adding one means adding it to this list.
// Run socket continuations on the socket engine's own threads instead of queueing each one to the
// thread pool: every continuation here is a short parse or a non-blocking send, and skipping the hop
// costs the tool less CPU, which on a 2-core machine is CPU the broker gets (rpc: about +30 % calls/s,
// -30 % tool CPU in our runs). Read once, on first socket use; a value set by the user wins.
if (Environment.GetEnvironmentVariable("DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS") is null)
{
    Environment.SetEnvironmentVariable("DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS", "1");
}

IScenario[] scenarios =
[
    new FanoutScenario(),
    new RpcScenario(),
    new BroadcastScenario(),
    new CompressionScenario(),
];

if (args.Length == 0 || args[0] is "help" or "--help" or "-h")
{
    PrintHelp(scenarios);
    return args.Length == 0 ? ExitCodes.Usage : ExitCodes.Ok;
}

IScenario? scenario = Array.Find(scenarios, s => s.Name == args[0]);
if (scenario is null)
{
    Console.Error.WriteLine($"Unknown scenario '{args[0]}'.");
    PrintHelp(scenarios);
    return ExitCodes.Usage;
}

if (args.Skip(1).Any(a => a is "--help" or "-h"))
{
    Console.WriteLine(scenario.Usage);
    return ExitCodes.Ok;
}

using var interrupted = new CancellationTokenSource();
Console.CancelKeyPress += (_, e) =>
{
    e.Cancel = true; // stop the run and clean up instead of dying with connections half open
    interrupted.Cancel();
};

try
{
    CommandLine options = CommandLine.Parse(args[1..]);
    return await scenario.RunAsync(options, interrupted.Token);
}
catch (UsageException e)
{
    Console.Error.WriteLine(e.Message);
    Console.Error.WriteLine();
    Console.Error.WriteLine(scenario.Usage);
    return ExitCodes.Usage;
}

static void PrintHelp(IScenario[] scenarios)
{
    Console.WriteLine("Herald load test. Start the broker first (see loadtest/README.md), then:");
    Console.WriteLine();
    Console.WriteLine("  dotnet run -c Release --project loadtest/Herald.LoadTest -- <scenario> [options]");
    Console.WriteLine();
    Console.WriteLine("Scenarios:");
    foreach (IScenario s in scenarios)
    {
        Console.WriteLine($"  {s.Name,-10} {s.Summary}");
    }

    Console.WriteLine();
    Console.WriteLine("`<scenario> --help` lists a scenario's options.");
}
