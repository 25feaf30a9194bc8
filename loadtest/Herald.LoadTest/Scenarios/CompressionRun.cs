using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.Protocol;
using MessagePack;
using ZstdSharp;

namespace Herald.LoadTest.Scenarios;

/// <summary>How the broker is configured for a run of the <c>compression</c> scenario (the seed's three encodings).</summary>
internal enum CompressionMode
{
    /// <summary>The subscriber does not ask for Zstd: every MESSAGE goes out plain (the seed's "binary encoding").</summary>
    None,

    /// <summary>Compress every publication (the seed's "static compression"): no size floor, no ratio or CPU limit.</summary>
    Always,

    /// <summary>The broker's defaults (the seed's "adaptive compression").</summary>
    Adaptive,
}

/// <summary>
/// One measurement of the <c>compression</c> scenario: one class, one broker mode, one link rate. Starts
/// its own broker (unless <c>--external</c>), connects a link-capped subscriber and a publisher, runs
/// warm-up and window, drains, and kills the broker.
/// </summary>
internal static class CompressionRun
{
    /// <summary>The sid the subscriber subscribes with.</summary>
    public const uint Sid = 1;

    /// <summary>The subscriber's receive buffer: room for a few of the largest payloads the classes make.</summary>
    private const int SubscriberReceiveBuffer = 512 * 1024;

    /// <summary>The broker configuration that compresses every publication for Zstd subscribers: no size floor, no ratio or CPU limit.</summary>
    public static readonly IReadOnlyList<string> CompressEveryPublication =
    [
        "--Herald:Compression:NoCompressionLimit=0",
        "--Herald:Compression:CompressionRatioDisableLimit=1",
        "--Herald:Compression:CpuDisableLimit=1",
        "--Herald:Compression:CpuBackoffStart=1",
    ];

    /// <summary>The broker arguments for <paramref name="mode"/> on <paramref name="port"/>; the same line is printed for starting a broker by hand.</summary>
    public static List<string> BrokerArguments(CompressionMode mode, int port)
    {
        string p = port.ToString(CultureInfo.InvariantCulture);
        List<string> arguments = ["--Herald:Http:Port=-1", "--Herald:Monitoring:Port=-1", "--Herald:Policy:Port=-1", "--Herald:Tcp:Host=127.0.0.1", $"--Herald:Tcp:PortRangeStart={p}", $"--Herald:Tcp:PortRangeEnd={p}"];
        if (mode == CompressionMode.Always)
        {
            arguments.AddRange(CompressEveryPublication);
        }

        return arguments;
    }

