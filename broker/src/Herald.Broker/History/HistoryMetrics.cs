using System.Diagnostics.Metrics;
using Herald.Broker.Telemetry;

namespace Herald.Broker.History;

/// <summary>The histories' instruments, on the broker's one meter: read from the store's totals when the exporter collects (nothing per message).</summary>
internal static class HistoryMetrics
{
    public static void Observe(IMeterFactory meterFactory, HistoryStore store)
    {
        Meter meter = meterFactory.Create(BrokerMetrics.MeterName);
        meter.CreateObservableGauge("herald.history.bytes", () => store.Bytes, "By", "Bytes every topic history holds together (bounded by Herald:History:MaxBytes).");
        meter.CreateObservableGauge("herald.history.topics", () => store.TopicCount, "{topic}", "Topics holding a history (bounded by Herald:History:MaxTopics).");
        meter.CreateObservableCounter("herald.history.evicted", () => store.EvictedTopics, "{topic}", "Histories dropped whole to make room for another topic's: a client resuming one is told its history was lost.");
        meter.CreateObservableCounter(
            "herald.history.resumes",
            () => new[]
            {
                new Measurement<long>(store.Recovered, new KeyValuePair<string, object?>("recovered", true)),
                new Measurement<long>(store.NotRecovered, new KeyValuePair<string, object?>("recovered", false)),
            },
            "{subscription}",
            "Subscriptions that asked to resume from a position: recovered (every missed message replayed) or not (history lost, too old, none kept).");
    }
}
