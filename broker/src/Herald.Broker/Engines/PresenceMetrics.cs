using System.Diagnostics.Metrics;
using Herald.Broker.Telemetry;

namespace Herald.Broker.Engines;

/// <summary>Presence's metrics (spec §15), read from the engine when scraped: counts only, never a member's name.</summary>
internal static class PresenceMetrics
{
    public static void Observe(IMeterFactory meterFactory, IPresence presence)
    {
        Meter meter = meterFactory.Create(BrokerMetrics.MeterName);
        meter.CreateObservableGauge("herald.presence.members", () => presence.Counts.Entries, "{member}", "Presence entries (a connection present on a topic), bounded by Herald:Presence:MaxEntries.");
        meter.CreateObservableCounter("herald.presence.events", () => presence.Counts.Events, "{event}", "Join, leave, suppressed and resumed events queued to events subscribers (one per subscriber).");
        meter.CreateObservableCounter("herald.presence.events.suppressed", () => presence.Counts.Suppressed, "{event}", "Join and leave events not sent because their topic was above Herald:Presence:MaxEventsMembers (one per subscriber).");
    }
}
