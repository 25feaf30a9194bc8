using System.Text;
using Herald.Cli.Tests.Infrastructure;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Cli.Tests;

/// <summary>
/// <c>herald context</c>: the files it keeps, and which setting wins. A setting's source is seen through the
/// address a failed connection names: each candidate is a port where nothing listens.
/// </summary>
[Collection(ToolCollection.Name)]
public sealed class ContextTests(ToolFixture tool, OpenBroker fixture) : CliTest(tool), IClassFixture<OpenBroker>
{
    private string ContextFolder => Path.Combine(ConfigHome, "herald", "context");

    [Fact]
    public async Task Add_select_ls_show_and_rm_keep_a_context_file_only_its_owner_can_read()
    {
        AssertExit(0, await RunAsync(["context", "add", "dev", "--server", fixture.Broker.TcpUrl, "--token", "secret-token-0123456789", "--description", "the test broker"]));
        AssertExit(0, await RunAsync(["context", "add", "other", "--server", "tcp://127.0.0.1:1", "--select"]));

        string devFile = Path.Combine(ContextFolder, "dev.json");
        Assert.Contains("secret-token-0123456789", await File.ReadAllTextAsync(devFile), StringComparison.Ordinal);
        if (!OperatingSystem.IsWindows())
        {
            Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite, File.GetUnixFileMode(devFile));
            Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute, File.GetUnixFileMode(ContextFolder));
        }

        AssertExit(0, await RunAsync(["context", "select", "dev"]));
        HeraldRun ls = await RunAsync(["context", "ls"]);
        AssertExit(0, ls);
        Assert.Equal($"* dev               {fixture.Broker.TcpUrl}  the test broker\n  other             tcp://127.0.0.1:1\n", ls.Output);

        HeraldRun show = await RunAsync(["context", "show"]);
        AssertExit(0, show);
        Assert.Contains("Context:        dev (selected)", show.Output, StringComparison.Ordinal);
        Assert.Contains("Token:          set (not shown)", show.Output, StringComparison.Ordinal);
        Assert.DoesNotContain("secret-token", show.Output + show.Error, StringComparison.Ordinal);

        // The selected context is what a command connects with (the broker has auth off: the token is ignored).
        string topic = Unique("cli.ctx");
        await using HeraldRun sub = Start(["sub", topic, "--count", "1"]);
        await sub.WaitForErrorLineAsync($"on {fixture.Broker.TcpUrl}");
        AssertExit(0, await RunAsync(["pub", topic, "via the context"]));
        Assert.Equal(0, await sub.WaitForExitAsync());
        Assert.Contains("via the context", sub.Output, StringComparison.Ordinal);

        AssertExit(0, await RunAsync(["context", "rm", "dev"]));
        Assert.False(File.Exists(devFile));
        HeraldRun after = await RunAsync(["context", "ls"]);
        Assert.Equal("  other             tcp://127.0.0.1:1\n", after.Output);
        HeraldRun again = await RunAsync(["context", "rm", "dev"]);
        AssertExit(1, again);
        Assert.Contains("no context named 'dev'", again.Error, StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_flag_beats_the_environment_which_beats_the_context()
    {
        int contextPort = TestBroker.FreePort(), environmentPort = TestBroker.FreePort(), flagPort = TestBroker.FreePort();
        AssertExit(0, await RunAsync(["context", "add", "c", "--server", $"tcp://127.0.0.1:{contextPort}", "--select"]));
        var environment = new Dictionary<string, string> { ["HERALD_URL"] = $"tcp://127.0.0.1:{environmentPort}" };

        HeraldRun all = await RunAsync(["pub", "t", "x", "--server", $"tcp://127.0.0.1:{flagPort}"], environment);
        HeraldRun noFlag = await RunAsync(["pub", "t", "x"], environment);
        HeraldRun contextOnly = await RunAsync(["pub", "t", "x"]);

        AssertExit(3, all);
        Assert.Contains($"127.0.0.1:{flagPort}", all.Error, StringComparison.Ordinal);
        AssertExit(3, noFlag);
        Assert.Contains($"127.0.0.1:{environmentPort}", noFlag.Error, StringComparison.Ordinal);
        AssertExit(3, contextOnly);
        Assert.Contains($"127.0.0.1:{contextPort}", contextOnly.Error, StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_contexts_token_goes_only_to_the_server_that_context_names()
    {
        const string Token = "context-secret-0123456789";
        using var elsewhere = new System.Net.Sockets.TcpListener(System.Net.IPAddress.Loopback, 0);
        elsewhere.Start();
        string other = $"tcp://127.0.0.1:{((System.Net.IPEndPoint)elsewhere.LocalEndpoint).Port}";
        AssertExit(0, await RunAsync(["context", "add", "mine", "--server", fixture.Broker.TcpUrl, "--token", Token, "--select"]));

        // A --server and a HERALD_URL from elsewhere: each gets the HELLO, neither the context's token.
        foreach ((string[] arguments, Dictionary<string, string>? environment) in new[]
        {
            (new[] { "pub", "t", "x", "--server", other }, (Dictionary<string, string>?)null),
            (new[] { "pub", "t", "x" }, new Dictionary<string, string> { ["HERALD_URL"] = other }),
        })
        {
            await using HeraldRun run = Start(arguments, environment);
            await run.WaitForErrorLineAsync("not sending context 'mine''s token");
            using System.Net.Sockets.TcpClient accepted = await elsewhere.AcceptTcpClientAsync();
            byte[] hello = await ReadSomeAsync(accepted.GetStream()); // no broker here: the run is ended when disposed
            Assert.NotEmpty(hello);
            Assert.DoesNotContain(Token, Encoding.UTF8.GetString(hello), StringComparison.Ordinal);
        }

        // To its own server the context's token still goes (a bystander command carries on).
        string topic = Unique("cli.ctx.token");
        await using HeraldRun sub = Start(["sub", topic, "--count", "1"]);
        await sub.WaitForErrorLineAsync($"on {fixture.Broker.TcpUrl}");
        AssertExit(0, await RunAsync(["pub", topic, "to my own server"]));
        Assert.Equal(0, await sub.WaitForExitAsync());
        Assert.DoesNotContain("not sending", sub.Error, StringComparison.Ordinal);
    }

    /// <summary>What the peer sent first (its HELLO), read until it pauses.</summary>
    private static async Task<byte[]> ReadSomeAsync(System.Net.Sockets.NetworkStream stream)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        byte[] buffer = new byte[4096];
        int read = await stream.ReadAsync(buffer, timeout.Token);
        return buffer[..read];
    }

    [Fact]
    public async Task The_context_flag_beats_HERALD_CONTEXT_which_beats_the_selected_one()
    {
        int selectedPort = TestBroker.FreePort(), environmentPort = TestBroker.FreePort(), flagPort = TestBroker.FreePort();
        AssertExit(0, await RunAsync(["context", "add", "selected", "--server", $"tcp://127.0.0.1:{selectedPort}", "--select"]));
        AssertExit(0, await RunAsync(["context", "add", "from-env", "--server", $"tcp://127.0.0.1:{environmentPort}"]));
        AssertExit(0, await RunAsync(["context", "add", "from-flag", "--server", $"tcp://127.0.0.1:{flagPort}"]));
        var environment = new Dictionary<string, string> { ["HERALD_CONTEXT"] = "from-env" };

        HeraldRun flag = await RunAsync(["pub", "t", "x", "--context", "from-flag"], environment);
        HeraldRun env = await RunAsync(["pub", "t", "x"], environment);
        HeraldRun selected = await RunAsync(["pub", "t", "x"]);

        Assert.Contains($"127.0.0.1:{flagPort}", flag.Error, StringComparison.Ordinal);
        Assert.Contains($"127.0.0.1:{environmentPort}", env.Error, StringComparison.Ordinal);
        Assert.Contains($"127.0.0.1:{selectedPort}", selected.Error, StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_malformed_context_file_is_a_clear_error_naming_the_file()
    {
        Directory.CreateDirectory(ContextFolder);
        string file = Path.Combine(ContextFolder, "broken.json");
        await File.WriteAllTextAsync(file, "{\"server\": \"tcp://127.0.0.1:4502\",");
        await File.WriteAllTextAsync(Path.Combine(ContextFolder, "typo.json"), "{\"sever\": \"tcp://127.0.0.1:4502\"}");

        HeraldRun broken = await RunAsync(["pub", "t", "x", "--context", "broken"]);
        HeraldRun typo = await RunAsync(["pub", "t", "x", "--context", "typo"]);
        HeraldRun missing = await RunAsync(["pub", "t", "x", "--context", "nowhere"]);

        AssertExit(1, broken);
        Assert.Contains($"context 'broken' ({file}) is not valid", broken.Error, StringComparison.Ordinal);
        AssertNoStackTrace(broken);
        AssertExit(1, typo);
        Assert.Contains("sever", typo.Error, StringComparison.Ordinal);
        AssertExit(1, missing);
        Assert.Contains("no context named 'nowhere'", missing.Error, StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_context_name_cannot_leave_the_context_folder()
    {
        HeraldRun escape = await RunAsync(["context", "add", "../../escaped", "--server", "tcp://127.0.0.1:1"]);

        AssertExit(2, escape);
        Assert.Contains("is not a context name", escape.Error, StringComparison.Ordinal);
        Assert.False(File.Exists(Path.Combine(ConfigHome, "escaped.json")));
        Assert.False(Directory.Exists(ContextFolder) && Directory.EnumerateFileSystemEntries(ContextFolder).Any());
    }

    [Fact]
    public async Task A_token_file_others_can_read_is_used_with_a_warning_and_rewritten_owner_only()
    {
        if (OperatingSystem.IsWindows())
        {
            return; // Unix file modes
        }

        AssertExit(0, await RunAsync(["context", "add", "leaky", "--server", fixture.Broker.TcpUrl, "--token", "t0ken-0123456789"]));
        string file = Path.Combine(ContextFolder, "leaky.json");
        File.SetUnixFileMode(file, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead | UnixFileMode.OtherRead);

        HeraldRun show = await RunAsync(["context", "show", "leaky"]);
        AssertExit(0, show);
        Assert.Contains("is readable by others", show.Error, StringComparison.Ordinal);

        AssertExit(0, await RunAsync(["context", "add", "leaky", "--server", fixture.Broker.TcpUrl, "--token", "t0ken-0123456789"]));
        Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite, File.GetUnixFileMode(file));
    }
}
