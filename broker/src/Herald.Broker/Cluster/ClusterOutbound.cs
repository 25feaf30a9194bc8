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
/// <b>Out</b> (spec cluster.md §1, §3): this node's publications to the other nodes. A publication routed on this node
/// is copied once into an envelope (<see cref="ClusterEnvelope"/>) and queued; one writer task stamps each with this
/// node's next sequence number and PUBLISHes it to <c>{prefix}{topic}</c>, in that order, on one connection, so Redis
/// receives a node's publications in sequence order. The queue is bounded in bytes; past it, or while Redis is
/// unreachable, the publication stays local and is counted. A history topic's publication (spec cluster.md §9) goes
/// through a script that positions and keeps it, and waits for Redis in order while it is unreachable. A request
/// nobody here took is answered "no responders" unless another node's subscriptions cover it. Queue groups (spec
/// cluster.md §11) are chosen among every node's members and what was chosen travels in the envelope: no Redis call
/// on a publication's path.
/// </summary>
internal sealed class ClusterOutbound : IPublicationExchange, IDisposable
{
    private readonly ClusterConnection _connection;
    private readonly ClusterOptions _options;
    private readonly byte[] _channelPrefix;
    private readonly TopicRouter _router;
    private readonly ClusterNodes _nodes;
    private readonly ClusterMetrics _metrics;
    private readonly Channel<Outbound> _outbound = Channel.CreateUnbounded<Outbound>(new UnboundedChannelOptions { SingleReader = true });
    private readonly EnvelopeSigner? _signer; // the writer's
    private readonly Queue<Outbound> _parked = new(); // history publications waiting for Redis; the writer's
    private Task _writer = Task.CompletedTask;
    private long _forwardBytes;
    private ulong _sequence; // the writer's
    private volatile bool _running;

    public ClusterOutbound(ClusterConnection connection, TopicRouter router, ClusterNodes nodes, ClusterMetrics metrics)
    {
        _connection = connection;
        _options = connection.Options;
        _channelPrefix = connection.ChannelPrefix;
        _router = router;
        _nodes = nodes;
        _metrics = metrics;
        _signer = _options.Secret is { } secret ? new EnvelopeSigner(secret) : null;
    }

