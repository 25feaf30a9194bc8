using System.Diagnostics;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// The sample CLI (clients/dotnet/samples/Herald.Client.Publish), run as a separate process exactly as
/// the browser test runs it: <c>dotnet Herald.Client.Publish.dll --url ... --topic ... --message ... [--count N]</c>.
/// </summary>
public class SampleTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    [Theory]
    [InlineData(HeraldTransport.Tcp)]
    [InlineData(HeraldTransport.LongPoll)]
    public async Task The_publish_sample_publishes_count_messages_flushes_and_exits_0(HeraldTransport transport)
    {
        string topic = Topics.Unique("sample");
        await using HeraldClient subscriber = fixture.Client(HeraldTransport.LongPoll);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic);

        (int exit, string output) = await RunAsync("--url", fixture.Broker.Url(transport), "--topic", topic, "--message", "héllo from the sample", "--count", "3");

        Assert.True(exit == 0, output);
        for (int i = 0; i < 3; i++)
        {
            Assert.Equal("héllo from the sample", (await subscription.ReadAsync(Wait.Token())).GetString());
        }
    }

    [Fact]
    public async Task The_publish_sample_exits_1_when_the_broker_cannot_be_reached_and_2_on_bad_arguments()
    {
        (int unreachable, string why) = await RunAsync("--url", $"tcp://127.0.0.1:{TestBroker.FreePort()}", "--topic", "t", "--message", "m");
        (int missing, _) = await RunAsync("--url", fixture.Broker.TcpUrl, "--topic", "t");

        Assert.Equal(1, unreachable);
        Assert.Contains("Could not connect", why, StringComparison.Ordinal);
        Assert.Equal(2, missing);
    }

    private static async Task<(int Exit, string Output)> RunAsync(params string[] args)
    {
        var start = new ProcessStartInfo(Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") ?? "dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        start.ArgumentList.Add(Path.Combine(AppContext.BaseDirectory, "Herald.Client.Publish.dll"));
        foreach (string arg in args)
        {
            start.ArgumentList.Add(arg);
        }

        using Process process = Process.Start(start)!;
        Task<string> stdout = process.StandardOutput.ReadToEndAsync();
        Task<string> stderr = process.StandardError.ReadToEndAsync();
        await process.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(60));
        return (process.ExitCode, await stdout + await stderr);
    }
}
