using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.Broker.Api;
using Herald.Cli.Tests.Infrastructure;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Cli.Tests;

/// <summary>
/// <c>herald api ...</c> against the real broker's server API, each a process of the packed tool: a publication and its
/// idempotent repeat, a broadcast, the history read back, the node's info, the key from the environment and never
/// printed, a wrong key's exit code, and <c>new-key</c>'s key and hash.
/// </summary>
[Collection(ToolCollection.Name)]
public sealed class ApiTests(ToolFixture tool, ApiBroker fixture) : CliTest(tool), IClassFixture<ApiBroker>
{
    private string[] Api => ["--api", $"http://127.0.0.1:{fixture.Broker.ApiPort}"];

    [Fact]
    public async Task Publish_broadcast_history_and_info_through_the_server_api()
    {
        string topic = Unique("kept");
        var env = new Dictionary<string, string> { ["HERALD_API_KEY"] = ApiBroker.Key };
        HeraldRun first = await RunAsync(["api", "publish", topic, "one", "--idempotency-key", "k", "-H", "a=b", .. Api], env);
        HeraldRun repeat = await RunAsync(["api", "publish", topic, "one", "--idempotency-key", "k", .. Api], env);
        HeraldRun broadcast = await RunAsync(["api", "broadcast", "two", "--topic", topic, "--topic", topic + ".x", .. Api], env);
        HeraldRun history = await RunAsync(["api", "history", topic, .. Api], env);
        HeraldRun info = await RunAsync(["api", "info", .. Api], env);

        AssertExit(0, first);
        Assert.Equal("{\"duplicate\":false}\n", first.Output);
        AssertExit(0, repeat);
        Assert.Equal("{\"duplicate\":true}\n", repeat.Output);
        AssertExit(0, broadcast);
        Assert.Equal(2, broadcast.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries).Length);
        AssertExit(0, history);
        string[] kept = history.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.Equal(["one", "two"], kept.Select(line => JsonDocument.Parse(line).RootElement.GetProperty("data").GetString()));
        AssertExit(0, info);
        Assert.Equal("herald", JsonDocument.Parse(info.Output).RootElement.GetProperty("server_name").GetString());
        foreach (HeraldRun run in new[] { first, repeat, broadcast, history, info })
        {
            Assert.DoesNotContain(ApiBroker.Key, run.Output + run.Error, StringComparison.Ordinal);
        }
    }

    [Fact]
    public async Task A_wrong_or_missing_key_exits_refused_or_usage_without_a_stack()
    {
        HeraldRun wrong = await RunAsync(["api", "info", "--key", "wrong", .. Api]);
        AssertExit(4, wrong);
        AssertNoStackTrace(wrong);
        HeraldRun missing = await RunAsync(["api", "info", .. Api], new Dictionary<string, string> { ["HERALD_API_KEY"] = "" });
        AssertExit(2, missing);
    }

    [Fact]
    public async Task Revoke_lists_and_lifts_an_identity_and_disconnect_needs_a_client_or_an_identity()
    {
        var env = new Dictionary<string, string> { ["HERALD_API_KEY"] = ApiBroker.Key };
        string who = Unique("suspended");
        HeraldRun revoke = await RunAsync(["api", "revoke", who, "--until", "1h", "--reason", "Suspended.", .. Api], env);
        HeraldRun listed = await RunAsync(["api", "revocations", .. Api], env);
        HeraldRun unrevoke = await RunAsync(["api", "unrevoke", who, .. Api], env);
        HeraldRun again = await RunAsync(["api", "unrevoke", who, .. Api], env);
        HeraldRun nobody = await RunAsync(["api", "disconnect", "--identity", Unique("nobody"), .. Api], env);
        HeraldRun neither = await RunAsync(["api", "disconnect", .. Api], env);
        HeraldRun unknown = await RunAsync(["api", "disconnect", "--client", "00000000000fffff", .. Api], env);

        AssertExit(0, revoke);
        Assert.Equal("{\"clients\":0,\"nodes\":1,\"nodes_asked\":1}\n", revoke.Output);
        AssertExit(0, listed);
        Assert.Contains(listed.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries), line => JsonDocument.Parse(line).RootElement.GetProperty("identity").GetString() == who);
        Assert.Equal("{\"lifted\":true}\n", unrevoke.Output);
        Assert.Equal("{\"lifted\":false}\n", again.Output);
        AssertExit(0, nobody);
        AssertExit(2, neither);
        Assert.NotEqual(0, unknown.ExitCode);
        Assert.Contains("ClientNotFound", unknown.Error, StringComparison.Ordinal);
    }

    [Fact]
    public async Task New_key_prints_a_key_once_and_the_configuration_holding_its_hash()
    {
        HeraldRun made = await RunAsync(["api", "new-key", "--name", "billing", "--scope", "publish"]);
        AssertExit(0, made);
        string[] lines = made.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        string key = lines[0]["key:  ".Length..];
        string hash = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(key)));
        Assert.Equal($"--Herald:Api:Keys:0:Name=billing --Herald:Api:Keys:0:Hash={hash} --Herald:Api:Keys:0:Scope=publish", lines[1]);
    }
}

/// <summary>A broker with the server API on (an ephemeral port, one admin key) and a history on <c>kept.&gt;</c>.</summary>
public sealed class ApiBroker : IAsyncLifetime
{
    public const string Key = "cli-test-admin-key-0123456789abcdef0123456789";

    public TestBroker Broker { get; private set; } = null!;

    public async Task InitializeAsync() => Broker = await TestBroker.StartAsync(o =>
    {
        o.Api.Host = "127.0.0.1";
        o.Api.Port = 0;
        o.Api.Keys = [new ApiKeyOptions { Name = "admin", Hash = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(Key))), Scope = "admin" }];
        o.History.Topics.Add(new Herald.Broker.History.HistoryRule { Pattern = "kept.>", MaxMessages = 10 });
    });

    public async Task DisposeAsync() => await Broker.DisposeAsync();
}
