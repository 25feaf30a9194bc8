using System.Diagnostics.Metrics;
using Herald.Broker.Hosting;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Broker.Transports;
using Herald.Testing;
using Microsoft.AspNetCore.Builder;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
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
        MonitoringPort = listeners.MonitoringPort ?? 0;
        ApiPort = listeners.ApiPort ?? 0;
        Http = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{HttpPort}"), Timeout = TimeSpan.FromSeconds(60) };
        Monitoring = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{MonitoringPort}"), Timeout = TimeSpan.FromSeconds(60) };
    }

    public int Port => Ports[0];

    public int[] Ports { get; }

    public int HttpPort { get; }

    public int PolicyPort { get; }

    public int MonitoringPort { get; }

    /// <summary>The server API's port (0: no API, no key configured).</summary>
    public int ApiPort { get; }

    /// <summary>A client for the server API's listener (no key: each request sets its own).</summary>
    public HttpClient Api => _api ??= new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{ApiPort}"), Timeout = TimeSpan.FromSeconds(60) };

    private HttpClient? _api;

    /// <summary>A client for the broker's HTTP port (long-poll, policy files).</summary>
    public HttpClient Http { get; }

    /// <summary>A client for the broker's monitoring listener (probes, <c>/metrics</c>, <c>/varz</c>, <c>/connz</c>, <c>/subsz</c>).</summary>
    public HttpClient Monitoring { get; }

    public IServiceProvider Services => _app.Services;

    /// <summary>A probe of this broker's own counters, from now on (see <see cref="MetricsProbe"/>).</summary>
    public MetricsProbe Metrics() => new(this);

    /// <param name="time">The broker's clock instead of the system's (a <c>FakeTimeProvider</c> the test moves).</param>
    public static async Task<TestBroker> StartAsync(Action<HeraldOptions>? configure = null, string[]? args = null, TimeProvider? time = null)
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
            options.Monitoring.Host = "127.0.0.1";
            options.Monitoring.Port = 0;
            options.Api.Host = "127.0.0.1";
            options.Api.Port = 0;
            configure?.Invoke(options);
        }, services =>
        {
            QuietCpu.Install(services);
            if (time is not null)
            {
                services.AddSingleton(time);
            }
        });
        await app.StartAsync();
        return new TestBroker(app, app.Services.GetRequiredService<Listeners>());
    }

    /// <summary>
    /// Starts a graceful stop without waiting for it, in the order a SIGTERM brings: the console lifetime
    /// fires <c>ApplicationStopping</c> first, then the host stops its services.
    /// </summary>
    public Task StopAsync()
    {
        _stopped = true;
        _app.Services.GetRequiredService<IHostApplicationLifetime>().StopApplication();
        return _app.StopAsync();
    }

    /// <summary>
    /// Stops the broker at the end of a test. The test reads its clients no more, so the stop does not give them
    /// <c>ShutdownDrainTimeout</c> to take what was queued (a long-poll session holding unacknowledged messages
    /// would keep every such test waiting 5 s for a poll that never comes). A test about shutdown stops the broker
    /// itself (<see cref="StopAsync"/>), with the drain it configured.
    /// </summary>
    public async ValueTask DisposeAsync()
    {
        Http.Dispose();
        Monitoring.Dispose();
        _api?.Dispose();
        if (!_stopped)
        {
            _app.Services.GetRequiredService<BrokerCore>().Limits.ShutdownDrainTimeout = TimeSpan.Zero;
            await _app.StopAsync();
        }

        await _app.DisposeAsync();
    }
}

