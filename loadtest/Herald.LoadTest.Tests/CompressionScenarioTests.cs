using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>compression</c> end to end at a tiny size: the tool starts a broker per mode, streams the simple class
/// through a link-capped subscriber, checks every payload, and reports that adaptive compression sent
/// compressed messages that arrived intact (with fewer wire bytes than payload bytes) while "none" sent none.
/// </summary>
public class CompressionScenarioTests
{
    [Fact]
    public async Task Simple_messages_go_compressed_with_adaptive_and_plain_with_none_and_every_payload_checks_out()
    {
        string outFile = Repo.OutFile("compression");
        string port = Repo.FreePorts(1).ToString(CultureInfo.InvariantCulture);

        // 2 s windows: the run refuses to report a window under 0.5 s, which a 1 s window became on a loaded machine.
        int code = await Repo.RunAsync("compression",
            "--class", "simple", "--mode", "none,adaptive", "--link-mbps", "100", "--seconds", "2", "--warmup", "0.5",
            "--pool", "4", "--port", port, "--broker-dll", Repo.BrokerDll, "--out", outFile);

        Assert.True(code == ExitCodes.Ok, $"exit {code}: {(File.Exists(outFile) ? File.ReadAllText(outFile) : "no result file")}"); // the result says why
        Dictionary<string, JsonElement> runs = Repo.ReadJson(outFile).GetProperty("runs").EnumerateArray().ToDictionary(r => r.GetProperty("mode").GetString()!);
        Assert.All(runs.Values, r => Assert.True(r.GetProperty("ok").GetBoolean()));
        Assert.All(runs.Values, r => Assert.True(r.GetProperty("messages").GetInt64() > 0));
        Assert.Equal(0, runs["none"].GetProperty("compressedMessages").GetInt64());
        Assert.True(runs["adaptive"].GetProperty("compressedMessages").GetInt64() > 0);
        Assert.True(runs["adaptive"].GetProperty("wireRatio").GetDouble() < 0.5, "simple messages compress well");
    }
}
