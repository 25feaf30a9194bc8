using System.Diagnostics.Metrics;
using Herald.Broker.Routing;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Broker.Transports.LongPoll;
using Herald.Broker.Transports.Sse;
using Herald.Broker.Transports.WebSockets;
using Herald.Broker.Transports.Tcp;

namespace Herald.Broker.Monitoring;

/// <summary>
/// The broker's state as observable instruments on the <c>Herald.Broker</c> meter, read when a collector
/// collects (each Prometheus scrape, each OTLP export), never on the message path. Created once at start.
/// </summary>
internal sealed class BrokerGauges
{
    private readonly SessionRegistry _sessions;

    public BrokerGauges(BrokerMetrics metrics, SessionRegistry sessions, PollSessionStore polls, TopicRouter router)
    {
        _sessions = sessions;
        Meter meter = metrics.Meter;
        meter.CreateObservableUpDownCounter("herald.connections", Connections, "{connection}", "Open connections (TCP, WebSocket), sessions (long-poll) and event streams (SSE), by transport.");
        meter.CreateObservableUpDownCounter("herald.subscriptions", () => (long)router.SubscriptionCount, "{subscription}", "Live subscriptions, all transports.");
        meter.CreateObservableUpDownCounter(
            "herald.topics",
            () => (long)router.PatternCount,
            "{topic}",
            "Distinct subscribed topics and wildcard patterns (each with at least one subscription).");
        meter.CreateObservableUpDownCounter("herald.longpoll.polls.held", () => (long)polls.HeldPolls, "{poll}", "Long polls held open now, waiting for a message or the poll timeout.");
        meter.CreateObservableUpDownCounter("herald.queue.depth", () => Queues(bytes: false), "{message}", "Messages waiting to be written (TCP) or acknowledged (long-poll), summed by transport.");
        meter.CreateObservableUpDownCounter("herald.queue.size", () => Queues(bytes: true), "By", "Bytes of the messages waiting, summed by transport.");
    }

    /// <summary>Open sessions per transport, from the one registry; every transport is reported, 0 included.</summary>
    private List<Measurement<long>> Connections() => ByTransport(static _ => 1);

    /// <summary>The backlogs of every session, summed per transport.</summary>
    private List<Measurement<long>> Queues(bool bytes) => bytes ? ByTransport(static s => s.Backlog.Pending.Bytes) : ByTransport(static s => s.Backlog.Pending.Messages);

    private List<Measurement<long>> ByTransport(Func<ProtocolSession, long> value)
    {
        var totals = new Dictionary<string, long>(StringComparer.Ordinal) { [TcpConnectionHandler.Transport] = 0, [PollSession.TransportName] = 0, [WebSocketEndpoint.TransportName] = 0, [SseSession.TransportName] = 0 };
        foreach (ProtocolSession session in _sessions.Sessions)
        {
            totals[session.Transport] = totals.GetValueOrDefault(session.Transport) + value(session);
        }

        var measurements = new List<Measurement<long>>(totals.Count);
        foreach (KeyValuePair<string, long> total in totals)
        {
            measurements.Add(new Measurement<long>(total.Value, new KeyValuePair<string, object?>(BrokerMetrics.TransportAttribute, total.Key)));
        }

        return measurements;
    }
}
