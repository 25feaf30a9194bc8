using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.Cli.Tests.Infrastructure;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Cli.Tests;

/// <summary><c>herald server info|connz|subsz|health</c> against the broker's real monitoring listener.</summary>
[Collection(ToolCollection.Name)]
public sealed class ServerTests(ToolFixture tool, OpenBroker fixture) : CliTest(tool), IClassFixture<OpenBroker>
{
    [Fact]
    public async Task Info_summarises_varz_and_json_prints_it_whole()
    {
        HeraldRun summary = await RunAsync(["server", "info", "--monitor", fixture.Monitor]);
        HeraldRun json = await RunAsync(["server", "info", "--json", "--monitor", fixture.Monitor]);

        AssertExit(0, summary);
        Assert.Contains($"Ports:          tcp {fixture.Broker.TcpPort}, http {fixture.Broker.HttpPort}, monitoring {fixture.Broker.MonitoringPort}", summary.Output, StringComparison.Ordinal);
        AssertExit(0, json);
        using JsonDocument varz = JsonDocument.Parse(json.Output);
        Assert.Equal(fixture.Broker.TcpPort, varz.RootElement.GetProperty("ports").GetProperty("tcp_first").GetInt32());
        Assert.Equal("ready", varz.RootElement.GetProperty("status").GetString());
    }

    [Fact]
    public async Task Health_says_ready_and_exits_0()
    {
        HeraldRun health = await RunAsync(["server", "health", "--monitor", fixture.Monitor]);

        AssertExit(0, health);
        Assert.Contains("alive: alive\nready: ready\n", health.Output, StringComparison.Ordinal);
        Assert.Contains($"tcp ports: {fixture.Broker.TcpPort}", health.Output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Subsz_and_connz_show_a_running_subscriber()
    {
        string pattern = Unique("cli.watched") + ".>";
        await using HeraldRun sub = Start(["sub", pattern, "--server", fixture.Broker.TcpUrl]);
        await sub.WaitForErrorLineAsync("Subscribed to");

        HeraldRun subsz = await RunAsync(["server", "subsz", "--monitor", fixture.Monitor]);
        HeraldRun connz = await RunAsync(["server", "connz", "--monitor", fixture.Monitor]);

        AssertExit(0, subsz);
        Assert.Contains($"     1  {pattern}\n", subsz.Output, StringComparison.Ordinal);
        AssertExit(0, connz);
        Assert.Contains("herald-sub", connz.Output, StringComparison.Ordinal);
    }
}

/// <summary>A broker whose monitoring listener wants a token (<c>Herald:Monitoring:Token</c>).</summary>
public sealed class GuardedMonitorBroker : IAsyncLifetime
{
    public const string Token = "monitoring-token-0123456789";

    public TestBroker Broker { get; private set; } = null!;

    public string Monitor => $"http://127.0.0.1:{Broker.MonitoringPort}";

    public async Task InitializeAsync() => Broker = await TestBroker.StartAsync(o =>
    {
        o.Monitoring.Port = 0;
        o.Monitoring.Token = Token;
    });

    public async Task DisposeAsync() => await Broker.DisposeAsync();
}

[Collection(ToolCollection.Name)]
public sealed class MonitoringTokenTests(ToolFixture tool, GuardedMonitorBroker fixture) : CliTest(tool), IClassFixture<GuardedMonitorBroker>
{
    [Fact]
    public async Task Without_the_token_exits_4_naming_it_with_it_works_and_a_wrong_one_exits_4()
    {
        HeraldRun without = await RunAsync(["server", "info", "--monitor", fixture.Monitor]);
        HeraldRun with = await RunAsync(["server", "info", "--monitor", fixture.Monitor], new Dictionary<string, string> { ["HERALD_MONITOR_TOKEN"] = GuardedMonitorBroker.Token });
        HeraldRun wrong = await RunAsync(["server", "info", "--monitor", fixture.Monitor, "--monitor-token", "not-the-token-0123456789"]);

        AssertExit(4, without);
        Assert.Contains("401", without.Error, StringComparison.Ordinal);
        Assert.Contains("--monitor-token", without.Error, StringComparison.Ordinal);
        AssertNoStackTrace(without);
        AssertExit(0, with);
        Assert.Contains("Server:", with.Output, StringComparison.Ordinal);
        AssertExit(4, wrong);
        Assert.Contains("refused the token", wrong.Error, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Health_needs_no_token()
    {
        AssertExit(0, await RunAsync(["server", "health", "--monitor", fixture.Monitor]));
    }
}

/// <summary>A broker with static-token authentication: <see cref="Token"/> may do everything.</summary>
public sealed class TokenBroker : IAsyncLifetime
{
    public const string Token = "cli-token-0123456789";

    public TestBroker Broker { get; private set; } = null!;

    public async Task InitializeAsync() => Broker = await TestBroker.StartAsync(o =>
    {
        o.Security.Auth.Mode = Herald.Broker.Security.AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.FromMilliseconds(10);
        o.Security.Auth.Tokens.Add(new Herald.Broker.Security.TokenOptions
        {
            Name = "cli",
            Sha256 = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(Token))),
            Permissions = { Publish = { ">" }, Subscribe = { ">" } },
        });
    });

    public async Task DisposeAsync() => await Broker.DisposeAsync();
}

[Collection(ToolCollection.Name)]
public sealed class AuthenticationTests(ToolFixture tool, TokenBroker fixture) : CliTest(tool), IClassFixture<TokenBroker>
{
    [Fact]
    public async Task A_wrong_or_missing_token_exits_4_and_the_right_one_publishes()
    {
        HeraldRun wrong = await RunAsync(["pub", "cli.auth", "x", "--server", fixture.Broker.TcpUrl, "--token", "wrong-token-0123456789"]);
        HeraldRun missing = await RunAsync(["pub", "cli.auth", "x", "--server", fixture.Broker.TcpUrl]);
        HeraldRun right = await RunAsync(["pub", "cli.auth", "x", "--server", fixture.Broker.TcpUrl], new Dictionary<string, string> { ["HERALD_TOKEN"] = TokenBroker.Token });

        AssertExit(4, wrong);
        Assert.Contains("authentication failed", wrong.Error, StringComparison.Ordinal);
        AssertNoStackTrace(wrong);
        AssertExit(4, missing);
        AssertExit(0, right);
    }
}