    public static async Task<CompressionRunResult> ExecuteAsync(CompressionScenarioOptions options, PayloadSet payloads, CompressionMode mode, double linkMbps, RunLog log, CancellationToken cancellationToken)
    {
        bool slow = linkMbps < CompressionScenarioOptions.SlowLinkMbps;
        double seconds = slow ? options.SlowSeconds : options.Seconds;
        double warmup = slow ? options.SlowWarmup : options.Warmup;
        double linkBytesPerSecond = linkMbps * 1e6 / 8;
        double grace = options.Grace ?? CompressionScenarioOptions.AutoGrace(options.InFlight, linkBytesPerSecond);
        var result = new CompressionRunResult(payloads.Class, mode, linkMbps, warmup, seconds, grace);
        CultureInfo c = CultureInfo.InvariantCulture;

        BrokerChild? child = null;
        HeraldConnection? subscriberConnection = null;
        HeraldConnection? publisherConnection = null;
        var state = new RunState();
        try
        {
            IPEndPoint endPoint;
            using (var setup = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken))
            {
                setup.CancelAfter(TimeSpan.FromSeconds(options.SetupTimeout));
                try
                {
                    BrokerEndpoints endpoints = await BrokerEndpoints.ResolveAsync(options.Host, options.Port, options.Port, setup.Token);
                    endPoint = endpoints.At(options.Port);
                    if (!options.External)
                    {
                        if (await BrokerChild.IsListeningAsync(endPoint, setup.Token))
                        {
                            result.SetupFailure = $"something already listens on {endPoint}: stop it or choose another --port";
                            return result;
                        }

                        child = BrokerChild.Start(options.BrokerDll, BrokerArguments(mode, options.Port));
                        result.BrokerPid = child.Id;
                        result.BrokerCommandLine = child.CommandLine;
                        Console.WriteLine($"  broker pid {child.Id}: {child.CommandLine}");
                        if (await child.WaitUntilReadyAsync(endPoint, TimeSpan.FromSeconds(options.SetupTimeout), setup.Token) is { } notReady)
                        {
                            result.SetupFailure = notReady;
                            return result;
                        }
                    }

                    var link = new TokenBucket(linkBytesPerSecond);
                    Capabilities ask = mode == CompressionMode.None ? Capabilities.None : Capabilities.Zstd;
                    subscriberConnection = await HeraldConnection.ConnectAsync(
                        endPoint, "loadtest-compression-sub", setup.Token, SubscriberReceiveBuffer, capabilities: ask, link: link, receiveWindow: options.ReceiveWindow);
                    await subscriberConnection.SubscribeAsync(CompressionRun.Sid, payloads.Topic, setup.Token);
                    publisherConnection = await HeraldConnection.ConnectAsync(endPoint, "loadtest-compression-pub", setup.Token);
                }
                catch (Exception e) when (RunState.IsSetupFailure(e) && !cancellationToken.IsCancellationRequested)
                {
                    result.SetupFailure = e is OperationCanceledException ? $"setup did not finish within {options.SetupTimeout} s" : e.Message;
                    return result;
                }
                catch (OperationCanceledException)
                {
                    result.Interrupted = true;
                    return result;
                }
                catch (System.ComponentModel.Win32Exception e)
                {
                    result.SetupFailure = $"could not start the broker ({BrokerChild.DotnetHost()} {options.BrokerDll}): {e.Message}";
                    return result;
                }
            }

            bool zstd = (subscriberConnection.Welcome.Capabilities & Capabilities.Zstd) != 0;
            result.ZstdGranted = zstd;
            if (mode != CompressionMode.None && !zstd)
            {
                result.Failures.Add("the subscriber asked for zstd and the broker did not grant it (Herald:Compression:Enabled=false?)");
            }

            Process? brokerProcess = child?.Process ?? FindProcess(options.BrokerPid);
            using var credits = new SemaphoreSlim(options.InFlight); // no maximum: a stray extra MESSAGE must not throw in the reader
            using var subscriber = new CompressionSubscriber(subscriberConnection, payloads, zstd, credits, log, state);
            var publisher = new CompressionPublisher(publisherConnection, payloads, credits, log, state);
            Task reading = subscriber.RunAsync();
            Task publisherReading = publisher.ReadAsync();
            using var stopPublishing = new CancellationTokenSource();
            Task publishing = publisher.PublishAsync(stopPublishing.Token);

            WindowResult<CompressionSnapshot> timeline = await MeasuredWindow.RunAsync(
                warmup,
                seconds,
                () => CompressionSnapshot.Take(subscriber, publisher, brokerProcess),
                (now, previous, current, measuring) =>
                {
                    if ((int)Math.Round(now) % 5 != 0)
                    {
                        return;
                    }

                    double s = current.Seconds(previous);
                    long n = current.Received - previous.Received;
                    Console.WriteLine(string.Create(c,
                        $"    {now,5:F0}s  msg/s {n / s,8:F2}  payload MB/s {(current.PayloadBytes - previous.PayloadBytes) / s / 1e6,7:F2}  wire MB/s {(current.WireBytes - previous.WireBytes) / s / 1e6,7:F3}  compressed {Share(current.Compressed - previous.Compressed, n)}{(measuring ? "" : "  (warm-up)")}"));
                },
                () => publisher.Failure is { } f ? $"publisher failed: {f}"
                    : subscriber.Closed ? $"subscriber disconnected: {subscriber.LostReason ?? "closed"}"
                    : child is not null && child.HasExited ? "the broker exited"
                    : null,
                windowStarted: null,
                cancellationToken);
            result.Interrupted = timeline.Interrupted;

            // Stop publishing; let the messages in flight cross the link (bounded by the grace time).
            long drainStart = Stopwatch.GetTimestamp();
            await stopPublishing.CancelAsync();
            await RunState.WaitQuietlyAsync(publishing, TimeSpan.FromSeconds(grace));
            long sent = publisher.Sent;
            while (!timeline.Interrupted && Stopwatch.GetElapsedTime(drainStart).TotalSeconds < grace && !subscriber.Closed && subscriber.Received < sent)
            {
                await Task.Delay(10, CancellationToken.None);
            }

            result.DrainSeconds = Stopwatch.GetElapsedTime(drainStart).TotalSeconds;
            result.Undelivered = subscriber.Closed ? 0 : Math.Max(0, sent - subscriber.Received);
            state.BeginStopping();
            subscriberConnection.Close();
            publisherConnection.Close();
            await RunState.WaitQuietlyAsync(Task.WhenAll(reading, publisherReading, publishing), TimeSpan.FromSeconds(2));

            result.Collect(timeline, subscriber, publisher);
            return result;
        }
        finally
        {
            state.BeginStopping();
            subscriberConnection?.Close();
            publisherConnection?.Close();
            if (child is not null)
            {
                await child.DisposeAsync();
                result.BrokerWarnings = child.Warnings;
                result.BrokerErrors = child.Errors;
                result.BrokerNotable = child.Notable;
                result.BrokerTail = child.Tail;
            }
        }
    }

    public static string Share(long part, long whole) =>
        whole == 0 ? "   -" : string.Create(CultureInfo.InvariantCulture, $"{100.0 * part / whole,3:F0}%");

    private static Process? FindProcess(int? pid)
    {
        if (pid is not { } id)
        {
            return null;
        }

        try
        {
            return Process.GetProcessById(id);
        }
        catch (ArgumentException)
        {
            Console.Error.WriteLine($"warning: no process with id {id}; broker CPU will not be reported.");
            return null;
        }
    }
}

