using System.Diagnostics.Metrics;
using Herald.Broker.Monitoring;
using Herald.Broker.Routing;
using Herald.Broker.Sessions;
using Herald.Broker.Transports.LongPoll;
using Herald.Broker.Transports.Tcp;

namespace Herald.Broker.Telemetry;

/// <summary>
/// The broker's state as observable instruments on the <c>Herald.Broker</c> meter, read when a collector
/// collects (each Prometheus scrape, each OTLP export), never on the message path. Created once at start.
/// </summary>
internal sealed class BrokerGauges
{
    private readonly SessionRegistry _sessions;
    private readonly PollSessionStore _polls;

    public BrokerGauges(BrokerMetrics metrics, SessionRegistry sessions, PollSessionStore polls, TopicRouter router)
    {
        _sessions = sessions;
        _polls = polls;
        Meter meter = metrics.Meter;
        meter.CreateObservableUpDownCounter("herald.connections", Connections, "{connection}", "Open connections (TCP) and sessions (long-poll), by transport.");
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

    /// <summary>Open sessions per transport, read from the session tables; every transport is reported, 0 included.</summary>
    private List<Measurement<long>> Connections()
    {
        long tcp = 0;
        Dictionary<string, long>? others = null;
        foreach (OpenConnection open in _sessions.OpenConnections)
        {
            if (open.Transport == TcpConnectionHandler.Transport)
            {
                tcp++;
            }
            else
            {
                others ??= new Dictionary<string, long>(StringComparer.Ordinal);
                others[open.Transport] = others.GetValueOrDefault(open.Transport) + 1;
            }
        }

        var measurements = new List<Measurement<long>>(2 + (others?.Count ?? 0))
        {
            new(tcp, new KeyValuePair<string, object?>(BrokerMetrics.TransportAttribute, TcpConnectionHandler.Transport)),
            new(_polls.Count, new KeyValuePair<string, object?>(BrokerMetrics.TransportAttribute, PollSessionStore.Transport)),
        };
        if (others is not null)
        {
            foreach (KeyValuePair<string, long> other in others)
            {
                measurements.Add(new Measurement<long>(other.Value, new KeyValuePair<string, object?>(BrokerMetrics.TransportAttribute, other.Key)));
            }
        }

        return measurements;
    }

    /// <summary>Sums the queues of every session that reports them (<see cref="IConnectionStats"/>), per transport.</summary>
    private List<Measurement<long>> Queues(bool bytes)
    {
        var totals = new Dictionary<string, long>(2, StringComparer.Ordinal);
        foreach (OpenConnection open in _sessions.OpenConnections)
        {
            if (ConnectionStats.Of(open.Session) is { } stats)
            {
                totals[open.Transport] = totals.GetValueOrDefault(open.Transport) + (bytes ? stats.PendingBytes : stats.PendingMessages);
            }
        }

        foreach (PollSession session in _polls.Sessions)
        {
            if (ConnectionStats.Of(session) is { } stats)
            {
                totals[PollSessionStore.Transport] = totals.GetValueOrDefault(PollSessionStore.Transport) + (bytes ? stats.PendingBytes : stats.PendingMessages);
            }
        }

        var measurements = new List<Measurement<long>>(totals.Count);
        foreach (KeyValuePair<string, long> total in totals)
        {
            measurements.Add(new Measurement<long>(total.Value, new KeyValuePair<string, object?>(BrokerMetrics.TransportAttribute, total.Key)));
        }

        return measurements;
    }
}
