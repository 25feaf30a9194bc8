using System.Buffers.Binary;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// One repetition of <c>shards</c> (see <see cref="ShardsScenario"/>): fresh clients, the subscriptions, the
/// warm-up, then each shard's counters read around the measured publications. Threading: the subscriber's
/// handler (its receive loop) is the only writer of the per-topic order state and of <see cref="Received"/>;
/// the repetition's task publishes and reads <see cref="Received"/>.
/// </summary>
internal sealed class ShardsRun : IScenarioRun
{
    private const int LeadCheckEvery = 1024; // publications between two looks at the subscriber

    private readonly List<string> _failures = [];
    private readonly long[] _lastPerTopic;
    private long _received;
    private long _reordered;

    private ShardsRun(int topics)
    {
        _lastPerTopic = new long[topics];
        Array.Fill(_lastPerTopic, -1);
    }

    /// <summary>Each shard's cost over the measured publications, shard i at index i; empty when nothing was measured.</summary>
    public IReadOnlyList<ShardCost> Shards { get; private set; } = [];

    /// <summary>The measured publications (the warm-up's not counted).</summary>
    public long Published { get; private set; }

    /// <summary>From the first reading of the shards to the last, after every measured publication arrived.</summary>
    public double Seconds { get; private set; }

    public long Received => Volatile.Read(ref _received);

    public bool Interrupted { get; private set; }

    public IReadOnlyList<string> Failures => _failures;

    /// <summary>Runs one repetition; null when the clients could not be set up (the target is unreachable).</summary>
    public static async Task<ShardsRun?> RunAsync(ClusterTarget target, ShardsOptions options, RunLog log, CancellationToken cancellationToken)
    {
        var run = new ShardsRun(options.Topics);
        string[] topics = [.. Enumerable.Range(0, options.Topics).Select(k => string.Create(CultureInfo.InvariantCulture, $"bench.shards.{k}"))];
        IPubSubClient? publisher = null, subscriber = null;
        var probes = new List<RedisProbe>();
        try
        {
            bool ready = await ScenarioSkeleton.SetUpClientsAsync(target, options.Target.SetupTimeoutSeconds, async setup =>
            {
                publisher = await target.ConnectAsync(0, setup);
                subscriber = await target.ConnectAsync(1, setup);
                foreach (string topic in topics)
                {
                    await subscriber.SubscribeAsync(topic, run.Deliver, setup);
                }

                foreach (System.Net.IPEndPoint shard in target.ShardEndPoints)
                {
                    probes.Add(await RedisProbe.ConnectAsync(shard));
                }
            }, cancellationToken);
            if (!ready)
            {
                return null;
            }

            long published = PublishCalls(await ReadAsync(probes)); // the shards' PUBLISH calls so far: the setup's none, another run's some
            var deadline = Stopwatch.StartNew();
            if (!await run.PublishAsync(publisher!, topics, 0, options.Warmup, options, deadline, cancellationToken))
            {
                return run.Ended(publisher, subscriber, log, cancellationToken);
            }

            // A subscriber on the publisher's node gets its publications before the node's writer has PUBLISHed them: each
            // reading waits (at most --grace) until the shards have taken every publication sent before it.
            (string Cpu, string Stats)[] before = await ReadOnceTakenAsync(probes, published + options.Warmup, options.Grace, cancellationToken);
            long start = Stopwatch.GetTimestamp();
            bool done = await run.PublishAsync(publisher!, topics, options.Warmup, options.Publications, options, deadline, cancellationToken);
            (string Cpu, string Stats)[] after = await ReadOnceTakenAsync(probes, published + options.Warmup + options.Publications, options.Grace, cancellationToken);
            run.Seconds = Stopwatch.GetElapsedTime(start).TotalSeconds;
            run.Published = options.Publications;
            run.Shards = [.. before.Select((b, i) => ShardCost.Between(b.Cpu, b.Stats, after[i].Cpu, after[i].Stats))];
            return done ? run.Checked(publisher!, subscriber!) : run.Ended(publisher, subscriber, log, cancellationToken);
        }
        finally
        {
            await ScenarioClients.DisposeAllAsync([publisher, subscriber]);
            foreach (RedisProbe probe in probes)
            {
                await probe.DisposeAsync();
            }
        }
    }

    private static async Task<(string Cpu, string Stats)[]> ReadAsync(List<RedisProbe> probes) =>
        await Task.WhenAll(probes.Select(async p => (await p.InfoAsync("cpu"), await p.InfoAsync("commandstats"))));

    /// <summary>The shards' PUBLISH calls together, in one reading.</summary>
    private static long PublishCalls((string Cpu, string Stats)[] reading) => reading.Sum(r => RedisInfo.Calls(r.Stats, "publish"));

    /// <summary>Reads every shard once their PUBLISH calls reach <paramref name="calls"/> together, or <paramref name="grace"/> seconds have passed.</summary>
    private static async Task<(string Cpu, string Stats)[]> ReadOnceTakenAsync(List<RedisProbe> probes, long calls, double grace, CancellationToken cancellationToken)
    {
        var waited = Stopwatch.StartNew();
        while (true)
        {
            (string Cpu, string Stats)[] reading = await ReadAsync(probes);
            if (PublishCalls(reading) >= calls || waited.Elapsed.TotalSeconds >= grace)
            {
                return reading;
            }

            await Task.Delay(20, cancellationToken);
        }
    }

