using System.Buffers;
using System.Threading.Channels;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Protocol;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// <b>Out</b> (spec cluster.md §1, §3, §13): this node's publications to the other nodes. A publication routed on this node
/// is copied once into an envelope (<see cref="ClusterEnvelope"/>) and queued for its topic's shard
/// (<see cref="ClusterShards.For(ReadOnlySpan{byte})"/>); each shard has one writer task (<see cref="ShardWriter"/>) that
/// stamps each with this node's next sequence number and PUBLISHes it to <c>{prefix}{topic}</c> on that shard, in that
/// order, on one connection, so each shard receives a node's publications in sequence order. One counter numbers them
/// all (the origin's sequence, §3): each shard's stream of them rises. The queues are bounded together in bytes; past
/// it, or while a topic's shard is unreachable, the publication stays local and is counted (for that shard). A history
/// topic's publication (spec cluster.md §9) goes through a script that positions and keeps it, and waits for its shard in
/// order while it is unreachable. A request nobody here took is answered "no responders" unless another node's
/// subscriptions on the topic's shard cover it. Queue groups (spec cluster.md §11) are chosen among every node's members
/// and what was chosen travels in the envelope: no Redis call on a publication's path.
/// </summary>
internal sealed partial class ClusterOutbound : IPublicationExchange, IDisposable
{
    private readonly ClusterShards _shards;
    private readonly ClusterOptions _options;
    private readonly TopicRouter _router;
    private readonly ClusterNodes _nodes;
    private readonly ClusterMetrics _metrics;
    private readonly ShardWriter[] _writers;
    private long _forwardBytes;
    private ulong _sequence; // the last stamped, by any writer (Stamp)
    private volatile bool _running;

    public ClusterOutbound(ClusterShards shards, TopicRouter router, ClusterNodes nodes, ClusterMetrics metrics)
    {
        _shards = shards;
        _options = shards.First.Options;
        _router = router;
        _nodes = nodes;
        _metrics = metrics;
        _writers = [.. shards.All.Select(shard => new ShardWriter(this, shard))];
    }

    private ulong NodeId => _shards.NodeId;


    /// <summary>
    /// Who published this node's history publications in flight (by sequence number), for their no-echo subscriptions when they come back.
    /// </summary>
    public KeptOrigins KeptOrigins { get; } = new();

    public long ForwardQueueBytes => Interlocked.Read(ref _forwardBytes);

    /// <summary>Which node delivers each queue group of a publication (spec cluster.md §11), for one publisher or reader.</summary>
    public GroupAssignments NewAssignments() => new(NodeId);

    /// <summary>Starts the writer: publications are accepted from now on.</summary>
    public void Start()
    {
        _running = true;
        foreach (ShardWriter writer in _writers)
        {
            writer.Start();
        }
    }

    /// <summary>Accepts no more publications (the first step of stopping, before anything else stops).</summary>
    public void Close()
    {
        _running = false;
        foreach (ShardWriter writer in _writers)
        {
            writer.Close();
        }
    }

    /// <summary>Waits, a few seconds at most, until the writer has sent what was queued before <see cref="Close"/>.</summary>
    public Task DrainAsync() => Task.WhenAny(Task.WhenAll(_writers.Select(writer => writer.Done)), Task.Delay(TimeSpan.FromSeconds(5), CancellationToken.None));

    /// <summary>
    /// Queues <paramref name="command"/> among this node's publications on <paramref name="shard"/>: that shard's writer
    /// calls it in order with them, with the server it publishes through there (null while unreachable), and the
    /// command sends what it sends before it returns (the presence scripts, cluster.md §12: a member's join before its
    /// publications on the topic's shard, its leave after them). False when stopping.
    /// </summary>
    public bool Run(ClusterConnection shard, Action<IServer?> command) => _running && _writers[shard.Index].TryWrite(new Outbound([], [], 0, null, null, Command: command));

    /// <summary><paramref name="shard"/> is back: its writer sends what waited for it.</summary>
    public void Nudge(ClusterConnection shard) => _writers[shard.Index].TryWrite(new Outbound([], [], 0, null, null));

