using System.Diagnostics.Metrics;
using Herald.Broker.Telemetry;

namespace Herald.Broker.Security;

/// <summary>
/// The hooks' instruments, on the broker's one meter, each with the bounded attribute <c>herald.hook</c> (connect,
/// subscribe, publish): calls made to the backend, answers taken from the cache, refusals, failures (with
/// <c>herald.hook.failure</c>: timeout, overloaded, status, unreadable, unreachable) and the latency of each call.
/// Counted per decision, never per message of a topic no hook matches.
/// </summary>
internal sealed class HookMetrics
{
    private readonly Counter<long> _calls;
    private readonly Counter<long> _cached;
    private readonly Counter<long> _refusals;
    private readonly Counter<long> _failures;
    private readonly Histogram<double> _duration;

    public HookMetrics(IMeterFactory meterFactory)
    {
        Meter meter = meterFactory.Create(BrokerMetrics.MeterName);
        _calls = meter.CreateCounter<long>("herald.hook.calls", "{call}", "Calls made to the application's backend by a hook (answers from the cache not counted).");
        _cached = meter.CreateCounter<long>("herald.hook.cached", "{decision}", "Decisions a hook took from its cache of the backend's answers, without a call.");
        _refusals = meter.CreateCounter<long>("herald.hook.refusals", "{decision}", "Decisions the backend refused (cached answers included).");
        _failures = meter.CreateCounter<long>("herald.hook.failures", "{call}", "Calls that brought no usable answer; the hook's failure policy decided instead.");
        _duration = meter.CreateHistogram<double>("herald.hook.duration", "s", "Time from a hook's question to its decision, the wait for a free call included.");
    }

    public void Called(string hook) => _calls.Add(1, new KeyValuePair<string, object?>("herald.hook", hook));

    public void Cached(string hook) => _cached.Add(1, new KeyValuePair<string, object?>("herald.hook", hook));

    public void Refused(string hook) => _refusals.Add(1, new KeyValuePair<string, object?>("herald.hook", hook));

    public void Failed(string hook, string failure) =>
        _failures.Add(1, new KeyValuePair<string, object?>("herald.hook", hook), new KeyValuePair<string, object?>("herald.hook.failure", failure));

    public void Decided(string hook, TimeSpan elapsed) => _duration.Record(elapsed.TotalSeconds, new KeyValuePair<string, object?>("herald.hook", hook));
}
