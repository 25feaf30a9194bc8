using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// One run of the <c>broadcast</c> scenario at a fixed M: set up M subscribers, publish
/// <c>warm-up + N</c> bursts every P seconds, judge each burst when its deadline (publish + P) passes,
/// allow a grace period for stragglers, close everything. Bounded: setup timeout + settle +
/// bursts x P + P + grace + close timeout.
/// </summary>
internal static class BroadcastRun
{
    private const double AbortCheckSeconds = 0.25;
    private const int MaxBurstLines = 5;

    /// <summary>
    /// Allocation since the last GC above which the tool collects its own garbage in the quiet time
    /// between bursts (long-poll allocates a few KB per poll; TCP allocates nothing). With a gen0 budget
    /// well above this plus one burst's allocation (DOTNET_GCgen0size), no GC then falls inside a burst.
    /// </summary>
    private const long CollectBetweenBurstsBytes = 32L * 1024 * 1024;

    public static async Task<BroadcastRunResult> ExecuteAsync(BroadcastOptions options, ITarget target, int subscribers, RunLog log, CancellationToken cancellationToken)
    {
        Process? broker = target.ServerProcess;
        var message = new BroadcastMessage(options.Topic, options.Payload);
        int total = options.WarmupBursts + options.Bursts;
        var tracker = new BurstTracker(total, subscribers, options.Period);
        var pacer = new Pacer(options.ConnectRate, options.ConnectConcurrency);
        var result = new BroadcastRunResult { Subscribers = subscribers, BurstsPlanned = options.Bursts, WarmupBursts = options.WarmupBursts };
        double setupTimeout = options.SetupTimeoutFor(subscribers);
        await using IBroadcastTransport transport = target switch
        {
            HeraldTarget herald when options.Transport == BroadcastTransportKind.Connection => new BroadcastConnectionTransport(options, herald, message, log),
            HeraldTarget herald => new BroadcastLongPollTransport(options, herald, message, log),
            _ => new BroadcastClientTransport(target, message, log),
        };

        result.BrokerRssBeforeMB = BrokerRssMB(broker);
        CultureInfo c = CultureInfo.InvariantCulture;

        // ---- Setup, bounded by the setup timeout.
        long setupStart = Stopwatch.GetTimestamp();
        using (var setup = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken))
        {
            setup.CancelAfter(TimeSpan.FromSeconds(setupTimeout));
            Task setupTask = transport.SetupAsync(subscribers, tracker, pacer, setup.Token);
            while (await Task.WhenAny(setupTask, Task.Delay(TimeSpan.FromSeconds(5), CancellationToken.None)) != setupTask)
            {
                Console.WriteLine(string.Create(c, $"    setup: {transport.Established:N0} of {subscribers:N0} subscribed after {Stopwatch.GetElapsedTime(setupStart).TotalSeconds:F0} s"));
            }

            try
            {
                await setupTask;
            }
            catch (Exception e) when (IsSetupFailure(e))
            {
                result.SetupSeconds = Stopwatch.GetElapsedTime(setupStart).TotalSeconds;
                result.Interrupted = cancellationToken.IsCancellationRequested;
                result.SetupFailure = e is OperationCanceledException
                    ? cancellationToken.IsCancellationRequested
                        ? "interrupted during setup"
                        : $"setup did not finish within {setupTimeout:F0} s ({transport.Established:N0} of {subscribers:N0} subscribed)"
                    : $"{Describe(e)} ({transport.Established:N0} of {subscribers:N0} subscribed)";
                result.BrokerUnreachable = transport.Established == 0 && IsRefused(e);
                await CloseAsync(transport, options, subscribers, result, broker);
                result.Checks = transport.Checks();
                return result;
            }
        }

        result.SetupSeconds = Stopwatch.GetElapsedTime(setupStart).TotalSeconds;
        result.Describe = transport.Describe;
        Console.WriteLine(string.Create(c, $"    {transport.Describe}; set up in {result.SetupSeconds:F1} s ({subscribers / Math.Max(result.SetupSeconds, 1e-3):N0}/s)"));

