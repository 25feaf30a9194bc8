using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using System.Security.Cryptography;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using Herald.Protocol;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// One repetition of <c>presence</c> against one freshly started broker (see <see cref="PresenceScenario"/> for the
/// phases). Every step is bounded by <c>--setup-timeout</c>; a step that fails or finds a wrong count is a failure
/// and the figures after it are left out. Not thread-safe: the repetition's own task fills it; the event handlers
/// count into their own slots of the watchers' arrays.
/// </summary>
internal sealed class PresenceRun : IScenarioRun
{
    /// <summary>Subscriptions of each kind per connection before the measured phases.</summary>
    private const int WarmupSubscriptions = 50;

    private static readonly DeliveryHandler Idle = static (_, _, _) => { };

    private readonly PresenceOptions _options;
    private long[] _joinEvents = [];
    private long[] _suppressedEvents = [];

    private PresenceRun(PresenceOptions options, int repetition)
    {
        _options = options;
        JoinFirst = repetition % 2 == 0; // every other repetition, so neither phase always meets the other's tables
    }

    public bool JoinFirst { get; }

    /// <summary>Subscriptions of each phase.</summary>
    public double Subscriptions => (double)_options.Connections * _options.Subscriptions;

    public double? PlainRate { get; private set; }

    public double? JoinRate { get; private set; }

    /// <summary>GC heap and RSS growth over each phase, in bytes.</summary>
    public double? PlainHeap { get; private set; }

    public double? JoinHeap { get; private set; }

    public double? PlainRss { get; private set; }

    public double? JoinRss { get; private set; }

    public double? WatchedJoinRate { get; private set; }

    /// <summary>GC heap and RSS growth while every member joined the large topic (a subscription and a member each), in bytes.</summary>
    public double? LargeTopicHeap { get; private set; }

    public double? LargeTopicRss { get; private set; }

    /// <summary>The fewest join events a watcher got.</summary>
    public double? JoinEventsPerWatcher { get; private set; }

    /// <summary>Events not sent, as the broker counts them (<c>/varz</c> <c>presence.events_suppressed</c>).</summary>
    public double? Suppressed { get; private set; }

    /// <summary>Events sent, as the broker counts them (<c>/varz</c> <c>presence.events</c>).</summary>
    public long? EventsSent { get; private set; }

    public Latencies Occupancy { get; } = new();

    /// <summary>The median time of a full paged read, and the pages and members each read.</summary>
    public double? FullReadMs { get; private set; }

    public int Pages { get; private set; }

    public long MembersRead { get; private set; }

    public bool Interrupted => false; // Ctrl+C ends a repetition without a result

    public List<string> Failures { get; } = [];

    IReadOnlyList<string> IScenarioRun.Failures => Failures;

