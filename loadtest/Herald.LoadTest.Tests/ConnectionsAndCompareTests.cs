using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>connections</c> and <c>compare</c> end to end at a tiny size against the real broker: the scenario
/// holds the idle connections it was asked for and reports RSS per connection; compare runs it per target,
/// embeds each result, and lists a target whose server is unavailable as skipped without failing.
/// </summary>
public class ConnectionsAndCompareTests
{
    private static string[] HeraldArgs()
    {
        int first = Repo.FreePorts(4);
        return
        [
            "--ports", $"{first}-{first + 1}", "--http-port", (first + 2).ToString(CultureInfo.InvariantCulture), "--monitoring-port", (first + 3).ToString(CultureInfo.InvariantCulture),
            "--broker-dll", Repo.BrokerDll, "--settle", "0.2", "--warmup", "5",
        ];
    }

    [Fact]
    public async Task Connections_holds_every_idle_subscriber_of_each_step_and_reports_rss_per_connection()
    {
        string outFile = Repo.OutFile("connections");
        int code = await Repo.RunAsync("connections", [.. HeraldArgs(), "--steps", "20,50", "--out", outFile]);

        Assert.Equal(ExitCodes.Ok, code);
        JsonElement result = Repo.ReadJson(outFile);
        Assert.Equal("connections", result.GetProperty("scenario").GetString());
        JsonElement steps = result.GetProperty("repetitions")[0].GetProperty("steps");
        Assert.Equal([20, 50], steps.EnumerateArray().Select(s => s.GetProperty("connections").GetInt32()));
        Assert.All(steps.EnumerateArray(), s => Assert.Equal(s.GetProperty("connections").GetInt32(), s.GetProperty("alive").GetInt32()));
        Assert.All(steps.EnumerateArray(), s => Assert.True(s.GetProperty("serverRssBytes").GetInt64() > 0));
        Assert.True(steps[1].TryGetProperty("gcHeapBytes", out JsonElement heap) && heap.GetInt64() > 0, "the broker's GC heap from /varz");

        Dictionary<string, JsonElement> headlines = result.GetProperty("headlines").EnumerateArray().ToDictionary(h => h.GetProperty("name").GetString()!);
        Assert.Equal(50, headlines["connections held"].GetProperty("value").GetDouble());
        Assert.True(headlines["connections held"].GetProperty("higherIsBetter").GetBoolean());
        Assert.Equal(JsonValueKind.Number, headlines["server RSS per connection"].GetProperty("value").ValueKind);
        Assert.False(headlines["server RSS per connection"].GetProperty("higherIsBetter").GetBoolean());
    }

    [Fact]
    public async Task Compare_runs_the_scenario_per_target_embeds_each_result_and_computes_ratios()
    {
        Repo.EnsurePeerServers();
        string outFile = Repo.OutFile("compare");
        string markdown = Path.ChangeExtension(Repo.OutFile("compare"), ".md");
        string[] herald = HeraldArgs();
        string port = herald[1].Split('-')[0]; // peers take the first port of the range: free again once Herald has stopped
        int code = await Repo.RunAsync("compare", ["connections", .. herald, "--port", port, "--steps", "10", "--targets", "herald/tcp,herald/websocket,nats/tcp", "--out", outFile, "--markdown", markdown]);

        Assert.Equal(ExitCodes.Ok, code);
        JsonElement result = Repo.ReadJson(outFile);
        Assert.Equal("connections", result.GetProperty("comparedScenario").GetString());
        JsonElement[] targets = [.. result.GetProperty("targets").EnumerateArray()];
        AssertStamped(result, "herald-loadtest compare connections ");
        AssertStamped(targets[2].GetProperty("result"), "herald-loadtest connections "); // each run its own command line, not compare's
        Assert.Equal(["herald/tcp", "herald/websocket", "nats/tcp"], targets.Select(t => t.GetProperty("label").GetString()));
        Assert.All(targets, t => Assert.Equal("ok", t.GetProperty("status").GetString()));

        JsonElement embedded = targets[2].GetProperty("result");
        Assert.Equal("connections", embedded.GetProperty("scenario").GetString());
        Assert.StartsWith("nats-server", embedded.GetProperty("target").GetProperty("server").GetString(), StringComparison.Ordinal);
        Assert.Contains(embedded.GetProperty("headlines").EnumerateArray(), h => h.GetProperty("name").GetString() == "connections held" && h.GetProperty("value").GetDouble() == 10);
        Assert.All(targets[0].GetProperty("ratios").EnumerateArray(), r => Assert.Equal(1.0, r.GetProperty("heraldAdvantage").GetDouble(), 9));
        Assert.Contains(targets[2].GetProperty("ratios").EnumerateArray(), r => r.GetProperty("heraldAdvantage").ValueKind == JsonValueKind.Number);

        // herald/websocket: its own run (the HTTP port's /ws), compared with herald/tcp like a peer
        JsonElement websocket = targets[1].GetProperty("result");
        Assert.Equal("herald/websocket", websocket.GetProperty("target").GetProperty("label").GetString());
        Assert.Contains(websocket.GetProperty("headlines").EnumerateArray(), h => h.GetProperty("name").GetString() == "connections held" && h.GetProperty("value").GetDouble() == 10);
        Assert.Contains(targets[1].GetProperty("ratios").EnumerateArray(), r => r.GetProperty("heraldAdvantage").ValueKind == JsonValueKind.Number);

        string table = File.ReadAllText(markdown);
        Assert.Contains(table.Split('\n'), line => line.StartsWith("| herald/tcp |", StringComparison.Ordinal) && line.EndsWith("| 10 | 1.00x |", StringComparison.Ordinal));
        Assert.Contains(table.Split('\n'), line => line.StartsWith("| herald/websocket |", StringComparison.Ordinal) && line.Contains("| 10 |", StringComparison.Ordinal));
        Assert.Contains(table.Split('\n'), line => line.StartsWith("| nats/tcp |", StringComparison.Ordinal));
    }

