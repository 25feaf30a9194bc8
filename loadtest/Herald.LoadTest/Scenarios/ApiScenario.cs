using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>api</c>: what publishing through the broker's server API (POST /api/v1/publish, /api/v1/batch) costs against a
/// TCP publisher, on one broker the tool starts with an API key. One TCP subscriber (client 0) counts what arrives on
/// the topic; each mode sends <c>--messages</c> publications and is timed from its first send to the subscriber's last
/// receipt: the TCP publisher (client 1, batched writes, at most <c>--max-lead</c> ahead of the subscriber), the API
/// one publication per request, and the API in batches of <c>--batch</c>, each with <c>--concurrency</c> requests in
/// flight over keep-alive connections. The three figures come from the same broker in the same run, so their ratios
/// are what to read on a shared machine.
/// </summary>
internal sealed class ApiScenario : IScenario
{
    public string Name => "api";

    internal static readonly Option<int> Messages = OptionKinds.Integer("messages", 20_000, 10, 10_000_000, "publications per mode");

    internal static readonly Option<int> Batch = OptionKinds.Integer("batch", 100, 1, 1000, "publications per batch request (the broker's Herald:Api:MaxBatchItems is 1000)");

    internal static readonly Option<int> Concurrency = OptionKinds.Integer("concurrency", 4, 1, 256, "API requests in flight");

    internal static readonly Option<int> Payload = OptionKinds.Integer("payload", 128, 0, 65_536, "payload bytes");

    internal static readonly Option<int> ApiPort = OptionKinds.Integer("api-port", 0, 0, 65535, "the server API's port (0: a free one)");

    internal static readonly Option<double> MaxSeconds = OptionKinds.Seconds("max-seconds", 60, 0.1, 3600, "give up a mode after S s");

    /// <summary>The key the tool configures (its SHA-256 goes to the broker); loopback only, a throwaway.</summary>
    private const string Key = "loadtest-api-key-0123456789abcdef0123456789abcdef";

    public string Description => """
        publish throughput through the server API (single and batch) against a TCP publisher, same broker, same run.
        Herald only (--target herald, --server start): the tool configures an API key, and a TCP subscriber counts every mode.
        Exit codes: 0 ok, 1 a mode lost messages or a request failed, 2 usage, 3 server unreachable, 130 Ctrl+C.
        """;

    public IReadOnlyList<Option> Options { get; } =
        [Messages, Batch, Concurrency, Payload, ApiPort, WindowOptions.MaxLeadOption, MaxSeconds, ScenarioOptions.Out, .. TargetCommandOptions.All];

    public CommandSettings Read(ParseResult parsed)
    {
        TargetOptions target = TargetOptions.Read(parsed);
        if (target.Target != "herald" || !target.StartServer)
        {
            throw new UsageException("api: --target herald with --server start (the tool configures the broker's API key).");
        }

        var options = new ApiOptions(
            parsed.GetValue(Messages),
            parsed.GetValue(Batch),
            parsed.GetValue(Concurrency),
            parsed.GetValue(Payload),
            parsed.GetValue(ApiPort),
            parsed.GetValue(WindowOptions.MaxLeadOption),
            parsed.GetValue(MaxSeconds),
            parsed.GetValue(ScenarioOptions.Out));
        return new(options, target);
    }

