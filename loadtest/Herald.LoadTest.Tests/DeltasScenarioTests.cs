using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>deltas</c> end to end at a tiny size against the real broker: every stream in every mode delivers every
/// publication, each rebuilt byte for byte by every subscriber; with none nothing comes compressed or as a delta, Zstd
/// subscribers get the JSON stream's every message compressed, and delta subscribers get deltas on it, fewer payload
/// bytes than Zstd's; the result file has each cell's headlines. No speed is asserted.
/// </summary>
public class DeltasScenarioTests
{
    [Fact]
    public async Task Deltas_runs_every_stream_in_every_mode_at_a_tiny_size_and_rebuilds_every_payload()
    {
        int first = Repo.FreePorts(3);
        string outFile = Repo.OutFile("deltas");
        string Port(int offset) => (first + offset).ToString(CultureInfo.InvariantCulture);
        int code = await Repo.RunAsync("deltas",
        [
            "--ports", $"{first}-{first}", "--http-port", Port(1), "--monitoring-port", Port(2), "--broker-dll", Repo.BrokerDll,
            "--subscribers", "3", "--messages", "300", "--warmup", "30", "--out", outFile,
        ]);

        Assert.True(code == ExitCodes.Ok, $"exit {code}: {(File.Exists(outFile) ? File.ReadAllText(outFile) : "no result file")}");
        JsonElement result = Repo.ReadJson(outFile);
        Assert.Equal("deltas", result.GetProperty("scenario").GetString());
        Dictionary<string, JsonElement> cells = result.GetProperty("cells").EnumerateArray()
            .ToDictionary(c => $"{c.GetProperty("stream").GetString()} {c.GetProperty("mode").GetString()}");
        Assert.Equal(9, cells.Count);
        Assert.All(cells.Values, c =>
        {
            Assert.True(c.GetProperty("measured").GetBoolean());
            Assert.Equal(900, c.GetProperty("deliveries").GetInt64());
            Assert.Equal(0, c.GetProperty("mismatches").GetInt64());
        });
        Assert.All(cells.Where(c => c.Key.EndsWith(" none", StringComparison.Ordinal)), c =>
        {
            Assert.Equal(0, c.Value.GetProperty("zstdMessages").GetInt64());
            Assert.Equal(0, c.Value.GetProperty("deltaMessages").GetInt64());
            Assert.Equal(100, c.Value.GetProperty("payloadPercent").GetDouble(), 3);
        });
        Assert.Equal(900, cells["json zstd"].GetProperty("zstdMessages").GetInt64());
        Assert.True(cells["json deltas"].GetProperty("deltaMessages").GetInt64() > 0);
        Assert.True(cells["json deltas"].GetProperty("payloadPercent").GetDouble() < cells["json zstd"].GetProperty("payloadPercent").GetDouble(), "deltas beat Zstd per message on the JSON stream");
        Assert.Contains(result.GetProperty("headlines").EnumerateArray(), h => h.GetProperty("name").GetString() == "ticker deltas broker us/publication");
    }
}
