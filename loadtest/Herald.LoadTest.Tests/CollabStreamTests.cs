using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>collab</c> and <c>stream</c> end to end at a tiny size against the broker the tool starts: the run
/// passes its own checks (exit 0), and the result file has the exact delivery counts and headlines computed
/// from the runs it saved.
/// </summary>
public class CollabStreamTests
{
    private static string[] TargetArgs()
    {
        int first = Repo.FreePorts(4);
        return
        [
            "--ports", $"{first}-{first + 1}", "--http-port", (first + 2).ToString(CultureInfo.InvariantCulture), "--monitoring-port", (first + 3).ToString(CultureInfo.InvariantCulture),
            "--broker-dll", Repo.BrokerDll,
        ];
    }

    [Fact]
    public async Task Collab_delivers_every_publication_to_every_other_client_of_the_room()
    {
        string outFile = Repo.OutFile("collab");
        int code = await Repo.RunAsync("collab", [
            "--rooms", "3", "--clients", "3", "--delay", "0.2", "--rounds", "5", "--warmup-rounds", "1", "--grace", "5",
            "--out", outFile, .. TargetArgs()]);

        Assert.Equal(ExitCodes.Ok, code);
        JsonElement result = Repo.ReadJson(outFile);
        Assert.Equal("collab", result.GetProperty("scenario").GetString());
        Assert.True(result.GetProperty("ok").GetBoolean());
        AssertHeadlines(result, "3x3-d0.2 mean latency ms", "3x3-d0.2 p99 latency ms");

        JsonElement run = Assert.Single(Assert.Single(result.GetProperty("rows").EnumerateArray()).GetProperty("runs").EnumerateArray());
        const int expected = 5 * 3 * 2; // measured rounds x rooms x (clients - the publisher)
        Assert.Equal(5 * 3, run.GetProperty("measuredPublications").GetInt64());
        Assert.Equal(expected, run.GetProperty("expected").GetInt64());
        Assert.Equal(expected, run.GetProperty("received").GetInt64());
        Assert.Equal(0, run.GetProperty("missing").GetInt64());
        Assert.Equal(0, run.GetProperty("outOfOrder").GetInt64());
        JsonElement latency = run.GetProperty("latency");
        Assert.Equal(expected, latency.GetProperty("count").GetInt64()); // one latency per delivery

        // one run: the headlines are its mean and p99, in ms (the file keeps the mean to 0.1 us)
        JsonElement[] headlines = [.. result.GetProperty("headlines").EnumerateArray()];
        Assert.Equal(latency.GetProperty("meanUs").GetDouble() / 1000, headlines[0].GetProperty("value").GetDouble(), 0.0001);
        Assert.Equal(latency.GetProperty("p99Us").GetDouble() / 1000, headlines[1].GetProperty("value").GetDouble(), 9);
    }

    [Fact]
    public async Task Collab_rejects_a_preset_it_does_not_know()
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("collab", ["--preset", "7x7-d7", .. TargetArgs()]));
    }

    [Fact]
    public async Task Stream_delivers_every_message_in_order_and_measures_throughput()
    {
        string outFile = Repo.OutFile("stream");
        int code = await Repo.RunAsync("stream", [
            "--messages", "3000", "--warmup", "500", "--max-lead", "200", "--repeat", "2", "--max-seconds", "30",
            "--out", outFile, .. TargetArgs()]);

        Assert.Equal(ExitCodes.Ok, code);
        JsonElement result = Repo.ReadJson(outFile);
        Assert.Equal("stream", result.GetProperty("scenario").GetString());
        Assert.True(result.GetProperty("ok").GetBoolean());
        AssertHeadlines(result, "messages/s", "MB/s");
        Assert.Equal(2, result.GetProperty("headlines")[0].GetProperty("repetitions").GetInt32());

        int payloadBytes = result.GetProperty("parameters").GetProperty("payloadBytes").GetInt32();
        Assert.True(payloadBytes > 5 * 16, "five strings of 16 characters plus the sequence number");
        JsonElement[] runs = [.. result.GetProperty("runs").EnumerateArray()];
        Assert.Equal(2, runs.Length);
        foreach (JsonElement run in runs)
        {
            Assert.Equal(3000, run.GetProperty("sent").GetInt64());
            Assert.Equal(3000, run.GetProperty("received").GetInt64());
            Assert.Equal(0, run.GetProperty("missing").GetInt64());
            Assert.Equal(0, run.GetProperty("outOfOrder").GetInt64());
            Assert.Equal(0, run.GetProperty("malformed").GetInt64());
            Assert.Equal(2500, run.GetProperty("measuredMessages").GetInt64());
            double perSecond = run.GetProperty("messagesPerSecond").GetDouble();
            Assert.Equal(2500 / run.GetProperty("seconds").GetDouble(), perSecond, 6);
            Assert.Equal(perSecond * payloadBytes / 1e6, run.GetProperty("megabytesPerSecond").GetDouble(), 6);
        }

        // two runs: each headline is the median of the two, i.e. their mean
        JsonElement[] headlines = [.. result.GetProperty("headlines").EnumerateArray()];
        Assert.Equal(runs.Average(r => r.GetProperty("messagesPerSecond").GetDouble()), headlines[0].GetProperty("value").GetDouble(), 6);
        Assert.Equal(runs.Average(r => r.GetProperty("megabytesPerSecond").GetDouble()), headlines[1].GetProperty("value").GetDouble(), 6);
    }

    private static void AssertHeadlines(JsonElement result, params string[] names)
    {
        JsonElement[] headlines = [.. result.GetProperty("headlines").EnumerateArray()];
        Assert.Equal(names, headlines.Select(h => h.GetProperty("name").GetString()));
        foreach (JsonElement h in headlines)
        {
            Assert.Equal(JsonValueKind.Number, h.GetProperty("value").ValueKind);
        }
    }
}