    /// <summary>Runs the phases; null when Ctrl+C stopped it.</summary>
    public static async Task<PresenceRun?> RunAsync(ITarget target, PresenceOptions options, int repetition, CancellationToken cancellationToken)
    {
        var run = new PresenceRun(options, repetition);
        string prefix = $"presence.{Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(4))}.";
        try
        {
            if (await run.SubscribePhasesAsync(target, prefix, cancellationToken))
            {
                await run.LargeTopicAsync(target, prefix + "room", cancellationToken);
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            return null;
        }
        catch (Exception e) when (e is OperationCanceledException || ScenarioClients.IsSetupFailure(e))
        {
            run.Failures.Add(e is OperationCanceledException ? $"a step did not finish within {options.Target.SetupTimeoutSeconds.ToString(CultureInfo.InvariantCulture)} s" : $"{e.GetType().Name}: {e.Message}");
        }

        return run;
    }

    /// <summary>Plain and joined subscriptions of every connection: rate and memory of each phase. False when the run cannot go on.</summary>
    private async Task<bool> SubscribePhasesAsync(ITarget target, string prefix, CancellationToken cancellationToken)
    {
        HeraldTcpClient[] clients = await ConnectAsync(target, 0, _options.Connections, cancellationToken);
        try
        {
            if (!clients[0].Welcome.Capabilities.HasFlag(Capabilities.Presence))
            {
                Failures.Add($"{target.Label} does not grant presence (HELLO capability bit 5){(target is ClusterTarget ? ": a cluster node grants it once presence is shared across nodes" : "")}; nothing measured");
                return false;
            }

            // A warm-up of both kinds first (JIT, pools, the tables' first growth), so neither measured phase pays for it.
            int warmup = Math.Min(_options.Subscriptions, WarmupSubscriptions);
            await SubscribeEachAsync(clients, $"{prefix}warm.plain.", warmup, SubscribeOptions.None, cancellationToken);
            await SubscribeEachAsync(clients, $"{prefix}warm.join.", warmup, SubscribeOptions.Join, cancellationToken);
            (long? heap, long? rss) = await MemoryAsync(target, cancellationToken);
            bool[] phases = JoinFirst ? [true, false] : [false, true];
            foreach (bool join in phases)
            {
                long start = Stopwatch.GetTimestamp();
                await SubscribeEachAsync(clients, $"{prefix}{(join ? "join" : "plain")}.", _options.Subscriptions, join ? SubscribeOptions.Join : SubscribeOptions.None, cancellationToken);
                double rate = Subscriptions / Stopwatch.GetElapsedTime(start).TotalSeconds;
                (long? heapAfter, long? rssAfter) = await MemoryAsync(target, cancellationToken);
                if (join)
                {
                    (JoinRate, JoinHeap, JoinRss) = (rate, heapAfter - heap, rssAfter - rss);
                }
                else
                {
                    (PlainRate, PlainHeap, PlainRss) = (rate, heapAfter - heap, rssAfter - rss);
                }

                (heap, rss) = (heapAfter, rssAfter);
            }

            long refused = clients.Sum(c => c.Errors);
            PresenceReplyFrame sample = await Bounded(token => clients[0].PresenceAsync($"{prefix}join.0.0", 0, null, token), cancellationToken);
            if (refused > 0 || sample.Members != 1)
            {
                Failures.Add($"joined subscriptions: {refused:N0} refused (ERROR frames), a sample topic has {sample.Members} members instead of 1 ({sample.Code})");
                return false;
            }

            return true;
        }
        finally
        {
            await ScenarioClients.DisposeAllAsync(clients);
        }
    }

    /// <summary>Every client subscribes to <paramref name="count"/> topics of its own under <paramref name="prefix"/>, each pipelining its SUBSCRIBEs.</summary>
    private Task SubscribeEachAsync(HeraldTcpClient[] clients, string prefix, int count, SubscribeOptions options, CancellationToken cancellationToken) =>
        Bounded(token => Task.WhenAll(clients.Select((client, c) => Task.WhenAll(Enumerable.Range(0, count).Select(i =>
            client.SubscribeAsync($"{prefix}{c}.{i}", options, Idle, token))))), cancellationToken);

    /// <summary>One topic: watchers first, then every member joins it; the events, the occupancy calls, the full reads.</summary>
    private async Task LargeTopicAsync(ITarget target, string topic, CancellationToken cancellationToken)
    {
        int members = _options.Members;
        int maxEvents = _options.MaxEventsMembers;
        HeraldTcpClient[] watchers = await ConnectAsync(target, _options.Connections, _options.Watchers, cancellationToken);
        HeraldTcpClient[] joiners = [];
        try
        {
            _joinEvents = new long[watchers.Length];
            _suppressedEvents = new long[watchers.Length];
            await Bounded(token => Task.WhenAll(watchers.Select((w, i) => w.SubscribeAsync(topic, SubscribeOptions.PresenceEvents, (_, _, headers) => Count(i, headers), token))), cancellationToken);
            joiners = await ConnectAsync(target, _options.Connections + watchers.Length, members, cancellationToken);
            (long? heap, long? rss) = await MemoryAsync(target, cancellationToken);

            long start = Stopwatch.GetTimestamp();
            await Bounded(token => ScenarioClients.SubscribeAllAsync(members, (i, t) => joiners[i].SubscribeAsync(topic, SubscribeOptions.Join, Idle, t), token), cancellationToken);
            WatchedJoinRate = members / Stopwatch.GetElapsedTime(start).TotalSeconds;
            (long? heapAfter, long? rssAfter) = await MemoryAsync(target, cancellationToken);
            (LargeTopicHeap, LargeTopicRss) = (heapAfter - heap, rssAfter - rss);

            // Every watcher gets a join per member up to maxEvents, then one `suppressed` (spec §15.2).
            long joinsExpected = Math.Min(members, maxEvents);
            long suppressedExpected = members > maxEvents ? 1 : 0;
            bool arrived = await Until(() => Enumerable.Range(0, watchers.Length).All(i => Volatile.Read(ref _joinEvents[i]) >= joinsExpected && Volatile.Read(ref _suppressedEvents[i]) >= suppressedExpected), cancellationToken);
            JoinEventsPerWatcher = _joinEvents.Min();
            if (!arrived || _joinEvents.Any(n => n != joinsExpected) || _suppressedEvents.Any(n => n != suppressedExpected))
            {
                Failures.Add($"events: each watcher should get {joinsExpected:N0} joins and {suppressedExpected} suppressed; got joins {_joinEvents.Min():N0}-{_joinEvents.Max():N0}, suppressed {_suppressedEvents.Min()}-{_suppressedEvents.Max()}");
            }

            Suppressed = await HeraldMonitoring.SumAsync(target, cancellationToken, "presence", "events_suppressed");
            EventsSent = await HeraldMonitoring.SumAsync(target, cancellationToken, "presence", "events");
            long suppressedCounted = (long)watchers.Length * Math.Max(0, members - maxEvents);
            if (target is HeraldTarget && Suppressed != suppressedCounted)
            {
                Failures.Add($"/varz presence.events_suppressed is {Suppressed}, expected {suppressedCounted:N0} ({watchers.Length} watchers x {Math.Max(0, members - maxEvents):N0} joins above {maxEvents:N0})");
            }

            HeraldTcpClient reader = watchers[0];
            for (int q = 0; q < _options.Queries; q++)
            {
                long sent = Stopwatch.GetTimestamp();
                PresenceReplyFrame occupancy = await Bounded(token => reader.PresenceAsync(topic, 0, null, token), cancellationToken);
                Occupancy.RecordTicks(sent, Stopwatch.GetTimestamp());
                if (occupancy.Code != ErrorCode.None || occupancy.Members != (ulong)members)
                {
                    Failures.Add($"occupancy: {occupancy.Members:N0} members ({occupancy.Code}), expected {members:N0}");
                    return;
                }
            }

            var reads = new List<double>(_options.Reads);
            for (int r = 0; r < _options.Reads; r++)
            {
                long began = Stopwatch.GetTimestamp();
                (Pages, MembersRead) = await Bounded(token => ReadAllAsync(reader, topic, token), cancellationToken);
                reads.Add(Stopwatch.GetElapsedTime(began).TotalMilliseconds);
                if (MembersRead != members)
                {
                    Failures.Add($"full read: {MembersRead:N0} members in {Pages} pages, expected {members:N0}");
                    return;
                }
            }

            FullReadMs = Headline.Of("", "", false, reads).Value;
        }
        finally
        {
            await ScenarioClients.DisposeAllAsync([.. watchers, .. joiners]);
        }
    }

    /// <summary>Every member of <paramref name="topic"/>, page after page (spec §15.3): the pages and the members listed.</summary>
    private static async Task<(int Pages, long Members)> ReadAllAsync(HeraldTcpClient reader, string topic, CancellationToken cancellationToken)
    {
        int pages = 0;
        long listed = 0;
        string? cursor = null;
        do
        {
            PresenceReplyFrame page = await reader.PresenceAsync(topic, PresenceScenario.PageSize, cursor, cancellationToken);
            pages++;
            listed += page.Entries.Count;
            cursor = page.Next;
        }
        while (cursor is not null);
        return (pages, listed);
    }

    /// <summary>Counts watcher <paramref name="watcher"/>'s event by its <c>Herald-Presence</c> header (receive loop; its own slot).</summary>
    private void Count(int watcher, ReadOnlySpan<byte> headers)
    {
        Span<byte> kind = stackalloc byte[16];
        if (HeaderBlock.TryCopyFirstValue(new ReadOnlySequence<byte>(headers.ToArray()), "Herald-Presence"u8, kind, out int written))
        {
            if (kind[..written].SequenceEqual("join"u8))
            {
                Interlocked.Increment(ref _joinEvents[watcher]);
            }
            else if (kind[..written].SequenceEqual("suppressed"u8))
            {
                Interlocked.Increment(ref _suppressedEvents[watcher]);
            }
        }
    }

    private async Task<HeraldTcpClient[]> ConnectAsync(ITarget target, int first, int count, CancellationToken cancellationToken)
    {
        IPubSubClient[] clients = await Bounded(token => ScenarioClients.ConnectAsync(target, first, count, token), cancellationToken);
        if (clients.Any(c => c is not HeraldTcpClient))
        {
            await ScenarioClients.DisposeAllAsync(clients);
            throw new UsageException("presence needs Herald's framed clients (tcp, tls, websocket).");
        }

        return [.. clients.Cast<HeraldTcpClient>()];
    }

    /// <summary>The broker's GC heap (<c>/varz</c>) and RSS (a cluster's: the nodes' sums) after <c>--settle</c>.</summary>
    private async Task<(long? Heap, long? Rss)> MemoryAsync(ITarget target, CancellationToken cancellationToken)
    {
        await Task.Delay(TimeSpan.FromSeconds(_options.Settle), cancellationToken);
        return (await HeraldMonitoring.SumAsync(target, cancellationToken, "process", "gc_heap_bytes"), TargetReport.ServerRss(target));
    }

    /// <summary><paramref name="step"/> within <c>--setup-timeout</c>: past it, an <see cref="OperationCanceledException"/> the run reports.</summary>
    private async Task<T> Bounded<T>(Func<CancellationToken, Task<T>> step, CancellationToken cancellationToken)
    {
        using CancellationTokenSource bounded = Bound(cancellationToken);
        return await step(bounded.Token);
    }

    private async Task Bounded(Func<CancellationToken, Task> step, CancellationToken cancellationToken)
    {
        using CancellationTokenSource bounded = Bound(cancellationToken);
        await step(bounded.Token);
    }

    private CancellationTokenSource Bound(CancellationToken cancellationToken)
    {
        var bounded = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        bounded.CancelAfter(TimeSpan.FromSeconds(_options.Target.SetupTimeoutSeconds));
        return bounded;
    }

    /// <summary>Polls <paramref name="condition"/> every 20 ms until it holds or <c>--setup-timeout</c> passes.</summary>
    private async Task<bool> Until(Func<bool> condition, CancellationToken cancellationToken)
    {
        long start = Stopwatch.GetTimestamp();
        while (!condition())
        {
            if (Stopwatch.GetElapsedTime(start).TotalSeconds > _options.Target.SetupTimeoutSeconds)
            {
                return false;
            }

            await Task.Delay(20, cancellationToken);
        }

        return true;
    }

    public void Print(TextWriter output)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        output.WriteLine();
        output.WriteLine(string.Create(c, $"  subscribe, {Subscriptions:N0} per phase ({(JoinFirst ? "joined first" : "plain first")}): plain {PlainRate:N0}/s, with join {JoinRate:N0}/s"));
        output.WriteLine(string.Create(c, $"  growth per subscription: GC heap plain {PlainHeap / Subscriptions:N0} B, joined {JoinHeap / Subscriptions:N0} B; RSS plain {PlainRss / Subscriptions:N0} B, joined {JoinRss / Subscriptions:N0} B"));
        output.WriteLine(string.Create(c, $"  {_options.Members:N0} joins into a topic under {_options.Watchers} watchers: {WatchedJoinRate:N0}/s, GC heap {LargeTopicHeap / _options.Members:N0} B and RSS {LargeTopicRss / _options.Members:N0} B per join; join events per watcher {JoinEventsPerWatcher:N0}; suppressed (/varz) {Suppressed:N0}, sent {EventsSent:N0}"));
        output.WriteLine(string.Create(c, $"  occupancy: {Occupancy.Describe()}"));
        output.WriteLine(string.Create(c, $"  full read: {MembersRead:N0} members in {Pages} pages, median {FullReadMs:F1} ms of {_options.Reads}"));
        Outcome.PrintFailures(Failures);
    }