    /// <summary>Publications sent to <paramref name="shard"/> (monitoring, <c>/varz</c> <c>cluster.shards</c>).</summary>
    public long SentTo(int shard) => _writers[shard].Sent;

    /// <summary>Publications on <paramref name="shard"/>'s topics that stayed local: it was unreachable, or the queue full (monitoring).</summary>
    public long DroppedFor(int shard) => _writers[shard].Dropped;

    /// <summary>
    /// What a publisher on this node (a session) hands the router, then <see cref="Forward"/>, for
    /// <paramref name="publish"/>: <paramref name="reused"/> (made at the first) to choose each queue group among the
    /// cluster's members. Null, each group chosen among this node's members as on one node, when no group has members
    /// on another node (one test: what a node whose groups are all its own pays), or when the publication cannot reach
    /// the other nodes now (Redis unreachable, no room in the forward queue), so that no group is given to a node it
    /// will not reach.
    /// </summary>
    public GroupAssignments? Assigning(ref GroupAssignments? reused, in PublishFrame publish)
    {
        if (!_router.HasMembersElsewhere)
        {
            return null;
        }

        ClusterConnection shard = _shards.For(publish.Topic);
        long most = ClusterEnvelope.HeaderSize + ClusterEnvelope.TagSize + 1 + (GroupAssignments.Max * GroupAssignments.Size) + 2
            + publish.Envelope.Length + publish.Headers.Length + shard.ChannelPrefix.Length + publish.Topic.Length;
        if (!_running || !shard.IsConnected || Interlocked.Read(ref _forwardBytes) + most > _options.MaxForwardQueueBytes)
        {
            return null;
        }

        return (reused ??= NewAssignments()).Decide(shard.Index); // Forward takes the shard from there: the topic is hashed once
    }

    /// <summary>
    /// Sends a publication routed on this node to the other nodes (one copy into the queue; the caller's bytes
    /// are not kept). With <paramref name="request"/>, a request that reached nobody here: it is told if no
    /// other node received it either. <paramref name="groups"/>: the queue groups the router gave to other nodes
    /// while routing it here (spec cluster.md §11), carried in the envelope.
    /// </summary>
    /// <returns>True: the cluster answers <paramref name="request"/> (or drops it with the publication while stopping).</returns>
    public bool Forward(in PublishFrame publish, INoResponders? request, GroupAssignments? groups)
    {
        if (!_running)
        {
            return true;
        }

        CountOverflow(groups);
        ShardWriter writer = _writers[groups is { Deciding: true, Shard: >= 0 } ? groups.Shard : _shards.For(publish.Topic).Index];
        byte[] prefix = writer.Shard.ChannelPrefix;
        byte[] envelope = ClusterEnvelope.Write(publish, NodeId, signed: _options.Secret is not null, groups);
        long size = envelope.Length + prefix.Length + publish.Topic.Length;
        if (!TryReserve(size))
        {
            _metrics.DroppedQueueFull();
            writer.CountDropped();
            request?.NoResponders(publish.ReplyTo!.Value.ToArray()); // nothing will reach the other nodes
            return true;
        }

        byte[] channel = new byte[prefix.Length + publish.Topic.Length];
        prefix.CopyTo(channel, 0);
        publish.Topic.CopyTo(channel.AsSpan(prefix.Length));
        byte[]? replyTo = request is null ? null : publish.ReplyTo!.Value.ToArray();
        if (!writer.TryWrite(new Outbound(channel, envelope, size, request, replyTo)))
        {
            Interlocked.Add(ref _forwardBytes, -size); // stopping
        }

        return true;
    }

