using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Scenarios;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>broadcast</c> end to end at a tiny size against the Herald it starts itself (both tuned transports),
/// over two periods, and the <c>chart</c> command drawing M against P from the result files.
/// </summary>
public class BroadcastTests
{
    private static readonly double[] Periods = [0.5, 1]; // generous: a burst of 20 must be on time even on a busy CI machine

    // One tiny run per transport, shared by the tests of this class (they never run in parallel).
    private static readonly Dictionary<string, Task<(string Json, string Chart)>> Runs = [];

    private static Task<(string Json, string Chart)> RunTinyAsync(string transport)
    {
        if (!Runs.TryGetValue(transport, out Task<(string, string)>? run))
        {
            run = RunAsync(transport);
            Runs[transport] = run;
        }

        return run;
    }

    private static async Task<(string Json, string Chart)> RunAsync(string transport)
    {
        int first = Repo.FreePorts(3);
        string output = Repo.OutFile($"broadcast-{transport}");
        string chart = Path.Combine(Path.GetTempPath(), $"herald-broadcast-{transport}-{Guid.NewGuid():N}");
        List<string> args =
        [
            "--target", "herald", "--transport", transport, "--broker-dll", Repo.BrokerDll,
            "--ports", $"{first}-{first + 1}", "--http-port", (first + 2).ToString(CultureInfo.InvariantCulture),
            "--subscribers", "20", "--bursts", "3", "--periods", "0.5,1",
            "--settle", "0.2", "--grace", "1", "--pause", "0", "--setup-timeout", "30", "--out", output, "--chart", chart,
        ];
        Assert.Equal(0, await Repo.RunAsync("broadcast", [.. args]));
        return (output, chart);
    }

    private static void AssertChart(string path, params string[] labels)
    {
        byte[] png = File.ReadAllBytes(path + ".png");
        Assert.True(png.Length > 1000);
        Assert.Equal(new byte[] { 0x89, (byte)'P', (byte)'N', (byte)'G', 0x0D, 0x0A, 0x1A, 0x0A }, png[..8]);
        string svg = File.ReadAllText(path + ".svg");
        Assert.Contains("<svg", svg, StringComparison.Ordinal);
        foreach (string label in labels)
        {
            Assert.Contains(label, svg, StringComparison.Ordinal);
        }
    }

    [Theory]
    [InlineData("tcp")]
    [InlineData("longpoll")]
    public async Task A_tiny_broadcast_over_two_periods_writes_every_run_and_a_headline_per_period(string transport)
    {
        (string output, string chart) = await RunTinyAsync(transport);
        JsonElement json = Repo.ReadJson(output);

        Assert.Equal("broadcast", json.GetProperty("scenario").GetString());
        Assert.Equal($"herald/{transport}", json.GetProperty("target").GetProperty("label").GetString());
        Assert.True(json.GetProperty("target").TryGetProperty("pid", out _)); // the tool started the server
        JsonElement[] headlines = [.. json.GetProperty("headlines").EnumerateArray()];
        Assert.Equal(Periods.Length, headlines.Length);
        foreach (JsonElement h in headlines)
        {
            Assert.StartsWith("largest M on time at P=", h.GetProperty("name").GetString(), StringComparison.Ordinal);
            Assert.True(h.GetProperty("higherIsBetter").GetBoolean());
            Assert.Equal(20, h.GetProperty("value").GetDouble());
        }

        JsonElement[] periods = [.. json.GetProperty("periods").EnumerateArray()];
        Assert.Equal(Periods, periods.Select(p => p.GetProperty("periodSeconds").GetDouble()));
        foreach (JsonElement period in periods)
        {
            JsonElement run = Assert.Single(Assert.Single(period.GetProperty("repetitions").EnumerateArray()).GetProperty("runs").EnumerateArray());
            Assert.Equal(20, run.GetProperty("subscribers").GetInt32());
            Assert.Equal("GOOD", run.GetProperty("verdict").GetString());
            Assert.Equal(3, run.GetProperty("burstsOnTime").GetInt32());
            Assert.Equal(0, run.GetProperty("missedDeliveries").GetInt64());
            // 20 subscribers x (1 warm-up + 3 judged bursts), each message checked by its subscriber
            Assert.Equal(80, run.GetProperty("checks").GetProperty("messagesReceived").GetInt64());
            Assert.Equal(0, run.GetProperty("checks").GetProperty("sequenceGaps").GetInt64());
        }

        Assert.True(json.GetProperty("ok").GetBoolean());
        AssertChart(chart, $"herald/{transport}"); // --chart: this run's own line
    }

    [Fact]
    public async Task The_chart_command_draws_every_result_file_as_svg_and_png()
    {
        (string tcp, _) = await RunTinyAsync("tcp");
        (string longpoll, _) = await RunTinyAsync("longpoll");
        string chart = Path.Combine(Path.GetTempPath(), $"herald-broadcast-chart-{Guid.NewGuid():N}", "broadcast");

        Assert.Equal(0, await Repo.RunAsync("chart", "--in", $"{tcp},{longpoll}", "--out", chart));

        AssertChart(chart, "herald/tcp", "herald/longpoll");
    }

    [Fact]
    public async Task The_chart_command_refuses_a_file_that_is_not_a_broadcast_result()
    {
        string other = Repo.OutFile("not-broadcast");
        await File.WriteAllTextAsync(other, """{"scenario":"fanout","headlines":[]}""");
        Assert.Equal(2, await Repo.RunAsync("chart", "--in", other, "--out", Path.Combine(Path.GetTempPath(), $"herald-chart-{Guid.NewGuid():N}")));
    }

    /// <summary>
    /// The generic transport every non-Herald target uses (one <see cref="IPubSubClient"/> per subscriber),
    /// driven here through Herald's TCP client: Herald hidden behind a plain <see cref="ITarget"/> so the
    /// scenario cannot pick its tuned transport.
    /// </summary>
    [Fact]
    public async Task A_run_through_the_targets_own_client_delivers_every_burst_to_every_subscriber()
    {
        await using ITarget herald = await TargetContractTests.StartAsync("herald", "tcp");
        await using var target = new PlainTarget(herald);
        BroadcastOptions options = BroadcastOptions.Read(CommandLine.Parse(
            ["--subscribers", "20", "--bursts", "3", "--period", "0.5", "--settle", "0.2", "--grace", "1", "--pause", "0", "--setup-timeout", "30"]));

        BroadcastRunResult run = await BroadcastRun.ExecuteAsync(options, target, 20, new RunLog(), CancellationToken.None);

        Assert.Null(run.SetupFailure);
        Assert.StartsWith("herald/tcp: 20 subscribers and 1 publisher through the target's client", run.Describe, StringComparison.Ordinal);
        Assert.True(run.Good, run.OneLine());
        Assert.Equal(80, run.Checks.Get("messagesReceived"));
        Assert.Null(run.Checks.DescribeProblems());
    }

    /// <summary>Passes everything to <paramref name="inner"/> but is not a <see cref="HeraldTarget"/>.</summary>
    private sealed class PlainTarget(ITarget inner) : ITarget
    {
        public string Name => inner.Name;

        public string Transport => inner.Transport;

        public string ServerDescription => inner.ServerDescription;

        public string? ServerCommandLine => inner.ServerCommandLine;

        public Process? ServerProcess => inner.ServerProcess;

        public int MaxPayload => inner.MaxPayload;

        public Task<IPubSubClient> ConnectAsync(int index, CancellationToken cancellationToken) => inner.ConnectAsync(index, cancellationToken);

        public ValueTask DisposeAsync() => ValueTask.CompletedTask; // the test disposes the inner target
    }
}