    private ulong NodeId => _connection.NodeId;

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
        _writer = Task.Run(WriteLoopAsync, CancellationToken.None);
    }

    /// <summary>Accepts no more publications (the first step of stopping, before anything else stops).</summary>
    public void Close()
    {
        _running = false;
        _outbound.Writer.TryComplete();
    }

    /// <summary>Waits, a few seconds at most, until the writer has sent what was queued before <see cref="Close"/>.</summary>
    public Task DrainAsync() => Task.WhenAny(_writer, Task.Delay(TimeSpan.FromSeconds(5), CancellationToken.None));

    /// <summary>
    /// Queues <paramref name="command"/> among this node's publications: the writer calls it in order with them, with the
    /// server it publishes through (null while unreachable), and the command sends what it sends before it returns (the
    /// presence scripts, cluster.md §12: a member's join before its publications, its leave after them). False when
    /// stopping.
    /// </summary>
    public bool Run(Action<IServer?> command) => _running && _outbound.Writer.TryWrite(new Outbound([], [], 0, null, null, Command: command));

    /// <summary>Redis is back: the writer sends what waited for it.</summary>
    public void Nudge() => _outbound.Writer.TryWrite(new Outbound([], [], 0, null, null));

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

        long most = ClusterEnvelope.HeaderSize + ClusterEnvelope.TagSize + 1 + (GroupAssignments.Max * GroupAssignments.Size) + 2
            + publish.Envelope.Length + publish.Headers.Length + _channelPrefix.Length + publish.Topic.Length;
        if (!_running || !_connection.IsConnected || Interlocked.Read(ref _forwardBytes) + most > _options.MaxForwardQueueBytes)
        {
            return null;
        }

        return (reused ??= NewAssignments()).Decide();
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
        byte[] envelope = ClusterEnvelope.Write(publish, NodeId, signed: _options.Secret is not null, groups);
        long size = envelope.Length + _channelPrefix.Length + publish.Topic.Length;
        if (!TryReserve(size))
        {
            _metrics.DroppedQueueFull();
            request?.NoResponders(publish.ReplyTo!.Value.ToArray()); // nothing will reach the other nodes
            return true;
        }

        byte[] channel = new byte[_channelPrefix.Length + publish.Topic.Length];
        _channelPrefix.CopyTo(channel, 0);
        publish.Topic.CopyTo(channel.AsSpan(_channelPrefix.Length));
        byte[]? replyTo = request is null ? null : publish.ReplyTo!.Value.ToArray();
        if (!_outbound.Writer.TryWrite(new Outbound(channel, envelope, size, request, replyTo)))
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
        byte[] envelope = ClusterEnvelope.Write(publish, NodeId, signed: _options.Secret is not null, chosen);
        long size = envelope.Length + (2 * (_channelPrefix.Length + publish.Topic.Length + 2)) + _channelPrefix.Length + publish.Topic.Length;
        if (!TryReserve(size))
        {
            _metrics.DroppedQueueFull();
            return false;
        }

        byte[] topic = publish.Topic.ToArray();
        byte[] channel = new byte[_channelPrefix.Length + topic.Length];
        _channelPrefix.CopyTo(channel, 0);
        topic.CopyTo(channel, _channelPrefix.Length);
        var kept = new KeptPublication(ClusterHistory.HashKey(_options.ChannelPrefix, topic), ClusterHistory.StreamKey(_options.ChannelPrefix, topic), history.Rule.MaxMessages, ClusterHistory.TimeToLiveMs(history.Rule), history.Rule.MaxBytes, publisher);
        if (!_outbound.Writer.TryWrite(new Outbound(channel, envelope, size, null, null, kept)))
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

    private async Task WriteLoopAsync()
    {
        ChannelReader<Outbound> outbound = _outbound.Reader;
        while (await outbound.WaitToReadAsync().ConfigureAwait(false))
        {
            while (outbound.TryRead(out Outbound item))
            {
                SendParked();
                if (item.Command is { } command)
                {
                    command(_connection.PublishServer());
                    continue;
                }

                if (item.Envelope.Length == 0)
                {
                    continue; // the nudge of a restored connection: the parked ones went above
                }

                if (item.Kept is not null && (_parked.Count > 0 || _connection.PublishServer() is null))
                {
                    _parked.Enqueue(item); // a history topic's publication waits for Redis, in order, still counted in the queue's bytes
                    continue;
                }

                Interlocked.Add(ref _forwardBytes, -item.Size);
                Send(item);
            }
        }

        while (_parked.TryDequeue(out Outbound left))
        {
            Interlocked.Add(ref _forwardBytes, -left.Size); // stopping: what never reached Redis is gone with the node
            _metrics.DroppedDisconnected();
        }
    }

    /// <summary>
    /// Sends the history publications that waited for Redis (spec cluster.md §9: recoverable, unlike the others, which
    /// are delivered here only), oldest first, while it is reachable. Caller: the writer.
    /// </summary>
    private void SendParked()
    {
        while (_parked.Count > 0 && _connection.PublishServer() is not null)
        {
            Outbound item = _parked.Dequeue();
            Interlocked.Add(ref _forwardBytes, -item.Size);
            Send(item);
        }
    }

    // Caller: the writer, one at a time, in queue order: the sequence numbers go to Redis in order.
    private void Send(Outbound item)
    {
        if (_connection.PublishServer() is not { } server)
        {
            _metrics.DroppedDisconnected();
            item.Request?.NoResponders(item.ReplyTo!);
            return;
        }

        ClusterEnvelope.Stamp(item.Envelope, _sequence = ClusterEnvelope.NextSequence(_sequence, DateTimeOffset.UtcNow.ToUnixTimeMilliseconds()));
        _signer?.Sign(item.Envelope);
        try
        {
            if (item.Kept is { } kept)
            {
                KeptOrigins.Put(_sequence, kept.Publisher);
                server.Execute("EVAL", [ClusterHistory.PublishScript, 2, kept.Hash, kept.Stream, item.Channel, item.Envelope, ClusterSharedHistory.NewEpoch(), kept.MaxMessages, kept.TimeToLiveMs, kept.MaxBytes], CommandFlags.FireAndForget);
                _metrics.SentOne();
                return;
            }

            server.Execute("PUBLISH", [item.Channel, item.Envelope], CommandFlags.FireAndForget);
            _metrics.SentOne();
            if (item.Request is not null)
            {
                _ = AnswerAsync(item); // a request nobody here took: does another node's interest cover it?
            }
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            _metrics.DroppedDisconnected();
            item.Request?.NoResponders(item.ReplyTo!);
        }
    }

    /// <summary>
    /// Tells the requester "no responders" unless another node's Redis subscriptions cover the topic (the covers
    /// every node keeps in Redis before it confirms a subscription, spec cluster.md §4). PUBLISH's receiver count
    /// cannot say it: on Redis Cluster it counts one shard's subscribers only.
    /// </summary>
    private async Task AnswerAsync(Outbound item)
    {
        bool covered;
        try
        {
            covered = await _nodes.OthersCoverAsync(_connection.Database, item.Channel.AsMemory(_channelPrefix.Length)).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            covered = false; // unreachable: the publication did not reach anyone either
        }

        if (!covered)
        {
            item.Request!.NoResponders(item.ReplyTo!);
        }
    }

    private readonly record struct Outbound(byte[] Channel, byte[] Envelope, long Size, INoResponders? Request, byte[]? ReplyTo, KeptPublication? Kept = null, Action<IServer?>? Command = null);

    /// <summary>A history topic's publication (spec cluster.md §9): its keys in Redis, its rule's bounds, and who published it (no-echo).</summary>
    private sealed record KeptPublication(RedisKey Hash, RedisKey Stream, int MaxMessages, long TimeToLiveMs, long MaxBytes, IMessageSink Publisher);

    public void Dispose() => _signer?.Dispose();
}
