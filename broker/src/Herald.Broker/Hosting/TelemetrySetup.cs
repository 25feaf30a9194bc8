using System.Buffers;
using System.Globalization;
using System.Text;
using Herald.Broker.Monitoring;
using Herald.Broker.Telemetry;
using Herald.Broker.Transports;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using OpenTelemetry.Exporter;
using OpenTelemetry.Metrics;
using OpenTelemetry.Resources;
using OpenTelemetry.Trace;
using Serilog;
using Serilog.Core;
using Serilog.Events;
using Serilog.Extensions.Logging;
using Serilog.Formatting.Compact;

namespace Herald.Broker.Hosting;

/// <summary>
/// Logs, metrics and traces for the host. Serilog is only the sink of
/// Microsoft.Extensions.Logging: every line still comes from the source-generated methods of
/// <see cref="BrokerLog"/>, and the standard <c>Logging:LogLevel</c> filters still decide what is written.
/// OpenTelemetry collects the <c>Herald.Broker</c> meter, ASP.NET Core's and Kestrel's, and the runtime's,
/// for the Prometheus scrape endpoint and, when configured, OTLP; with OTLP traces on, the spans of HTTP requests
/// and the <c>Herald.Broker</c> source's span of each publication whose <c>traceparent</c> is sampled
/// (<see cref="BrokerTracing"/>).
/// </summary>
internal static class TelemetrySetup
{
    public const string ServiceName = "herald";

    /// <summary>Paths that are not traced: probes and scrapes, polled every few seconds.</summary>
    private static readonly string[] Untraced = ["/metrics", "/healthz", "/readyz", "/varz", "/connz", "/subsz"];

    /// <summary>The broker's version, from its assembly (informational version, without the source-link suffix).</summary>
    public static string Version => BrokerVersion.Value;

    /// <summary>Replaces the default logging providers with one Serilog console sink in the configured format.</summary>
    public static void AddHeraldLogging(this ILoggingBuilder logging, LoggingOptions options)
    {
        // Verbose here: the Microsoft.Extensions.Logging filters (Logging:LogLevel) run before this sink.
        // A listener that cannot be opened is said once, in one line, by Program: not also as the host's stack dump.
        LoggerConfiguration configuration = new LoggerConfiguration().MinimumLevel.Verbose().Enrich.With<SessionTokenRedaction>()
            .Filter.ByExcluding(e => e.Exception is ListenerUnavailableException);
        // Text prints values as they are, so control characters from clients are escaped first (a newline in
        // a client name would otherwise start a forged line); JSON escapes them itself and keeps values exact.
        configuration = options.Format == LogFormat.Json
            ? configuration.WriteTo.Console(new RenderedCompactJsonFormatter())
            : configuration.Enrich.With<ControlCharacterEscaper>().WriteTo.Console(
                outputTemplate: "[{Timestamp:HH:mm:ss.fff} {Level:u3}] {SourceContext}: {Message:lj}{NewLine}{Exception}",
                formatProvider: CultureInfo.InvariantCulture);
        logging.ClearProviders();

        // The provider alone, not AddSerilog(): that also adds a Trace-level rule for this provider, which
        // would override every Logging:LogLevel setting. The host disposes the provider (and flushes the sink).
        logging.AddProvider(new SerilogLoggerProvider(configuration.CreateLogger(), dispose: true));
    }

