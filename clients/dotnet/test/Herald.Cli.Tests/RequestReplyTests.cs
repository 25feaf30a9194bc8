using System.Text.Json;
using Herald.Cli.Tests.Infrastructure;

namespace Herald.Cli.Tests;

/// <summary><c>herald req</c> and <c>herald reply</c>: an echo, a command per request, and the two ways to get no reply.</summary>
[Collection(ToolCollection.Name)]
public sealed class RequestReplyTests(ToolFixture tool, OpenBroker fixture) : CliTest(tool), IClassFixture<OpenBroker>
{
    private string Server => fixture.Broker.TcpUrl;

    [Fact]
    public async Task Reply_echoes_a_request_with_its_headers_and_req_prints_the_reply()
    {
        string topic = Unique("svc.echo");
        await using HeraldRun reply = Start(["reply", topic, "--count", "1", "--server", Server]);
        await reply.WaitForErrorLineAsync("Listening for requests");

        HeraldRun req = await RunAsync(["req", topic, "ping", "-H", "X-Id=7", "--output", "json", "--server", Server]);

        AssertExit(0, req);
        using JsonDocument answer = JsonDocument.Parse(req.Output);
        Assert.Equal("ping", answer.RootElement.GetProperty("payload").GetString());
        Assert.Equal("7", answer.RootElement.GetProperty("headers").GetProperty("X-Id")[0].GetString());
        Assert.Equal(0, await reply.WaitForExitAsync());
        Assert.Contains($"[#1] answered a request on '{topic}' (4 bytes)", reply.Error, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Reply_with_a_command_answers_with_its_output_given_the_request_on_stdin()
    {
        string topic = Unique("svc.upper");
        await using HeraldRun reply = Start(["reply", topic, "--command", "tr a-z A-Z; printf \" on %s\" \"$HERALD_TOPIC\"", "--count", "2", "--server", Server]);
        await reply.WaitForErrorLineAsync("Listening for requests");

        HeraldRun first = await RunAsync(["req", topic, "hello", "--server", Server]);
        HeraldRun second = await RunAsync(["req", topic, "--server", Server], stdin: "again"u8.ToArray());

        AssertExit(0, first);
        Assert.Equal($"HELLO on {topic}\n", first.Output);
        AssertExit(0, second);
        Assert.Equal($"AGAIN on {topic}\n", second.Output);
        Assert.Equal(0, await reply.WaitForExitAsync());
    }

    [Fact]
    public async Task A_request_nobody_subscribes_to_exits_5_at_once_with_no_responders()
    {
        HeraldRun req = await RunAsync(["req", Unique("svc.nobody"), "hi", "--timeout", "30s", "--server", Server]);

        AssertExit(5, req);
        Assert.Contains("no responders", req.Error, StringComparison.Ordinal);
        Assert.Equal("", req.Output);
        AssertNoStackTrace(req);
    }

    [Fact]
    public async Task A_request_a_subscriber_never_answers_exits_5_after_the_timeout()
    {
        string topic = Unique("svc.silent");
        await using HeraldRun silent = Start(["sub", topic, "--server", Server]); // subscribed, never replies
        await silent.WaitForErrorLineAsync("Subscribed to");

        HeraldRun req = await RunAsync(["req", topic, "anyone?", "--timeout", "300ms", "--server", Server]);

        AssertExit(5, req);
        Assert.Contains($"no reply on '{topic}' within 300ms", req.Error, StringComparison.Ordinal);
        AssertNoStackTrace(req);
    }
}
