using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using Herald.Protocol;
using MessagePack;
using ZstdSharp;

namespace Herald.LoadTest.Scenarios;

/// <summary>How the subscribers of a <c>deltas</c> cell ask to receive their messages.</summary>
internal enum DeltaMode
{
    /// <summary>Nothing asked: every MESSAGE carries the payload as published.</summary>
    None,

    /// <summary>Zstd (HELLO bit 0) from a broker that compresses every publication, small ones included: one Zstd frame per message.</summary>
    Zstd,

    /// <summary>Deltas (HELLO bit 7, SUBSCRIBE option 8): each message a Fossil delta against the one before where the broker finds it pays.</summary>
    Deltas,
}

/// <summary>
/// One cell of the <c>deltas</c> scenario: one stream to <c>--subscribers</c> TCP (or WebSocket) subscribers of one
/// topic in one mode, on the broker the scenario started. A publisher sends the stream's publications at most
/// <c>--max-lead</c> ahead of the slowest subscriber; each subscriber rebuilds every payload (decompresses a Zstd one,
/// applies a delta to the payload before it) and checks it byte for byte. After a warm-up, the measured part runs from
/// the first publication to the last subscriber's receipt: bytes read per delivery, the broker's CPU time (its
/// process's, from /proc) per publication, deliveries per second.
/// </summary>
internal static class DeltasRun
{
    private const uint Sid = 1;

    /// <summary>Publications sent to the socket together.</summary>
    private const int Batch = 32;

    public static string Name(DeltaMode mode) => mode.ToString().ToLowerInvariant();

    public static async Task<DeltasCellResult> ExecuteAsync(HeraldTarget target, DeltasOptions options, DeltaStream stream, byte[][] payloads, DeltaMode mode, RunLog log, CancellationToken cancellationToken)
    {
        var result = new DeltasCellResult(stream, mode, options.Subscribers, options.Messages);
        string topic = string.Create(CultureInfo.InvariantCulture, $"bench.deltas.{DeltaStreams.Name(stream)}.mode{(int)mode}"); // as long in every mode: the same frame overhead
        byte[] topicBytes = Topic.EncodeName(topic);
        byte[][] frames = [.. payloads.Select(p =>
        {
            var frame = new ArrayBufferWriter<byte>(p.Length + 64);
            FrameWriter.WritePublish(frame, topicBytes, default, PayloadFlags.None, p);
            return frame.WrittenSpan.ToArray();
        })];
        Capabilities ask = mode switch { DeltaMode.Zstd => Capabilities.Zstd, DeltaMode.Deltas => Capabilities.Deltas, _ => Capabilities.None };
        SubscribeOptions subscribe = mode == DeltaMode.Deltas ? SubscribeOptions.Delta : SubscribeOptions.None;

        var state = new RunState();
        HeraldConnection[] connections = [];
        HeraldConnection? publisherConnection = null;
        var subscribers = new List<DeltasSubscriber>();
        try
        {
            SetupOutcome setup = await ScenarioSkeleton.SetUpAsync(options.SetupTimeout, async token =>
            {
                connections = await HeraldConnection.ConnectManyAsync(target.Endpoints, options.Subscribers, i => $"loadtest-deltas-{i}",
                    (c, _, t) => c.SubscribeAsync(Sid, topic, t, subscribe), token, capabilities: ask);
                publisherConnection = await HeraldConnection.ConnectAsync(target.Endpoints.For(options.Subscribers), "loadtest-deltas-pub", token, via: target.Endpoints);
            }, e => RunState.IsSetupFailure(e) ? e.Message : null, cancellationToken);
            if (setup.Failure is not null || setup.Interrupted)
            {
                result.Failures.Add(setup.Failure ?? "interrupted");
                result.Interrupted = setup.Interrupted;
                return result;
            }

            HeraldConnection publisher = publisherConnection!;
            foreach (HeraldConnection connection in connections)
            {
                if ((connection.Welcome.Capabilities & ask) != ask)
                {
                    result.Failures.Add($"{connection.Name} asked for {ask} and the broker granted {connection.Welcome.Capabilities}");
                }

                subscribers.Add(new DeltasSubscriber(connection, payloads, topicBytes, log, state));
            }

            var publisherHealth = new ConnectionHealth(publisher.Name, log, () => state.Stopping);
            Task[] reading = [.. subscribers.Select(s => s.RunAsync()), publisher.ReadUntilClosedAsync(null, publisherHealth)];
            long MinReceived() => subscribers.Min(s => s.Received);
            string? Lost() => subscribers.Select(s => s.Failure).FirstOrDefault(f => f is not null) ?? publisherHealth.Failure;

            // Warm-up: the broker's JIT, its encoder's per-topic figures, the subscribers' first full message.
            long sent = 0;
            string? failure = await PublishAsync(publisher, frames, options.Warmup, options.MaxLead, () => MinReceived(), Lost, options.MaxSeconds, cancellationToken);
            sent += options.Warmup;
            failure ??= await UntilReceivedAsync(sent, MinReceived, Lost, options.MaxSeconds, cancellationToken);
            DeltasSnapshot start = DeltasSnapshot.Take(target.ServerProcess, subscribers);
            failure ??= await PublishAsync(publisher, frames, options.Messages, options.MaxLead, () => MinReceived(), Lost, options.MaxSeconds, cancellationToken, first: sent);
            sent += options.Messages;
            failure ??= await UntilReceivedAsync(sent, MinReceived, Lost, options.MaxSeconds, cancellationToken);
            DeltasSnapshot end = DeltasSnapshot.Take(target.ServerProcess, subscribers);
            result.Interrupted = cancellationToken.IsCancellationRequested;
            if (failure is not null && !result.Interrupted)
            {
                result.Failures.Add(failure);
            }

            state.BeginStopping();
            RunState.CloseAll(connections, publisher);
            await RunState.WaitQuietlyAsync(Task.WhenAll(reading), TimeSpan.FromSeconds(2));
            result.Collect(start, end, subscribers, publisherHealth);
            return result;
        }
        finally
        {
            state.BeginStopping();
            RunState.CloseAll(connections, publisherConnection);
            foreach (DeltasSubscriber subscriber in subscribers)
            {
                subscriber.Dispose();
            }
        }
    }

