using System.Diagnostics;

namespace Herald.Client.Telemetry;

/// <summary>
/// The client's spans, after the OpenTelemetry semantic conventions for messaging spans (semconv 1.27 and
/// later, status Development: operation types <c>send</c> and <c>process</c>, span name
/// <c>{messaging.operation.name} {destination}</c>): a <c>send &lt;topic&gt;</c> Producer span per
/// publication, whose context travels in the publication's <c>traceparent</c>/<c>tracestate</c> headers
/// (W3C Trace Context, written and read by <see cref="DistributedContextPropagator.Current"/>), and a
/// <c>process &lt;topic&gt;</c> Consumer span around each call of a subscription's handler, child of that
/// context and linked to it (the conventions' "creation context").
/// </summary>
/// <remarks>
/// Nothing here runs, allocates or touches a header unless something listens to the
/// <see cref="SourceName"/> source (<see cref="ActivitySource.HasListeners"/>, checked first by every caller):
/// OpenTelemetry's <c>AddSource("Herald.Client")</c>, or an <see cref="ActivityListener"/>.
/// A reply inbox (<c>_INBOX...</c>, spec §7) is a temporary destination: its spans are named <c>send</c>
/// and <c>process</c> alone, with <c>messaging.destination.temporary</c> set, so span names stay few.
/// </remarks>
internal static class ClientTracing
{
    public const string SourceName = "Herald.Client";

    public static readonly ActivitySource Source = new(SourceName, typeof(ClientTracing).Assembly.GetName().Version?.ToString());

    /// <summary>
    /// Starts the Producer span of one publication and writes its context into <paramref name="headers"/>
    /// (a new instance; the caller's is not changed). Headers that already carry a <c>traceparent</c> keep it
    /// (a creation context the user chose): the span links to it instead. Call only when
    /// <see cref="ActivitySource.HasListeners"/>.
    /// </summary>
    public static Activity? StartSend(string topic, int bodySize, ClientIdentity client, ref HeraldHeaders? headers)
    {
        bool temporary = IsTemporary(topic);
        ActivityLink[]? links = headers is not null && TryExtract(headers, out ActivityContext custom) ? [new ActivityLink(custom)] : null;
        Activity? activity = Source.StartActivity(temporary ? "send" : "send " + topic, ActivityKind.Producer, parentContext: default, tags: null, links: links);
        if (activity is { IsAllDataRequested: true })
        {
            Tag(activity, "send", topic, temporary, bodySize, client);
        }

        Activity? context = activity ?? Activity.Current;
        if (context is not null && links is null)
        {
            var carrier = new HeaderCarrier(headers ?? HeraldHeaders.Empty);
            DistributedContextPropagator.Current.Inject(context, carrier, static (carrier, name, value) => ((HeaderCarrier)carrier!).Set(name, value));
            headers = carrier.Headers;
        }

        return activity;
    }

    /// <summary>
    /// Starts the Consumer span around one handler call: its parent is the context the message carried (a
    /// new trace without one), linked as well. Call only when <see cref="ActivitySource.HasListeners"/>.
    /// </summary>
    public static Activity? StartProcess(HeraldMessage message, string pattern, ClientIdentity client)
    {
        bool temporary = IsTemporary(message.Topic);
        bool carried = TryExtract(message.Headers, out ActivityContext creation);
        Activity? activity = Source.StartActivity(
            temporary ? "process" : "process " + message.Topic,
            ActivityKind.Consumer,
            creation,
            tags: null,
            links: carried ? [new ActivityLink(creation)] : null);
        if (activity is { IsAllDataRequested: true })
        {
            Tag(activity, "process", message.Topic, temporary, message.Payload.Length, client);
            activity.SetTag("messaging.destination.subscription.name", pattern);
        }

        return activity;
    }

    /// <summary>Marks a span failed (the conventions' <c>error.type</c>).</summary>
    public static void Failed(Activity? activity, Exception error)
    {
        if (activity is not null)
        {
            activity.SetStatus(ActivityStatusCode.Error, error.Message);
            activity.SetTag("error.type", error.GetType().FullName);
        }
    }

    /// <summary>The creation context carried in <paramref name="headers"/>, read by the current propagator.</summary>
    public static bool TryExtract(HeraldHeaders headers, out ActivityContext context)
    {
        context = default;
        if (headers.Count == 0)
        {
            return false;
        }

        DistributedContextPropagator.Current.ExtractTraceIdAndState(
            headers,
            static (object? carrier, string name, out string? value, out IEnumerable<string>? values) =>
            {
                values = null;
                value = ((HeraldHeaders)carrier!).GetFirstValue(name);
            },
            out string? traceParent,
            out string? traceState);
        return ActivityContext.TryParse(traceParent, traceState, isRemote: true, out context);
    }

    private static void Tag(Activity activity, string operation, string topic, bool temporary, int bodySize, ClientIdentity client)
    {
        activity.SetTag("messaging.system", "herald");
        activity.SetTag("messaging.operation.type", operation);
        activity.SetTag("messaging.operation.name", operation);
        activity.SetTag("messaging.destination.name", topic);
        if (temporary)
        {
            activity.SetTag("messaging.destination.temporary", true);
        }

        activity.SetTag("messaging.message.body.size", bodySize);
        activity.SetTag("messaging.client.id", client.Name);
        activity.SetTag("server.address", client.Host);
        if (client.Port is { } port)
        {
            activity.SetTag("server.port", port);
        }
    }

    private static bool IsTemporary(string topic) => topic.StartsWith("_INBOX.", StringComparison.Ordinal);

    /// <summary>Collects what the propagator injects; a field that is not a valid header is left out rather than failing the publication.</summary>
    private sealed class HeaderCarrier(HeraldHeaders headers)
    {
        public HeraldHeaders Headers { get; private set; } = headers;

        public void Set(string name, string value)
        {
            try
            {
                Headers = Headers.Set(name, value);
            }
            catch (ArgumentException)
            {
                // Not a token key, or a value with CR/LF (a custom propagator's field): not carried.
            }
        }
    }
}

/// <summary>Who a span's client is: <c>messaging.client.id</c> (the client's name), <c>server.address</c>, <c>server.port</c>.</summary>
internal sealed record ClientIdentity(string Name, string Host, int? Port);
