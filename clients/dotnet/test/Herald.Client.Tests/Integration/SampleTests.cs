using System.Diagnostics;
using System.Text.Json;
using System.Text.Json.Nodes;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// The sample CLIs (clients/dotnet/samples), run as separate processes exactly as the browser and interop
/// tests run them: <c>dotnet Herald.Client.Publish.dll --url ... --topic ... --message ... [--header K=V]... [--count N]</c>
/// and <c>dotnet Herald.Client.Subscribe.dll --url ... --pattern ... [--count N]</c>.
/// </summary>
public class SampleTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    [Theory]
    [InlineData(HeraldTransport.Tcp)]
    [InlineData(HeraldTransport.LongPoll)]
    public async Task The_publish_sample_publishes_count_messages_with_its_headers_flushes_and_exits_0(HeraldTransport transport)
    {
        string topic = Topics.Unique("sample");
        await using HeraldClient subscriber = fixture.Client(HeraldTransport.LongPoll);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic);

        (int exit, string output) = await RunPublishAsync(
            "--url", fixture.Broker.Url(transport), "--topic", topic, "--message", "héllo from the sample", "--count", "3",
            "--header", "X-Tag=a", "--header", "x-Case=Grüße 👋", "--header", "X-Tag=b", "--header", "X-Empty=", "--header", "X-Eq=k=v");

        Assert.True(exit == 0, output);
        for (int i = 0; i < 3; i++)
        {
            HeraldMessage message = await subscription.ReadAsync(Wait.Token());
            Assert.Equal("héllo from the sample", message.GetString());
            Assert.Equal(["X-Tag", "x-Case", "X-Empty", "X-Eq"], message.Headers.Keys);
            Assert.Equal(["a", "b"], message.Headers["X-Tag"]);
            Assert.Equal(["Grüße 👋"], message.Headers["x-Case"]);
            Assert.Equal([""], message.Headers["X-Empty"]);
            Assert.Equal(["k=v"], message.Headers["X-Eq"]);
        }
    }

    [Fact]
    public async Task The_publish_sample_exits_1_when_the_broker_cannot_be_reached_and_2_on_bad_arguments()
    {
        (int unreachable, string why) = await RunPublishAsync("--url", $"tcp://127.0.0.1:{TestBroker.FreePort()}", "--topic", "t", "--message", "m");
        (int missing, _) = await RunPublishAsync("--url", fixture.Broker.TcpUrl, "--topic", "t");

        Assert.Equal(1, unreachable);
        Assert.Contains("Could not connect", why, StringComparison.Ordinal);
        Assert.Equal(2, missing);
    }

    [Fact]
    public async Task The_publish_sample_exits_2_on_a_header_that_is_not_Key_Value_or_that_HeraldHeaders_refuses()
    {
        foreach (string header in (string[])["NoEquals", "=value", "Bad Key=x", "Herald-Status=200"])
        {
            (int exit, string output) = await RunPublishAsync("--url", fixture.Broker.TcpUrl, "--topic", "t", "--message", "m", "--header", header);
            Assert.True(exit == 2, $"{header}: {output}");
            Assert.Contains($"bad header '{header}'", output, StringComparison.Ordinal);
        }
    }

    [Theory]
    [InlineData(HeraldTransport.Tcp)]
    [InlineData(HeraldTransport.LongPoll)]
    public async Task The_subscribe_sample_prints_ready_then_each_message_as_a_JSON_line_and_exits_0_after_count(HeraldTransport transport)
    {
        string topic = Topics.Unique("sample.sub");
        string url = fixture.Broker.Url(transport);
        using Process process = Start("Herald.Client.Subscribe.dll", "--url", url, "--pattern", $"{topic}.>", "--count", "2");
        Task<string> stderr = process.StandardError.ReadToEndAsync();
        try
        {
            using JsonDocument ready = JsonDocument.Parse(await ReadLineAsync(process));
            Assert.True(ready.RootElement.GetProperty("ready").GetBoolean());
            Assert.Equal($"{topic}.>", ready.RootElement.GetProperty("pattern").GetString());

            await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp);
            await publisher.PublishAsync($"{topic}.a", "Grüße 👋", HeraldHeaders.Empty.Add("X-Tag", "a").Add("x-tag", "b").Add("X-Empty", ""));
            await publisher.PublishAsync($"{topic}.b", "plain");

            // Compared as parsed JSON (an emoji may come as \u escapes), re-written in the order it came.
            Assert.Equal(
                Json($$$"""{"topic":"{{{topic}}}.a","payload":"Grüße 👋","headers":{"X-Tag":["a","b"],"X-Empty":[""]}}"""),
                Json(await ReadLineAsync(process)));
            Assert.Equal(Json($$$"""{"topic":"{{{topic}}}.b","payload":"plain","headers":{}}"""), Json(await ReadLineAsync(process)));
            await process.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(60));
            Assert.True(process.ExitCode == 0, await stderr);
        }
        finally
        {
            if (!process.HasExited)
            {
                process.Kill();
            }
        }
    }

    [Fact]
    public async Task The_subscribe_sample_exits_1_when_the_broker_cannot_be_reached_and_2_on_bad_arguments()
    {
        (int unreachable, string why) = await RunSampleAsync("Herald.Client.Subscribe.dll", "--url", $"tcp://127.0.0.1:{TestBroker.FreePort()}", "--pattern", "t");
        (int missing, _) = await RunSampleAsync("Herald.Client.Subscribe.dll", "--url", fixture.Broker.TcpUrl);

        Assert.Equal(1, unreachable);
        Assert.Contains("Could not connect", why, StringComparison.Ordinal);
        Assert.Equal(2, missing);
    }

    private static string Json(string line) => JsonNode.Parse(line)!.ToJsonString();

    /// <summary>The next line of the process's stdout (UTF-8), within a hang bound (60 s, as for a process's exit: it may have to start first).</summary>
    private static async Task<string> ReadLineAsync(Process process)
    {
        using var bound = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        return await process.StandardOutput.ReadLineAsync(bound.Token) ?? throw new InvalidOperationException("the sample closed its output");
    }

    private static Process Start(string dll, params string[] args)
    {
        var start = new ProcessStartInfo(Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") ?? "dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
            StandardOutputEncoding = System.Text.Encoding.UTF8,
        };
        start.ArgumentList.Add(Path.Combine(AppContext.BaseDirectory, dll));
        foreach (string arg in args)
        {
            start.ArgumentList.Add(arg);
        }

        return Process.Start(start)!;
    }

    private static Task<(int Exit, string Output)> RunPublishAsync(params string[] args) => RunSampleAsync("Herald.Client.Publish.dll", args);

    private static async Task<(int Exit, string Output)> RunSampleAsync(string dll, params string[] args)
    {
        using Process process = Start(dll, args);
        Task<string> stdout = process.StandardOutput.ReadToEndAsync();
        Task<string> stderr = process.StandardError.ReadToEndAsync();
        await process.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(60));
        return (process.ExitCode, await stdout + await stderr);
    }
}