    public void Write(Utf8JsonWriter json)
    {
        json.WriteStartObject();
        json.WriteBoolean("ok", Failures.Count == 0);
        json.WriteBoolean("joinedFirst", JoinFirst);
        json.WriteNumber("subscriptionsPerPhase", Subscriptions);
        ResultFile.WriteNumberOrNull(json, "plainSubscriptionsPerSecond", PlainRate);
        ResultFile.WriteNumberOrNull(json, "joinedSubscriptionsPerSecond", JoinRate);
        ResultFile.WriteNumberOrNull(json, "plainGcHeapGrowthBytes", PlainHeap);
        ResultFile.WriteNumberOrNull(json, "joinedGcHeapGrowthBytes", JoinHeap);
        ResultFile.WriteNumberOrNull(json, "plainRssGrowthBytes", PlainRss);
        ResultFile.WriteNumberOrNull(json, "joinedRssGrowthBytes", JoinRss);
        ResultFile.WriteNumberOrNull(json, "watchedJoinsPerSecond", WatchedJoinRate);
        ResultFile.WriteNumberOrNull(json, "largeTopicGcHeapGrowthBytes", LargeTopicHeap);
        ResultFile.WriteNumberOrNull(json, "largeTopicRssGrowthBytes", LargeTopicRss);
        ResultFile.WriteNumberOrNull(json, "joinEventsPerWatcher", JoinEventsPerWatcher);
        json.WriteNumber("suppressedEventsReceived", _suppressedEvents.Sum());
        ResultFile.WriteNumberOrNull(json, "eventsSuppressed", Suppressed);
        ResultFile.WriteNumberOrNull(json, "eventsSent", EventsSent);
        Occupancy.Write(json, "occupancy");
        ResultFile.WriteNumberOrNull(json, "fullReadMs", FullReadMs);
        json.WriteNumber("fullReadPages", Pages);
        json.WriteNumber("fullReadMembers", MembersRead);
        ResultFile.WriteStrings(json, "failures", Failures);
        json.WriteEndObject();
    }
}
