using System.Diagnostics;
using System.Globalization;
using System.Security.Cryptography;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// One repetition of one <c>collab</c> row: open T x N clients, subscribe each to its room, publish on the
/// schedule, record every delivery's latency from the scheduled time, and check that every other client
/// of the room got each publication exactly once, in order. Driven by the scenario's flow only.
/// </summary>
internal sealed class CollabRun : ScenarioRun
{
    private const int ConnectParallelism = 32;

    private readonly Lock _gate = new();
    private long _received; // measured deliveries; under _gate

    private CollabRun(CollabRow row) => Row = row;

    public CollabRow Row { get; }

    /// <summary>Latency of measured deliveries (us); written under <see cref="_gate"/> by every client's receive loop.</summary>
    public Latencies Latencies { get; } = new();

    public long MeasuredPublications { get; private set; }

    public long Late { get; private set; }

    public double MaxLagMs { get; private set; }

    public long Foreign { get; private set; }

    public double SetupSeconds { get; private set; }

    /// <summary>The schedule: when room <paramref name="room"/> publishes round <paramref name="round"/>, in Stopwatch ticks after the origin.</summary>
    private static long Offset(CollabRow row, long round, int room) => (long)((round + ((double)room / row.Rooms)) * row.Delay * Stopwatch.Frequency);

    /// <summary>Runs once; null when connecting or subscribing failed (the reason is printed).</summary>
    public static async Task<CollabRun?> ExecuteAsync(ITarget target, CollabRow row, CollabOptions options, double setupSeconds, StampedPayload payload, CancellationToken cancellationToken)
    {
        var run = new CollabRun(row);
        string id = Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(4)); // topics unique per run: no stray copies from an earlier one
        string[] topics = [.. Enumerable.Range(0, row.Rooms).Select(r => string.Create(CultureInfo.InvariantCulture, $"collab.{id}.{r}"))];
        var members = new RoomMember[row.Rooms * row.Clients];
        var schedule = new CollabSchedule(options.WarmupRounds);
        for (int i = 0; i < members.Length; i++)
        {
            members[i] = new RoomMember(run, schedule, payload, room: i / row.Clients, isPublisher: i % row.Clients == 0);
        }

