using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Hosting;

/// <summary>How log lines are written to standard output.</summary>
public enum LogFormat
{
    /// <summary>One human-readable line per event (development).</summary>
    Text,

    /// <summary>One compact JSON object per line (CLEF, Serilog's rendered compact format): containers, log shippers.</summary>
    Json,
}

/// <summary><c>Herald:Logging</c>. Levels stay in the standard <c>Logging:LogLevel</c> section.</summary>
public sealed class LoggingOptions
{
    /// <summary><c>Text</c> for a terminal, <c>Json</c> for a container (the Docker image sets it).</summary>
    public LogFormat Format { get; set; } = LogFormat.Text;

    /// <summary>
    /// Per-client fault lines (protocol errors, torn frames, timeouts, slow consumers, failed authentications)
    /// written per <see cref="ClientFaultInterval"/>; the rest are summed up in one line at its end. <c>0</c>: only the summaries.
    /// </summary>
    [Range(0, 1_000_000)]
    public int ClientFaultsPerInterval { get; set; } = 20;

    /// <summary>The interval of <see cref="ClientFaultsPerInterval"/>.</summary>
    public TimeSpan ClientFaultInterval { get; set; } = TimeSpan.FromSeconds(10);
}

/// <summary><c>Herald:Telemetry</c>: where metrics and traces go.</summary>
public sealed class TelemetryOptions
{
    /// <summary>Serve the Prometheus text format at <c>/metrics</c> (on the monitoring listener, as the other operations endpoints).</summary>
    public bool Prometheus { get; set; } = true;

    public OtlpOptions Otlp { get; set; } = new();
}

/// <summary>Wire protocol of the OTLP exporter.</summary>
public enum OtlpProtocol
{
    /// <summary>gRPC, usually port 4317.</summary>
    Grpc,

    /// <summary>HTTP with protobuf bodies, usually port 4318 (<c>/v1/metrics</c>, <c>/v1/traces</c>).</summary>
    HttpProtobuf,
}

/// <summary><c>Herald:Telemetry:Otlp</c>: push metrics and traces to an OpenTelemetry collector.</summary>
public sealed class OtlpOptions
{
    /// <summary>Export over OTLP at all (off by default: Prometheus scrapes <c>/metrics</c>).</summary>
    public bool Enabled { get; set; }

    /// <summary>
    /// The collector, e.g. <c>http://otel-collector:4317</c>. Empty: the standard
    /// <c>OTEL_EXPORTER_OTLP_ENDPOINT</c> variable, else the exporter's default (localhost).
    /// With <c>HttpProtobuf</c>, a base address gets <c>/v1/metrics</c> and <c>/v1/traces</c> appended.
    /// </summary>
    public string? Endpoint { get; set; }

    public OtlpProtocol Protocol { get; set; } = OtlpProtocol.Grpc;

    /// <summary>How often metrics are pushed.</summary>
    public TimeSpan MetricsInterval { get; set; } = TimeSpan.FromSeconds(15);

    /// <summary>
    /// Also export traces: of the HTTP endpoints (long-poll, policy files; not the probes or scrapes), and the
    /// broker's span of each publication whose <c>traceparent</c> is sampled (<c>Herald.Broker</c> source).
    /// </summary>
    public bool Traces { get; set; } = true;

    /// <summary>
    /// Most spans a second the broker records under a caller's sampled context (a publication's <c>traceparent</c>,
    /// an HTTP request's): a caller's sampled flag is a request, not an order, so no publisher makes the broker trace
    /// every publication. Beyond it the span is not recorded (the message goes on, its headers as they were).
    /// 0: never under a caller's context.
    /// </summary>
    [System.ComponentModel.DataAnnotations.Range(0, 1_000_000)]
    public int RemoteSampledSpansPerSecond { get; set; } = 100;
}
