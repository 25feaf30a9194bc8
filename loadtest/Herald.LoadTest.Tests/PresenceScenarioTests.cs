using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>presence</c> end to end at a tiny size against the real broker, so the scenario behind README's presence table
/// cannot rot: every phase runs, the result file has every figure, and the counts it checks itself are right. No speed
/// is asserted.
/// </summary>
public class PresenceScenarioTests
{
    [Fact]
    public async Task Presence_runs_every_phase_at_a_tiny_size_and_writes_every_figure()
    {
        int first = Repo.FreePorts(4);
        string outFile = Repo.OutFile("presence");
        string Port(int offset) => (first + offset).ToString(CultureInfo.InvariantCulture);
        int code = await Repo.RunAsync("presence",
        [
            "--ports", $"{first}-{Port(1)}", "--http-port", Port(2), "--monitoring-port", Port(3), "--broker-dll", Repo.BrokerDll,
            "--connections", "10", "--subscriptions", "20", "--members", "300", "--watchers", "3", "--max-events-members", "50",
            "--queries", "20", "--reads", "2", "--settle", "0", "--out", outFile,
        ]);

        Assert.Equal(ExitCodes.Ok, code);
        JsonElement result = Repo.ReadJson(outFile);
        Assert.Equal("presence", result.GetProperty("scenario").GetString());
        Assert.StartsWith("herald-loadtest presence ", result.GetProperty("commandLine").GetString(), StringComparison.Ordinal);
        Assert.True(result.GetProperty("machine").GetProperty("processorCount").GetInt32() > 0);
        Assert.True(result.GetProperty("ok").GetBoolean());

        Dictionary<string, JsonElement> headlines = result.GetProperty("headlines").EnumerateArray().ToDictionary(h => h.GetProperty("name").GetString()!, h => h.GetProperty("value"));
        Assert.Equal(
            ["subscribe/s, plain", "subscribe/s, with join", "join/plain subscribe rate", "GC heap per plain subscription", "GC heap per member", "RSS per member",
             "joins/s into a watched topic", "GC heap per join of the large topic", "join events per watcher", "events suppressed", "occupancy p50 latency us", "occupancy p99 latency us", "full read ms"],
            headlines.Keys);
        Assert.All(headlines.Values, v => Assert.Equal(JsonValueKind.Number, v.ValueKind)); // memory growth may be 0 or less at this size
        foreach (string rate in new[] { "subscribe/s, plain", "subscribe/s, with join", "join/plain subscribe rate", "joins/s into a watched topic", "occupancy p50 latency us", "full read ms" })
        {
            Assert.True(headlines[rate].GetDouble() > 0, rate);
        }

        Assert.Equal(50, headlines["join events per watcher"].GetDouble()); // a join each up to --max-events-members, then one suppressed
        Assert.Equal(3 * (300 - 50), headlines["events suppressed"].GetDouble()); // /varz: every watcher, every join above it

        JsonElement repetition = Assert.Single(result.GetProperty("repetitions").EnumerateArray());
        Assert.Equal(200, repetition.GetProperty("subscriptionsPerPhase").GetDouble());
        Assert.Equal(3, repetition.GetProperty("suppressedEventsReceived").GetInt64());
        Assert.Equal(3 * 51, repetition.GetProperty("eventsSent").GetInt64());
        Assert.Equal(20, repetition.GetProperty("occupancy").GetProperty("count").GetInt64());
        Assert.Equal((1, 300), (repetition.GetProperty("fullReadPages").GetInt32(), repetition.GetProperty("fullReadMembers").GetInt32()));
        Assert.Equal(300, result.GetProperty("parameters").GetProperty("members").GetInt32());
    }
}