    /// <summary>
    /// Sends <paramref name="count"/> publications (publication <c>n</c> is frame <c>n % frames</c>), in batches, never
    /// more than <paramref name="maxLead"/> ahead of the slowest subscriber. Returns why it stopped early, or null.
    /// </summary>
    private static async Task<string?> PublishAsync(HeraldConnection publisher, byte[][] frames, int count, int maxLead, Func<long> received, Func<string?> lost, double maxSeconds, CancellationToken cancellationToken, long first = 0)
    {
        var batch = new ArrayBufferWriter<byte>(Batch * (frames.Max(f => f.Length) + 1));
        var deadline = Stopwatch.StartNew();
        long next = first, end = first + count;
        try
        {
            while (next < end)
            {
                while (next - received() >= maxLead)
                {
                    if (lost() is { } why)
                    {
                        return why;
                    }

                    if (deadline.Elapsed.TotalSeconds > maxSeconds)
                    {
                        return string.Create(CultureInfo.InvariantCulture, $"publication {next} still more than --max-lead ahead of the slowest subscriber after {maxSeconds} s");
                    }

                    await Task.Delay(1, cancellationToken);
                }

                batch.ResetWrittenCount();
                for (int i = 0; i < Batch && next < end && next - received() < maxLead; i++, next++)
                {
                    batch.Write(frames[(int)(next % frames.Length)]);
                }

                await publisher.SendAsync(batch.WrittenMemory, CancellationToken.None); // never cut a frame in half
            }

            return null;
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            return null;
        }
        catch (Exception e) when (RunState.IsConnectionEnd(e))
        {
            return $"publishing failed: {e.Message}";
        }
    }

    /// <summary>Waits until every subscriber has received <paramref name="count"/> messages; why not, or null.</summary>
    private static async Task<string?> UntilReceivedAsync(long count, Func<long> received, Func<string?> lost, double maxSeconds, CancellationToken cancellationToken)
    {
        var deadline = Stopwatch.StartNew();
        while (received() < count)
        {
            if (lost() is { } why)
            {
                return why;
            }

            if (deadline.Elapsed.TotalSeconds > maxSeconds || cancellationToken.IsCancellationRequested)
            {
                return string.Create(CultureInfo.InvariantCulture, $"the slowest subscriber has {received()} of {count} messages after {deadline.Elapsed.TotalSeconds:F1} s");
            }

            await Task.Delay(1, CancellationToken.None);
        }

        return null;
    }
}

/// <summary>
/// A subscriber of a <c>deltas</c> cell: rebuilds each MESSAGE's payload (as published, Zstd, or a delta against the
/// payload before) and compares it with publication <c>n</c>; counts the bytes read and how each message came.
/// Threading: <see cref="RunAsync"/> is the only writer; the counters are read by the publisher and the snapshots.
/// </summary>
internal sealed class DeltasSubscriber(HeraldConnection connection, byte[][] payloads, byte[] topic, RunLog log, RunState state) : IDisposable
{
    private readonly ConnectionHealth _health = new(connection.Name, log, () => state.Stopping);
    private readonly Decompressor _decompressor = new();
    private readonly byte[] _scratch = new byte[1 << 20];