    public static void AddHeraldTelemetry(this IServiceCollection services, HeraldOptions options)
    {
        TelemetryOptions telemetry = options.Telemetry;
        OtlpOptions otlp = telemetry.Otlp;
        OpenTelemetry.OpenTelemetryBuilder builder = services.AddOpenTelemetry()
            .ConfigureResource(resource => resource.AddService(ServiceName, serviceVersion: Version, serviceInstanceId: Environment.MachineName))
            .WithMetrics(metrics =>
            {
                metrics.AddMeter(BrokerMetrics.MeterName)
                    .AddAspNetCoreInstrumentation()  // http.server.*, kestrel.* (connections per port)
                    .AddRuntimeInstrumentation();    // dotnet.* : GC, heap, CPU time, thread pool
                if (telemetry.Prometheus)
                {
                    // No response cache: each scrape (and each test) sees the values of that moment.
                    metrics.AddPrometheusExporter(prometheus => prometheus.ScrapeResponseCacheDurationMilliseconds = 0);
                }

                if (otlp.Enabled)
                {
                    metrics.AddOtlpExporter((exporter, reader) =>
                    {
                        Configure(exporter, otlp, "v1/metrics");
                        reader.PeriodicExportingMetricReaderOptions.ExportIntervalMilliseconds = (int)otlp.MetricsInterval.TotalMilliseconds;
                    });
                }
            });

        if (otlp.Enabled && otlp.Traces)
        {
            builder.WithTracing(tracing => tracing
                .SetSampler(RemoteRateSampler.ParentBased(otlp.RemoteSampledSpansPerSecond)) // a caller's sampled flag, within a rate
                .AddSource(BrokerTracing.SourceName) // a traced publication's route span; nothing while this is off
                .AddAspNetCoreInstrumentation(aspnet =>
                {
                    aspnet.Filter = context => !IsUntraced(context.Request.Path);

                    // No credential leaves in a span: url.path names a long-poll session as {session}, and url.query
                    // carries no credential's value (SSE's access_token, any token parameter).
                    aspnet.EnrichWithHttpRequest = (activity, request) =>
                    {
                        string path = request.Path.Value ?? "";
                        if (RedactSessionToken(path) is var redacted && !ReferenceEquals(redacted, path))
                        {
                            activity.SetTag("url.path", redacted);
                        }

                        if (request.QueryString.Value is { Length: > 1 } query)
                        {
                            activity.SetTag("url.query", RedactQueryCredentials(query)[1..]);
                        }
                    };
                })
                .AddOtlpExporter(exporter => Configure(exporter, otlp, "v1/traces")));
        }
    }

    /// <summary>Maps <c>/metrics</c> when Prometheus is on.</summary>
    public static void MapHeraldTelemetry(this WebApplication app, HeraldOptions options)
    {
        if (options.Telemetry.Prometheus)
        {
            app.MapPrometheusScrapingEndpoint().AsMonitoring(); // on the monitoring listener, or behind its token
        }
    }

    private static void Configure(OtlpExporterOptions exporter, OtlpOptions otlp, string signalPath)
    {
        exporter.Protocol = otlp.Protocol == OtlpProtocol.HttpProtobuf ? OtlpExportProtocol.HttpProtobuf : OtlpExportProtocol.Grpc;
        if (!string.IsNullOrEmpty(otlp.Endpoint))
        {
            var endpoint = new Uri(otlp.Endpoint, UriKind.Absolute);
            if (otlp.Protocol == OtlpProtocol.HttpProtobuf && endpoint.AbsolutePath is "/" or "")
            {
                endpoint = new Uri(endpoint, signalPath); // set in code, the HTTP exporter takes the full signal URL
            }

            exporter.Endpoint = endpoint;
        }
    }

    /// <summary>
    /// Rewrites every string property of a log event that holds a long-poll session path or a URL query with a
    /// credential (ASP.NET Core's request lines, the <c>RequestPath</c> and <c>QueryString</c> properties) so that no
    /// session token and no credential (SSE's <c>access_token</c>, any token parameter) is ever written.
    /// Log lines are never on the hot path.
    /// </summary>
    private sealed class SessionTokenRedaction : ILogEventEnricher
    {
        public void Enrich(LogEvent logEvent, ILogEventPropertyFactory propertyFactory)
        {
            List<LogEventProperty>? redacted = null;
            foreach (KeyValuePair<string, LogEventPropertyValue> property in logEvent.Properties)
            {
                if (property.Value is ScalarValue { Value: string text } && RedactCredentials(text) is var safe && !ReferenceEquals(safe, text))
                {
                    (redacted ??= []).Add(new LogEventProperty(property.Key, new ScalarValue(safe)));
                }
            }

            foreach (LogEventProperty property in redacted ?? [])
            {
                logEvent.AddOrUpdateProperty(property);
            }
        }
    }

