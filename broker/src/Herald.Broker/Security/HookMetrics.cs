using System.Diagnostics.Metrics;
using Herald.Broker.Telemetry;

namespace Herald.Broker.Security;

/// <summary>
/// The hooks' instruments, on the broker's one meter, each with the bounded attribute <c>herald.hook</c> (connect,
/// subscribe, publish): calls made to the backend and those in flight, answers taken from the cache, refusals, failures (with
/// <c>herald.hook.failure</c>: timeout, overloaded, status, unreadable, unreachable) and the latency of each call.
/// Counted per decision, never per message of a topic no hook matches.
/// </summary>
internal sealed class HookMetrics
{
    private readonly Counter<long> _calls;
    private readonly Counter<long> _cached;
    private readonly Counter<long> _refusals;
    private readonly Counter<long> _failures;
    private readonly UpDownCounter<long> _inFlight;
    private readonly Histogram<double> _duration;

    public HookMetrics(IMeterFactory meterFactory)
    {
        Meter meter = meterFactory.Create(BrokerMetrics.MeterName);
        _calls = meter.CreateCounter<long>("herald.hook.calls", "{call}", "Calls made to the application's backend by a hook (answers from the cache not counted).");
        _cached = meter.CreateCounter<long>("herald.hook.cached", "{decision}", "Decisions a hook took from its cache of the backend's answers, without a call.");
        _refusals = meter.CreateCounter<long>("herald.hook.refusals", "{decision}", "Decisions the backend refused (cached answers included).");
        _failures = meter.CreateCounter<long>("herald.hook.failures", "{call}", "Calls that brought no usable answer; the hook's failure policy decided instead.");
        _inFlight = meter.CreateUpDownCounter<long>("herald.hook.in_flight", "{call}", "Calls to the application's backend a hook holds one of its MaxConcurrent slots for now (a timed-out call gives its slot back as its request is cancelled).");
        _duration = meter.CreateHistogram<double>("herald.hook.duration", "s", "Time from a hook's question to its decision, the wait for a free call included.");
    }

    public void Called(string hook) => _calls.Add(1, new KeyValuePair<string, object?>("herald.hook", hook));

    /// <summary>A call took (+1) or gave back (-1) one of the hook's slots: recorded inside the slot, so the sum is never over the cap.</summary>
    public void Holding(string hook, int change) => _inFlight.Add(change, new KeyValuePair<string, object?>("herald.hook", hook));

    public void Cached(string hook) => _cached.Add(1, new KeyValuePair<string, object?>("herald.hook", hook));

    public void Refused(string hook) => _refusals.Add(1, new KeyValuePair<string, object?>("herald.hook", hook));

    public void Failed(string hook, string failure) =>
        _failures.Add(1, new KeyValuePair<string, object?>("herald.hook", hook), new KeyValuePair<string, object?>("herald.hook.failure", failure));

    public void Decided(string hook, TimeSpan elapsed) => _duration.Record(elapsed.TotalSeconds, new KeyValuePair<string, object?>("herald.hook", hook));
}
