using System.Globalization;
using System.Text.Json;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>stalled</c> end to end at a tiny size (20 stalled subscribers, 2 fast ones, 3 s) against the broker the
/// tool starts with the scenario's queue limit (2 MiB; the broker needs more than one max frame of 1 MiB)
/// and 12 MB published to each stalled subscriber, so that they trip the policy. Whether the
/// fast subscribers got everything is the broker's behaviour, which the scenario reports (exit 0 or 1);
/// these tests check that the run completes, that the broker was configured and counted what the stalled
/// ones cost, and that the figures agree with each other. No speed is asserted.
/// </summary>
public class StalledScenarioTests
{
    private const int Stalled = 20;
    private const int MaxPendingBytes = 2 * 1024 * 1024;

    [Theory]
    [InlineData("disconnect", "Disconnect")]
    [InlineData("drop-oldest", "DropOldest")]
    public async Task Stalled_reports_the_fast_subscribers_and_what_the_stalled_ones_cost(string policy, string brokerPolicy)
    {
        int first = Repo.FreePorts(4);
        string output = Repo.OutFile($"stalled-{policy}");
        int exit = await Repo.RunAsync("stalled",
        [
            "--ports", $"{first}-{first + 1}", "--http-port", (first + 2).ToString(CultureInfo.InvariantCulture), "--monitoring-port", (first + 3).ToString(CultureInfo.InvariantCulture),
            "--broker-dll", Repo.BrokerDll, "--setup-timeout", "60", "--grace", "5",
            "--stalled", Stalled.ToString(CultureInfo.InvariantCulture), "--fast", "2", "--seconds", "3", "--rate", "4000", "--payload", "1024",
            "--max-pending-bytes", MaxPendingBytes.ToString(CultureInfo.InvariantCulture), "--policy", policy, "--out", output,
        ]);

        Assert.True(exit is ExitCodes.Ok or ExitCodes.RunFailed, $"the run completed (exit {exit})");
        JsonElement json = Repo.ReadJson(output);
        Assert.Equal("stalled", json.GetProperty("scenario").GetString());
        Assert.Equal(exit == ExitCodes.Ok, json.GetProperty("ok").GetBoolean());

        // the tool started the broker with the limit and the policy asked for
        string commandLine = json.GetProperty("target").GetProperty("commandLine").GetString()!;
        Assert.Contains($"--Herald:Limits:MaxPendingBytes={MaxPendingBytes}", commandLine, StringComparison.Ordinal);
        Assert.Contains($"--Herald:Limits:SlowConsumerPolicy={brokerPolicy}", commandLine, StringComparison.Ordinal);
        Assert.Equal(brokerPolicy, json.GetProperty("parameters").GetProperty("policy").GetString());

        JsonElement run = Assert.Single(json.GetProperty("repetitions").EnumerateArray());
        Assert.True(run.GetProperty("measured").GetBoolean());
        long published = run.GetProperty("published").GetInt64();
        Assert.True(published > 0, "the publisher published");
        Assert.True(run.GetProperty("publishedInWindow").GetInt64() <= published);

        // each fast subscriber's counts add up: received + lost = published, the ratio is received / published,
        // the run's figures are the worst of them, and every shortfall, reorder or cut-off is a failure
        JsonElement[] fast = [.. run.GetProperty("fastSubscribers").EnumerateArray()];
        Assert.Equal(2, fast.Length);
        foreach (JsonElement f in fast)
        {
            long received = f.GetProperty("received").GetInt64();
            Assert.Equal(published, received + f.GetProperty("lost").GetInt64());
            Assert.True(f.GetProperty("gaps").GetInt64() <= f.GetProperty("lost").GetInt64(), "messages missing in the middle are among those lost");
            Assert.Equal((double)received / published, f.GetProperty("deliveryRatio").GetDouble(), 9);
            Assert.True(f.GetProperty("worstSilenceMs").GetDouble() > 0, "the first delivery came after sending started");
        }

        Assert.Equal(fast.Min(f => f.GetProperty("deliveryRatio").GetDouble()), run.GetProperty("fastDeliveryRatio").GetDouble());
        Assert.Equal(fast.Max(f => f.GetProperty("worstSilenceMs").GetDouble()), run.GetProperty("fastWorstSilenceMs").GetDouble());
        Assert.Equal(fast.Count(f => f.GetProperty("cutOff").ValueKind == JsonValueKind.String), run.GetProperty("fastCutOff").GetInt32());
        Assert.Equal(fast.Count(f => f.GetProperty("lost").GetInt64() > 0), run.GetProperty("fastLosing").GetInt32());
        bool fastWhole = fast.All(f => f.GetProperty("lost").GetInt64() == 0 && f.GetProperty("reordered").GetInt64() == 0 && f.GetProperty("unexpected").GetInt64() == 0
            && f.GetProperty("errorReplies").GetInt64() == 0 && f.GetProperty("cutOff").ValueKind == JsonValueKind.Null);
        Assert.True(fastWhole || !run.GetProperty("ok").GetBoolean(), "a fast subscriber that missed anything fails the run");

        // 12 MB published to each stalled subscriber against a 2 MiB queue: the broker's policy acted, and /varz said so
        JsonElement stalled = run.GetProperty("stalledSubscribers");
        Assert.True(stalled.GetProperty("slowConsumerActions").GetInt64() > 0, "the stalled subscribers tripped the slow-consumer policy");
        Assert.InRange(stalled.GetProperty("connectionsLeft").GetInt64(), 0, Stalled + 3);
        Assert.InRange(stalled.GetProperty("connectionsAfterDrain").GetInt64(), 0, Stalled + 3);
        if (brokerPolicy == "Disconnect")
        {
            Assert.True(stalled.GetProperty("connectionsClosed").GetInt64() > 0, "Disconnect closed stalled connections");
        }
        else
        {
            Assert.True(stalled.GetProperty("messagesDropped").GetInt64() > 0, "DropOldest dropped the stalled subscribers' oldest messages");
            Assert.Equal(0, stalled.GetProperty("connectionsClosed").GetInt64()); // and closed no connection
        }

        // RSS: per stalled connection is (end - baseline) / N, the bound is baseline + N x (limit + overhead)
        JsonElement rss = run.GetProperty("serverRss");
        long baseline = rss.GetProperty("baselineBytes").GetInt64();
        Assert.Equal((rss.GetProperty("endBytes").GetInt64() - baseline) / Stalled, rss.GetProperty("perStalledBytes").GetInt64());
        Assert.Equal(baseline + (Stalled * (MaxPendingBytes + (1780 * 1024))), rss.GetProperty("boundBytes").GetInt64()); // README's per-connection terms at the defaults

        // the headlines are this repetition's figures
        Dictionary<string, double> headlines = json.GetProperty("headlines").EnumerateArray().ToDictionary(h => h.GetProperty("name").GetString()!, h => h.GetProperty("value").GetDouble());
        Assert.Equal(100 * run.GetProperty("fastDeliveryRatio").GetDouble(), headlines["fast delivery %"], 9);
        Assert.Equal(run.GetProperty("fastWorstSilenceMs").GetDouble(), headlines["worst silence ms"]);
        Assert.Equal(rss.GetProperty("perStalledBytes").GetInt64() / 1024.0, headlines["RSS KB/stalled"], 9);
    }

    [Fact]
    public async Task Stalled_refuses_a_target_other_than_herald_tcp()
    {
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("stalled", ["--target", "nats"]));
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("stalled", ["--transport", "longpoll"]));
        Assert.Equal(ExitCodes.Usage, await Repo.RunAsync("stalled", ["--policy", "block"]));
    }
}
