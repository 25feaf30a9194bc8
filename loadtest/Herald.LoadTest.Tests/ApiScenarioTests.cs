using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>api</c> end to end at a tiny size against the real broker: every mode (TCP publisher, API single, API batch)
/// delivers every publication to the subscriber and the result file has each mode's figures. No speed is asserted.
/// </summary>
public class ApiScenarioTests
{
    [Fact]
    public async Task Api_runs_every_mode_at_a_tiny_size_and_writes_every_figure()
    {
        int first = Repo.FreePorts(4);
        string outFile = Repo.OutFile("api");
        string Port(int offset) => (first + offset).ToString(CultureInfo.InvariantCulture);
        int code = await Repo.RunAsync("api",
        [
            "--ports", $"{first}-{first}", "--http-port", Port(1), "--monitoring-port", Port(2), "--api-port", Port(3), "--broker-dll", Repo.BrokerDll,
            "--messages", "200", "--batch", "50", "--concurrency", "2", "--out", outFile,
        ]);

        Assert.Equal(ExitCodes.Ok, code);
        JsonElement result = Repo.ReadJson(outFile);
        Assert.Equal("api", result.GetProperty("scenario").GetString());
        Assert.True(result.GetProperty("ok").GetBoolean());
        Assert.Equal(["tcp publisher messages/s", "api single messages/s", "api batch 50 messages/s"], result.GetProperty("headlines").EnumerateArray().Select(h => h.GetProperty("name").GetString()));
        Assert.All(result.GetProperty("modes").EnumerateArray(), mode => Assert.Equal(200, mode.GetProperty("received").GetInt64()));
    }
}