/// <summary>
/// The publications of one class: <c>--pool</c> payloads with sizes from the seed's distribution, each
/// encoded once as a PUBLISH frame; publication <c>n</c> is payload <c>n % pool</c>, so the subscriber
/// knows what the <c>n</c>-th MESSAGE must carry (the broker keeps per-topic order).
/// </summary>
internal sealed class PayloadSet
{
    public PayloadSet(PayloadClass payloadClass, int count, int seed)
    {
        Class = payloadClass;
        Topic = $"bench.compression.{PayloadClasses.Name(payloadClass)}";
        TopicBytes = Herald.Protocol.Topic.EncodeName(Topic);
        int[] sizes = PayloadClasses.Sizes(count, seed);
        Payloads = new byte[count][];
        PublishFrames = new byte[count][];
        for (int i = 0; i < count; i++)
        {
            Payloads[i] = PayloadClasses.Generate(payloadClass, sizes[i], unchecked((seed * 7919) + i + 1));
            var frame = new ArrayBufferWriter<byte>(sizes[i] + 64);
            FrameWriter.WritePublish(frame, TopicBytes, default, PayloadFlags.None, Payloads[i]);
            PublishFrames[i] = frame.WrittenSpan.ToArray();
        }

        MeanSize = sizes.Average();
        MaxSize = sizes.Max();
        MinSize = sizes.Min();
        InBand = sizes.Count(s => s is >= PayloadClasses.BandLow and <= PayloadClasses.BandHigh);
        (ReferenceRatio, ReferenceCompressSeconds) = MeasureReference();
    }

    public PayloadClass Class { get; }

    public string Topic { get; }

    public byte[] TopicBytes { get; }

    public byte[][] Payloads { get; }

    public byte[][] PublishFrames { get; }

    public double MeanSize { get; }

    public int MaxSize { get; }

    public int MinSize { get; }

    public int InBand { get; }

    /// <summary>Compressed/original over the pool with the broker's default levels by size (1 below 16 KiB, 3 below 128 KiB, else 7).</summary>
    public double ReferenceRatio { get; }

    /// <summary>CPU time of one pass of <see cref="ReferenceRatio"/>, in this process: seconds per pool.</summary>
    public double ReferenceCompressSeconds { get; }

    public long TotalBytes => Payloads.Sum(p => (long)p.Length);