    /// <summary>The last payload rebuilt: what the next delta applies to (a published payload when it matched).</summary>
    private byte[] _previous = [];

    private long _received;
    private long _wirePayloadBytes;
    private long _zstd;
    private long _deltas;

    public long Received => Volatile.Read(ref _received);

    public long WireBytes => connection.BytesReceived;

    public long WirePayloadBytes => Volatile.Read(ref _wirePayloadBytes);

    public long Zstd => Volatile.Read(ref _zstd);

    public long Deltas => Volatile.Read(ref _deltas);

    public long Mismatches { get; private set; }

    public string? Failure => _health.Failure;

    public long ErrorFrames => _health.ErrorFrames + _health.UnexpectedFrames;

    public Task RunAsync() => connection.ReadUntilClosedAsync(Take, _health);

    public void Dispose() => _decompressor.Dispose();

    private bool Take(ReadOnlySequence<byte> body, long receivedAt)
    {
        var reader = new MessagePackReader(body);
        if (FrameDecoder.ReadHeader(ref reader, out int elements) != FrameType.Message)
        {
            return false;
        }

        PublishFrame message = FrameDecoder.ReadMessage(ref reader, elements);
        long n = _received;
        byte[] expected = payloads[(int)(n % payloads.Length)];
        ReadOnlySpan<byte> payload = message.Payload.IsSingleSegment ? message.Payload.FirstSpan : message.Payload.ToArray();
        string? mismatch = message.Sid != 1 || !message.Topic.FirstSpan.SequenceEqual(topic) ? $"sid {message.Sid} topic '{message.TopicString}'" : null;
        ReadOnlySpan<byte> plain = payload;
        if (mismatch is null && message.Flags == PayloadFlags.Zstd)
        {
            _zstd++;
            try
            {
                plain = _scratch.AsSpan(0, _decompressor.Unwrap(payload, _scratch));
            }
            catch (ZstdException e)
            {
                mismatch = $"the Zstd payload does not decompress: {e.Message}";
            }
        }
        else if (mismatch is null && message.Flags == PayloadFlags.Delta)
        {
            _deltas++;
            if (!FossilDelta.TryGetTargetSize(payload, out int size) || size > _scratch.Length)
            {
                mismatch = "the delta's size line is malformed or over 1 MiB";
            }
            else if (FossilDelta.TryApply(_previous, payload, _scratch.AsSpan(0, size)) is { } refused)
            {
                mismatch = $"the delta does not apply: {refused}";
            }
            else
            {
                plain = _scratch.AsSpan(0, size);
            }
        }
        else if (mismatch is null && message.Flags != PayloadFlags.None)
        {
            mismatch = $"flags {message.Flags}";
        }

        if (mismatch is null && !plain.SequenceEqual(expected))
        {
            mismatch = $"payload differs from publication {n} ({plain.Length} bytes, published {expected.Length}; flags {message.Flags})";
        }

        _previous = mismatch is null ? expected : plain.ToArray();
        if (mismatch is not null && Mismatches++ == 0)
        {
            log.Report(connection.Name, $"MESSAGE {n}: {mismatch}");
        }

        Volatile.Write(ref _wirePayloadBytes, _wirePayloadBytes + payload.Length);
        Volatile.Write(ref _received, n + 1);
        return true;
    }
}

/// <summary>The counters at one instant: the broker's and the tool's CPU time, and what the subscribers have read.</summary>
internal readonly record struct DeltasSnapshot(ResourceSnapshot Resources, long Received, long WireBytes, long WirePayloadBytes, long Zstd, long Deltas)
{
    public static DeltasSnapshot Take(Process? broker, List<DeltasSubscriber> subscribers) => new(
        ResourceSnapshot.Take(broker),
        subscribers.Sum(s => s.Received),
        subscribers.Sum(s => s.WireBytes),
        subscribers.Sum(s => s.WirePayloadBytes),
        subscribers.Sum(s => s.Zstd),
        subscribers.Sum(s => s.Deltas));
}

/// <summary>One cell's figures (one stream, one mode, one repetition) and what went wrong.</summary>
internal sealed class DeltasCellResult(DeltaStream stream, DeltaMode mode, int subscribers, int messages) : IScenarioRun
{
    public DeltaStream Stream { get; } = stream;

    public DeltaMode Mode { get; } = mode;

    public bool Interrupted { get; set; }

    public List<string> Failures { get; } = [];

