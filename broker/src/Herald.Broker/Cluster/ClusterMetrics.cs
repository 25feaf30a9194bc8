using System.Diagnostics.Metrics;
using Herald.Broker.Telemetry;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster engine's instruments, on the broker's one meter (as Compression/ has its own). Per-message
/// counts are running totals read when the exporter collects (one interlocked add per publication, none
/// per subscriber); <c>/varz</c> reads the same totals.
/// </summary>
internal sealed class ClusterMetrics
{
    private readonly Counter<long> _reconnects;
    private long _sent;
    private long _received;
    private long _droppedQueueFull;
    private long _droppedDisconnected;
    private long _duplicates;
    private long _invalid;
    private long _repaired;
    private long _groupsOverflowed;
    private long _replayed;
    private long _shed;

    public ClusterMetrics(IMeterFactory meterFactory, ClusterEngine engine)
    {
        Meter meter = meterFactory.Create(BrokerMetrics.MeterName);
        meter.CreateObservableCounter("herald.cluster.messages.sent", () => Sent, "{message}", "Publications this node sent to Redis for the other nodes.");
        meter.CreateObservableCounter("herald.cluster.messages.received", () => Received, "{message}", "Publications of other nodes this node received from Redis and routed.");
        meter.CreateObservableCounter(
            "herald.cluster.forward.dropped",
            () => new[]
            {
                new Measurement<long>(Interlocked.Read(ref _droppedQueueFull), new KeyValuePair<string, object?>("reason", "queue_full")),
                new Measurement<long>(Interlocked.Read(ref _droppedDisconnected), new KeyValuePair<string, object?>("reason", "disconnected")),
            },
            "{message}",
            "Publications delivered on this node only, not sent to the other nodes: the forward queue was full, or Redis was unreachable.");
        meter.CreateObservableCounter("herald.cluster.duplicates", () => Duplicates, "{message}", "Copies Redis sent twice while this node changed its subscriptions, skipped.");
        meter.CreateObservableCounter("herald.cluster.invalid", () => Invalid, "{message}", "Messages on this cluster's channels that were not a Herald envelope, skipped.");
        meter.CreateObservableCounter("herald.cluster.inbound.shed", () => InboundShed, "{message}", "Publications from Redis this node took off a subscription's queue unrouted, past Herald:Cluster:MaxInboundMessages; their subscribers here were told how many they lost.");
        meter.CreateObservableCounter("herald.cluster.replayed", () => Replayed, "{message}", "Signed envelopes refused as replays: one this node had routed already, or older than Herald:Cluster:ReplayWindow (cluster.md §3).");
        meter.CreateObservableCounter("herald.cluster.history.repaired", () => Repaired, "{message}", "History topics' publications this node missed while Redis was unreachable, read back from their streams and routed in order.");
        meter.CreateObservableCounter("herald.cluster.groups.overflowed", () => GroupsOverflowedCount, "{group}", "Queue groups of a publication past the 64 one envelope gives to other nodes, chosen on the publishing node instead (cluster.md §11).");
        meter.CreateObservableCounter("herald.cluster.sessions.taken_over", () => engine.Sessions.TakenOver, "{session}", "Long-poll sessions this node took over from a node whose lease expired or was given up (cluster.md §10).");
        meter.CreateObservableCounter("herald.cluster.sessions.forwarded", () => engine.Sessions.CommandsSent, "{request}", "Long-poll requests this node received for a session another node owns, sent to that node.");
        meter.CreateObservableCounter("herald.cluster.sessions.refused", () => (Measurement<long>[])[new(engine.Sessions.CommandsForged, new KeyValuePair<string, object?>("reason", "forged")), new(engine.Sessions.CommandsReplayed, new KeyValuePair<string, object?>("reason", "replayed")), new(engine.Sessions.CommandsExpired, new KeyValuePair<string, object?>("reason", "expired")), new(engine.Sessions.CommandsBusy, new KeyValuePair<string, object?>("reason", "busy")), new(engine.Sessions.EntriesForged, new KeyValuePair<string, object?>("reason", "entry"))], "{message}", "Long-poll session commands (forged, replayed, past their deadline, over MaxSessionCommands) and backlog entries (untagged or mis-tagged) refused (cluster.md §10).");
        meter.CreateObservableGauge("herald.cluster.sessions.owned", () => engine.Sessions.Owned, "{session}", "Long-poll sessions whose subscriptions this node holds (whose lease it keeps).");
        _reconnects = meter.CreateCounter<long>("herald.cluster.reconnects", "{connection}", "Times the connection to Redis was restored after a failure.");
        meter.CreateObservableGauge("herald.cluster.redis.connected", () => engine.IsConnected ? 1 : 0, "1", "1 while this node is connected to Redis.");
        meter.CreateObservableGauge("herald.cluster.subscriptions", () => engine.RedisSubscriptions, "{subscription}", "Redis channels and patterns this node subscribes to.");
        meter.CreateObservableGauge("herald.cluster.forward.queue", () => engine.ForwardQueueBytes, "By", "Bytes of publications waiting to be sent to Redis.");
        meter.CreateObservableGauge("herald.cluster.inbound.queue", () => engine.InboundQueued, "{message}", "Publications received from Redis and not yet routed on this node: its lag behind the others.");
    }

    public long Sent => Interlocked.Read(ref _sent);

    public long Received => Interlocked.Read(ref _received);

    public long Dropped => Interlocked.Read(ref _droppedQueueFull) + Interlocked.Read(ref _droppedDisconnected);

    public long Duplicates => Interlocked.Read(ref _duplicates);

    public long Invalid => Interlocked.Read(ref _invalid);

    public long Repaired => Interlocked.Read(ref _repaired);

    public long Replayed => Interlocked.Read(ref _replayed);

    public long InboundShed => Interlocked.Read(ref _shed);

    public long GroupsOverflowedCount => Interlocked.Read(ref _groupsOverflowed);

    public void Shed(int count) => Interlocked.Add(ref _shed, count);

    public void ReplayedOne() => Interlocked.Increment(ref _replayed);

    public void RepairedOne() => Interlocked.Increment(ref _repaired);

    public void GroupsOverflowed(int groups) => Interlocked.Add(ref _groupsOverflowed, groups);

    public void SentOne() => Interlocked.Increment(ref _sent);

    public void ReceivedOne() => Interlocked.Increment(ref _received);

    public void DroppedQueueFull() => Interlocked.Increment(ref _droppedQueueFull);

    public void DroppedDisconnected() => Interlocked.Increment(ref _droppedDisconnected);

    public void Duplicate() => Interlocked.Increment(ref _duplicates);

    public void InvalidOne() => Interlocked.Increment(ref _invalid);

    public void Reconnected() => _reconnects.Add(1);
}