    private (double Ratio, double Seconds) MeasureReference()
    {
        using var fast = new Compressor(1);
        using var normal = new Compressor(3);
        using var max = new Compressor(7);
        long before = 0, after = 0;
        TimeSpan cpu = Environment.CpuUsage.TotalTime;
        foreach (byte[] payload in Payloads)
        {
            Compressor compressor = payload.Length < 16 * 1024 ? fast : payload.Length < 128 * 1024 ? normal : max;
            before += payload.Length;
            after += Math.Min(payload.Length, compressor.Wrap(payload).Length);
        }

        return (before == 0 ? 1 : (double)after / before, (Environment.CpuUsage.TotalTime - cpu).TotalSeconds);
    }
}

/// <summary>
/// The link-capped subscriber: decodes every MESSAGE, decompresses a Zstd one, compares the payload
/// byte for byte with what was published, and hands the publisher a credit back.
/// Threading: <see cref="RunAsync"/> is the only writer; the counters are read by the timeline.
/// </summary>
internal sealed class CompressionSubscriber(HeraldConnection connection, PayloadSet payloads, bool zstdGranted, SemaphoreSlim credits, RunLog log, RunState state) : IDisposable
{
    private readonly Decompressor _decompressor = new();
    private readonly byte[] _plain = new byte[Math.Max(payloads.MaxSize, 1024 * 1024)];
    private readonly ConnectionHealth _health = new(connection.Name, log, () => state.Stopping);
    private long _received;
    private long _payloadBytes;
    private long _wirePayloadBytes;
    private long _compressed;

    public long Received => Volatile.Read(ref _received);

    /// <summary>Payload bytes delivered, uncompressed.</summary>
    public long PayloadBytes => Volatile.Read(ref _payloadBytes);

    /// <summary>Payload bytes as they crossed the link (compressed size for a Zstd MESSAGE).</summary>
    public long WirePayloadBytes => Volatile.Read(ref _wirePayloadBytes);

    public long Compressed => Volatile.Read(ref _compressed);

    public long WireBytes => connection.BytesReceived;

    public double LinkWaitSeconds => connection.Link?.Waited.TotalSeconds ?? 0;

    public bool Closed => _health.Ended;

    public string? LostReason => _health.Failure;

    public long Mismatches { get; private set; }

    public long CompressedWithoutNegotiation { get; private set; }

    public long ErrorFrames => _health.ErrorFrames;

    public long Unexpected => _health.UnexpectedFrames;

    public void Dispose() => _decompressor.Dispose();

    public Task RunAsync() => connection.ReadUntilClosedAsync(TakeMessage, _health);

    private bool TakeMessage(ReadOnlySequence<byte> body, long receivedAt)
    {
        var reader = new MessagePackReader(body);
        if (FrameDecoder.ReadHeader(ref reader, out int elements) != FrameType.Message)
        {
            return false;
        }

        Check(FrameDecoder.ReadMessage(ref reader, elements));
        return true;
    }

    private void Check(in PublishFrame message)
    {
        long n = _received;
        byte[] expected = payloads.Payloads[(int)(n % payloads.Payloads.Length)];
        ReadOnlySpan<byte> payload = message.Payload.IsSingleSegment ? message.Payload.FirstSpan : message.Payload.ToArray();
        string? mismatch = null;
        ReadOnlySpan<byte> plain = payload;
        if (message.Sid != CompressionRun.Sid || !message.Topic.FirstSpan.SequenceEqual(payloads.TopicBytes))
        {
            mismatch = $"sid {message.Sid} topic '{message.TopicString}', expected sid {CompressionRun.Sid} topic '{payloads.Topic}'";
        }
        else if (message.Flags == PayloadFlags.Zstd)
        {
            Volatile.Write(ref _compressed, _compressed + 1);
            if (!zstdGranted)
            {
                CompressedWithoutNegotiation++;
                mismatch = "a Zstd MESSAGE on a connection that did not negotiate zstd";
            }

            try
            {
                plain = _plain.AsSpan(0, _decompressor.Unwrap(payload, _plain));
            }
            catch (ZstdException e)
            {
                mismatch = $"the Zstd payload does not decompress: {e.Message}";
            }
        }
        else if (message.Flags != PayloadFlags.None)
        {
            mismatch = $"flags {message.Flags}";
        }

        if (mismatch is null && !plain.SequenceEqual(expected))
        {
            mismatch = $"payload differs from publication {n} ({plain.Length} bytes, published {expected.Length}; flags {message.Flags})";
        }

        if (mismatch is not null && Mismatches++ == 0)
        {
            log.Report(connection.Name, $"MESSAGE {n}: {mismatch}");
        }

        Volatile.Write(ref _wirePayloadBytes, _wirePayloadBytes + payload.Length);
        Volatile.Write(ref _payloadBytes, _payloadBytes + expected.Length);
        Volatile.Write(ref _received, n + 1);
        credits.Release();
    }
}

