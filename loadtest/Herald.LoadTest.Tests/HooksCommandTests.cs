using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>hooks</c> end to end at a tiny size against the real broker and the backend the tool starts: every configuration
/// runs and the result file has each operation's rate, p50 and p99 without and with its hook, one repetition per round.
/// No speed is asserted.
/// </summary>
public class HooksCommandTests
{
    [Fact]
    public async Task Hooks_runs_every_configuration_at_a_tiny_size_and_writes_every_figure()
    {
        int first = Repo.FreePorts(3);
        string outFile = Repo.OutFile("hooks");
        string Port(int offset) => (first + offset).ToString(CultureInfo.InvariantCulture);
        int code = await Repo.RunAsync("hooks",
        [
            "--ports", $"{first}-{first}", "--http-port", Port(1), "--monitoring-port", Port(2), "--broker-dll", Repo.BrokerDll,
            "--connections", "20", "--concurrency", "4", "--rounds", "1", "--out", outFile,
        ]);

        Assert.Equal(ExitCodes.Ok, code);
        JsonElement result = Repo.ReadJson(outFile);
        Assert.Equal("hooks", result.GetProperty("scenario").GetString());
        Assert.True(result.GetProperty("ok").GetBoolean());
        string[] expected =
        [
            "connect/s, no hook", "connect p50 us, no hook", "connect p99 us, no hook", "connect/s, hook", "connect p50 us, hook", "connect p99 us, hook",
            "subscribe/s, no hook", "subscribe p50 us, no hook", "subscribe p99 us, no hook", "subscribe/s, hook", "subscribe p50 us, hook", "subscribe p99 us, hook",
        ];
        JsonElement[] headlines = [.. result.GetProperty("headlines").EnumerateArray()];
        Assert.Equal(expected, headlines.Select(h => h.GetProperty("name").GetString()));
        Assert.All(headlines, h => Assert.True(h.GetProperty("value").GetDouble() > 0 && h.GetProperty("repetitions").GetInt32() == 1));
        Assert.Equal(4, result.GetProperty("runs").GetArrayLength());
    }
}