        // ---- Bursts.
        try
        {
            await Task.Delay(TimeSpan.FromSeconds(options.Settle), cancellationToken);
            await PublishBurstsAsync(options, transport, tracker, broker, result, cancellationToken);
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            result.Interrupted = true;
        }

        // ---- Grace: stragglers of bursts that were not complete, to tell late deliveries from lost ones.
        long graceStart = Stopwatch.GetTimestamp();
        while (!result.Interrupted && Stopwatch.GetElapsedTime(graceStart).TotalSeconds < options.Grace
            && Enumerable.Range(0, result.BurstsSentTotal).Any(b => tracker.Received(b) < subscribers)
            && transport.Lost < subscribers)
        {
            await Task.Delay(20, CancellationToken.None);
        }

        Summarize(result, tracker, options);
        result.BrokerRssLoadedMB = BrokerRssMB(broker);
        result.BrokerOpenFiles = broker is null ? null : ProcessLimits.OpenFiles(broker.Id);
        result.ToolRssMB = Environment.WorkingSet / 1e6;
        await CloseAsync(transport, options, subscribers, result, broker);
        result.Checks = transport.Checks();
        if (tracker.OutOfRange > 0)
        {
            result.Checks.Add("outOfRangeBursts", tracker.OutOfRange);
        }

