using System.Diagnostics.Metrics;
using Herald.Broker.Hosting;
using Herald.Broker.Transports;
using Microsoft.AspNetCore.Builder;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>The real broker, started in-process on loopback, on one ephemeral port unless told otherwise.</summary>
public sealed class TestBroker : IAsyncDisposable
{
    private readonly WebApplication _app;
    private bool _stopped;

    private TestBroker(WebApplication app, Listeners listeners)
    {
        _app = app;
        Ports = listeners.TcpPorts.Order().ToArray();
        HttpPort = listeners.HttpPort ?? 0;
        PolicyPort = listeners.PolicyPort ?? 0;
        Http = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{HttpPort}"), Timeout = TimeSpan.FromSeconds(60) };
    }

    public int Port => Ports[0];

    public int[] Ports { get; }

    public int HttpPort { get; }

    public int PolicyPort { get; }

    /// <summary>A client for the broker's HTTP port (long-poll, policy files).</summary>
    public HttpClient Http { get; }

    public IServiceProvider Services => _app.Services;

    public static async Task<TestBroker> StartAsync(Action<HeraldOptions>? configure = null, string[]? args = null)
    {
        string[] all = ["--Logging:LogLevel:Default=Warning", "--Logging:LogLevel:Herald=Error", .. args ?? []];
        WebApplication app = HeraldHost.Build(all, options =>
        {
            options.Tcp.Host = "127.0.0.1";
            options.Tcp.PortRangeStart = 0;
            options.Tcp.PortRangeEnd = 0;
            options.Http.Host = "127.0.0.1";
            options.Http.Port = 0;
            options.Policy.Port = 0;
            configure?.Invoke(options);
        });
        await app.StartAsync();
        return new TestBroker(app, app.Services.GetRequiredService<Listeners>());
    }

    /// <summary>Starts a graceful stop (what a SIGTERM does) without waiting for it.</summary>
    public Task StopAsync()
    {
        _stopped = true;
        return _app.StopAsync();
    }

    public async ValueTask DisposeAsync()
    {
        Http.Dispose();
        if (!_stopped)
        {
            await _app.StopAsync();
        }

        await _app.DisposeAsync();
    }
}

/// <summary>
/// Collects the broker's counters by name, through a real <see cref="MeterListener"/>: what was counted
/// since the probe was made. Ordinary counters report each increment; the per-message counts are
/// observable counters (cumulative totals read at collection), so the probe reads them on every lookup
/// and subtracts what they showed when it was made. A broker disposed meanwhile keeps its last value.
/// </summary>
public sealed class MetricsProbe : IDisposable
{
    private readonly MeterListener _listener = new();
    private readonly Dictionary<string, long> _totals = [];
    private readonly Dictionary<(Instrument Instrument, string Tags), long> _observed = [];
    private readonly Dictionary<string, long> _baseline;
    private readonly Lock _gate = new();

    public MetricsProbe()
    {
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name == "Herald.Broker")
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>((instrument, value, tags, _) =>
        {
            lock (_gate)
            {
                if (instrument.IsObservable)
                {
                    _observed[(instrument, string.Join(',', tags.ToArray().Select(t => $"{t.Key}={t.Value}")))] = value;
                }
                else
                {
                    _totals[instrument.Name] = _totals.GetValueOrDefault(instrument.Name) + value;
                }
            }
        });
        _listener.Start();
        _listener.RecordObservableInstruments();
        lock (_gate)
        {
            _baseline = ObservedByName();
        }
    }

    public long this[string name]
    {
        get
        {
            _listener.RecordObservableInstruments();
            lock (_gate)
            {
                return _totals.GetValueOrDefault(name) + ObservedByName().GetValueOrDefault(name) - _baseline.GetValueOrDefault(name);
            }
        }
    }

    public void Dispose() => _listener.Dispose();

    // Caller holds _gate.
    private Dictionary<string, long> ObservedByName()
    {
        var sums = new Dictionary<string, long>();
        foreach (((Instrument instrument, _), long value) in _observed)
        {
            sums[instrument.Name] = sums.GetValueOrDefault(instrument.Name) + value;
        }

        return sums;
    }
}