    /// <summary><paramref name="text"/> with every credential a URL may carry redacted (<see cref="RedactSessionToken"/>, <see cref="RedactQueryCredentials"/>); the same instance when there is none.</summary>
    internal static string RedactCredentials(string text) => RedactQueryCredentials(RedactSessionToken(text));

    /// <summary>
    /// <paramref name="text"/> with the value of every query parameter that names a credential (its name, decoded,
    /// contains <c>token</c>, <c>auth</c>, <c>password</c>, <c>secret</c> or <c>key</c>: SSE's <c>access_token</c>,
    /// any token parameter) replaced by <c>{redacted}</c>, wherever a query appears in it (a URL, a request line, a
    /// <c>QueryString</c> property); the same instance when there is none. Logs and traces, never the hot path.
    /// </summary>
    internal static string RedactQueryCredentials(string text)
    {
        int question = text.IndexOf('?', StringComparison.Ordinal);
        if (question < 0)
        {
            return text;
        }

        StringBuilder? safe = null;
        int copied = 0;
        int at = question + 1;
        while (at < text.Length)
        {
            int end = text.AsSpan(at).IndexOfAny(QueryEnds);
            end = end < 0 ? text.Length : at + end;
            int equals = text.AsSpan(at, end - at).IndexOf('=');
            if (equals > 0 && IsCredentialName(text.AsSpan(at, equals)) && text.AsSpan(at + equals + 1, end - at - equals - 1) is not ("" or Redacted))
            {
                safe ??= new StringBuilder(text.Length);
                safe.Append(text, copied, at + equals + 1 - copied).Append(Redacted);
                copied = end;
            }

            if (end < text.Length && text[end] == '&')
            {
                at = end + 1;
                continue;
            }

            int next = end < text.Length ? text.IndexOf('?', end) : -1; // the query ended: another may follow in the text
            if (next < 0)
            {
                break;
            }

            at = next + 1;
        }

        return safe is null ? text : safe.Append(text, copied, text.Length - copied).ToString();
    }

    private const string Redacted = "{redacted}";

    private static readonly SearchValues<char> QueryEnds = SearchValues.Create("& #\"'\r\n\t");

    private static bool IsCredentialName(ReadOnlySpan<char> name)
    {
        string decoded = Uri.UnescapeDataString(name.ToString());
        foreach (string word in CredentialWords)
        {
            if (decoded.Contains(word, StringComparison.OrdinalIgnoreCase))
            {
                return true;
            }
        }

        return false;
    }

    private static readonly string[] CredentialWords = ["token", "auth", "password", "secret", "key"];

    /// <summary>
    /// <paramref name="text"/> with the session token of a long-poll path replaced by <c>{session}</c>, for
    /// logs and traces (longpoll §1: the token is never logged); the same instance when there is none.
    /// </summary>
    internal static string RedactSessionToken(string text)
    {
        const string Sessions = "/poll/sessions/";
        int start = text.IndexOf(Sessions, StringComparison.OrdinalIgnoreCase);
        if (start < 0 || start + Sessions.Length == text.Length)
        {
            return text;
        }

        start += Sessions.Length;
        int end = text.AsSpan(start).IndexOfAny('/', '?', ' ');
        end = end < 0 ? text.Length : start + end;
        return text.AsSpan(start, end - start) is "{session}" ? text : string.Concat(text.AsSpan(0, start), "{session}", RedactSessionToken(text[end..]));
    }

    private static bool IsUntraced(PathString path)
    {
        foreach (string untraced in Untraced)
        {
            if (path.StartsWithSegments(untraced, StringComparison.OrdinalIgnoreCase))
            {
                return true;
            }
        }

        return false;
    }
}
