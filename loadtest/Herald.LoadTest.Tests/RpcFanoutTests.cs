using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>fanout</c> and <c>rpc</c> end to end at a tiny size against the broker the tool starts: every mode and
/// payload runs, passes its own checks (nothing lost, reordered, wrong or unanswered) and writes a result
/// with its headlines. Sizes and times are small so each test takes a few seconds; no figure is asserted.
/// </summary>
public class RpcFanoutTests
{
    private static string[] TargetArgs()
    {
        int first = Repo.FreePorts(3);
        return
        [
            "--ports", $"{first}-{first + 1}", "--http-port", (first + 2).ToString(CultureInfo.InvariantCulture),
            "--broker-dll", Repo.BrokerDll, "--setup-timeout", "60", "--warmup", "0.3", "--seconds", "1", "--grace", "5",
        ];
    }

    [Fact]
    public async Task Fanout_delivers_every_message_in_order_and_reports_its_headline()
    {
        string output = Repo.OutFile("fanout");
        int exit = await Repo.RunAsync("fanout", [.. TargetArgs(), "--subscribers", "5", "--max-lead", "2000", "--repeat", "2", "--out", output]);

        JsonElement json = Repo.ReadJson(output);
        Assert.Equal(ExitCodes.Ok, exit);
        Assert.Equal("fanout", json.GetProperty("scenario").GetString());
        Assert.Equal("herald/tcp", json.GetProperty("target").GetProperty("label").GetString());
        JsonElement headline = Assert.Single(json.GetProperty("headlines").EnumerateArray());
        Assert.Equal("deliveries/s", headline.GetProperty("name").GetString());
        Assert.True(headline.GetProperty("value").GetDouble() > 0);
        Assert.Equal(2, headline.GetProperty("repetitions").GetInt32());
        Assert.Equal(2, json.GetProperty("repetitions").GetArrayLength());
        foreach (JsonElement run in json.GetProperty("repetitions").EnumerateArray())
        {
            Assert.True(run.GetProperty("deliveries").GetInt64() > 0);
            Assert.Equal(0, run.GetProperty("missing").GetInt64());
            Assert.Equal(0, run.GetProperty("reordered").GetInt64());
            Assert.Equal(0, run.GetProperty("unexpected").GetInt64());
            Assert.Equal(0, run.GetProperty("undeliveredAfterGrace").GetInt64());
            Assert.True(run.GetProperty("resources").GetProperty("toolCpuSeconds").GetDouble() > 0);
        }

        Assert.True(json.GetProperty("ok").GetBoolean());
    }

    [Theory]
    [InlineData("twoway", "small", 1)]
    [InlineData("twoway", "composite", 3)]
    [InlineData("twoway", "list42", 2)]
    [InlineData("oneway", "small", 1)]
    [InlineData("oneway", "list42", 3)]
    public async Task Rpc_answers_every_call_with_the_service_reply(string mode, string payload, int callers)
    {
        string output = Repo.OutFile($"rpc-{mode}-{payload}");
        int exit = await Repo.RunAsync("rpc", [.. TargetArgs(), "--mode", mode, "--payload", payload, "--callers", callers.ToString(CultureInfo.InvariantCulture), "--responders", "2", "--max-lead", "500", "--out", output]);

        JsonElement json = Repo.ReadJson(output);
        Assert.Equal(ExitCodes.Ok, exit);
        Assert.Equal("rpc", json.GetProperty("scenario").GetString());
        Assert.Equal(mode, json.GetProperty("parameters").GetProperty("mode").GetString());
        Assert.Equal(payload, json.GetProperty("parameters").GetProperty("payload").GetString());
        Dictionary<string, double> headlines = json.GetProperty("headlines").EnumerateArray().ToDictionary(h => h.GetProperty("name").GetString()!, h => h.GetProperty("value").GetDouble());
        Assert.True(headlines["calls/s"] > 0);
        if (mode == "twoway")
        {
            Assert.True(headlines["p50 latency us"] > 0);
            Assert.True(headlines["p99 latency us"] >= headlines["p50 latency us"]);
        }
        else
        {
            Assert.DoesNotContain("p50 latency us", headlines.Keys);
        }

        JsonElement run = Assert.Single(json.GetProperty("repetitions").EnumerateArray());
        Assert.True(run.GetProperty("calls").GetInt64() > 0);
        Assert.True(run.GetProperty("requestsHandled").GetInt64() >= run.GetProperty("calls").GetInt64());
        Assert.Equal(0, run.GetProperty("unexpected").GetInt64());
        Assert.Equal(0, run.GetProperty("missing").GetInt64());
        Assert.Equal(0, run.GetProperty("reordered").GetInt64());
        Assert.Equal(0, run.GetProperty("unanswered").GetInt64());
        Assert.True(json.GetProperty("ok").GetBoolean());
    }

    [Fact]
    public async Task Rpc_rejects_an_unknown_payload()
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("rpc", [.. TargetArgs(), "--payload", "huge"]));
    }
}