/// <summary>The publisher: one PUBLISH per credit (at most <c>--in-flight</c> not yet received by the subscriber).</summary>
internal sealed class CompressionPublisher(HeraldConnection connection, PayloadSet payloads, SemaphoreSlim credits, RunLog log, RunState state)
{
    private readonly ConnectionHealth _health = new(connection.Name, log, () => state.Stopping);
    private long _sent;

    /// <summary>Publications the socket accepted.</summary>
    public long Sent => Volatile.Read(ref _sent);

    public long BytesSent => connection.BytesSent;

    public long ErrorFrames => _health.ErrorFrames;

    public long Unexpected => _health.UnexpectedFrames;

    public string? Failure => _health.Failure;

    public async Task PublishAsync(CancellationToken stop)
    {
        byte[][] frames = payloads.PublishFrames;
        long sent = 0;
        try
        {
            while (!stop.IsCancellationRequested)
            {
                await credits.WaitAsync(stop);
                await connection.SendAsync(frames[(int)(sent % frames.Length)], CancellationToken.None); // never cut a frame in half
                Volatile.Write(ref _sent, ++sent);
            }
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            // the window is over
        }
        catch (Exception e) when (RunState.IsConnectionEnd(e))
        {
            if (!state.Stopping)
            {
                _health.Fail(e.Message);
                log.Report(connection.Name, $"send failed: {e.Message}");
            }
        }
    }

    /// <summary>Answers the broker's PINGs and reports its ERRORs until the connection ends.</summary>
    public Task ReadAsync() => connection.ReadUntilClosedAsync(null, _health);
}

/// <summary>The counters at one instant; two of them bracket the measured window.</summary>
internal readonly record struct CompressionSnapshot(
    ResourceSnapshot Resources,
    double? MachineBusySeconds,
    long Received,
    long PayloadBytes,
    long WirePayloadBytes,
    long WireBytes,
    long Compressed,
    long Published,
    double LinkWaitSeconds)
{
    public static CompressionSnapshot Take(CompressionSubscriber subscriber, CompressionPublisher publisher, Process? broker) => new(
        ResourceSnapshot.Take(broker),
        MachineCpu.BusySeconds(),
        subscriber.Received,
        subscriber.PayloadBytes,
        subscriber.WirePayloadBytes,
        subscriber.WireBytes,
        subscriber.Compressed,
        publisher.Sent,
        subscriber.LinkWaitSeconds);

    public double Seconds(CompressionSnapshot earlier) => Stopwatch.GetElapsedTime(earlier.Resources.Timestamp, Resources.Timestamp).TotalSeconds;
}

/// <summary>What one run measured, and what went wrong.</summary>
internal sealed class CompressionRunResult(PayloadClass payloadClass, CompressionMode mode, double linkMbps, double warmup, double seconds, double grace) : IScenarioRun
{
    private const double MinimumWindowSeconds = 0.5;

    public PayloadClass Class { get; } = payloadClass;

    public CompressionMode Mode { get; } = mode;

    public double LinkMbps { get; } = linkMbps;

    public double Warmup { get; } = warmup;

    public double Seconds { get; } = seconds;

    public double Grace { get; } = grace;

    public string? SetupFailure { get; set; }

    public bool Interrupted { get; set; }

    /// <summary>Why this cell of the matrix did not run (the time cap, Ctrl+C); null when it ran.</summary>
    public string? Skipped { get; private init; }

    public bool ZstdGranted { get; set; }

    public int? BrokerPid { get; set; }

    public string? BrokerCommandLine { get; set; }

    public int BrokerWarnings { get; set; }

    public int BrokerErrors { get; set; }

    public IReadOnlyList<string> BrokerNotable { get; set; } = [];