    IReadOnlyList<string> IScenarioRun.Failures => [.. Failures.Select(f => $"{DeltaStreams.Name(Stream)}/{DeltasRun.Name(Mode)}: {f}")];

    public bool Measured { get; private set; }

    public double Seconds { get; private set; }

    /// <summary>Messages delivered in the measured part, over every subscriber.</summary>
    public long Deliveries { get; private set; }

    /// <summary>Bytes the subscribers read in it (frames whole: length prefix, topic, flags, payload).</summary>
    public long WireBytes { get; private set; }

    /// <summary>The payloads' share of them, as they crossed the wire (compressed, or a delta).</summary>
    public long WirePayloadBytes { get; private set; }

    /// <summary>The payloads as published, for as many deliveries.</summary>
    public long PayloadBytes { get; private set; }

    public long ZstdMessages { get; private set; }

    public long DeltaMessages { get; private set; }

    public ResourceUsage Resources { get; private set; }

    public long Mismatches { get; private set; }

    public double WireBytesPerMessage => Deliveries > 0 ? (double)WireBytes / Deliveries : 0;

    /// <summary>Payload bytes on the wire over the payloads as published, in percent.</summary>
    public double PayloadPercent => PayloadBytes > 0 ? 100.0 * WirePayloadBytes / PayloadBytes : 0;

    public double DeliveriesPerSecond => Seconds > 0 ? Deliveries / Seconds : 0;

    /// <summary>The broker's CPU time per publication, in microseconds; null without its process.</summary>
    public double? BrokerMicrosecondsPerPublication => Resources.BrokerCpuSeconds is { } cpu ? cpu * 1e6 / messages : null;

    public void Collect(DeltasSnapshot start, DeltasSnapshot end, List<DeltasSubscriber> all, ConnectionHealth publisher)
    {
        Mismatches = all.Sum(s => s.Mismatches);
        if (Mismatches > 0)
        {
            Failures.Add($"{Mismatches:N0} MESSAGEs were not what was published (the first one in the events)");
        }

        long errors = all.Sum(s => s.ErrorFrames) + publisher.ErrorFrames + publisher.UnexpectedFrames;
        if (errors > 0)
        {
            Failures.Add($"{errors} ERROR or unexpected frames");
        }

        Measured = end.Received - start.Received == (long)messages * subscribers && Failures.Count == 0;
        Seconds = Stopwatch.GetElapsedTime(start.Resources.Timestamp, end.Resources.Timestamp).TotalSeconds;
        Deliveries = end.Received - start.Received;
        WireBytes = end.WireBytes - start.WireBytes;
        WirePayloadBytes = end.WirePayloadBytes - start.WirePayloadBytes;
        ZstdMessages = end.Zstd - start.Zstd;
        DeltaMessages = end.Deltas - start.Deltas;
        Resources = ResourceUsage.Between(start.Resources, end.Resources);
    }

    /// <summary>Sets the bytes the measured deliveries would have been as published (the stream's payloads, cycled).</summary>
    public void SetPublishedBytes(byte[][] payloads, int warmup)
    {
        long bytes = 0;
        for (long n = warmup; n < warmup + (long)messages; n++)
        {
            bytes += payloads[(int)(n % payloads.Length)].Length;
        }

        PayloadBytes = bytes * subscribers;
    }

    public void Write(Utf8JsonWriter json)
    {
        json.WriteStartObject();
        json.WriteString("stream", DeltaStreams.Name(Stream));
        json.WriteString("mode", DeltasRun.Name(Mode));
        json.WriteBoolean("ok", Failures.Count == 0 && !Interrupted);
        json.WriteBoolean("measured", Measured);
        json.WriteNumber("seconds", Seconds);
        json.WriteNumber("deliveries", Deliveries);
        json.WriteNumber("deliveriesPerSecond", DeliveriesPerSecond);
        json.WriteNumber("wireBytes", WireBytes);
        json.WriteNumber("wireBytesPerMessage", WireBytesPerMessage);
        json.WriteNumber("wirePayloadBytes", WirePayloadBytes);
        json.WriteNumber("payloadBytes", PayloadBytes);
        json.WriteNumber("payloadPercent", PayloadPercent);
        json.WriteNumber("zstdMessages", ZstdMessages);
        json.WriteNumber("deltaMessages", DeltaMessages);
        if (BrokerMicrosecondsPerPublication is { } us)
        {
            json.WriteNumber("brokerMicrosecondsPerPublication", us);
        }

        Resources.Write(json);
        json.WriteNumber("mismatches", Mismatches);
        ResultFile.WriteStrings(json, "failures", Failures);
        json.WriteEndObject();
    }
}