        try
        {
            long setupStart = Stopwatch.GetTimestamp();
            SetupOutcome setup = await ScenarioSkeleton.SetUpAsync(setupSeconds, token =>
                Parallel.ForEachAsync(Enumerable.Range(0, members.Length), new ParallelOptions { MaxDegreeOfParallelism = ConnectParallelism, CancellationToken = token }, async (i, t) =>
                {
                    RoomMember member = members[i];
                    member.Client = await target.ConnectAsync(i, t);
                    await member.Client.SubscribeAsync(topics[member.Room], member.OnMessage, t);
                }), StreamRun.AnyButOutOfMemory, cancellationToken);
            if (setup.Failure is { } why)
            {
                Console.Error.WriteLine($"error: could not connect and subscribe {members.Length} clients to {target.Label}: {why}");
                return null;
            }

            if (setup.Interrupted)
            {
                run.Interrupted = true;
                return run;
            }

            run.SetupSeconds = Stopwatch.GetElapsedTime(setupStart).TotalSeconds;
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  {members.Length:N0} clients connected and subscribed in {run.SetupSeconds:F2} s"));
            await run.PublishAndCollectAsync(target, options, payload, topics, members, schedule, cancellationToken);
            return run;
        }
        finally
        {
            await Task.WhenAll(members.Select(m => StreamRun.DisposeQuietlyAsync(m.Client)));
        }
    }

    private async Task PublishAndCollectAsync(ITarget target, CollabOptions options, StampedPayload payload, string[] topics, RoomMember[] members, CollabSchedule schedule, CancellationToken cancellationToken)
    {
        CollabRow row = Row;
        int totalRounds = options.WarmupRounds + options.Rounds;
        long lateTicks = (long)(options.LateMs / 1000 * Stopwatch.Frequency);
        using var deadline = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        deadline.CancelAfter(TimeSpan.FromSeconds(options.MaxSeconds));

        ResourceSnapshot before = ResourceSnapshot.Take(target.ServerProcesses);
        schedule.Origin = Stopwatch.GetTimestamp() + (Stopwatch.Frequency / 10); // a little ahead: the first room is not late by construction
        long measuredPublications = 0, late = 0, maxLag = 0;
        int round = 0;
        Task publishing = Task.Run(async () =>
        {
            byte[] body = payload.NewBuffer();
            for (; round < totalRounds; round++)
            {
                for (int room = 0; room < row.Rooms; room++)
                {
                    long due = schedule.Origin + Offset(row, round, room);
                    long now = Stopwatch.GetTimestamp();
                    while (now < due)
                    {
                        // sleep to about a millisecond before the time, then yield until it: timer slack
                        // would otherwise add a millisecond or more to every latency
                        long left = due - now;
                        if (left > Stopwatch.Frequency / 500)
                        {
                            await Task.Delay(TimeSpan.FromTicks((left - (Stopwatch.Frequency / 1000)) * TimeSpan.TicksPerSecond / Stopwatch.Frequency), deadline.Token);
                        }
                        else
                        {
                            Thread.Yield();
                        }

                        now = Stopwatch.GetTimestamp();
                    }

                    payload.Stamp(body, 0, (uint)room);
                    payload.Stamp(body, 1, (uint)round);
                    members[room * row.Clients].Client!.Publish(topics[room], body);
                    if (round >= options.WarmupRounds)
                    {
                        Interlocked.Increment(ref measuredPublications);
                        long lag = Stopwatch.GetTimestamp() - due;
                        maxLag = Math.Max(maxLag, lag);
                        if (lag > lateTicks)
                        {
                            late++;
                        }
                    }
                }
            }
        }, CancellationToken.None);

        long started = Stopwatch.GetTimestamp();
        string? stopped = null;
        long expected() => Interlocked.Read(ref measuredPublications) * (row.Clients - 1);
        long graceEnd = long.MaxValue;
        while (true)
        {
            await Task.WhenAny(publishing, Task.Delay(publishing.IsCompleted ? 100 : 1000, CancellationToken.None));
            if (cancellationToken.IsCancellationRequested)
            {
                Interrupted = true;
                break;
            }

            if (members.FirstOrDefault(m => m.Client?.Failure is not null) is { } broken)
            {
                stopped = $"a client of room {broken.Room} was disconnected: {broken.Client!.Failure}";
                break;
            }

            if (publishing.IsFaulted)
            {
                stopped = $"the publisher failed: {publishing.Exception?.GetBaseException().Message}";
                break;
            }

            long received = ReceivedSoFar();
            if (publishing.IsCompleted)
            {
                if (received >= expected())
                {
                    break;
                }

                graceEnd = Math.Min(graceEnd, Stopwatch.GetTimestamp() + (long)(options.Grace * Stopwatch.Frequency));
                if (Stopwatch.GetTimestamp() >= graceEnd)
                {
                    break; // the missing deliveries are reported below
                }

                continue;
            }

            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"  {Stopwatch.GetElapsedTime(started).TotalSeconds,6:F1}s  round {Math.Min(Volatile.Read(ref round) + 1, totalRounds),5}/{totalRounds}{(Volatile.Read(ref round) < options.WarmupRounds ? " (warm-up)" : "")}  measured publications {Interlocked.Read(ref measuredPublications),9:N0}  deliveries {received,10:N0}"));
        }

        ResourceSnapshot after = ResourceSnapshot.Take(target.ServerProcesses);
        await deadline.CancelAsync();
        try
        {
            await publishing;
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            // cancelled by --max-seconds, Ctrl+C or a failure; said below
        }

        if (round < totalRounds && stopped is null && !Interrupted)
        {
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  stopped by --max-seconds {options.MaxSeconds} after {round} of {totalRounds} rounds"));
        }

        Usage = ResourceUsage.Between(before, after);
        ServerRss = TargetReport.ServerRss(target);
        MeasuredPublications = Interlocked.Read(ref measuredPublications);
        Expected = expected();
        Late = late;
        MaxLagMs = maxLag * 1000.0 / Stopwatch.Frequency;
        lock (_gate)
        {
            Received = _received;
        }

        OutOfOrder = members.Sum(m => m.OutOfOrder);
        Foreign = members.Sum(m => m.Foreign);
        if (stopped is not null)
        {
            Failures.Add(stopped);
        }

        if (Missing > 0 && !Interrupted)
        {
            Failures.Add($"{Missing:N0} of {Expected:N0} deliveries never arrived (within --grace {options.Grace.ToString(CultureInfo.InvariantCulture)} s of the last publication)");
        }

        if (Received > Expected)
        {
            Failures.Add($"{Received - Expected:N0} deliveries more than published");
        }

        if (OutOfOrder > 0)
        {
            Failures.Add($"{OutOfOrder:N0} deliveries arrived twice or out of order");
        }

        if (Foreign > 0)
        {
            Failures.Add($"{Foreign:N0} deliveries were not this room's publications");
        }

        long errors = members.Sum(m => m.Client?.Errors ?? 0);
        if (errors > 0)
        {
            Failures.Add($"the server sent {errors:N0} error replies");
        }
    }

    private long ReceivedSoFar()
    {
        lock (_gate)
        {
            return _received;
        }
    }

    /// <summary>Called by a receiving member's receive loop for a measured delivery.</summary>
    private void Record(long scheduled, long arrived)
    {
        lock (_gate)
        {
            Latencies.RecordTicks(scheduled, arrived);
            _received++;
        }
    }

    public override void Write(Utf8JsonWriter json)
    {
        json.WriteStartObject();
        json.WriteNumber("setupSeconds", SetupSeconds);
        json.WriteNumber("measuredPublications", MeasuredPublications);
        WriteDeliveries(json);
        json.WriteNumber("foreign", Foreign);
        json.WriteNumber("late", Late);
        json.WriteNumber("maxLagMs", MaxLagMs);
        Latencies.Write(json, "latency");
        WriteUsage(json);
        ResultFile.WriteStrings(json, "failures", Failures);
        json.WriteEndObject();
    }

    /// <summary>The schedule's origin (Stopwatch ticks), set once before the first publication; read by every receive loop.</summary>
    private sealed class CollabSchedule(int warmupRounds)
    {
        private long _origin;

        public int WarmupRounds => warmupRounds;

        public long Origin
        {
            get => Volatile.Read(ref _origin);
            set => Volatile.Write(ref _origin, value);
        }
    }

    /// <summary>
    /// One client of a room. <see cref="OnMessage"/> runs on the client's own receive loop, one message at a
    /// time, so its counters need no lock; they are read after the run.
    /// </summary>
    private sealed class RoomMember(CollabRun run, CollabSchedule schedule, StampedPayload payload, int room, bool isPublisher)
    {
        private long _lastRound = -1;

        public int Room => room;

        public IPubSubClient? Client { get; set; }

        public long OutOfOrder { get; private set; }

        public long Foreign { get; private set; }

        public void OnMessage(ReadOnlySpan<byte> body, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
        {
            long arrived = Stopwatch.GetTimestamp();
            if (!payload.TryRead(body, 0, out uint fromRoom) || !payload.TryRead(body, 1, out uint round) || fromRoom != room)
            {
                Foreign++;
                return;
            }

            if (isPublisher)
            {
                return; // its own copy: peers have no no-echo option, so every target echoes it the same way
            }

            if (round <= _lastRound)
            {
                OutOfOrder++;
                return;
            }

            _lastRound = round;
            if (round >= schedule.WarmupRounds)
            {
                run.Record(schedule.Origin + Offset(run.Row, round, room), arrived);
            }
        }
    }
}