    public IReadOnlyList<string> BrokerTail { get; set; } = [];

    public List<string> Failures { get; } = [];

    public bool Measured { get; private set; }

    public double MeasuredSeconds { get; private set; }

    public long Messages { get; private set; }

    public long PayloadBytes { get; private set; }

    public long WirePayloadBytes { get; private set; }

    public long WireBytes { get; private set; }

    public long CompressedMessages { get; private set; }

    public long Published { get; private set; }

    public double LinkWaitSeconds { get; private set; }

    public ResourceUsage Resources { get; private set; }

    public double? OtherCores { get; private set; }

    public double DrainSeconds { get; set; }

    public long Undelivered { get; set; }

    public long TotalReceived { get; private set; }

    public long TotalCompressed { get; private set; }

    public long Mismatches { get; private set; }

    public double MessagesPerSecond => MeasuredSeconds > 0 ? Messages / MeasuredSeconds : 0;

    public double PayloadMBps => MeasuredSeconds > 0 ? PayloadBytes / MeasuredSeconds / 1e6 : 0;

    public double WireMBps => MeasuredSeconds > 0 ? WireBytes / MeasuredSeconds / 1e6 : 0;

    /// <summary>Payload bytes on the wire / uncompressed payload bytes, in the window.</summary>
    public double WireRatio => PayloadBytes > 0 ? (double)WirePayloadBytes / PayloadBytes : 1;

    /// <summary>Wire bytes / what the link can carry in the window.</summary>
    public double LinkUse => MeasuredSeconds > 0 ? WireBytes / (LinkMbps * 1e6 / 8 * MeasuredSeconds) : 0;

    public bool Ok => SetupFailure is null && !Interrupted && Failures.Count == 0 && Measured;

    /// <summary>The run's failures as one line, <c>class/mode/link: why</c>; none when it was ok or skipped.</summary>
    IReadOnlyList<string> IScenarioRun.Failures =>
        Ok || Skipped is not null ? [] : [$"{PayloadClasses.Name(Class)}/{Mode.ToString().ToLowerInvariant()}/{LinkMbps.ToString(CultureInfo.InvariantCulture)}: {SetupFailure ?? string.Join("; ", Failures)}"];

    /// <summary>A cell of the matrix that did not run, and why.</summary>
    public static CompressionRunResult Skip(PayloadClass payloadClass, CompressionMode mode, double linkMbps, string why, bool interrupted) =>
        new(payloadClass, mode, linkMbps, 0, 0, 0) { Skipped = why, Interrupted = interrupted };

    public string Status => SetupFailure is not null ? "SETUP FAILED" : Interrupted ? "INTERRUPTED" : !Ok ? "FAILED" : "ok";

    public void Collect(WindowResult<CompressionSnapshot> timeline, CompressionSubscriber subscriber, CompressionPublisher publisher)
    {
        if (timeline.Aborted is { } aborted)
        {
            Failures.Add($"run aborted: {aborted}");
        }

        if (subscriber.LostReason is { } lost)
        {
            Failures.Add($"subscriber disconnected: {lost}");
        }

        if (publisher.Failure is { } failure && timeline.Aborted is null)
        {
            Failures.Add($"publisher failed: {failure}");
        }

        Mismatches = subscriber.Mismatches;
        if (subscriber.Mismatches > 0)
        {
            Failures.Add($"{subscriber.Mismatches:N0} MESSAGEs differed from what was published (first one in the events)");
        }

        if (subscriber.ErrorFrames + publisher.ErrorFrames > 0)
        {
            Failures.Add($"{subscriber.ErrorFrames + publisher.ErrorFrames} ERROR frames");
        }

        if (subscriber.Unexpected + publisher.Unexpected > 0)
        {
            Failures.Add($"{subscriber.Unexpected + publisher.Unexpected} unexpected frames");
        }

        if (Undelivered > 0 && !timeline.Interrupted)
        {
            Failures.Add($"{Undelivered} publications not received {Grace:F1} s after publishing stopped");
        }

        TotalReceived = subscriber.Received;
        TotalCompressed = subscriber.Compressed;
        if (timeline.Start is not { } start || timeline.End.Seconds(start) < MinimumWindowSeconds)
        {
            if (!timeline.Interrupted)
            {
                Failures.Add("the run ended before the measured window");
            }

            return;
        }

        CompressionSnapshot end = timeline.End;
        Measured = true;
        MeasuredSeconds = end.Seconds(start);
        Messages = end.Received - start.Received;
        PayloadBytes = end.PayloadBytes - start.PayloadBytes;
        WirePayloadBytes = end.WirePayloadBytes - start.WirePayloadBytes;
        WireBytes = end.WireBytes - start.WireBytes;
        CompressedMessages = end.Compressed - start.Compressed;
        Published = end.Published - start.Published;
        LinkWaitSeconds = end.LinkWaitSeconds - start.LinkWaitSeconds;
        Resources = ResourceUsage.Between(start.Resources, end.Resources);
        if (start.MachineBusySeconds is { } m0 && end.MachineBusySeconds is { } m1 && Resources.WallSeconds > 0)
        {
            OtherCores = Math.Max(0, ((m1 - m0) - Resources.ToolCpuSeconds - (Resources.BrokerCpuSeconds ?? 0)) / Resources.WallSeconds);
        }

        if (Messages == 0)
        {
            Failures.Add("no MESSAGE was delivered in the measured window");
        }
    }

