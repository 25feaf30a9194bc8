using Herald.Broker.Monitoring;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Broker.Transports;
using Microsoft.AspNetCore.Builder;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Hosting;

/// <summary>
/// Everything an operator needs, added to the host in two calls: logs, metrics and traces,
/// health, the monitoring endpoints and the shutdown drain delay.
/// </summary>
internal static class OperationsSetup
{
    /// <summary>Before the app is built: the Serilog sink, OpenTelemetry and the monitoring services.</summary>
    public static void AddHeraldOperations(this WebApplicationBuilder builder, HeraldOptions options)
    {
        builder.Logging.AddHeraldLogging(options.Logging);
        IServiceCollection services = builder.Services;
        services.AddHeraldTelemetry(options);
        services.AddSingleton<BrokerGauges>();
        services.AddSingleton<BrokerHealth>();
        services.AddSingleton<ProcessUsage>();
        services.AddSingleton<MonitoringLogin>();
        services.AddSingleton<StatusSampler>();
        services.AddSingleton<StatusPage>();
        services.AddHostedService(sp => new ShutdownSequence(options.Monitoring.DrainDelay, sp.GetRequiredService<BrokerHealth>(), sp.GetRequiredService<SessionRegistry>()));
    }

    /// <summary>After the app is built: the endpoints; creates the health state and the gauges so they see the whole life cycle.</summary>
    public static void MapHeraldOperations(this WebApplication app, HeraldOptions options)
    {
        app.Services.GetRequiredService<BrokerHealth>();
        app.Services.GetRequiredService<BrokerGauges>();
        app.MapHealth();
        if (options.Monitoring.Enabled)
        {
            app.Services.GetRequiredService<StatusSampler>(); // its first rates are since start
            app.MapMonitoring();
        }

        app.MapHeraldTelemetry(options);
        app.Lifetime.ApplicationStarted.Register(() => LogEndpoints(app, options));
    }

    private static void LogEndpoints(WebApplication app, HeraldOptions options)
    {
        ILogger log = app.Services.GetRequiredService<BrokerCore>().Log;
        Listeners listeners = app.Services.GetRequiredService<Listeners>();
        MonitoringOptions monitoring = options.Monitoring;
        string guarded = (options.Telemetry.Prometheus ? ", /metrics" : "") + (monitoring.Enabled ? ", /varz, /connz, /subsz, /statusz" : "");
        bool token = !string.IsNullOrEmpty(monitoring.Token);
        if (listeners.MonitoringPort is { } port)
        {
            string page = monitoring.Enabled ? ", the status page /" : "";
            log.OperationsEndpoints(monitoring.Host, port, guarded + page, token && guarded.Length > 0 ? " (all but the probes need the bearer token; the status page asks for it)" : "");
        }
        else
        {
            log.OperationsEndpointsOff();
        }

        string onHttpPort = (monitoring.ProbesOnHttpPort ? ", /healthz, /readyz" : "") + (token && guarded.Length > 0 ? guarded + " (with the bearer token)" : "");
        if (listeners.HttpPort is { } http && onHttpPort.Length > 0)
        {
            log.OperationsOnHttpPort(http, onHttpPort[2..]);
        }

        OtlpOptions otlp = options.Telemetry.Otlp;
        if (otlp.Enabled)
        {
            string endpoint = string.IsNullOrEmpty(otlp.Endpoint) ? Environment.GetEnvironmentVariable("OTEL_EXPORTER_OTLP_ENDPOINT") ?? "the exporter's default" : otlp.Endpoint;
            log.OtlpExport(otlp.Traces ? " and traces" : "", endpoint, otlp.Protocol.ToString(), otlp.MetricsInterval);
        }
    }
}
