using System.Globalization;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>--token</c> against a broker with token authentication and identities granted only the scenarios'
/// topics (<c>bench.&gt;</c>): every client authenticates (TCP HELLO, long-poll bearer on every request),
/// callers put their inboxes under their identity's <c>inbox_prefix</c> (spec §7; a fixed <c>_INBOX.</c> inbox
/// is refused for a restricted identity), and responders of another identity (<c>--responder-token</c>),
/// granted no inbox of the callers', answer through the reply permission each delivered request grants.
/// The runs pass their own checks: every call answered, nothing lost.
/// </summary>
public sealed class TokenAuthTests : IAsyncLifetime
{
    private const string Identity = "bench";
    private const string Token = "loadtest-bench-token";
    private const string ResponderToken = "loadtest-responder-token";

    private readonly int _firstPort = Repo.FreePorts(4);
    private BrokerChild? _broker;

    private string[] PortArgs =>
    [
        "--ports", $"{_firstPort}-{_firstPort + 1}",
        "--http-port", (_firstPort + 2).ToString(CultureInfo.InvariantCulture),
        "--monitoring-port", (_firstPort + 3).ToString(CultureInfo.InvariantCulture),
    ];

    public async Task InitializeAsync()
    {
        TargetOptions options = Repo.TargetOptionsOf(PortArgs);
        _broker = BrokerChild.Start(Repo.BrokerDll,
        [
            .. HeraldNode.Arguments(options),
            "--Herald:Security:Auth:Mode=Token",
            .. Restricted(0, Identity, Token),
            .. Restricted(1, "bench-responder", ResponderToken),
        ]);
        Assert.Null(await _broker.WaitUntilReadyAsync(new System.Net.IPEndPoint(System.Net.IPAddress.Loopback, _firstPort), TimeSpan.FromSeconds(60), CancellationToken.None, Token));
    }

    /// <summary>Token number <paramref name="n"/>: publish and subscribe <c>bench.&gt;</c> only (inboxes: its own, by the broker's rule).</summary>
    private static string[] Restricted(int n, string name, string token) =>
    [
        $"--Herald:Security:Auth:Tokens:{n}:Name={name}",
        $"--Herald:Security:Auth:Tokens:{n}:Sha256={Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(token)))}",
        $"--Herald:Security:Auth:Tokens:{n}:Permissions:Publish:0=bench.>",
        $"--Herald:Security:Auth:Tokens:{n}:Permissions:Subscribe:0=bench.>",
    ];

    public async Task DisposeAsync()
    {
        if (_broker is not null)
        {
            await _broker.DisposeAsync();
        }
    }

    private string[] ScenarioArgs(string transport) =>
    [
        .. PortArgs, "--server", "external", "--server-pid", _broker!.Id.ToString(CultureInfo.InvariantCulture),
        "--transport", transport, "--token", Token, "--setup-timeout", "60", "--warmup", "0.3", "--seconds", "3", "--grace", "5", // a window long enough that a machine busy with the other test projects still delivers in it
    ];

    [Theory]
    [InlineData("tcp")]
    [InlineData("longpoll")]
    public async Task Clients_take_the_identity_s_inbox_prefix_from_the_broker(string transport)
    {
        TargetOptions options = Repo.TargetOptionsOf([.. ScenarioArgs(transport)]);
        await using ITarget target = await HeraldTarget.StartAsync(options, CancellationToken.None);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        await using IPubSubClient client = await target.ConnectAsync(0, timeout.Token);

        // spec §7: _INBOX. and the first 24 hex digits of the SHA-256 of the identity's name
        string expected = "_INBOX." + Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(Identity)))[..24];
        Assert.Equal(expected, client.InboxPrefix);
    }

    [Theory]
    [InlineData("tcp", 3)]
    [InlineData("longpoll", 2)]
    public async Task Rpc_answers_every_call_between_restricted_identities(string transport, int callers)
    {
        string output = Repo.OutFile($"rpc-auth-{transport}");
        int exit = await Repo.RunAsync("rpc", [.. ScenarioArgs(transport), "--responder-token", ResponderToken, "--callers", callers.ToString(CultureInfo.InvariantCulture), "--responders", "2", "--max-lead", "500", "--out", output]);

        JsonElement json = Repo.ReadJson(output);
        Assert.Equal(ExitCodes.Ok, exit);
        JsonElement run = Assert.Single(json.GetProperty("repetitions").EnumerateArray());
        Assert.True(run.GetProperty("calls").GetInt64() > 0, "calls were answered");
        Assert.Equal(0, run.GetProperty("unexpected").GetInt64());
        Assert.Equal(0, run.GetProperty("missing").GetInt64());
        Assert.Equal(0, run.GetProperty("unanswered").GetInt64());
        Assert.True(json.GetProperty("ok").GetBoolean());
    }

    [Fact]
    public async Task Fanout_delivers_everything_for_a_restricted_identity()
    {
        string output = Repo.OutFile("fanout-auth");
        int exit = await Repo.RunAsync("fanout", [.. ScenarioArgs("tcp"), "--subscribers", "5", "--max-lead", "2000", "--out", output]);

        JsonElement json = Repo.ReadJson(output);
        Assert.Equal(ExitCodes.Ok, exit);
        JsonElement run = Assert.Single(json.GetProperty("repetitions").EnumerateArray());
        Assert.True(run.GetProperty("deliveries").GetInt64() > 0, "messages were delivered");
        Assert.Equal(0, run.GetProperty("missing").GetInt64());
        Assert.Equal(0, run.GetProperty("undeliveredAfterGrace").GetInt64());
        Assert.Equal(0, run.GetProperty("disconnectedSubscribers").GetInt64());
        Assert.True(json.GetProperty("ok").GetBoolean());
    }
}