    /// <summary>What a table built from the file needs to name its run: the command line, when, and the machine and its load.</summary>
    private static void AssertStamped(JsonElement result, string commandStart)
    {
        Assert.StartsWith(commandStart, result.GetProperty("commandLine").GetString(), StringComparison.Ordinal);
        Assert.True(result.GetProperty("startedUtc").GetDateTimeOffset() <= result.GetProperty("finishedUtc").GetDateTimeOffset());
        Assert.Equal(JsonValueKind.String, result.GetProperty("sourceCommit").ValueKind); // the tests run in a git checkout
        JsonElement machine = result.GetProperty("machine");
        Assert.Equal(JsonValueKind.String, machine.GetProperty("runtime").ValueKind);
        if (OperatingSystem.IsLinux())
        {
            Assert.False(string.IsNullOrEmpty(machine.GetProperty("cpuModel").GetString()));
            Assert.True(machine.GetProperty("memoryBytes").GetInt64() > 0);
            Assert.Equal(3, machine.GetProperty("loadAverageBefore").GetArrayLength());
            Assert.Equal(3, machine.GetProperty("loadAverageAfter").GetArrayLength());
        }
    }

    [Fact]
    public async Task Compare_lists_a_target_it_cannot_reach_as_skipped_with_the_reason()
    {
        string outFile = Repo.OutFile("compare");
        string nobody = Repo.FreePorts(1).ToString(CultureInfo.InvariantCulture);
        // --setup-timeout: how long each target is retried before it counts as unreachable (30 s by default), not
        // part of what is checked; nothing listens on the port, so the answer is the same after 2 s
        int code = await Repo.RunAsync("compare", ["connections", "--server", "external", "--port", nobody, "--steps", "10", "--settle", "0.2", "--setup-timeout", "2", "--targets", "nats/tcp,redis/tcp", "--out", outFile]);

        Assert.Equal(ExitCodes.BrokerUnreachable, code); // nothing could run
        JsonElement[] targets = [.. Repo.ReadJson(outFile).GetProperty("targets").EnumerateArray()];
        Assert.Equal(2, targets.Length);
        Assert.All(targets, t =>
        {
            Assert.Equal("skipped", t.GetProperty("status").GetString());
            Assert.Equal(ExitCodes.BrokerUnreachable, t.GetProperty("exitCode").GetInt32());
            Assert.False(string.IsNullOrWhiteSpace(t.GetProperty("reason").GetString()));
        });
    }

    [Fact]
    public async Task Compare_without_a_scenario_or_with_an_option_it_sets_itself_is_a_usage_error()
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("compare", "--targets", "herald/tcp"));
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("compare", "connections", "--target", "nats"));
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("compare", "connections", "--targets", "herald/quic"));
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("compare", "connections", "--targets", "nats/websocket"));
    }
}
