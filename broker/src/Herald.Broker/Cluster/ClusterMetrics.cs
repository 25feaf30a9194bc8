using System.Diagnostics.Metrics;
using Herald.Broker.Telemetry;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster engine's instruments, on the broker's one meter (as Compression/ has its own). Per-message
/// counts are running totals read when the exporter collects (one interlocked add per publication, none
/// per subscriber); <c>/varz</c> reads the same totals. What is per shard (spec cluster.md §13: received, connected,
/// subscriptions, inbound queue; sent and dropped are counted by each shard's writer) carries a <c>shard</c> tag, the
/// shard's index.
/// </summary>
internal sealed class ClusterMetrics
{
    private readonly Counter<long> _reconnects;
    private long _sent;
    private readonly long[] _receivedOn;
    private long _droppedQueueFull;
    private long _droppedDisconnected;
    private long _duplicates;
    private long _invalid;
    private long _repaired;
    private long _groupsOverflowed;
    private long _replayed;
    private long _shed;
    private readonly long[] _lossNoticesOn;
    private readonly long[] _subscribeFailuresOn;

    public ClusterMetrics(IMeterFactory meterFactory, ClusterEngine engine, int shards = 1)
    {
        _receivedOn = new long[shards];
        _lossNoticesOn = new long[shards];
        _subscribeFailuresOn = new long[shards];
        Meter meter = meterFactory.Create(BrokerMetrics.MeterName);
        meter.CreateObservableCounter("herald.cluster.messages.sent", () => PerShard(shards, engine.SentTo), "{message}", "Publications this node sent to Redis for the other nodes, per shard.");
        meter.CreateObservableCounter("herald.cluster.messages.received", () => PerShard(shards, ReceivedOn), "{message}", "Publications of other nodes this node received from Redis and routed, per shard.");
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
        meter.CreateObservableCounter("herald.cluster.inbound.shed", () => InboundShed, "{message}", "Publications from Redis this node took off a subscription's queue unrouted, past Herald:Cluster:MaxInboundMessages or MaxInboundBytes; their subscribers here were told how many they lost.");
        meter.CreateObservableCounter("herald.cluster.loss_notices", () => PerShard(shards, LossNoticesOn), "{subscription}", "Subscriptions on this node told they may have lost an unknown number of messages, each time a shard their publications travel through came back after an outage (cluster.md §13).");
        meter.CreateObservableCounter("herald.cluster.subscribe.failures", () => PerShard(shards, SubscribeFailuresOn), "{subscription}", "Attempts to subscribe to a Redis channel or glob on a shard that failed (unreachable, or the command timed out); each is made again when the shard is back, and its subscribers are told then (cluster.md §13).");
        meter.CreateObservableCounter("herald.cluster.replayed", () => Replayed, "{message}", "Signed envelopes refused as replays: one this node had routed already, or older than Herald:Cluster:ReplayWindow (cluster.md §3).");
        meter.CreateObservableCounter("herald.cluster.history.repaired", () => Repaired, "{message}", "History topics' publications this node missed while Redis was unreachable, read back from their streams and routed in order.");
        meter.CreateObservableCounter("herald.cluster.groups.overflowed", () => GroupsOverflowedCount, "{group}", "Queue groups of a publication past the 64 one envelope gives to other nodes, chosen on the publishing node instead (cluster.md §11).");
        meter.CreateObservableCounter("herald.cluster.sessions.taken_over", () => engine.Sessions.TakenOver, "{session}", "Long-poll sessions this node took over from a node whose lease expired or was given up (cluster.md §10).");
        meter.CreateObservableCounter("herald.cluster.sessions.forwarded", () => engine.Sessions.CommandsSent, "{request}", "Long-poll requests this node received for a session another node owns, sent to that node.");
        meter.CreateObservableCounter("herald.cluster.control.refused", () => engine.Control.Refused, "{message}", "Control-channel actions and answers refused: untagged or mis-tagged with a secret, replayed, past their deadline, or malformed (cluster.md §14).");
        meter.CreateObservableCounter("herald.cluster.sessions.refused", () => (Measurement<long>[])[new(engine.Sessions.CommandsForged, new KeyValuePair<string, object?>("reason", "forged")), new(engine.Sessions.CommandsReplayed, new KeyValuePair<string, object?>("reason", "replayed")), new(engine.Sessions.CommandsExpired, new KeyValuePair<string, object?>("reason", "expired")), new(engine.Sessions.CommandsBusy, new KeyValuePair<string, object?>("reason", "busy")), new(engine.Sessions.EntriesForged, new KeyValuePair<string, object?>("reason", "entry"))], "{message}", "Long-poll session commands (forged, replayed, past their deadline, over MaxSessionCommands) and backlog entries (untagged or mis-tagged) refused (cluster.md §10).");
        meter.CreateObservableCounter("herald.cluster.sessions.frames", () => (Measurement<long>[])[new(engine.Sessions.Kept.Found, new KeyValuePair<string, object?>("source", "memory")), new(engine.Sessions.Kept.Fetched, new KeyValuePair<string, object?>("source", "redis"))], "{frame}", "Frames this node's long-poll polls took from the frames it kept of its latest appends (memory) or fetched from Redis (cluster.md §10, KeptFrameBytes).");
        meter.CreateObservableGauge("herald.cluster.sessions.owned", () => engine.Sessions.Owned, "{session}", "Long-poll sessions whose subscriptions this node holds (whose lease it keeps).");
        _reconnects = meter.CreateCounter<long>("herald.cluster.reconnects", "{connection}", "Times the connection to Redis was restored after a failure.");
        meter.CreateObservableGauge("herald.cluster.redis.connected", () => PerShard(shards, shard => engine.ConnectedTo(shard) ? 1 : 0), "1", "1 while this node is connected to the shard's Redis.");
        meter.CreateObservableGauge("herald.cluster.subscriptions", () => PerShard(shards, shard => engine.RedisSubscriptionsOn(shard)), "{subscription}", "Redis channels and patterns this node subscribes to, per shard.");
        meter.CreateObservableGauge("herald.cluster.forward.queue", () => engine.ForwardQueueBytes, "By", "Bytes of publications waiting to be sent to Redis (every shard's: one bound).");
        meter.CreateObservableGauge("herald.cluster.inbound.queue", () => PerShard(shards, engine.InboundQueuedOn), "{message}", "Publications received from a shard and not yet routed on this node: its lag behind the others there.");
    }

