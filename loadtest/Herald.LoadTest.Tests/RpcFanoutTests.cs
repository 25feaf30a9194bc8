using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>fanout</c> and <c>rpc</c> end to end at a tiny size against the broker the tool starts: every mode and
/// payload runs, passes its own checks (nothing lost, reordered, wrong or unanswered) and writes a result
/// with its headlines, each computed from the repetitions it saved. Sizes and times are small so each test
/// takes a few seconds; no speed is asserted.
/// </summary>
public class RpcFanoutTests
{
    private static string[] TargetArgs()
    {
        int first = Repo.FreePorts(4);
        return
        [
            "--ports", $"{first}-{first + 1}", "--http-port", (first + 2).ToString(CultureInfo.InvariantCulture), "--monitoring-port", (first + 3).ToString(CultureInfo.InvariantCulture),
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
        Assert.Equal(2, headline.GetProperty("repetitions").GetInt32());
        JsonElement[] runs = [.. json.GetProperty("repetitions").EnumerateArray()];
        Assert.Equal(2, runs.Length);
        foreach (JsonElement run in runs)
        {
            // the rate is the window's deliveries over the window's length, and nothing went missing
            Assert.Equal(run.GetProperty("deliveries").GetInt64() / run.GetProperty("measuredSeconds").GetDouble(), run.GetProperty("deliveriesPerSecond").GetDouble(), 6);
            Assert.Equal(0, run.GetProperty("missing").GetInt64());
            Assert.Equal(0, run.GetProperty("reordered").GetInt64());
            Assert.Equal(0, run.GetProperty("unexpected").GetInt64());
            Assert.Equal(0, run.GetProperty("undeliveredAfterGrace").GetInt64());
            Assert.Equal(0, run.GetProperty("disconnectedSubscribers").GetInt64());
        }

        // the headline is the median of the repetitions (of two, their mean), the spread their range
        double[] rates = [.. runs.Select(r => r.GetProperty("deliveriesPerSecond").GetDouble()).Order()];
        Assert.Equal((rates[0] + rates[1]) / 2, headline.GetProperty("value").GetDouble(), 6);
        Assert.Equal(rates[0], headline.GetProperty("min").GetDouble());
        Assert.Equal(rates[1], headline.GetProperty("max").GetDouble());

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
        JsonElement run = Assert.Single(json.GetProperty("repetitions").EnumerateArray());
        long calls = run.GetProperty("calls").GetInt64();

        // one repetition: each headline is that repetition's figure
        Assert.Equal(calls / run.GetProperty("measuredSeconds").GetDouble(), run.GetProperty("callsPerSecond").GetDouble(), 6);
        Assert.Equal(run.GetProperty("callsPerSecond").GetDouble(), headlines["calls/s"]);
        JsonElement latency = run.GetProperty("latency");
        if (mode == "twoway")
        {
            Assert.Equal(["calls/s", "p50 latency us", "p99 latency us"], headlines.Keys);
            Assert.Equal(latency.GetProperty("medianUs").GetDouble(), headlines["p50 latency us"]);
            Assert.Equal(latency.GetProperty("p99Us").GetDouble(), headlines["p99 latency us"]);
        }
        else
        {
            Assert.Equal(["calls/s"], headlines.Keys);
            Assert.Equal(0, latency.GetProperty("count").GetInt64());
        }

        Assert.True(run.GetProperty("requestsHandled").GetInt64() >= calls, "the responders handled at least the calls counted in the window");
        Assert.Equal(0, run.GetProperty("unexpected").GetInt64());
        Assert.Equal(0, run.GetProperty("missing").GetInt64());
        Assert.Equal(0, run.GetProperty("reordered").GetInt64());
        Assert.Equal(0, run.GetProperty("unanswered").GetInt64());
        Assert.True(json.GetProperty("ok").GetBoolean());
    }

    [Theory]
    [InlineData("herald", "twoway")]
    [InlineData("herald", "oneway")]
    [InlineData("nats", "twoway")]
    [InlineData("nats", "oneway")]
    public async Task Rpc_with_responders_in_a_queue_group_answers_every_call_once(string target, string mode)
    {
        if (target == "nats")
        {
            Repo.EnsurePeerServers();
        }

        string[] args = TargetArgs();
        string output = Repo.OutFile($"rpc-queue-{target}-{mode}");
        int exit = await Repo.RunAsync("rpc", [.. args, "--target", target, "--port", args[1].Split('-')[0], "--mode", mode, "--callers", "3", "--responders", "3", "--queue", "workers", "--max-lead", "500", "--out", output]);

        // Had every responder been given every request, the callers would have got each reply three times
        // (twoway: replies to calls no longer in flight, counted unexpected) or each request (oneway: seen twice).
        JsonElement json = Repo.ReadJson(output);
        Assert.Equal(ExitCodes.Ok, exit);
        Assert.Equal("workers", json.GetProperty("parameters").GetProperty("queue").GetString());
        JsonElement run = Assert.Single(json.GetProperty("repetitions").EnumerateArray());
        Assert.True(run.GetProperty("calls").GetInt64() > 0);
        Assert.Equal(0, run.GetProperty("unexpected").GetInt64());
        Assert.Equal(0, run.GetProperty("reordered").GetInt64());
        Assert.True(json.GetProperty("ok").GetBoolean());
    }

    [Theory]
    [InlineData("redis")]
    [InlineData("signalr")]
    public async Task Rpc_refuses_a_queue_group_on_a_target_without_them(string target)
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("rpc", [.. TargetArgs(), "--target", target, "--queue", "workers"]));
    }

    [Fact]
    public async Task Rpc_rejects_an_unknown_payload()
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("rpc", [.. TargetArgs(), "--payload", "huge"]));
    }
}