        return result;
    }

    /// <summary>
    /// Publishes burst b at t0 + b·P and judges each burst as soon as it is complete or its deadline
    /// (publish + P) has passed. In search mode the first measured burst that misses ends the run.
    /// </summary>
    private static async Task PublishBurstsAsync(BroadcastOptions options, IBroadcastTransport transport, BurstTracker tracker, Process? broker, BroadcastRunResult result, CancellationToken cancellationToken)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        int total = tracker.Count;
        int m = tracker.Subscribers;
        long period = tracker.PeriodTicks;
        long t0 = Stopwatch.GetTimestamp();
        int sent = 0, judged = 0, burstLines = 0;
        ResourceSnapshot? start = null;
        double worstSoFar = 0;
        var gcPauseAtPublish = new TimeSpan[total]; // the tool's own GC pauses, to tell them apart from the broker's delays
        result.ToolGcPauseMs = new double[total];
        long lastLostCheck = 0;
        double? machineBusyAtStart = null;
        int gcCount = GC.CollectionCount(0);
        long allocatedAtGc = GC.GetTotalAllocatedBytes();

        // Judges every burst whose fate is known; returns why the run should stop, or null.
        string? Judge(long now)
        {
            while (judged < sent)
            {
                long deadline = tracker.PublishedAt(judged) + period;
                bool complete = tracker.Received(judged) >= m;
                if (!complete && now <= deadline)
                {
                    break;
                }

                bool onTime = complete && tracker.LastReceipt(judged) <= deadline;
                bool measured = judged >= options.WarmupBursts;
                double gcPauseMs = (GC.GetTotalPauseDuration() - gcPauseAtPublish[judged]).TotalMilliseconds;
                result.ToolGcPauseMs[judged] = gcPauseMs;
                if (complete)
                {
                    worstSoFar = measured ? Math.Max(worstSoFar, tracker.CompletionSeconds(judged) ?? 0) : worstSoFar;
                }

                if (!onTime && burstLines++ < MaxBurstLines)
                {
                    Console.WriteLine(string.Create(c,
                        $"    burst {judged}{(measured ? "" : " (warm-up)")}: {(complete ? $"LATE, complete after {tracker.CompletionSeconds(judged) * 1000:F1} ms" : $"INCOMPLETE at its deadline, {tracker.Received(judged):N0} of {m:N0} delivered")} (load tool GC pauses meanwhile: {gcPauseMs:F0} ms)"));
                }

                judged++;
                if (!onTime && measured && options.StopOnMiss)
                {
                    return $"burst {judged - 1} missed its deadline";
                }

                if (measured && (judged - options.WarmupBursts) % 10 == 0)
                {
                    Console.WriteLine(string.Create(c, $"    {judged - options.WarmupBursts} of {options.Bursts} bursts judged; worst completion so far {worstSoFar * 1000:F1} ms"));
                }
            }

            if (now - lastLostCheck > BurstTracker.SecondsToTicks(AbortCheckSeconds))
            {
                lastLostCheck = now;
                if (transport.Lost >= m)
                {
                    return "every subscriber was lost";
                }
            }

            return transport.PublisherFailure is { } failure ? $"publisher failed: {failure}" : null;
        }

        string? stop = null;
        try
        {
            while (stop is null && (sent < total || judged < sent))
            {
                long now = Stopwatch.GetTimestamp();
                stop = Judge(now);
                if (stop is not null)
                {
                    break;
                }

                long due = sent < total ? t0 + (sent * period) : long.MaxValue;
                if (GC.CollectionCount(0) != gcCount)
                {
                    gcCount = GC.CollectionCount(0);
                    allocatedAtGc = GC.GetTotalAllocatedBytes();
                }

                if (judged == sent && sent > 0 && sent < total && due - now > period / 4
                    && tracker.Received(sent - 1) >= m && GC.GetTotalAllocatedBytes() - allocatedAtGc > CollectBetweenBurstsBytes)
                {
                    // Every delivery of the last burst is in and the next is not due: collect now rather
                    // than in the middle of the next burst.
                    GC.Collect(1, GCCollectionMode.Forced, blocking: true);
                    result.InducedGcs++;
                    continue;
                }

                if (now >= due)
                {
                    if (sent == options.WarmupBursts)
                    {
                        start = ResourceSnapshot.Take(broker);
                        machineBusyAtStart = MachineCpu.BusySeconds();
                    }

                    gcPauseAtPublish[sent] = GC.GetTotalPauseDuration();
                    tracker.MarkPublished(sent, Stopwatch.GetTimestamp());
                    try
                    {
                        await transport.PublishAsync(sent, cancellationToken);
                    }
                    catch (Exception e) when (e is not OperationCanceledException)
                    {
                        stop = $"publisher failed: {Describe(e)}";
                        sent++;
                        break;
                    }

                    sent++;
                    continue;
                }

                long nextEvent = Math.Min(due, judged < sent ? tracker.PublishedAt(judged) + period + 1 : long.MaxValue);
                double wait = Math.Clamp(BurstTracker.TicksToSeconds(nextEvent - now), 0.0005, AbortCheckSeconds);
                await Task.Delay(TimeSpan.FromSeconds(wait), cancellationToken);
            }

            if (stop is null && sent > 0)
            {
                // The CPU window is whole periods: from the first judged burst to the last one's deadline.
                double toDeadline = BurstTracker.TicksToSeconds(tracker.PublishedAt(sent - 1) + period - Stopwatch.GetTimestamp());
                if (toDeadline > 0)
                {
                    await Task.Delay(TimeSpan.FromSeconds(toDeadline), cancellationToken);
                }
            }
        }
        finally
        {
            result.BurstsSentTotal = sent; // also when interrupted: the summary counts what was sent
            result.StoppedEarly = stop;
        }

        if (start is { } s)
        {
            ResourceUsage usage = ResourceUsage.Between(s, ResourceSnapshot.Take(broker));
            result.Resources = usage;
            if (machineBusyAtStart is { } busy0 && MachineCpu.BusySeconds() is { } busy1 && usage.WallSeconds > 0)
            {
                result.MachineCores = (busy1 - busy0) / usage.WallSeconds;
                result.OtherCores = Math.Max(0, result.MachineCores.Value - usage.ToolCores - (usage.BrokerCores ?? 0));
            }
        }
    }

    /// <summary>Per-burst figures over the measured bursts, after the grace period.</summary>
    private static void Summarize(BroadcastRunResult result, BurstTracker tracker, BroadcastOptions options)
    {
        int m = tracker.Subscribers;
        var completions = new List<double>();
        for (int b = 0; b < result.BurstsSentTotal; b++)
        {
            double? completion = tracker.CompletionSeconds(b);
            bool onTime = completion is { } t && t <= options.Period;
            int missing = m - tracker.Received(b);
            int late = tracker.LateDeliveries(b);
            result.Bursts.Add(new BurstOutcome(b, b < options.WarmupBursts, tracker.Received(b), completion, onTime, late, b < result.ToolGcPauseMs.Length ? result.ToolGcPauseMs[b] : 0));
            if (b < options.WarmupBursts)
            {
                continue;
            }

            result.BurstsSent++;
            result.BurstsOnTime += onTime ? 1 : 0;
            result.BurstsLate += completion is not null && !onTime ? 1 : 0;
            result.BurstsIncomplete += completion is null ? 1 : 0;
            result.MissedDeliveries += Math.Max(0, missing);
            result.LateDeliveries += late;
            completions.Add(completion ?? double.PositiveInfinity);
        }

        if (completions.Count > 0)
        {
            completions.Sort();
            result.WorstSeconds = completions[^1];
            result.P99Seconds = completions[NearestRank(completions.Count, 99)];
            result.P50Seconds = completions[NearestRank(completions.Count, 50)];
        }
    }

    private static int NearestRank(int count, double percentile) => Math.Clamp((int)Math.Ceiling(percentile / 100 * count) - 1, 0, count - 1);

    private static async Task CloseAsync(IBroadcastTransport transport, BroadcastOptions options, int subscribers, BroadcastRunResult result, Process? broker)
    {
        long closeStart = Stopwatch.GetTimestamp();
        await transport.CloseAsync(TimeSpan.FromSeconds(options.CloseTimeoutFor(subscribers)));
        result.CloseSeconds = Stopwatch.GetElapsedTime(closeStart).TotalSeconds;
        await Task.Delay(TimeSpan.FromSeconds(options.Pause), CancellationToken.None); // let the broker let go of them
        result.BrokerRssAfterMB = BrokerRssMB(broker);
        result.BrokerAlive = broker is null || !HasExited(broker);
    }

    public static double? BrokerRssMB(Process? broker)
    {
        if (broker is null)
        {
            return null;
        }

        try
        {
            broker.Refresh();
            return broker.HasExited ? null : broker.WorkingSet64 / 1e6;
        }
        catch (InvalidOperationException)
        {
            return null;
        }
    }

    public static bool HasExited(Process broker)
    {
        try
        {
            broker.Refresh();
            return broker.HasExited;
        }
        catch (InvalidOperationException)
        {
            return true;
        }
    }

    private static bool IsSetupFailure(Exception e) =>
        RunState.IsSetupFailure(e) || e is TargetUnavailableException
        || (e is AggregateException a && a.InnerExceptions.All(IsSetupFailure));

    private static bool IsRefused(Exception e) => e switch
    {
        System.Net.Sockets.SocketException s => s.SocketErrorCode == System.Net.Sockets.SocketError.ConnectionRefused,
        HttpRequestException { InnerException: { } inner } => IsRefused(inner),
        AggregateException a => a.InnerExceptions.Any(IsRefused),
        _ => false,
    };

    private static string Describe(Exception e) => e switch
    {
        AggregateException a when a.InnerExceptions.Count > 0 => Describe(a.InnerExceptions[0]),
        HttpRequestException { InnerException: { } inner } h => $"{h.Message} ({inner.Message})",
        _ => e.Message,
    };
}

