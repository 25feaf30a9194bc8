// Tracing for the samples, turned on as an application turns it on: with the standard OpenTelemetry
// environment (OTEL_EXPORTER_OTLP_ENDPOINT, and OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_SERVICE_NAME and the rest
// as the OpenTelemetry SDK reads them), a tracer provider listens to the client's "Herald.Client" source and
// exports its spans (send <topic>, process <topic>) by OTLP. Without OTEL_EXPORTER_OTLP_ENDPOINT nothing
// listens and the client records nothing.
using System.Diagnostics;
using OpenTelemetry;
using OpenTelemetry.Trace;

namespace Herald.Client.Samples;

internal sealed class SampleTracing : IDisposable
{
    private readonly TracerProvider? _provider;
    private readonly EndedSpans _ended = new();

    private SampleTracing(bool enabled)
    {
        _provider = enabled
            ? Sdk.CreateTracerProviderBuilder()
                .AddSource("Herald.Client")
                .AddOtlpExporter()
                .AddProcessor(_ended) // after the exporter's processor: a span counted here is already queued for export
                .Build()
            : null;
    }

    public static SampleTracing FromEnvironment() =>
        new(!string.IsNullOrEmpty(Environment.GetEnvironmentVariable("OTEL_EXPORTER_OTLP_ENDPOINT")));

    /// <summary>
    /// Waits until <paramref name="count"/> Consumer spans (process <topic>) have ended, at most
    /// <paramref name="bound"/>: a handler's span ends just after the handler returns, so a sample that exits
    /// after its last message waits for that span before the provider's final flush. At once without tracing.
    /// </summary>
    public async Task WaitForProcessedAsync(int count, TimeSpan bound)
    {
        if (_provider is null)
        {
            return;
        }

        using var deadline = new CancellationTokenSource(bound);
        try
        {
            while (_ended.Consumer < count)
            {
                await Task.Delay(10, deadline.Token);
            }
        }
        catch (OperationCanceledException)
        {
            Console.Error.WriteLine($"warning: {_ended.Consumer} of {count} process span(s) ended within {bound.TotalSeconds} s; exporting what there is");
        }
    }

    /// <summary>Flushes what is left to the exporter and stops tracing.</summary>
    public void Dispose() => _provider?.Dispose();

    private sealed class EndedSpans : BaseProcessor<Activity>
    {
        private int _consumer;

        public int Consumer => Volatile.Read(ref _consumer);

        public override void OnEnd(Activity data)
        {
            if (data.Kind == ActivityKind.Consumer)
            {
                Interlocked.Increment(ref _consumer);
            }
        }
    }
}
