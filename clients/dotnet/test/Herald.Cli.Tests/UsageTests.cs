using Herald.Cli.Tests.Infrastructure;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Cli.Tests;

/// <summary>Help, version, and the exit codes of a wrong command line and an unreachable broker.</summary>
[Collection(ToolCollection.Name)]
public sealed class UsageTests(ToolFixture tool) : CliTest(tool)
{
    [Fact]
    public async Task Help_lists_the_commands_and_version_prints_one()
    {
        HeraldRun help = await RunAsync(["--help"]);
        HeraldRun version = await RunAsync(["--version"]);

        AssertExit(0, help);
        foreach (string command in new[] { "pub", "sub", "req", "reply", "presence", "server", "context" })
        {
            Assert.Contains($"\n  {command} ", help.Output, StringComparison.Ordinal);
        }

        AssertExit(0, version);
        Assert.Matches(@"^\d+\.\d+\.\d+", version.Output);
    }

    [Fact]
    public async Task An_unknown_command_or_a_bad_value_exits_2_with_the_reason()
    {
        HeraldRun unknown = await RunAsync(["publish", "x"]);
        HeraldRun badHeader = await RunAsync(["pub", "x", "y", "--header", "no-equals-sign", "--server", "tcp://127.0.0.1:1"]);
        HeraldRun badTimeout = await RunAsync(["req", "x", "y", "--timeout", "soon"]);

        AssertExit(2, unknown);
        Assert.Contains("'publish'", unknown.Error, StringComparison.Ordinal);
        AssertExit(2, badHeader);
        Assert.Contains("is not Key=Value", badHeader.Error, StringComparison.Ordinal);
        AssertExit(2, badTimeout);
        Assert.Contains("'soon' is not a duration", badTimeout.Error, StringComparison.Ordinal);
    }

    [Fact]
    public async Task An_unreachable_broker_exits_3_with_one_clear_line()
    {
        int port = TestBroker.FreePort();

        HeraldRun pub = await RunAsync(["pub", "x", "y", "--server", $"tcp://127.0.0.1:{port}"]);
        HeraldRun monitor = await RunAsync(["server", "info", "--monitor", $"http://127.0.0.1:{port}"]);

        AssertExit(3, pub);
        Assert.StartsWith("herald: cannot connect", pub.Error, StringComparison.Ordinal);
        Assert.Contains($"127.0.0.1:{port}", pub.Error, StringComparison.Ordinal);
        AssertNoStackTrace(pub);
        AssertExit(3, monitor);
        Assert.StartsWith("herald: cannot connect", monitor.Error, StringComparison.Ordinal);
        AssertNoStackTrace(monitor);
    }
}