/// <summary>One burst: deliveries (of M), publish-to-last-delivery time once complete, on time or not, and
/// how long the load tool itself was paused by its GC between the publish and the verdict.</summary>
internal readonly record struct BurstOutcome(int Burst, bool Warmup, int Received, double? CompletionSeconds, bool OnTime, int LateDeliveries, double ToolGcPauseMs);

/// <summary>Everything measured in one run (one M).</summary>
internal sealed class BroadcastRunResult
{
    public int Subscribers { get; init; }

    public int BurstsPlanned { get; init; }

    public int WarmupBursts { get; init; }

    public string? Describe { get; set; }

    public string? SetupFailure { get; set; }

    public bool BrokerUnreachable { get; set; }

    public bool Interrupted { get; set; }

    public bool BrokerAlive { get; set; } = true;

    public string? StoppedEarly { get; set; }

    public double SetupSeconds { get; set; }

    public double CloseSeconds { get; set; }

    /// <summary>Bursts sent, warm-up included.</summary>
    public int BurstsSentTotal { get; set; }

    /// <summary>Measured bursts (after warm-up) sent.</summary>
    public int BurstsSent { get; set; }

    public int BurstsOnTime { get; set; }

    public int BurstsLate { get; set; }

    public int BurstsIncomplete { get; set; }

