using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text.Json;
using System.Text.RegularExpressions;
using Herald.Broker.Hosting;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>The broker as a real process: what it writes to stdout in JSON mode, and its <c>--probe</c> mode.</summary>
public sealed class OperationsProcessTests
{
    [Fact]
    public async Task In_json_mode_every_line_on_stdout_is_one_json_log_event()
    {
        await using var broker = BrokerProcess.StartTcpOnly("json");
        JsonElement listening = await broker.WaitForEventAsync(1001);
        int port = listening.GetProperty("First").GetInt32();

        // A client whose name needs escaping says HELLO (a Debug event), then breaks the protocol (a Warning).
        using (var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp))
        {
            await socket.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port));
            var frames = new ArrayBufferWriter<byte>();
            FrameWriter.WriteHello(frames, "quote\" backslash\\ newline\n tab\t é", Capabilities.None);
            FrameWriter.WriteHello(frames, "again", Capabilities.None);
            await socket.SendAsync(frames.WrittenMemory);
            await broker.WaitForEventAsync(2002);
        }

        broker.Terminate(); // SIGTERM, as docker stop sends
        Assert.Equal(0, await broker.WaitForExitAsync());

        Assert.Empty(broker.Stderr);
        Assert.NotEmpty(broker.Stdout);
        var events = new List<JsonElement>();
        foreach (string line in broker.Stdout)
        {
            using JsonDocument document = JsonDocument.Parse(line); // throws on anything that is not one JSON value
            Assert.Equal(JsonValueKind.Object, document.RootElement.ValueKind);
            events.Add(document.RootElement.Clone());
        }

        Assert.All(events, e =>
        {
            Assert.True(DateTimeOffset.TryParse(e.GetProperty("@t").GetString(), CultureInfo.InvariantCulture, out _));
            Assert.False(string.IsNullOrEmpty(e.GetProperty("@m").GetString()));
        });
        var ids = events.Where(e => e.TryGetProperty("EventId", out _)).Select(e => e.GetProperty("EventId").GetProperty("Id").GetInt32()).ToHashSet();
        Assert.Superset(new HashSet<int> { 1001, 2001, 2002, 1002 }, ids); // listening, HELLO, protocol error, shutdown
        JsonElement welcomed = events.First(e => e.TryGetProperty("EventId", out JsonElement id) && id.GetProperty("Id").GetInt32() == 2001);
        Assert.Equal("quote\" backslash\\ newline\n tab\t é", welcomed.GetProperty("ClientName").GetString());
        Assert.Equal("Herald.Broker.Sessions.BrokerCore", welcomed.GetProperty("SourceContext").GetString());
    }

    [Fact]
    public async Task In_text_mode_a_newline_from_a_client_cannot_forge_a_log_line()
    {
        await using var broker = BrokerProcess.StartTcpOnly("text");
        string listening = await broker.WaitForLineAsync(l => l.Contains("listening for TCP", StringComparison.Ordinal));
        int port = int.Parse(Regex.Match(listening, @"ports (\d+)-").Groups[1].Value, CultureInfo.InvariantCulture);

        // The attacker's name ends its line and writes one that looks like the broker's, then clears the screen.
        const string Forged = "[12:00:00.000 ERR] Herald.Broker.Sessions.BrokerCore: FORGED admin logged in";
        using (var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp))
        {
            await socket.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port));
            var frames = new ArrayBufferWriter<byte>();
            FrameWriter.WriteHello(frames, "evil\n" + Forged + "\r\n\u001b[2J\u2028end", Capabilities.None);
            FrameWriter.WriteHello(frames, "again\nFORGED too", Capabilities.None); // a second HELLO: a protocol error, logged with its reason
            await socket.SendAsync(frames.WrittenMemory);
            await broker.WaitForLineAsync(l => l.Contains("broke the protocol", StringComparison.Ordinal));
        }

        // A bystander's HELLO is logged as before, on one line of its own.
        await using (var bystander = await ProtocolClient.ConnectAsync(port))
        {
            await bystander.HelloAsync();
            await broker.WaitForLineAsync(l => l.EndsWith("said HELLO as 'test'.", StringComparison.Ordinal));
        }

        broker.Terminate();
        Assert.Equal(0, await broker.WaitForExitAsync());

        string[] lines = [.. broker.Stdout];
        Assert.All(lines, l => Assert.Matches(@"^\[\d\d:\d\d:\d\d\.\d{3} [A-Z]{3}\] |^\s|^[A-Za-z.]+Exception", l)); // every line is the broker's own (or an exception's)
        Assert.DoesNotContain(lines, l => l.StartsWith("[12:00:00.000 ERR]", StringComparison.Ordinal));
        Assert.DoesNotContain(lines, l => l.Contains('\u001b', StringComparison.Ordinal) || l.Contains('\r', StringComparison.Ordinal) || l.Contains('\u2028', StringComparison.Ordinal));
        string hello = Assert.Single(lines, l => l.Contains("FORGED admin", StringComparison.Ordinal));
        Assert.Contains("said HELLO as 'evil\\n" + Forged + "\\r\\n\\u001B[2J\\u2028end'.", hello, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Probe_mode_exits_0_for_a_healthy_broker_and_1_for_none()
    {
        await using var broker = await TestBroker.StartAsync();
        string port = broker.MonitoringPort.ToString(CultureInfo.InvariantCulture);
        string http = broker.HttpPort.ToString(CultureInfo.InvariantCulture);

        // An absolute URL; a path on the configured monitoring listener (as the image's HEALTHCHECK uses it);
        // the HTTP port, which serves no probes by default; nobody listening.
        Assert.Equal(0, await BrokerProcess.RunAsync("--probe", $"http://127.0.0.1:{port}/healthz"));
        Assert.Equal(0, await BrokerProcess.RunAsync("--probe", "/readyz", "--Herald:Monitoring:Host=127.0.0.1", $"--Herald:Monitoring:Port={port}"));
        Assert.Equal(1, await BrokerProcess.RunAsync("--probe", $"http://127.0.0.1:{http}/healthz"));
        Assert.Equal(1, await BrokerProcess.RunAsync("--probe", $"http://127.0.0.1:{FreePort()}/healthz"));
    }

    [Fact]
    public async Task Anonymous_on_every_address_warns_and_names_what_is_exposed_the_monitoring_listener_included()
    {
        await using var broker = BrokerProcess.StartTcpOnly("json", "--Herald:Tcp:Host=0.0.0.0", "--Herald:Monitoring:Host=0.0.0.0", "--Herald:Monitoring:Port=0");

        JsonElement warning = await broker.WaitForEventAsync(6001);

        string message = warning.GetProperty("@m").GetString()!;
        Assert.Contains("publish, subscribe and answer requests on every topic", message, StringComparison.Ordinal);
        Assert.Contains("monitoring 0.0.0.0", message, StringComparison.Ordinal);
        Assert.Contains("client names and addresses, every subscribed topic and inbox", message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task An_open_monitoring_listener_beyond_loopback_warns_even_with_authentication_on()
    {
        await using var broker = BrokerProcess.StartTcpOnly(
            "json",
            "--Herald:Security:Auth:Mode=Jwt",
            "--Herald:Security:Auth:Jwt:HmacSecret=a-secret-of-at-least-thirty-two-bytes!!",
            "--Herald:Monitoring:Host=0.0.0.0",
            "--Herald:Monitoring:Port=0");

        JsonElement warning = await broker.WaitForEventAsync(6002);

        Assert.Contains("without Herald:Monitoring:Token", warning.GetProperty("@m").GetString()!, StringComparison.Ordinal);
    }

    [Fact]
    public async Task After_SIGTERM_clients_are_served_through_the_drain_delay_then_told_ShuttingDown_and_the_broker_exits_0()
    {
        int monitoringPort = FreePort();
        await using var broker = BrokerProcess.StartTcpOnly("json", "--Herald:Monitoring:DrainDelay=00:00:03", $"--Herald:Monitoring:Port={monitoringPort}");
        int port = (await broker.WaitForEventAsync(1001)).GetProperty("First").GetInt32();
        await using var client = await ProtocolClient.OpenAsync(port, "client");
        await client.SubscribeAsync(1, "chat");
        await client.PingPongAsync();
        using var monitoring = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{monitoringPort}") };

        broker.Terminate();
        HttpStatusCode ready = HttpStatusCode.OK;
        for (int i = 0; i < 600 && ready == HttpStatusCode.OK; i++)
        {
            using HttpResponseMessage response = await monitoring.GetAsync("/readyz");
            ready = response.StatusCode;
        }

        // Within the delay the client was not told to go: it publishes and receives as before.
        Assert.Equal(HttpStatusCode.ServiceUnavailable, ready);
        await client.PublishAsync("chat", "after SIGTERM");
        Assert.Equal("after SIGTERM", Assert.Single(await client.PingPongAsync()).Text);

        await client.ExpectClosedWithAsync(ErrorCode.ShuttingDown);
        Assert.Equal(0, await broker.WaitForExitAsync());
    }

    private static int FreePort() => Herald.Testing.TestPorts.Free();
}

/// <summary>
/// <c>dotnet Herald.Broker.dll</c> as a child process (the build copies the broker next to the tests),
/// its stdout and stderr collected line by line.
/// </summary>
public sealed class BrokerProcess : IAsyncDisposable
{
    private static readonly TimeSpan Timeout = TimeSpan.FromSeconds(30);

    private readonly Process _process;
    private readonly ConcurrentQueue<string> _stdout = new();
    private readonly ConcurrentQueue<string> _stderr = new();
    private readonly SemaphoreSlim _lines = new(0);

    private BrokerProcess(Process process)
    {
        _process = process;
        process.OutputDataReceived += (_, e) => Add(_stdout, e.Data);
        process.ErrorDataReceived += (_, e) => Add(_stderr, e.Data);
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
    }

    public IReadOnlyCollection<string> Stdout => _stdout;

    public IReadOnlyCollection<string> Stderr => _stderr;

    public static BrokerProcess Start(params string[] args) => new(Process.Start(StartInfo(args))!);

    /// <summary>
    /// The broker on one ephemeral TCP port on loopback and no other listener, logging in
    /// <paramref name="format"/> with Herald's Debug events; <paramref name="more"/> come last and win.
    /// </summary>
    public static BrokerProcess StartTcpOnly(string format, params string[] more) => Start(
    [
        $"--Herald:Logging:Format={format}",
        "--Logging:LogLevel:Herald=Debug",
        "--Herald:Tcp:Host=127.0.0.1",
        "--Herald:Tcp:PortRangeStart=0",
        "--Herald:Tcp:PortRangeEnd=0",
        "--Herald:Http:Port=-1",
        "--Herald:Monitoring:Port=-1",
        "--Herald:Policy:Port=-1",
        .. more,
    ]);

    /// <summary>
    /// As <see cref="StartTcpOnly"/> in JSON format, with the HTTP (long-poll) listener on an ephemeral loopback
    /// port too; <see cref="HttpPortAsync"/> reads which. <paramref name="more"/> come last and win.
    /// </summary>
    public static BrokerProcess StartTcpAndHttp(params string[] more) =>
        StartTcpOnly("json", ["--Herald:Http:Host=127.0.0.1", "--Herald:Http:Port=0", .. more]);

    /// <summary>The HTTP port the broker bound, from its startup event 3003 (JSON format).</summary>
    public async Task<int> HttpPortAsync() => (await WaitForEventAsync(3003)).GetProperty("Port").GetInt32();

    /// <summary>Runs the broker executable to its end (e.g. <c>--probe</c>) and returns its exit code.</summary>
    public static async Task<int> RunAsync(params string[] args)
    {
        await using var run = Start(args);
        return await run.WaitForExitAsync();
    }

    /// <summary>Waits for the JSON log event with <paramref name="eventId"/> and returns it.</summary>
    public async Task<JsonElement> WaitForEventAsync(int eventId)
    {
        using var cts = new CancellationTokenSource(Timeout);
        while (true)
        {
            foreach (string line in _stdout)
            {
                if (line.StartsWith('{'))
                {
                    using JsonDocument document = JsonDocument.Parse(line);
                    if (document.RootElement.TryGetProperty("EventId", out JsonElement id) && id.GetProperty("Id").GetInt32() == eventId)
                    {
                        return document.RootElement.Clone();
                    }
                }
            }

            if (_process.HasExited)
            {
                throw new Xunit.Sdk.XunitException($"The broker exited ({_process.ExitCode}) before event {eventId}:\n{string.Join('\n', _stdout.Concat(_stderr))}");
            }

            await _lines.WaitAsync(cts.Token);
        }
    }

    /// <summary>Waits for a line of output (text format) that <paramref name="match"/> accepts and returns it.</summary>
    public async Task<string> WaitForLineAsync(Func<string, bool> match)
    {
        using var cts = new CancellationTokenSource(Timeout);
        while (true)
        {
            if (_stdout.FirstOrDefault(match) is { } line)
            {
                return line;
            }

            if (_process.HasExited)
            {
                throw new Xunit.Sdk.XunitException($"The broker exited ({_process.ExitCode}) before the line:\n{string.Join('\n', _stdout.Concat(_stderr))}");
            }

            await _lines.WaitAsync(cts.Token);
        }
    }

    /// <summary>SIGKILL: the process ends at once, nothing of it runs (a crash, an OOM kill).</summary>
    public void Kill()
    {
        _process.Kill(entireProcessTree: true);
        _process.WaitForExit();
    }

    /// <summary>Sends SIGTERM, as <c>docker stop</c> and Kubernetes do.</summary>
    public void Terminate()
    {
        using Process kill = Process.Start("kill", ["-TERM", _process.Id.ToString(CultureInfo.InvariantCulture)])!;
        kill.WaitForExit();
    }

    public async Task<int> WaitForExitAsync()
    {
        using var cts = new CancellationTokenSource(Timeout);
        await _process.WaitForExitAsync(cts.Token);
        _process.WaitForExit(); // and for the end of the redirected streams
        return _process.ExitCode;
    }

    public async ValueTask DisposeAsync()
    {
        if (!_process.HasExited)
        {
            _process.Kill(entireProcessTree: true);
            await _process.WaitForExitAsync();
        }

        _process.Dispose();
        _lines.Dispose();
    }

    private static ProcessStartInfo StartInfo(string[] args)
    {
        string dll = typeof(HeraldHost).Assembly.Location;
        var info = new ProcessStartInfo("dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
            WorkingDirectory = Path.GetDirectoryName(dll)!,
            StandardOutputEncoding = System.Text.Encoding.UTF8,
        };
        info.ArgumentList.Add(dll);
        foreach (string arg in args)
        {
            info.ArgumentList.Add(arg);
        }

        return info;
    }

    private void Add(ConcurrentQueue<string> lines, string? line)
    {
        if (line is not null)
        {
            lines.Enqueue(line);
            _lines.Release();
        }
    }
}