    /// <summary>The subscriber's handler: one more arrival; a sequence number not above its topic's last is out of order (or twice).</summary>
    private void Deliver(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
    {
        long sequence = BinaryPrimitives.ReadInt64LittleEndian(payload);
        ref long last = ref _lastPerTopic[(int)(sequence % _lastPerTopic.Length)];
        if (sequence <= last)
        {
            _reordered++;
        }
        else
        {
            last = sequence;
        }

        Volatile.Write(ref _received, _received + 1);
    }

    /// <summary>
    /// Publishes numbers <paramref name="first"/> .. + <paramref name="count"/> - 1, number n on topic n % topics, never more than
    /// <c>--max-lead</c> ahead of the subscriber, then waits up to <c>--grace</c> for them all. False when they did not all
    /// arrive in time, the publisher failed, or Ctrl+C came (the reason is recorded).
    /// </summary>
    private async Task<bool> PublishAsync(IPubSubClient publisher, string[] topics, long first, long count, ShardsOptions options, Stopwatch deadline, CancellationToken cancellationToken)
    {
        byte[] payload = new byte[options.Payload];
        long next = first, end = first + count;
        try
        {
            while (next < end)
            {
                if (deadline.Elapsed.TotalSeconds > options.MaxSeconds)
                {
                    _failures.Add(string.Create(CultureInfo.InvariantCulture, $"--max-seconds {options.MaxSeconds}: {next - first:N0} of {count:N0} published"));
                    return false;
                }

                long room = Math.Min(options.MaxLead - (next - Received), Math.Min(LeadCheckEvery, end - next));
                if (room <= 0)
                {
                    await publisher.FlushAsync(cancellationToken); // what is buffered must go out, or the subscriber never catches up
                    await Task.Delay(1, cancellationToken);
                    continue;
                }

                for (; room > 0; room--, next++)
                {
                    BinaryPrimitives.WriteInt64LittleEndian(payload, next);
                    await publisher.PublishAsync(topics[next % topics.Length], payload, sendNow: false, cancellationToken: cancellationToken);
                }
            }

            await publisher.FlushAsync(cancellationToken);
            var grace = Stopwatch.StartNew();
            while (Received < end && grace.Elapsed.TotalSeconds < options.Grace && publisher.Failure is null)
            {
                await Task.Delay(10, cancellationToken);
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            Interrupted = true;
            return false;
        }
        catch (Exception e) when (RunState.IsConnectionEnd(e))
        {
            _failures.Add($"publisher: {e.Message}");
            return false;
        }

        if (Received < end)
        {
            _failures.Add(string.Create(CultureInfo.InvariantCulture, $"{end - Received:N0} of {end:N0} publications missing after --grace {options.Grace} s"));
            return false;
        }

        return true;
    }

    /// <summary>Every publication arrived: what is left to check is order and the connections.</summary>
    private ShardsRun Checked(IPubSubClient publisher, IPubSubClient subscriber)
    {
        if (_reordered > 0)
        {
            _failures.Add(string.Create(CultureInfo.InvariantCulture, $"{_reordered:N0} publications out of order (or twice) on their topic"));
        }

        AddFailure("publisher", publisher.Failure);
        AddFailure("subscriber", subscriber.Failure);
        return this;
    }

    private ShardsRun Ended(IPubSubClient? publisher, IPubSubClient? subscriber, RunLog log, CancellationToken cancellationToken)
    {
        AddFailure("publisher", publisher?.Failure);
        AddFailure("subscriber", subscriber?.Failure);
        if (cancellationToken.IsCancellationRequested)
        {
            Interrupted = true;
        }

        foreach (string failure in _failures)
        {
            log.Report("shards", failure);
        }

        return this;
    }

    private void AddFailure(string who, string? failure)
    {
        if (failure is not null)
        {
            _failures.Add($"{who}: {failure}");
        }
    }

    public void Print(TextWriter output)
    {
        output.WriteLine($"shards repetition ({(Interrupted ? "INTERRUPTED" : _failures.Count == 0 ? "OK" : "FAILED")})");
        long publishes = Math.Max(1, Shards.Sum(s => s.Publishes));
        for (int i = 0; i < Shards.Count; i++)
        {
            ShardCost shard = Shards[i];
            output.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"  shard {i}: Redis CPU {shard.CpuSeconds:F2} s = {shard.CpuSecondsPerMillion(Published):F2} s per M publications; {shard.Publishes:N0} PUBLISH ({100.0 * shard.Publishes / publishes:F1} %)"));
        }

        if (Shards.Count > 0)
        {
            output.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"  {Published:N0} publications in {Seconds:F1} s ({Published / Seconds:N0}/s); projected at one core per shard: {ShardCost.ProjectedRate(Shards, Published):N0}/s"));
        }

        Outcome.PrintFailures(_failures);
    }

    public void Write(Utf8JsonWriter json) => ScenarioSkeleton.WriteRepetition(json, this, Shards.Count > 0, Seconds, resources: null, figures =>
    {
        figures.WriteNumber("publications", Published);
        figures.WriteNumber("received", Received);
        figures.WriteNumber("reordered", _reordered);
        figures.WriteStartArray("shards");
        foreach (ShardCost shard in Shards)
        {
            shard.Write(figures, Published);
        }

        figures.WriteEndArray();
    });
}