/// <summary>
/// Collects the counters of one broker by name, through a real <see cref="MeterListener"/>: what that
/// broker counted since the probe was made. Each host makes its <c>Herald.Broker</c> meter through its own
/// <see cref="IMeterFactory"/> (the factory is the meter's <see cref="Meter.Scope"/>), so the probe listens to
/// that broker's instruments only, and what other brokers of the process (parallel tests) count never reaches
/// it: exact assertions are safe. Ordinary counters report each increment; the per-message counts are
/// observable counters (cumulative totals read at collection), so the probe reads them on every lookup and
/// subtracts what they showed when it was made. A broker disposed meanwhile keeps its last value.
/// </summary>
public sealed class MetricsProbe : IDisposable
{
    private const char Separator = '\u001f';

    private readonly MeterListener _listener = new();
    private readonly Dictionary<(string Name, string Tags), long> _totals = [];
    private readonly Dictionary<(string Name, string Tags), long> _most = [];
    private readonly Dictionary<(Instrument Instrument, string Tags), long> _observed = [];
    private readonly Dictionary<(string Name, string Tags), long> _baseline;
    private readonly Lock _gate = new();

    public MetricsProbe(TestBroker broker)
    {
        IMeterFactory factory = broker.Services.GetRequiredService<IMeterFactory>();
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name == BrokerMetrics.MeterName && ReferenceEquals(instrument.Meter.Scope, factory))
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>((instrument, value, tags, _) =>
        {
            string key = string.Join(Separator, tags.ToArray().Select(t => $"{t.Key}={t.Value}"));
            lock (_gate)
            {
                if (instrument.IsObservable)
                {
                    _observed[(instrument, key)] = value;
                }
                else
                {
                    long total = _totals.GetValueOrDefault((instrument.Name, key)) + value;
                    _totals[(instrument.Name, key)] = total;
                    _most[(instrument.Name, key)] = Math.Max(total, _most.GetValueOrDefault((instrument.Name, key)));
                }
            }
        });
        _listener.Start();
        _listener.RecordObservableInstruments();
        lock (_gate)
        {
            _baseline = Observed();
        }
    }

    /// <summary>The count of <paramref name="name"/> over all its attributes.</summary>
    public long this[string name] => Sum(name, null);

    /// <summary>The count of <paramref name="name"/> where attribute <paramref name="attribute"/> is <paramref name="value"/> (say <c>error.type</c>, <c>RateLimited</c>).</summary>
    public long this[string name, string attribute, string value] => Sum(name, $"{attribute}={value}");

    /// <summary>
    /// The highest an up-down counter (say <c>herald.hook.in_flight</c>) stood at since the probe was made, where attribute
    /// <paramref name="attribute"/> is <paramref name="value"/>: its changes are summed in the order the broker made them.
    /// </summary>
    public long Most(string name, string attribute, string value)
    {
        lock (_gate)
        {
            return _most.Where(m => m.Key.Name == name && m.Key.Tags.Split(Separator).Contains($"{attribute}={value}")).Select(m => m.Value).DefaultIfEmpty().Max();
        }
    }

    public void Dispose() => _listener.Dispose();

    private long Sum(string name, string? tag)
    {
        _listener.RecordObservableInstruments();
        lock (_gate)
        {
            Dictionary<(string Name, string Tags), long> observed = Observed();
            long sum = 0;
            foreach (((string Name, string Tags) key, long value) in _totals.Concat(observed))
            {
                if (Matches(key))
                {
                    sum += value;
                }
            }

            foreach (((string Name, string Tags) key, long value) in _baseline)
            {
                if (Matches(key))
                {
                    sum -= value;
                }
            }

            return sum;
        }

        bool Matches((string Name, string Tags) key) => key.Name == name && (tag is null || key.Tags.Split(Separator).Contains(tag));
    }

    // Caller holds _gate.
    private Dictionary<(string Name, string Tags), long> Observed()
    {
        var sums = new Dictionary<(string Name, string Tags), long>();
        foreach (((Instrument instrument, string tags), long value) in _observed)
        {
            sums[(instrument.Name, tags)] = sums.GetValueOrDefault((instrument.Name, tags)) + value;
        }

        return sums;
    }
}