    public void Write(Utf8JsonWriter json)
    {
        json.WriteStartObject();
        json.WriteString("class", PayloadClasses.Name(Class));
        json.WriteString("mode", Mode.ToString().ToLowerInvariant());
        json.WriteNumber("linkMbps", LinkMbps);
        json.WriteNumber("warmupSeconds", Warmup);
        json.WriteNumber("windowSeconds", Seconds);
        json.WriteString("status", Status);
        json.WriteBoolean("ok", Ok);
        if (SetupFailure is not null)
        {
            json.WriteString("setupFailure", SetupFailure);
        }

        json.WriteBoolean("zstdGranted", ZstdGranted);
        if (Measured)
        {
            json.WriteNumber("measuredSeconds", MeasuredSeconds);
            json.WriteNumber("messages", Messages);
            json.WriteNumber("messagesPerSecond", MessagesPerSecond);
            json.WriteNumber("payloadBytes", PayloadBytes);
            json.WriteNumber("payloadMBPerSecond", PayloadMBps);
            json.WriteNumber("wireBytes", WireBytes);
            json.WriteNumber("wireMBPerSecond", WireMBps);
            json.WriteNumber("wirePayloadBytes", WirePayloadBytes);
            json.WriteNumber("wireRatio", WireRatio);
            json.WriteNumber("linkUse", LinkUse);
            json.WriteNumber("compressedMessages", CompressedMessages);
            json.WriteNumber("compressedShare", Messages > 0 ? (double)CompressedMessages / Messages : 0);
            json.WriteNumber("published", Published);
            json.WriteNumber("linkWaitSeconds", LinkWaitSeconds);
            if (Resources.BrokerCores is { } broker)
            {
                json.WriteNumber("brokerCores", broker);
            }

            json.WriteNumber("toolCores", Resources.ToolCores);
            if (OtherCores is { } other)
            {
                json.WriteNumber("otherCores", other);
            }

            Resources.Write(json);
        }

        json.WriteNumber("totalReceived", TotalReceived);
        json.WriteNumber("totalCompressed", TotalCompressed);
        json.WriteNumber("mismatches", Mismatches);
        json.WriteNumber("undeliveredAfterGrace", Undelivered);
        json.WriteNumber("drainSeconds", DrainSeconds);
        json.WriteNumber("graceSeconds", Grace);
        ResultFile.WriteStrings(json, "failures", Failures);
        json.WriteStartObject("broker");
        if (BrokerPid is { } pid)
        {
            json.WriteNumber("pid", pid);
        }

        if (BrokerCommandLine is not null)
        {
            json.WriteString("commandLine", BrokerCommandLine);
        }

        json.WriteNumber("warnings", BrokerWarnings);
        json.WriteNumber("errors", BrokerErrors);
        ResultFile.WriteStrings(json, "notable", BrokerNotable);
        ResultFile.WriteStrings(json, "tail", BrokerTail);
        json.WriteEndObject();
        json.WriteEndObject();
    }
}
