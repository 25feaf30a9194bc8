using System.Diagnostics;
using OpenTelemetry.Trace;

namespace Herald.Broker.Hosting;

/// <summary>
/// The sampler for a span whose parent is a caller's sampled context (a publication's <c>traceparent</c>, an HTTP
/// request's): records at most <c>perSecond</c> of them a second (a token bucket of one second's worth), drops the
/// rest. The W3C sampled flag is the caller's wish; honoured without a bound, any publisher could make the broker
/// record and export a span for every publication it sends. Thread-safe: one lock, taken only for such a span.
/// </summary>
internal sealed class RemoteRateSampler : Sampler
{
    private readonly Lock _gate = new();
    private readonly double _perSecond;
    private double _tokens;
    private long _refilledAt = Stopwatch.GetTimestamp();

    private RemoteRateSampler(int perSecond)
    {
        _perSecond = perSecond;
        _tokens = perSecond;
        Description = $"RemoteRateSampler{{{perSecond}/s}}";
    }

    /// <summary>
    /// The broker's sampler: its own root spans (HTTP requests without a context) recorded, as before; under a caller's
    /// sampled context, at most <paramref name="perSecond"/> a second; under a context not sampled, none.
    /// </summary>
    public static Sampler ParentBased(int perSecond) => new ParentBasedSampler(
        new AlwaysOnSampler(),
        remoteParentSampled: perSecond > 0 ? new RemoteRateSampler(perSecond) : new AlwaysOffSampler(),
        remoteParentNotSampled: new AlwaysOffSampler(),
        localParentSampled: new AlwaysOnSampler(),
        localParentNotSampled: new AlwaysOffSampler());

    public override SamplingResult ShouldSample(in SamplingParameters samplingParameters)
    {
        lock (_gate)
        {
            long now = Stopwatch.GetTimestamp();
            _tokens = Math.Min(_perSecond, _tokens + (Stopwatch.GetElapsedTime(_refilledAt, now).TotalSeconds * _perSecond));
            _refilledAt = now;
            if (_tokens < 1)
            {
                return new SamplingResult(SamplingDecision.Drop);
            }

            _tokens--;
            return new SamplingResult(SamplingDecision.RecordAndSample);
        }
    }
}
