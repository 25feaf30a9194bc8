using System.Diagnostics.Metrics;
using Herald.Protocol;

namespace Herald.Broker.Telemetry;

/// <summary>
/// The broker's meter. Counters are added once per publish or per connection event, never per
/// subscriber, and carry only bounded tags (transport, error code): no topic names.
/// </summary>
internal sealed class BrokerMetrics
{
    public const string MeterName = "Herald.Broker";

    private readonly Counter<long> _published;
    private readonly Counter<long> _delivered;
    private readonly Counter<long> _protocolErrors;
    private readonly Counter<long> _slowConsumers;
    private readonly Counter<long> _dropped;
    private readonly UpDownCounter<long> _connections;
    private readonly Counter<long> _policyRequests;
    private readonly Counter<long> _polls;
    private readonly Counter<long> _redelivered;

    public BrokerMetrics(IMeterFactory meterFactory)
    {
        Meter meter = meterFactory.Create(MeterName);
        _published = meter.CreateCounter<long>("herald.messages.published", "{message}", "Publications received.");
        _delivered = meter.CreateCounter<long>("herald.messages.delivered", "{message}", "Messages queued to subscribers (one per matching subscription).");
        _protocolErrors = meter.CreateCounter<long>("herald.protocol.errors", "{error}", "Connections closed or warned for breaking the protocol, by error code.");
        _slowConsumers = meter.CreateCounter<long>("herald.slow_consumers", "{event}", "Slow-consumer policy actions, by policy.");
        _dropped = meter.CreateCounter<long>("herald.messages.dropped", "{message}", "Messages dropped by the DropOldest policy.");
        _connections = meter.CreateUpDownCounter<long>("herald.connections", "{connection}", "Open connections (TCP) and sessions (long-poll), by transport.");
        _policyRequests = meter.CreateCounter<long>("herald.policy.requests", "{request}", "Socket-policy connections, by outcome (silverlight, flash, refused, timeout, busy, aborted).");
        _polls = meter.CreateCounter<long>("herald.longpoll.polls", "{poll}", "Long polls answered, by outcome (messages, empty, replaced, ended).");
        _redelivered = meter.CreateCounter<long>("herald.longpoll.redeliveries", "{response}", "Poll responses that sent again messages a lost response had carried.");
    }

    public void Published(string transport, int deliveries)
    {
        var tag = new KeyValuePair<string, object?>("transport", transport);
        _published.Add(1, tag);
        if (deliveries > 0)
        {
            _delivered.Add(deliveries);
        }
    }

    public void ProtocolError(ErrorCode code) => _protocolErrors.Add(1, new KeyValuePair<string, object?>("code", code.ToString()));

    public void SlowConsumer(string policy) => _slowConsumers.Add(1, new KeyValuePair<string, object?>("policy", policy));

    public void Dropped(long count) => _dropped.Add(count);

    public void PolicyRequest(string outcome) => _policyRequests.Add(1, new KeyValuePair<string, object?>("outcome", outcome));

    public void Poll(string outcome) => _polls.Add(1, new KeyValuePair<string, object?>("outcome", outcome));

    public void Redelivered() => _redelivered.Add(1);

    public void ConnectionOpened(string transport) => _connections.Add(1, new KeyValuePair<string, object?>("transport", transport));

    public void ConnectionClosed(string transport) => _connections.Add(-1, new KeyValuePair<string, object?>("transport", transport));
}