    /// <summary>
    /// A publication on a topic that keeps a history, in a cluster (spec cluster.md §9): not routed here first, but
    /// sent to Redis, whose script gives it its offset, keeps it in the topic's stream and publishes it to every
    /// node interested, this one included, so that every node delivers the topic in the same order with the same
    /// positions. <paramref name="publisher"/> is remembered (by sequence number) for its no-echo subscriptions.
    /// False when it could not be queued (the queue is full, or the node is stopping): nobody gets it; counted.
    /// </summary>
    /// <param name="groups">Where the queue groups are chosen (spec cluster.md §11), made at the first: a group chosen here is delivered here when the publication comes back.</param>
    public bool ForwardKept(in PublishFrame publish, TopicHistory history, IMessageSink publisher, ref GroupAssignments? groups)
    {
        if (!_running)
        {
            return false;
        }

        GroupAssignments chosen = groups ??= NewAssignments();

        _router.ChooseGroups(publish.Topic, publisher, chosen);
        CountOverflow(chosen);
        ShardWriter writer = _writers[_shards.For(publish.Topic).Index];
        byte[] prefix = writer.Shard.ChannelPrefix;
        byte[] envelope = ClusterEnvelope.Write(publish, NodeId, signed: _options.Secret is not null, chosen);
        long size = envelope.Length + (2 * (prefix.Length + publish.Topic.Length + 2)) + prefix.Length + publish.Topic.Length;
        if (!TryReserve(size))
        {
            _metrics.DroppedQueueFull();
            writer.CountDropped();
            return false;
        }

        byte[] topic = publish.Topic.ToArray();
        byte[] channel = new byte[prefix.Length + topic.Length];
        prefix.CopyTo(channel, 0);
        topic.CopyTo(channel, prefix.Length);
        var kept = new KeptPublication(ClusterHistory.HashKey(writer.Shard.Prefix, topic), ClusterHistory.StreamKey(writer.Shard.Prefix, topic), history.Rule.MaxMessages, ClusterHistory.TimeToLiveMs(history.Rule), history.Rule.MaxBytes, publisher);
        if (!writer.TryWrite(new Outbound(channel, envelope, size, null, null, kept)))
        {
            Interlocked.Add(ref _forwardBytes, -size); // stopping
            return false;
        }

        return true;
    }

    /// <summary>Counts the queue groups past what one envelope carries (spec cluster.md §11): chosen here instead.</summary>
    private void CountOverflow(GroupAssignments? groups)
    {
        if (groups is { Overflowed: > 0 } over)
        {
            _metrics.GroupsOverflowed(over.Overflowed);
        }
    }

    /// <summary>
    /// Counts <paramref name="size"/> bytes into the forward queue unless that would pass the limit: the count
    /// never goes over it, not even for a moment (an add-then-undo would show a reader more than is held).
    /// </summary>
    private bool TryReserve(long size)
    {
        long limit = _options.MaxForwardQueueBytes;
        long held = Interlocked.Read(ref _forwardBytes);
        while (held + size <= limit)
        {
            long seen = Interlocked.CompareExchange(ref _forwardBytes, held + size, held);
            if (seen == held)
            {
                return true;
            }

            held = seen;
        }

        return false;
    }

    /// <summary>
    /// This node's next sequence number (spec cluster.md §3), for whichever shard's writer sends next: one counter for the
    /// node, so a writer's numbers rise (each shard receives them in order) and no two envelopes share one.
    /// </summary>
    private ulong NextSequence()
    {
        long now = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds();
        ulong last = Volatile.Read(ref _sequence);
        while (true)
        {
            ulong next = ClusterEnvelope.NextSequence(last, now);
            ulong seen = Interlocked.CompareExchange(ref _sequence, next, last);
            if (seen == last)
            {
                return next;
            }

            last = seen;
        }
    }

    /// <summary>A queued item left the queue (sent, dropped or parked no longer): its bytes are free.</summary>
    private void Release(long size) => Interlocked.Add(ref _forwardBytes, -size);

    private readonly record struct Outbound(byte[] Channel, byte[] Envelope, long Size, INoResponders? Request, byte[]? ReplyTo, KeptPublication? Kept = null, Action<IServer?>? Command = null);

    /// <summary>A history topic's publication (spec cluster.md §9): its keys in Redis, its rule's bounds, and who published it (no-echo).</summary>
    private sealed record KeptPublication(RedisKey Hash, RedisKey Stream, int MaxMessages, long TimeToLiveMs, long MaxBytes, IMessageSink Publisher);

    public void Dispose()
    {
        foreach (ShardWriter writer in _writers)
        {
            writer.Dispose();
        }
    }
}