    /// <summary>One measurement per shard, tagged with its index.</summary>
    private static Measurement<long>[] PerShard(int shards, Func<int, long> value)
    {
        var measurements = new Measurement<long>[shards];
        for (int i = 0; i < shards; i++)
        {
            measurements[i] = new(value(i), new KeyValuePair<string, object?>("shard", i));
        }

        return measurements;
    }

    public long Sent => Interlocked.Read(ref _sent);

    public long Received
    {
        get
        {
            long received = 0;
            for (int i = 0; i < _receivedOn.Length; i++)
            {
                received += ReceivedOn(i);
            }

            return received;
        }
    }

    /// <summary>Publications of other nodes received from <paramref name="shard"/> and routed.</summary>
    public long ReceivedOn(int shard) => Interlocked.Read(ref _receivedOn[shard]);

    public long Dropped => Interlocked.Read(ref _droppedQueueFull) + Interlocked.Read(ref _droppedDisconnected);

    public long Duplicates => Interlocked.Read(ref _duplicates);

    public long Invalid => Interlocked.Read(ref _invalid);

    public long Repaired => Interlocked.Read(ref _repaired);

    public long Replayed => Interlocked.Read(ref _replayed);

    public long InboundShed => Interlocked.Read(ref _shed);

    public long GroupsOverflowedCount => Interlocked.Read(ref _groupsOverflowed);

    public void Shed(int count) => Interlocked.Add(ref _shed, count);

    /// <summary>Subscriptions told they may have lost messages when <paramref name="shard"/> came back (spec cluster.md §13).</summary>
    public long LossNoticesOn(int shard) => Interlocked.Read(ref _lossNoticesOn[shard]);

    public void LossNotices(int shard, int subscriptions) => Interlocked.Add(ref _lossNoticesOn[shard], subscriptions);

    /// <summary>Attempts to subscribe on <paramref name="shard"/> that failed (spec cluster.md §13).</summary>
    public long SubscribeFailuresOn(int shard) => Interlocked.Read(ref _subscribeFailuresOn[shard]);

    public void SubscribeFailed(int shard) => Interlocked.Increment(ref _subscribeFailuresOn[shard]);

    public void ReplayedOne() => Interlocked.Increment(ref _replayed);

    public void RepairedOne() => Interlocked.Increment(ref _repaired);

    public void GroupsOverflowed(int groups) => Interlocked.Add(ref _groupsOverflowed, groups);

    public void SentOne() => Interlocked.Increment(ref _sent);

    public void ReceivedOne(int shard) => Interlocked.Increment(ref _receivedOn[shard]);

    public void DroppedQueueFull() => Interlocked.Increment(ref _droppedQueueFull);

    public void DroppedDisconnected() => Interlocked.Increment(ref _droppedDisconnected);

    public void Duplicate() => Interlocked.Increment(ref _duplicates);

    public void InvalidOne() => Interlocked.Increment(ref _invalid);

    public void Reconnected() => _reconnects.Add(1);
}
