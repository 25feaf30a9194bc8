using System.Buffers;
using System.Diagnostics;
using System.Text;
using Herald.Protocol;

namespace Herald.Broker.Telemetry;

/// <summary>
/// The broker's own span for a traced publication: <c>route</c> (the topic in <c>messaging.destination.name</c>, never in
/// the name: a span name is a low-cardinality label), from the moment the
/// PUBLISH was read until it was queued to every matching subscriber, child of the publisher's context that the
/// publication carries in its <c>traceparent</c> header (W3C Trace Context), and only when that context is
/// sampled and the broker's sampler agrees (at most <c>Telemetry:Otlp:RemoteSampledSpansPerSecond</c>: a publisher
/// cannot make the broker trace every publication).
/// <code>
/// traceparent: 00-&lt;trace-id: 32 hex&gt;-&lt;parent-id: 16 hex&gt;-&lt;flags: 2 hex&gt;   55 bytes, flags bit 0: sampled
/// </code>
/// </summary>
/// <remarks>
/// After the OpenTelemetry semantic conventions for messaging spans: the conventions' span-kind table covers
/// producers and consumers only, so the generic rule applies, and the broker's span is the child of an
/// asynchronous PRODUCER request: kind <see cref="ActivityKind.Consumer"/>, operation type <c>process</c> (the
/// message is pushed to the broker, which acts on it by routing it), operation name <c>route</c>, span name
/// <c>{messaging.operation.name}</c> (the conventions' fallback when the destination is not low-cardinality: topics
/// are the publishers' to choose). The conventions want the creation context attached so
/// that intermediaries cannot change it: the broker forwards the header block byte for byte, so subscribers'
/// spans are children of the publisher's span too, and the broker's span is their sibling.
/// <para>
/// Cost: a publication without a header block pays the caller's <c>HasHeaders</c> test; one with headers while
/// nothing listens to <see cref="SourceName"/> pays <see cref="ActivitySource.HasListeners"/>; one whose
/// <c>traceparent</c> is absent or not sampled pays one pass over its header map on the stack. Nothing is
/// allocated until a span is started.
/// </para>
/// </remarks>
internal static class BrokerTracing
{
    public const string SourceName = "Herald.Broker";

    public static readonly ActivitySource Source = new(SourceName, BrokerVersion.Value);

    private const int TraceParentLength = 55;

    /// <summary>Longest <c>tracestate</c> carried over to the span (W3C: 32 members of at most 256 bytes each is allowed, 512 is what propagators must keep).</summary>
    private const int MaxTraceState = 512;

    /// <summary>
    /// Starts the span of a publication whose header block carries a sampled <c>traceparent</c>; null for any
    /// other (absent, malformed, a version other than 00, not sampled), or when the sampler drops it. Call only
    /// when the publication has headers and <see cref="Source"/> has listeners.
    /// </summary>
    /// <param name="receivedAt"><see cref="Stopwatch.GetTimestamp"/> when the PUBLISH was read, or 0: the span starts now.</param>
    public static Activity? StartRoute(in PublishFrame publish, long receivedAt)
    {
        Span<byte> traceParent = stackalloc byte[TraceParentLength + 1];
        if (!HeaderBlock.TryCopyFirstValue(publish.Headers, "traceparent"u8, traceParent, out int length)
            || !TryParseSampled(traceParent[..length], out ActivityTraceId traceId, out ActivitySpanId spanId))
        {
            return null;
        }

        Span<byte> state = stackalloc byte[MaxTraceState];
        string? traceState = HeaderBlock.TryCopyFirstValue(publish.Headers, "tracestate"u8, state, out int stateLength) && stateLength > 0
            ? Encoding.UTF8.GetString(state[..stateLength])
            : null;
        var parent = new ActivityContext(traceId, spanId, ActivityTraceFlags.Recorded, traceState, isRemote: true);
        string topic = publish.TopicString;
        DateTimeOffset start = receivedAt != 0 ? DateTimeOffset.UtcNow - Stopwatch.GetElapsedTime(receivedAt) : default;
        Activity? span = Source.StartActivity("route", ActivityKind.Consumer, parent, startTime: start);
        if (span is { IsAllDataRequested: true })
        {
            span.SetTag("messaging.system", "herald");
            span.SetTag("messaging.operation.type", "process");
            span.SetTag("messaging.operation.name", "route");
            span.SetTag("messaging.destination.name", topic);
            span.SetTag("messaging.message.body.size", publish.Payload.Length);
        }

        return span;
    }

    /// <summary>A W3C <c>traceparent</c> of version 00 with the sampled flag (bit 0) set.</summary>
    internal static bool TryParseSampled(ReadOnlySpan<byte> value, out ActivityTraceId traceId, out ActivitySpanId spanId)
    {
        traceId = default;
        spanId = default;
        if (value.Length != TraceParentLength || value[0] != '0' || value[1] != '0' || value[2] != '-' || value[35] != '-' || value[52] != '-'
            || !IsLowerHex(value[3..35]) || !IsLowerHex(value[36..52]) || !IsLowerHex(value[53..])
            || (HexValue(value[54]) & 1) == 0)
        {
            return false;
        }

        ReadOnlySpan<byte> trace = value[3..35];
        ReadOnlySpan<byte> span = value[36..52];
        if (trace.IndexOfAnyExcept((byte)'0') < 0 || span.IndexOfAnyExcept((byte)'0') < 0)
        {
            return false; // all zeros: invalid (W3C Trace Context §3.2.2.3, §3.2.2.4)
        }

        traceId = ActivityTraceId.CreateFromUtf8String(trace);
        spanId = ActivitySpanId.CreateFromUtf8String(span);
        return true;
    }

    private static readonly SearchValues<byte> LowerHex = SearchValues.Create("0123456789abcdef"u8);

    private static bool IsLowerHex(ReadOnlySpan<byte> text) => text.IndexOfAnyExcept(LowerHex) < 0;

    private static int HexValue(byte digit) => digit <= '9' ? digit - '0' : digit - 'a' + 10;
}