    public async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (ApiOptions options, TargetOptions targetOptions) = Read(parsed).Of<ApiOptions>();
        int port = options.ApiPort != 0 ? options.ApiPort : FreePort();
        string hash = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(Key)));
        targetOptions = targetOptions with
        {
            ServerArguments =
            [
                .. targetOptions.ServerArguments ?? [],
                $"--Herald:Api:Host={targetOptions.Host}",
                string.Create(CultureInfo.InvariantCulture, $"--Herald:Api:Port={port}"),
                "--Herald:Api:Keys:0:Name=loadtest",
                $"--Herald:Api:Keys:0:Hash={hash}",
                "--Herald:Api:Keys:0:Scope=publish",
                "--Herald:Api:RequestsPerSecond=0", // measured, not limited
            ],
        };

        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"api: {options.Messages:N0} publications of {options.Payload} B per mode (tcp, api single, api batch of {options.Batch}), {options.Concurrency} API requests in flight, on {targetOptions.Describe()}"));
        await using ITarget target = await ScenarioSkeleton.StartAsync(targetOptions, cancellationToken);
        await using IPubSubClient subscriber = await target.ConnectAsync(0, cancellationToken);
        await using IPubSubClient publisher = await target.ConnectAsync(1, cancellationToken);
        long received = 0;
        long lastReceipt = 0;
        const string topic = "bench.api";
        await subscriber.SubscribeAsync(topic, (_, _, _) =>
        {
            Interlocked.Increment(ref received);
            Volatile.Write(ref lastReceipt, Stopwatch.GetTimestamp());
        }, cancellationToken);

        using var http = new HttpClient(new SocketsHttpHandler { MaxConnectionsPerServer = options.Concurrency }) { BaseAddress = new Uri($"http://{targetOptions.Host}:{port}") };
        http.DefaultRequestHeaders.Authorization = new AuthenticationHeaderValue("Bearer", Key);
        byte[] payload = RandomNumberGenerator.GetBytes(options.Payload);
        string single = Body(payload, 1, batch: false);
        string batched = Body(payload, options.Batch, batch: true);

        var rows = new List<ApiRow>();
        foreach ((string mode, Func<Task> send) in new (string, Func<Task>)[]
        {
            ("tcp publisher", () => SendTcpAsync(publisher, topic, payload, options, () => Interlocked.Read(ref received), cancellationToken)),
            ("api single", () => SendApiAsync(http, "/api/v1/publish", single, 1, options, cancellationToken)),
            (string.Create(CultureInfo.InvariantCulture, $"api batch {options.Batch}"), () => SendApiAsync(http, "/api/v1/batch", batched, options.Batch, options, cancellationToken)),
        })
        {
            long before = Interlocked.Read(ref received);
            long started = Stopwatch.GetTimestamp();
            string? failure = null;
            try
            {
                await send().WaitAsync(TimeSpan.FromSeconds(options.MaxSeconds), cancellationToken);
                var deadline = Stopwatch.StartNew();
                while (Interlocked.Read(ref received) - before < options.Messages && deadline.Elapsed.TotalSeconds < options.MaxSeconds)
                {
                    await Task.Delay(5, cancellationToken);
                }
            }
            catch (Exception e) when (e is HttpRequestException or TimeoutException or InvalidOperationException)
            {
                failure = e.Message;
            }

            long got = Interlocked.Read(ref received) - before;
            double seconds = Stopwatch.GetElapsedTime(started, Volatile.Read(ref lastReceipt)).TotalSeconds;
            rows.Add(new ApiRow(mode, options.Messages, got, seconds, got / Math.Max(seconds, 1e-9), failure ?? (got < options.Messages ? $"{options.Messages - got:N0} not received" : null)));
        }

        return Report(target, options, rows);
    }

    /// <summary>The TCP publisher: batched writes, at most <c>--max-lead</c> ahead of the subscriber.</summary>
    private static async Task SendTcpAsync(IPubSubClient publisher, string topic, byte[] payload, ApiOptions options, Func<long> received, CancellationToken cancellationToken)
    {
        long start = received();
        for (int i = 0; i < options.Messages; i++)
        {
            while (i - (received() - start) > options.MaxLead)
            {
                await publisher.FlushAsync(cancellationToken);
                await Task.Delay(1, cancellationToken);
            }

            await publisher.PublishAsync(topic, payload, sendNow: false, cancellationToken: cancellationToken);
        }

        await publisher.FlushAsync(cancellationToken);
    }

    /// <summary><c>--concurrency</c> workers posting <paramref name="body"/> (of <paramref name="perRequest"/> publications) until <c>--messages</c> are sent.</summary>
    private static async Task SendApiAsync(HttpClient http, string path, string body, int perRequest, ApiOptions options, CancellationToken cancellationToken)
    {
        int requests = (options.Messages + perRequest - 1) / perRequest;
        int next = -1;
        await Task.WhenAll(Enumerable.Range(0, options.Concurrency).Select(async _ =>
        {
            while (Interlocked.Increment(ref next) < requests)
            {
                using var content = new StringContent(body, Encoding.UTF8, "application/json");
                using HttpResponseMessage response = await http.PostAsync(path, content, cancellationToken);
                if (response.StatusCode != HttpStatusCode.OK)
                {
                    throw new InvalidOperationException($"{path} answered {(int)response.StatusCode}: {await response.Content.ReadAsStringAsync(cancellationToken)}");
                }
            }
        }));
    }

    /// <summary>One publication's JSON, or a batch of <paramref name="count"/> of them.</summary>
    private static string Body(byte[] payload, int count, bool batch)
    {
        string one = $"{{\"topic\":\"bench.api\",\"data_base64\":\"{Convert.ToBase64String(payload)}\"}}";
        return batch ? $"{{\"items\":[{string.Join(',', Enumerable.Repeat(one, count))}]}}" : one;
    }

    private static int FreePort()
    {
        using var probe = new TcpListener(IPAddress.Loopback, 0);
        probe.Start();
        return ((IPEndPoint)probe.LocalEndpoint).Port;
    }

    private int Report(ITarget target, ApiOptions options, List<ApiRow> rows)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        double tcp = rows[0].MessagesPerSecond;
        Console.WriteLine();
        Console.WriteLine(string.Create(c, $"  {"mode",-16}  {"sent",10}  {"received",10}  {"seconds",8}  {"messages/s",12}  {"vs tcp",7}"));
        foreach (ApiRow row in rows)
        {
            Console.WriteLine(string.Create(c, $"  {row.Mode,-16}  {row.Sent,10:N0}  {row.Received,10:N0}  {row.Seconds,8:F3}  {row.MessagesPerSecond,12:N0}  {row.MessagesPerSecond / Math.Max(tcp, 1e-9),7:F3}"));
        }

        var failures = rows.Where(r => r.Failure is not null).Select(r => $"{r.Mode}: {r.Failure}").ToList();
        Outcome.PrintFailures(failures);
        Console.WriteLine(failures.Count == 0 ? "  result: ok" : "  result: FAILED");
        if (options.Out is { } path)
        {
            ScenarioSkeleton.WriteResult(path, Name, target, [.. rows.Select(r => Headline.Of(r.Mode + " messages/s", "msg/s", higherIsBetter: true, [r.MessagesPerSecond]))], json =>
            {
                json.WriteNumber("messages", options.Messages);
                json.WriteNumber("batch", options.Batch);
                json.WriteNumber("concurrency", options.Concurrency);
                json.WriteNumber("payload", options.Payload);
            }, serverRss: null, json =>
            {
                json.WriteStartArray("modes");
                foreach (ApiRow row in rows)
                {
                    json.WriteStartObject();
                    json.WriteString("mode", row.Mode);
                    json.WriteNumber("sent", row.Sent);
                    json.WriteNumber("received", row.Received);
                    json.WriteNumber("seconds", row.Seconds);
                    json.WriteNumber("messagesPerSecond", row.MessagesPerSecond);
                    json.WriteEndObject();
                }

                json.WriteEndArray();
            }, failures, interrupted: false, log: null);
            Console.WriteLine($"result written to {path}");
        }

        return ScenarioSkeleton.ExitCode(interrupted: false, failures);
    }
}

/// <summary>The api scenario's options after the target's.</summary>
internal sealed record ApiOptions(int Messages, int Batch, int Concurrency, int Payload, int ApiPort, int MaxLead, double MaxSeconds, string? Out);

/// <summary>One mode's figures.</summary>
internal sealed record ApiRow(string Mode, int Sent, long Received, double Seconds, double MessagesPerSecond, string? Failure);
