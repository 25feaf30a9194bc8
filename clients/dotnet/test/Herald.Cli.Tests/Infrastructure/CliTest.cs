using Herald.Client.Tests.Infrastructure;

namespace Herald.Cli.Tests.Infrastructure;

/// <summary>
/// A test that runs the packed <c>herald</c>: each test has its own config folder (<c>XDG_CONFIG_HOME</c>), so its
/// contexts are its own, and its own topics.
/// </summary>
public abstract class CliTest(ToolFixture tool)
{
    protected ToolFixture Tool { get; } = tool;

    protected string ConfigHome { get; } = tool.NewFolder();

    protected static string Unique(string prefix) => $"{prefix}.{Guid.NewGuid():N}";

    /// <summary>Starts <c>herald</c>; the test waits for its lines or its exit.</summary>
    protected HeraldRun Start(IEnumerable<string> arguments, IReadOnlyDictionary<string, string>? environment = null, byte[]? stdin = null) =>
        HeraldRun.Start(Tool.Executable, ConfigHome, arguments, environment, stdin);

    /// <summary>Runs <c>herald</c> to its end.</summary>
    protected async Task<HeraldRun> RunAsync(IEnumerable<string> arguments, IReadOnlyDictionary<string, string>? environment = null, byte[]? stdin = null)
    {
        HeraldRun run = Start(arguments, environment, stdin);
        await run.WaitForExitAsync();
        return run;
    }

    /// <summary>Fails with what herald printed unless it exited with <paramref name="expected"/>.</summary>
    protected static void AssertExit(int expected, HeraldRun run) =>
        Assert.True(run.ExitCode == expected, $"herald exited {run.ExitCode}, not {expected}; stderr:\n{run.Error}\nstdout:\n{run.Output}");

    /// <summary>An expected failure is one line of its own, never a stack trace.</summary>
    protected static void AssertNoStackTrace(HeraldRun run) =>
        Assert.DoesNotContain("   at ", run.Error, StringComparison.Ordinal);
}

/// <summary>A broker with its monitoring listener on (an ephemeral port, open), shared by a class's tests.</summary>
public sealed class OpenBroker : IAsyncLifetime
{
    public TestBroker Broker { get; private set; } = null!;

    public string Monitor => $"http://127.0.0.1:{Broker.MonitoringPort}";

    public async Task InitializeAsync() => Broker = await TestBroker.StartAsync(o => o.Monitoring.Port = 0);

    public async Task DisposeAsync() => await Broker.DisposeAsync();
}