    public long MissedDeliveries { get; set; }

    public long LateDeliveries { get; set; }

    /// <summary>Over the measured bursts; +infinity when a burst never completed.</summary>
    public double? WorstSeconds { get; set; }

    public double? P99Seconds { get; set; }

    public double? P50Seconds { get; set; }

    public List<BurstOutcome> Bursts { get; } = [];

    /// <summary>Per burst (warm-up included): the load tool's GC pause time between publish and verdict.</summary>
    public double[] ToolGcPauseMs { get; set; } = [];

    public ResourceUsage? Resources { get; set; }

    public double? BrokerRssBeforeMB { get; set; }

    public double? BrokerRssLoadedMB { get; set; }

    public double? BrokerRssAfterMB { get; set; }

    public int? BrokerOpenFiles { get; set; }

    public double ToolRssMB { get; set; }

    /// <summary>Cores the whole machine kept busy during the judged bursts (Linux).</summary>
    public double? MachineCores { get; set; }

    /// <summary>Of those, what neither the tool nor the broker (started by the tool, or --server-pid) used: other processes, and the kernel's share of both.</summary>
    public double? OtherCores { get; set; }

    /// <summary>GCs the tool ran itself between bursts (see BroadcastRun.CollectBetweenBurstsBytes).</summary>
    public int InducedGcs { get; set; }

    public BroadcastChecks Checks { get; set; } = new();

    /// <summary>The seed's criterion: every measured burst was sent and reached all M subscribers within P.</summary>
    public bool Good => SetupFailure is null && !Interrupted && BurstsSent == BurstsPlanned && BurstsOnTime == BurstsPlanned;

    /// <summary>The run says nothing about M (interrupted, or the broker is gone).</summary>
    public bool Inconclusive => Interrupted || BrokerUnreachable || !BrokerAlive;

    public string Verdict => Good ? "GOOD" : Inconclusive ? "INCONCLUSIVE" : SetupFailure is not null ? "BAD (setup)" : "BAD";

    public static string Ms(double? seconds) => seconds switch
    {
        null => "-",
        double.PositiveInfinity => "never",
        { } s => (s * 1000).ToString("F1", CultureInfo.InvariantCulture) + " ms",
    };

    public string OneLine()
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        if (SetupFailure is not null)
        {
            return string.Create(c, $"M={Subscribers:N0}: {Verdict}: {SetupFailure}");
        }

