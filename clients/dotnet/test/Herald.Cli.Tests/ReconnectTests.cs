using Herald.Cli.Tests.Infrastructure;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Cli.Tests;

/// <summary><c>herald sub</c> says on stderr what the client goes through: a lost connection, the reconnect.</summary>
[Collection(ToolCollection.Name)]
public sealed class ReconnectTests(ToolFixture tool) : CliTest(tool)
{
    [Fact]
    public async Task Sub_reports_a_broker_restart_and_goes_on_printing_after_it()
    {
        int port = TestBroker.FreePort();
        string server = $"tcp://127.0.0.1:{port}";
        string topic = Unique("cli.restart");
        TestBroker broker = await TestBroker.StartAsync(tcpPort: port);
        try
        {
            await using HeraldRun sub = Start(["sub", topic, "--count", "1", "--server", server]);
            await sub.WaitForErrorLineAsync("Subscribed to");

            await broker.StopAsync();
            await sub.WaitForErrorLineAsync("reconnecting");
            await broker.DisposeAsync();
            broker = await TestBroker.StartAsync(tcpPort: port);
            await sub.WaitForErrorLineAsync("reconnected"); // subscribed again before this line

            AssertExit(0, await RunAsync(["pub", topic, "after the restart", "--server", server]));

            Assert.Equal(0, await sub.WaitForExitAsync());
            Assert.Equal($"[#1] {topic} (17 bytes)\nafter the restart\n", sub.Output);
            Assert.Contains("herald: connection lost (", sub.Error, StringComparison.Ordinal);
        }
        finally
        {
            await broker.DisposeAsync();
        }
    }
}
