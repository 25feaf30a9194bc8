using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Scenarios;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>broadcast</c> end to end at a tiny size against the Herald it starts itself (both tuned transports, the
/// connection one over TCP and over WebSocket),
/// over two periods, and the <c>chart</c> command drawing M against P from the result files. The tests assert
/// that every burst reached every subscriber; whether it did so within P is what the tool measures, so it
/// is checked only for agreeing with itself (verdict, headline, exit code), never required.
/// </summary>
public class BroadcastTests
{
    private static readonly double[] Periods = [0.5, 1];

    /// <summary>
    /// A hang bound, not a verdict: how long the tool waits (<c>--grace</c>) for deliveries that missed their
    /// burst's deadline. The wait ends as soon as every subscriber has every burst, so on a fast machine it
    /// costs nothing; on a slow one a late burst still arrives and is counted. Whether a burst was on time
    /// (within P) is the tool's measurement, never these tests' verdict.
    /// </summary>
    private const string HangBoundSeconds = "30";

    private const int Subscribers = 20;

    private const int Bursts = 3;

    // One tiny run per transport, shared by the tests of this class (they never run in parallel).
    private static readonly Dictionary<string, Task<(int Exit, string Json, string Chart)>> Runs = [];

    private static Task<(int Exit, string Json, string Chart)> RunTinyAsync(string transport)
    {
        if (!Runs.TryGetValue(transport, out Task<(int, string, string)>? run))
        {
            run = RunAsync(transport);
            Runs[transport] = run;
        }

        return run;
    }

    private static async Task<(int Exit, string Json, string Chart)> RunAsync(string transport)
    {
        int first = Repo.FreePorts(4);
        string output = Repo.OutFile($"broadcast-{transport}");
        string chart = Path.Combine(Path.GetTempPath(), $"herald-broadcast-{transport}-{Guid.NewGuid():N}");
        List<string> args =
        [
            "--target", "herald", "--transport", transport, "--broker-dll", Repo.BrokerDll,
            "--ports", $"{first}-{first + 1}", "--http-port", (first + 2).ToString(CultureInfo.InvariantCulture), "--monitoring-port", (first + 3).ToString(CultureInfo.InvariantCulture),
            "--subscribers", $"{Subscribers}", "--bursts", $"{Bursts}", "--periods", "0.5,1",
            "--settle", "0.2", "--grace", HangBoundSeconds, "--pause", "0", "--setup-timeout", "30", "--out", output, "--chart", chart,
        ];
        int exit = await Repo.RunAsync("broadcast", [.. args]);
        return (exit, output, chart);
    }

    /// <summary>
    /// What a run must do whatever the machine's speed: send every burst and deliver each one, whole and in
    /// order, to every subscriber (1 warm-up burst + <see cref="Bursts"/> judged ones).
    /// </summary>
    private static void AssertEveryBurstReachedEverySubscriber(JsonElement run)
    {
        Assert.Equal(JsonValueKind.Null, run.GetProperty("setupFailure").ValueKind);
        Assert.Equal(JsonValueKind.Null, run.GetProperty("stoppedEarly").ValueKind);
        Assert.Equal(Subscribers, run.GetProperty("subscribers").GetInt32());
        Assert.Equal(Bursts, run.GetProperty("burstsSent").GetInt32());
        Assert.All(run.GetProperty("bursts").EnumerateArray(), b => Assert.Equal(Subscribers, b.GetProperty("received").GetInt32()));
        Assert.Equal(0, run.GetProperty("missedDeliveries").GetInt64());
        Assert.Equal(0, run.GetProperty("burstsIncomplete").GetInt32());
        JsonElement checks = run.GetProperty("checks");
        Assert.Equal(Subscribers * (1 + Bursts), checks.GetProperty("messagesReceived").GetInt64());
        Assert.Equal(0, checks.GetProperty("sequenceGaps").GetInt64());
        Assert.Equal(0, checks.GetProperty("duplicates").GetInt64());
        Assert.Equal(0, checks.GetProperty("unexpectedFrames").GetInt64());
        foreach (string problem in (string[])["disconnected", "errorFrames"]) // a transport writes these only when it counts them
        {
            Assert.Equal(0, checks.TryGetProperty(problem, out JsonElement count) ? count.GetInt64() : 0);
        }

        // on time or not is measured, not asserted: the verdict only has to agree with the bursts' own record
        int onTime = run.GetProperty("burstsOnTime").GetInt32();
        Assert.Equal(Bursts, onTime + run.GetProperty("burstsLate").GetInt32());
        Assert.Equal(onTime == Bursts ? "GOOD" : "BAD", run.GetProperty("verdict").GetString());
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
    [InlineData("websocket")]
    [InlineData("longpoll")]
    public async Task A_tiny_broadcast_over_two_periods_writes_every_run_and_a_headline_per_period(string transport)
    {
        (int exit, string output, string chart) = await RunTinyAsync(transport);
        JsonElement json = Repo.ReadJson(output);

        Assert.Equal("broadcast", json.GetProperty("scenario").GetString());
        Assert.Equal($"herald/{transport}", json.GetProperty("target").GetProperty("label").GetString());
        Assert.True(json.GetProperty("target").TryGetProperty("pid", out _)); // the tool started the server
        JsonElement[] headlines = [.. json.GetProperty("headlines").EnumerateArray()];
        Assert.Equal(Periods.Length, headlines.Length);
        JsonElement[] periods = [.. json.GetProperty("periods").EnumerateArray()];
        Assert.Equal(Periods, periods.Select(p => p.GetProperty("periodSeconds").GetDouble()));
        bool everyRunGood = true;
        for (int i = 0; i < periods.Length; i++)
        {
            JsonElement run = Assert.Single(Assert.Single(periods[i].GetProperty("repetitions").EnumerateArray()).GetProperty("runs").EnumerateArray());
            AssertEveryBurstReachedEverySubscriber(run);
            Assert.StartsWith($"{transport}: {Subscribers} s", run.GetProperty("setup").GetString(), StringComparison.Ordinal); // the tuned transport, not the generic client's
            bool good = run.GetProperty("good").GetBoolean();
            everyRunGood &= good;

            // the headline of a period is the M its run found good, or none
            Assert.Equal(string.Create(CultureInfo.InvariantCulture, $"largest M on time at P={Periods[i]} s"), headlines[i].GetProperty("name").GetString());
            Assert.True(headlines[i].GetProperty("higherIsBetter").GetBoolean());
            Assert.Equal(good ? Subscribers : 0, headlines[i].GetProperty("value").GetDouble());
        }

        // "ok" says the server and the protocol did right (every burst reached every subscriber, checked
        // above); a late burst is the measurement (a slow machine may see one) and only makes the exit 1
        Assert.True(json.GetProperty("ok").GetBoolean(), string.Join("; ", json.GetProperty("failures").EnumerateArray()));
        Assert.Equal(everyRunGood ? ExitCodes.Ok : ExitCodes.RunFailed, exit);
        AssertChart(chart, $"herald/{transport}"); // --chart: this run's own line
    }

    [Fact]
    public async Task The_chart_command_draws_every_result_file_as_svg_and_png()
    {
        (_, string tcp, _) = await RunTinyAsync("tcp");
        (_, string longpoll, _) = await RunTinyAsync("longpoll");
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
        BroadcastOptions options = (BroadcastOptions)Program.ReadSettings(
            ["broadcast", "--subscribers", $"{Subscribers}", "--bursts", $"{Bursts}", "--period", "0.5", "--settle", "0.2", "--grace", HangBoundSeconds, "--pause", "0", "--setup-timeout", "30"]).Scenario;

        BroadcastRunResult run = await BroadcastRun.ExecuteAsync(options, target, Subscribers, new RunLog(), CancellationToken.None);

        Assert.Null(run.SetupFailure);
        Assert.StartsWith("herald/tcp: 20 subscribers and 1 publisher through the target's client", run.Describe, StringComparison.Ordinal);
        var json = new MemoryStream();
        using (var writer = new Utf8JsonWriter(json))
        {
            run.Write(writer);
        }

        AssertEveryBurstReachedEverySubscriber(JsonDocument.Parse(json.ToArray()).RootElement);
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