        string cpu = Resources is { } r
            ? string.Create(c, $"tool {r.ToolCores:F2} cores{(r.BrokerCores is { } b ? $", broker {b:F2} cores" : "")}{(OtherCores is { } o ? $", others {o:F2} cores" : "")}")
            : "cpu -";
        string rss = BrokerRssLoadedMB is { } rssMB ? string.Create(c, $", broker RSS {rssMB:F0} MB") : "";
        return string.Create(c,
            $"M={Subscribers:N0}: {Verdict}: {BurstsOnTime}/{BurstsPlanned} bursts on time ({BurstsSent} sent{(BurstsLate > 0 ? $", {BurstsLate} late" : "")}{(BurstsIncomplete > 0 ? $", {BurstsIncomplete} incomplete" : "")}), completion worst {Ms(WorstSeconds)} p99 {Ms(P99Seconds)} p50 {Ms(P50Seconds)}, missed {MissedDeliveries:N0}, late deliveries {LateDeliveries:N0}; {cpu}{rss}{(StoppedEarly is { } s ? $"; stopped: {s}" : "")}{(Checks.DescribeProblems() is { } p ? $"; problems: {p}" : "")}");
    }

    public void Write(Utf8JsonWriter json)
    {
        ArgumentNullException.ThrowIfNull(json);
        json.WriteStartObject();
        json.WriteNumber("subscribers", Subscribers);
        json.WriteString("verdict", Verdict);
        json.WriteBoolean("good", Good);
        json.WriteString("setup", Describe);
        json.WriteString("setupFailure", SetupFailure);
        json.WriteString("stoppedEarly", StoppedEarly);
        json.WriteBoolean("interrupted", Interrupted);
        json.WriteNumber("setupSeconds", SetupSeconds);
        json.WriteNumber("closeSeconds", CloseSeconds);
        json.WriteNumber("burstsPlanned", BurstsPlanned);
        json.WriteNumber("warmupBursts", WarmupBursts);
        json.WriteNumber("burstsSent", BurstsSent);
        json.WriteNumber("burstsOnTime", BurstsOnTime);
        json.WriteNumber("burstsLate", BurstsLate);
        json.WriteNumber("burstsIncomplete", BurstsIncomplete);
        json.WriteNumber("missedDeliveries", MissedDeliveries);
        json.WriteNumber("lateDeliveries", LateDeliveries);
        WriteMs(json, "worstCompletionMs", WorstSeconds);
        WriteMs(json, "p99CompletionMs", P99Seconds);
        WriteMs(json, "p50CompletionMs", P50Seconds);
        WriteOptional(json, "brokerRssBeforeMB", BrokerRssBeforeMB);
        WriteOptional(json, "brokerRssLoadedMB", BrokerRssLoadedMB);
        WriteOptional(json, "brokerRssAfterCloseMB", BrokerRssAfterMB);
        if (BrokerOpenFiles is { } fds)
        {
            json.WriteNumber("brokerOpenFilesLoaded", fds);
        }

        json.WriteNumber("toolRssMB", ToolRssMB);
        json.WriteNumber("toolInducedGcs", InducedGcs);
        WriteOptional(json, "machineBusyCores", MachineCores);
        WriteOptional(json, "otherProcessesCores", OtherCores);
        json.WriteBoolean("brokerAlive", BrokerAlive);
        Resources?.Write(json);
        json.WriteStartObject("checks");
        foreach (KeyValuePair<string, long> counter in Checks.Values)
        {
            json.WriteNumber(counter.Key, counter.Value);
        }

        json.WriteEndObject();
        json.WriteStartArray("bursts");
        foreach (BurstOutcome b in Bursts)
        {
            json.WriteStartObject();
            json.WriteNumber("burst", b.Burst);
            json.WriteBoolean("warmup", b.Warmup);
            json.WriteNumber("received", b.Received);
            WriteMs(json, "completionMs", b.CompletionSeconds);
            json.WriteBoolean("onTime", b.OnTime);
            json.WriteNumber("lateDeliveries", b.LateDeliveries);
            json.WriteNumber("toolGcPauseMs", Math.Round(b.ToolGcPauseMs, 1));
            json.WriteEndObject();
        }

        json.WriteEndArray();
        json.WriteEndObject();
    }

    /// <summary>Writes seconds as milliseconds (3 decimals), or null when unknown or never.</summary>
    private static void WriteMs(Utf8JsonWriter json, string name, double? seconds) =>
        ResultFile.WriteNumberOrNull(json, name, seconds is { } s ? Math.Round(s * 1000, 3) : null);

    private static void WriteOptional(Utf8JsonWriter json, string name, double? value)
    {
        if (value is { } v)
        {
            json.WriteNumber(name, Math.Round(v, 2));
        }
    }
}
