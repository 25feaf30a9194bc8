using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>--header-bytes</c> on <c>fanout</c> and <c>stream</c>: a short bounded run puts a block of exactly
/// that many bytes on every publication, every subscriber checks the block it receives (the first in full,
/// the rest by length: a delivery without it fails the run), and the result says how big the block was.
/// Targets that carry no headers in the tool, and a size too small for a block, are usage errors.
/// </summary>
public class HeaderBytesTests
{
    private static string[] TargetArgs(string target)
    {
        if (target is "nats" or "redis")
        {
            Repo.EnsurePeerServers();
        }

        int first = Repo.FreePorts(4);
        return
        [
            "--target", target, "--port", first.ToString(CultureInfo.InvariantCulture),
            "--ports", $"{first}-{first + 1}", "--http-port", (first + 2).ToString(CultureInfo.InvariantCulture), "--monitoring-port", (first + 3).ToString(CultureInfo.InvariantCulture),
            "--broker-dll", Repo.BrokerDll, "--setup-timeout", "60",
        ];
    }

    [Theory]
    [InlineData("herald")]
    [InlineData("nats")]
    public async Task Fanout_sends_the_block_with_every_publication_and_every_subscriber_receives_it(string target)
    {
        string output = Repo.OutFile($"fanout-headers-{target}");
        int exit = await Repo.RunAsync("fanout", [.. TargetArgs(target), "--header-bytes", "100", "--subscribers", "3", "--max-lead", "2000", "--warmup", "0.3", "--seconds", "1", "--grace", "5", "--out", output]);

        JsonElement json = Repo.ReadJson(output);
        Assert.Equal(ExitCodes.Ok, exit);
        Assert.Equal(100, json.GetProperty("parameters").GetProperty("headerBytes").GetInt32());
        JsonElement run = Assert.Single(json.GetProperty("repetitions").EnumerateArray());
        Assert.True(run.GetProperty("deliveries").GetInt64() > 0);
        Assert.Equal(0, run.GetProperty("unexpected").GetInt64()); // every subscriber's first block in full, every later one's length
        Assert.Equal(0, run.GetProperty("missing").GetInt64());
        Assert.True(json.GetProperty("ok").GetBoolean());
    }

    [Theory]
    [InlineData("herald")]
    [InlineData("nats")]
    public async Task Stream_sends_the_block_with_every_message_and_the_subscriber_receives_it(string target)
    {
        string output = Repo.OutFile($"stream-headers-{target}");
        int exit = await Repo.RunAsync("stream", [.. TargetArgs(target), "--header-bytes", "100", "--messages", "3000", "--warmup", "500", "--max-lead", "200", "--max-seconds", "30", "--out", output]);

        JsonElement json = Repo.ReadJson(output);
        Assert.Equal(ExitCodes.Ok, exit);
        Assert.Equal(100, json.GetProperty("parameters").GetProperty("headerBytes").GetInt32());
        JsonElement run = Assert.Single(json.GetProperty("runs").EnumerateArray());
        Assert.Equal(3000, run.GetProperty("received").GetInt64());
        Assert.Equal(0, run.GetProperty("malformed").GetInt64()); // the first block in full, every later one's length
        Assert.True(json.GetProperty("ok").GetBoolean());
    }

    [Fact]
    public async Task Without_the_option_the_result_says_no_header_block()
    {
        string output = Repo.OutFile("stream-no-headers");
        int exit = await Repo.RunAsync("stream", [.. TargetArgs("herald"), "--messages", "1000", "--warmup", "100", "--max-seconds", "30", "--out", output]);

        Assert.Equal(ExitCodes.Ok, exit);
        Assert.Equal(0, Repo.ReadJson(output).GetProperty("parameters").GetProperty("headerBytes").GetInt32());
    }

    [Theory]
    [InlineData("fanout", "redis")]
    [InlineData("stream", "redis")]
    [InlineData("fanout", "signalr")]
    public async Task A_target_without_headers_in_the_tool_is_a_usage_error(string scenario, string target)
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync(scenario, [.. TargetArgs(target), "--header-bytes", "100", .. Bounded(scenario)]));
    }

    [Theory]
    [InlineData("fanout", "8")]
    [InlineData("stream", "-1")]
    [InlineData("stream", "70000")]
    public async Task A_size_outside_0_or_32_to_65536_is_a_usage_error(string scenario, string bytes)
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync(scenario, [.. TargetArgs("herald"), "--header-bytes", bytes, .. Bounded(scenario)]));
    }

    /// <summary>A short run's options, valid for the scenario (an unknown option would be a usage error of its own).</summary>
    private static string[] Bounded(string scenario) => scenario == "fanout" ? ["--seconds", "1", "--warmup", "0.3"] : ["--messages", "1000", "--warmup", "100"];
}
