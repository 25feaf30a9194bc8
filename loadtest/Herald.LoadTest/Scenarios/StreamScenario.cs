using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Security.Cryptography;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>stream</c>: the net.tcp seed's throughput test. One client receives a fixed number of messages whose
/// body is five short strings (plus a sequence number here, to check order), pushed by one publisher as fast
/// as the target takes them, and the time from the first to the last measured message gives messages/s and
/// MB/s. The publisher never runs more than <c>--max-lead</c> messages ahead of what the subscriber has
/// received, so the figure is the delivery rate, not the rate at which a queue fills up to a slow-consumer limit.
/// </summary>
internal sealed class StreamScenario : IScenario
{
    public string Name => "stream";

    internal static readonly Option<int> Messages = OptionKinds.Integer("messages", 1_000_000, 2, 100_000_000, "messages per run");

    /// <summary>Messages before the measured ones; the default and the largest allowed depend on <see cref="Messages"/>.</summary>
    internal static readonly Option<int?> Warmup = OptionKinds.OptionalInteger("warmup", 0, 100_000_000, "messages before the measured ones, up to --messages - 2 (default: a fifth of --messages, at most 200000)");

    internal static readonly Option<int> Strings = OptionKinds.Integer("strings", 5, 0, 1000, "strings in a message body (5, as the seed)");

    internal static readonly Option<int> StringLength = OptionKinds.Integer("string-length", 16, 0, 10_000, "characters per string");

    internal static readonly Option<double> MaxSeconds = OptionKinds.Seconds("max-seconds", 60, 0.1, 24 * 3600, "give up a run after S s of streaming");

