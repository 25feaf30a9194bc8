using System.Net;
using System.Net.Sockets;
using Herald.Broker.Hosting;
using Herald.Broker.Transports;
using Herald.Client;
using Herald.Testing;
using Microsoft.AspNetCore.Builder;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Client.Tests.Infrastructure;

/// <summary>
/// The real broker, started in-process through <see cref="HeraldHost.Build"/> on loopback: TCP and HTTP
/// (long-poll, and WebSocket at <c>/ws</c>) on ephemeral ports, or on the ports given (a reconnect test restarts a
/// broker on the same ones).
/// </summary>
public sealed class TestBroker : IAsyncDisposable
{
    private readonly WebApplication _app;
    private bool _stopped;

    private TestBroker(WebApplication app)
    {
        _app = app;
        Listeners listeners = app.Services.GetRequiredService<Listeners>();
        TcpPort = listeners.TcpPorts.Min();
        HttpPort = listeners.HttpPort ?? 0;
        MonitoringPort = listeners.MonitoringPort;
        ApiPort = listeners.ApiPort;
    }

    public int TcpPort { get; }

    public int HttpPort { get; }

    /// <summary>The monitoring listener's port, when a test turns it on (<c>options.Monitoring.Port = 0</c>).</summary>
    public int? MonitoringPort { get; }

    /// <summary>The server API's port, when a test configures a key (<c>options.Api.Keys</c>, <c>options.Api.Port = 0</c>).</summary>
    public int? ApiPort { get; }

    public string TcpUrl => $"tcp://127.0.0.1:{TcpPort}";

    public string HttpUrl => $"http://127.0.0.1:{HttpPort}";

    public string WebSocketUrl => $"ws://127.0.0.1:{HttpPort}/ws";

    public string Url(HeraldTransport transport) => transport switch
    {
        HeraldTransport.Tcp => TcpUrl,
        HeraldTransport.WebSocket => WebSocketUrl,
        _ => HttpUrl,
    };

    public static async Task<TestBroker> StartAsync(Action<HeraldOptions>? configure = null, int tcpPort = 0, int httpPort = 0)
    {
        string[] args = ["--Logging:LogLevel:Default=Warning", "--Logging:LogLevel:Herald=Error"];
        WebApplication app = HeraldHost.Build(args, options =>
        {
            options.Tcp.Host = "127.0.0.1";
            options.Tcp.PortRangeStart = tcpPort;
            options.Tcp.PortRangeEnd = tcpPort;
            options.Http.Host = "127.0.0.1";
            options.Http.Port = httpPort;
            options.Policy.Port = -1;
            options.Monitoring.Port = -1; // the client tests read no monitoring endpoint
            options.Limits.ShutdownDrainTimeout = TimeSpan.FromSeconds(1);
            configure?.Invoke(options);
        }, QuietCpu.Install);
        await app.StartAsync();
        return new TestBroker(app);
    }

    /// <summary>A graceful stop, as SIGTERM: clients get a ShuttingDown ERROR (TCP) or 503 (long-poll), then the ports are free.</summary>
    public async Task StopAsync()
    {
        if (!_stopped)
        {
            _stopped = true;
            await _app.StopAsync();
        }
    }

    public async ValueTask DisposeAsync()
    {
        await StopAsync();
        await _app.DisposeAsync();
    }

    /// <summary>A port of the client tests' range (30000-31999, below the kernel's ephemeral range: <see cref="TestPorts"/>) that is free now.</summary>
    public static int FreePort() => TestPorts.Free();
}
