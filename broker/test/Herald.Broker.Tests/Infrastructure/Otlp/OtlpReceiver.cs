using System.Collections.Concurrent;
using System.Net;
using Google.Protobuf;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests.Infrastructure.Otlp;

/// <summary>One span as an OTLP exporter sent it, with the service that sent it (resource <c>service.name</c>).</summary>
public sealed record ReceivedSpan(
    string Service,
    string Scope,
    string Name,
    Span.Types.SpanKind Kind,
    string TraceId,
    string SpanId,
    string ParentSpanId,
    IReadOnlyDictionary<string, object> Attributes,
    IReadOnlyList<(string TraceId, string SpanId)> Links)
{
    public object? this[string attribute] => Attributes.GetValueOrDefault(attribute);
}

/// <summary>One metric as an OTLP exporter sent it: its name, the service, and the attribute keys of its points.</summary>
public sealed record ReceivedMetric(string Service, string Name, IReadOnlySet<string> AttributeKeys);

/// <summary>
/// A real OTLP/HTTP receiver on loopback for tests (binary protobuf, as <c>OtlpExportProtocol.HttpProtobuf</c>
/// sends): <c>POST /v1/traces</c> and <c>/v1/metrics</c> bodies are decoded with the OTLP message types
/// (<c>otlp.proto</c> beside this file) and kept as spans and metrics; it answers each with an empty export
/// response, as a collector does. Start one per test; exporters take <see cref="BaseAddress"/> and the path.
/// </summary>
public sealed class OtlpReceiver : IAsyncDisposable
{
    private readonly WebApplication _app;
    private readonly ConcurrentQueue<ReceivedSpan> _spans = new();
    private readonly ConcurrentQueue<ReceivedMetric> _metrics = new();

    private OtlpReceiver(WebApplication app) => _app = app;

    /// <summary><c>http://127.0.0.1:port/</c>.</summary>
    public string BaseAddress { get; private set; } = "";

    /// <summary>Where an OTLP/HTTP trace exporter sends.</summary>
    public Uri TracesEndpoint => new(new Uri(BaseAddress), "v1/traces");

    public IReadOnlyList<ReceivedSpan> Spans => [.. _spans];

    public IReadOnlyList<ReceivedMetric> Metrics => [.. _metrics];

    public static async Task<OtlpReceiver> StartAsync()
    {
        WebApplicationBuilder builder = WebApplication.CreateSlimBuilder();
        builder.WebHost.UseKestrel(k => k.Listen(IPAddress.Loopback, 0));
        WebApplication app = builder.Build();
        var receiver = new OtlpReceiver(app);
        app.MapPost("/v1/traces", async (HttpContext context) =>
        {
            ExportTraceServiceRequest request = ExportTraceServiceRequest.Parser.ParseFrom(await ReadBodyAsync(context));
            receiver.Add(request);
            await RespondAsync(context);
        });
        app.MapPost("/v1/metrics", async (HttpContext context) =>
        {
            ExportMetricsServiceRequest request = ExportMetricsServiceRequest.Parser.ParseFrom(await ReadBodyAsync(context));
            receiver.Add(request);
            await RespondAsync(context);
        });
        await app.StartAsync();
        receiver.BaseAddress = app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.First().Replace("localhost", "127.0.0.1", StringComparison.Ordinal) + "/";
        return receiver;
    }

    public async ValueTask DisposeAsync() => await _app.DisposeAsync();

    private void Add(ExportTraceServiceRequest request)
    {
        foreach (ResourceSpans resource in request.ResourceSpans)
        {
            string service = ServiceName(resource.Resource);
            foreach (ScopeSpans scope in resource.ScopeSpans)
            {
                foreach (Span span in scope.Spans)
                {
                    _spans.Enqueue(new ReceivedSpan(
                        service,
                        scope.Scope?.Name ?? "",
                        span.Name,
                        span.Kind,
                        Hex(span.TraceId),
                        Hex(span.SpanId),
                        Hex(span.ParentSpanId),
                        span.Attributes.ToDictionary(a => a.Key, a => Value(a.Value), StringComparer.Ordinal),
                        [.. span.Links.Select(l => (Hex(l.TraceId), Hex(l.SpanId)))]));
                }
            }
        }
    }

    private void Add(ExportMetricsServiceRequest request)
    {
        foreach (ResourceMetrics resource in request.ResourceMetrics)
        {
            string service = ServiceName(resource.Resource);
            foreach (Metric metric in resource.ScopeMetrics.SelectMany(s => s.Metrics))
            {
                IEnumerable<KeyValue> attributes = metric.DataCase switch
                {
                    Metric.DataOneofCase.Sum => metric.Sum.DataPoints.SelectMany(p => p.Attributes),
                    Metric.DataOneofCase.Gauge => metric.Gauge.DataPoints.SelectMany(p => p.Attributes),
                    Metric.DataOneofCase.Histogram => metric.Histogram.DataPoints.SelectMany(p => p.Attributes),
                    _ => [],
                };
                _metrics.Enqueue(new ReceivedMetric(service, metric.Name, attributes.Select(a => a.Key).ToHashSet(StringComparer.Ordinal)));
            }
        }
    }

    private static string ServiceName(Resource? resource) =>
        resource?.Attributes.FirstOrDefault(a => a.Key == "service.name")?.Value.StringValue ?? "";

    private static object Value(AnyValue? value) => value?.ValueCase switch
    {
        AnyValue.ValueOneofCase.StringValue => value.StringValue,
        AnyValue.ValueOneofCase.BoolValue => value.BoolValue,
        AnyValue.ValueOneofCase.IntValue => value.IntValue,
        AnyValue.ValueOneofCase.DoubleValue => value.DoubleValue,
        AnyValue.ValueOneofCase.ArrayValue => value.ArrayValue.Values.Select(Value).ToArray(),
        AnyValue.ValueOneofCase.BytesValue => value.BytesValue.ToByteArray(),
        _ => "",
    };

    private static string Hex(ByteString bytes) => bytes.IsEmpty ? "" : Convert.ToHexStringLower(bytes.Span);

    private static async Task<byte[]> ReadBodyAsync(HttpContext context)
    {
        using var body = new MemoryStream();
        await context.Request.Body.CopyToAsync(body);
        return body.ToArray();
    }

    /// <summary>An empty Export*ServiceResponse: everything accepted.</summary>
    private static Task RespondAsync(HttpContext context)
    {
        context.Response.ContentType = "application/x-protobuf";
        return Task.CompletedTask;
    }
}