    public string Description => """
        one publisher streams N messages to one subscriber: messages/s and MB/s (net.tcp seed).
        The subscriber is client 0 and the publisher client 1 of the target; the first --warmup messages are not measured.
        Exit codes: 0 ok, 1 a check failed (missing, reordered or malformed messages, a disconnection),
        2 usage, 3 server unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } =
        [Messages, Warmup, WindowOptions.MaxLeadOption, Strings, StringLength, PublicationHeaders.Option, MaxSeconds, ScenarioOptions.Repeat, ScenarioOptions.Out, .. TargetCommandOptions.All];

    public CommandSettings Read(ParseResult parsed)
    {
        StreamOptions options = StreamOptions.Read(parsed);
        return new(options, TargetOptions.Read(parsed) with { Headers = options.HeaderBytes > 0 });
    }

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (StreamOptions options, TargetOptions targetOptions) = Read(parsed).Of<StreamOptions>();
        var payload = new StampedPayload(counters: 1, options.Strings, options.StringLength);

        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"stream: {options.Messages:N0} messages ({options.Warmup:N0} warm-up) of {options.Strings} strings x {options.StringLength} chars = {payload.Length} B MessagePack, header block {options.HeaderBytes} B, max lead {options.MaxLead:N0}, {options.Repeat} run(s), on {targetOptions.Describe()}"));
        return await ScenarioSkeleton.RunRepetitionsAsync<StreamRun>(
            targetOptions,
            options.Repeat,
            (target, _) => StreamRun.ExecuteAsync(target, options, targetOptions.SetupTimeoutSeconds, payload, PublicationHeaders.Encode(target, options.HeaderBytes), cancellationToken),
            print: null,
            (target, runs, _) => Report(target, options, payload, runs),
            cancellationToken,
            check: target => _ = PublicationHeaders.Encode(target, options.HeaderBytes), // refuses a target without headers
            header: repetition => string.Create(CultureInfo.InvariantCulture, $"run {repetition}/{options.Repeat}:"));
    }

    private int Report(ITarget target, StreamOptions options, StampedPayload payload, List<StreamRun> runs)
    {
        bool interrupted = runs.Any(r => r.Interrupted);
        List<Headline> headlines =
        [
            Headline.Of("messages/s", "msg/s", higherIsBetter: true, [.. runs.Where(r => r.Measured).Select(r => r.MessagesPerSecond)]),
            Headline.Of("MB/s", "MB/s", higherIsBetter: true, [.. runs.Where(r => r.Measured).Select(r => r.MegabytesPerSecond)]),
        ];
        List<string> failures = ScenarioSkeleton.Failures(runs, i => runs.Count > 1 ? string.Create(CultureInfo.InvariantCulture, $"run {i}") : null);

        PrintTable(runs, headlines, failures, payload.Length, options.HeaderBytes);
        if (options.Out is { } path)
        {
            ScenarioSkeleton.WriteResult(path, Name, target, headlines, json =>
            {
                json.WriteNumber("messages", options.Messages);
                json.WriteNumber("warmupMessages", options.Warmup);
                json.WriteNumber("maxLead", options.MaxLead);
                payload.Write(json);
                json.WriteNumber("headerBytes", options.HeaderBytes);
                json.WriteNumber("maxSeconds", options.MaxSeconds);
                json.WriteNumber("repeat", options.Repeat);
            }, serverRss: null, json => ScenarioSkeleton.WriteRows(json, "runs", runs), failures, interrupted, log: null);
            Console.WriteLine($"result written to {path}");
        }

        return ScenarioSkeleton.ExitCode(interrupted, failures);
    }

    private static void PrintTable(List<StreamRun> runs, List<Headline> headlines, List<string> failures, int payloadBytes, int headerBytes)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        Console.WriteLine();
        Console.WriteLine(string.Create(c, $"  {"run",3}  {"sent",11}  {"received",11}  {"missing",8}  {"reordered",9}  {"seconds",8}  {"messages/s",12}  {"MB/s",8}  {"tool cores",10}  {"server cores",12}  {"server RSS MB",13}"));
        for (int i = 0; i < runs.Count; i++)
        {
            StreamRun r = runs[i];
            Console.WriteLine(string.Create(c,
                $"  {i + 1,3}  {r.Sent,11:N0}  {r.Received,11:N0}  {r.Missing,8:N0}  {r.OutOfOrder,9:N0}  {r.Seconds,8:F3}  {r.MessagesPerSecond,12:N0}  {r.MegabytesPerSecond,8:F2}  {r.Usage.ToolCores,10:F2}  {(r.Usage.BrokerCores is { } b ? b.ToString("F2", c) : "?"),12}  {(r.ServerRss is { } rss ? (rss / 1e6).ToString("F1", c) : "?"),13}"));
        }

        Console.WriteLine(string.Create(c, $"  payload {payloadBytes} B and header block {headerBytes} B per message; throughput counts payload bytes only"));
        foreach (Headline h in headlines)
        {
            Console.WriteLine(string.Create(c, $"  {h.Name,-12}: {h.Value:N2} {h.Unit} (median of {h.Repetitions}; min {h.Min:N2}, max {h.Max:N2})"));
        }

        if (runs.Count > 0)
        {
            runs[^1].Usage.Print(Console.Out);
        }

        Outcome.PrintFailures(failures);
        Console.WriteLine(failures.Count == 0 ? "  result: ok" : "  result: FAILED");
    }
}

/// <summary>The stream options after the target's.</summary>
internal sealed record StreamOptions(int Messages, int Warmup, int MaxLead, int Strings, int StringLength, int HeaderBytes, double MaxSeconds, int Repeat, string? Out)
{
    /// <exception cref="UsageException">--warmup leaves fewer than two measured messages.</exception>
    public static StreamOptions Read(ParseResult options)
    {
        int messages = options.GetValue(StreamScenario.Messages);
        int warmup = options.GetValue(StreamScenario.Warmup) ?? Math.Min(200_000, messages / 5);
        if (warmup > messages - 2)
        {
            throw new UsageException(string.Create(CultureInfo.InvariantCulture, $"--warmup must be an integer from 0 to {messages - 2}, got '{warmup}'."));
        }

        return new StreamOptions(
            messages,
            warmup,
            options.GetValue(WindowOptions.MaxLeadOption),
            options.GetValue(StreamScenario.Strings),
            options.GetValue(StreamScenario.StringLength),
            options.GetValue(PublicationHeaders.Option),
            options.GetValue(StreamScenario.MaxSeconds),
            options.GetValue(ScenarioOptions.Repeat),
            options.GetValue(ScenarioOptions.Out));
    }
}

/// <summary>
/// The subscriber's side of one run: checks each message's sequence number and header block (the first in
/// full, the rest by length, as <c>fanout</c> does), counts, and notes the receive times of the last warm-up
/// message and the last message. <see cref="OnMessage"/> runs on the subscriber's receive loop only; the
/// counters are read by other threads through <see cref="Received"/> and after <see cref="Done"/>.
/// </summary>
internal sealed class StreamReceiver(StampedPayload payload, long total, long warmup, byte[] expectedHeaders)
{
    private readonly TaskCompletionSource _done = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private long _received;
    private long _next;
    private long _wakeAt = long.MaxValue;
    private TaskCompletionSource? _wake;

    public Task Done => _done.Task;

    public long Received => Volatile.Read(ref _received);

    public long OutOfOrder { get; private set; }

    public long Malformed { get; private set; }

    /// <summary>Receive time of message number max(warmup, 1) (counting from 1): the start of the measured span.</summary>
    public long StartTimestamp { get; private set; }

    public long EndTimestamp { get; private set; }

    /// <summary>Messages between <see cref="StartTimestamp"/> and <see cref="EndTimestamp"/>.</summary>
    public long MeasuredCount => total - Math.Max(warmup, 1);

    public void OnMessage(ReadOnlySpan<byte> body, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
    {
        if (!payload.TryRead(body, 0, out uint sequence)
            || (_received == 0 ? !headers.SequenceEqual(expectedHeaders) : headers.Length != expectedHeaders.Length))
        {
            Malformed++;
            return;
        }

        if (sequence != _next)
        {
            OutOfOrder++;
        }

        _next = sequence + 1L;
        long count = _received + 1;
        if (count == Math.Max(warmup, 1))
        {
            StartTimestamp = Stopwatch.GetTimestamp();
        }

        if (count == total)
        {
            EndTimestamp = Stopwatch.GetTimestamp();
        }

        Volatile.Write(ref _received, count);
        if (count >= Volatile.Read(ref _wakeAt))
        {
            Volatile.Write(ref _wakeAt, long.MaxValue);
            Interlocked.Exchange(ref _wake, null)?.TrySetResult();
        }

        if (count == total)
        {
            _done.TrySetResult();
        }
    }

    /// <summary>Completes once <paramref name="count"/> messages have arrived. One waiter at a time (the publisher).</summary>
    public Task WaitUntilReceivedAsync(long count, CancellationToken cancellationToken)
    {
        var wake = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        Volatile.Write(ref _wake, wake);
        Volatile.Write(ref _wakeAt, count);
        if (Received >= count)
        {
            return Task.CompletedTask; // arrived before the receive loop could see _wakeAt
        }

        return wake.Task.WaitAsync(cancellationToken);
    }
}

/// <summary>One repetition of <c>stream</c>: connect, stream, check, measure. Not thread-safe; used by the scenario's flow only.</summary>
internal sealed class StreamRun : ScenarioRun
{
    private StreamRun() { }

    public long Sent { get; private set; }

    public long Malformed { get; private set; }

    public bool Measured { get; private set; }

    public long MeasuredMessages { get; private set; }

    public double Seconds { get; private set; }

    public double MessagesPerSecond { get; private set; }

    public double MegabytesPerSecond { get; private set; }

    /// <summary>Runs once; null when connecting or subscribing failed (the reason is printed).</summary>
    public static async Task<StreamRun?> ExecuteAsync(ITarget target, StreamOptions options, double setupSeconds, StampedPayload payload, byte[] headers, CancellationToken cancellationToken)
    {
        string topic = $"stream.{Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(4))}";
        var receiver = new StreamReceiver(payload, options.Messages, options.Warmup, headers);
        IPubSubClient? subscriber = null, publisher = null;
        try
        {
            SetupOutcome setup = await ScenarioSkeleton.SetUpAsync(setupSeconds, async token =>
            {
                subscriber = await target.ConnectAsync(0, token);
                publisher = await target.ConnectAsync(1, token);
                await subscriber.SubscribeAsync(topic, receiver.OnMessage, token);
            }, AnyButOutOfMemory, cancellationToken);
            if (setup.Failure is { } why)
            {
                Console.Error.WriteLine($"error: could not connect and subscribe to {target.Label}: {why}");
                return null;
            }

            if (setup.Interrupted)
            {
                return new StreamRun { Interrupted = true, Expected = options.Messages };
            }

            return await StreamAsync(target, options, payload, headers, topic, receiver, subscriber!, publisher!, cancellationToken);
        }
        finally
        {
            await DisposeQuietlyAsync(publisher);
            await DisposeQuietlyAsync(subscriber);
        }
    }

    private static async Task<StreamRun> StreamAsync(ITarget target, StreamOptions options, StampedPayload payload, byte[] headers, string topic, StreamReceiver receiver, IPubSubClient subscriber, IPubSubClient publisher, CancellationToken cancellationToken)
    {
        var run = new StreamRun { Expected = options.Messages };
        using var deadline = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        deadline.CancelAfter(TimeSpan.FromSeconds(options.MaxSeconds));
        ResourceSnapshot before = ResourceSnapshot.Take(target.ServerProcesses);
        long sent = 0;
        long lead = ScenarioClients.LeadWithin(options.MaxLead, [subscriber]);
        Task publishing = Task.Run(async () =>
        {
            byte[] body = payload.NewBuffer();
            for (long sequence = 0; sequence < options.Messages; sequence++)
            {
                if (sequence - receiver.Received >= lead)
                {
                    // Out of lead: send what is buffered, then wait until the subscriber has taken half the lead,
                    // so the two sides hand over in large steps instead of one message at a time.
                    await publisher.FlushAsync(deadline.Token);
                    await receiver.WaitUntilReceivedAsync(sequence - (lead / 2), deadline.Token);
                }

                payload.Stamp(body, 0, (uint)sequence);
                await publisher.PublishAsync(topic, body, headers: headers, sendNow: false, cancellationToken: deadline.Token);
                Volatile.Write(ref sent, sequence + 1);
            }

            await publisher.FlushAsync(deadline.Token);
        }, CancellationToken.None);

        long started = Stopwatch.GetTimestamp();
        long lastCount = 0;
        string? stopped = null;
        while (!receiver.Done.IsCompleted)
        {
            await Task.WhenAny(receiver.Done, Task.Delay(1000, CancellationToken.None));
            if (cancellationToken.IsCancellationRequested)
            {
                run.Interrupted = true;
                break;
            }

            if (receiver.Done.IsCompleted)
            {
                break;
            }

            if (publishing.IsFaulted && !deadline.IsCancellationRequested)
            {
                stopped = $"the publisher failed: {publishing.Exception?.GetBaseException().Message}";
                break;
            }

            if ((subscriber.Failure ?? publisher.Failure) is { } failure)
            {
                stopped = $"a client was disconnected: {failure}";
                break;
            }

            if (deadline.IsCancellationRequested)
            {
                stopped = $"not all messages arrived within --max-seconds {options.MaxSeconds.ToString(CultureInfo.InvariantCulture)}";
                break;
            }

            long count = receiver.Received;
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"  {Stopwatch.GetElapsedTime(started).TotalSeconds,6:F1}s  sent {Volatile.Read(ref sent),11:N0}  received {count,11:N0}  ({count - lastCount,9:N0}/s){(count < options.Warmup ? "  (warm-up)" : "")}"));
            lastCount = count;
        }

        ResourceSnapshot after = ResourceSnapshot.Take(target.ServerProcesses);
        await deadline.CancelAsync();
        try
        {
            await publishing;
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            // cancelled or broken with the run; the reason is in 'stopped'
        }

        run.Usage = ResourceUsage.Between(before, after);
        run.ServerRss = TargetReport.ServerRss(target);
        run.Sent = Volatile.Read(ref sent);
        run.Received = receiver.Received;
        run.OutOfOrder = receiver.OutOfOrder; // exact once Done completed (its writes come first); a snapshot otherwise
        run.Malformed = receiver.Malformed;
        if (receiver.Done.IsCompleted)
        {
            run.Seconds = Stopwatch.GetElapsedTime(receiver.StartTimestamp, receiver.EndTimestamp).TotalSeconds;
            run.MeasuredMessages = receiver.MeasuredCount;
            run.Measured = run.Seconds > 0;
            if (run.Measured)
            {
                run.MessagesPerSecond = run.MeasuredMessages / run.Seconds;
                run.MegabytesPerSecond = run.MeasuredMessages * (double)payload.Length / run.Seconds / 1e6;
            }
        }

        if (stopped is not null)
        {
            run.Failures.Add(stopped);
        }

        if (run.Missing > 0 && !run.Interrupted)
        {
            run.Failures.Add($"{run.Missing:N0} of {run.Expected:N0} messages never arrived");
        }

        if (run.OutOfOrder > 0)
        {
            run.Failures.Add($"{run.OutOfOrder:N0} messages arrived out of order or twice");
        }

        if (run.Malformed > 0)
        {
            run.Failures.Add($"{run.Malformed:N0} messages were not the bodies (or header blocks) published");
        }

        long errors = subscriber.Errors + publisher.Errors;
        if (errors > 0)
        {
            run.Failures.Add($"the server sent {errors:N0} error replies");
        }

        return run;
    }

    /// <summary>
    /// What <c>stream</c> and <c>collab</c> count as the target failing to set up: any exception but running
    /// out of memory, named by its type and message.
    /// </summary>
    internal static string? AnyButOutOfMemory(Exception e) => e is OutOfMemoryException ? null : $"{e.GetType().Name}: {e.Message}";

    public override void Write(Utf8JsonWriter json)
    {
        json.WriteStartObject();
        json.WriteNumber("sent", Sent);
        WriteDeliveries(json);
        json.WriteNumber("malformed", Malformed);
        json.WriteNumber("measuredMessages", MeasuredMessages);
        json.WriteNumber("seconds", Seconds);
        json.WriteNumber("messagesPerSecond", MessagesPerSecond);
        json.WriteNumber("megabytesPerSecond", MegabytesPerSecond);
        WriteUsage(json);
        json.WriteEndObject();
    }

    internal static async Task DisposeQuietlyAsync(IPubSubClient? client)
    {
        if (client is null)
        {
            return;
        }

        try
        {
            await client.DisposeAsync();
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            // closing after the run: how it closes does not change the result
        }
    }
}
