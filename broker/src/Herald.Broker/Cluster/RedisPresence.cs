using System.Globalization;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Protocol;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster's presence (spec §15.5, cluster.md §12): every node's members of a topic in Redis
/// (<see cref="PresenceScripts"/>), on the topic's shard (§13, <see cref="ClusterShards.For(string)"/>), so every node
/// answers the same members and occupancy and no one Redis holds every topic's.
/// </summary>
/// <remarks>
/// A join or leave is one script on the topic's shard, queued with this node's publications to that shard
/// (<see cref="ClusterOutbound.Run"/>) and so sent on the same connection in the same order: the script checks the cluster-wide <see cref="PresenceOptions.MaxMembersPerTopic"/>,
/// changes the tables, counts the occupancy and PUBLISHes the event on the topic's channel, where the other nodes read
/// it in order with this node's publications (<see cref="Receive"/>); it returns the same event, which this node
/// delivers to its own events subscribers before the join completes (the session reads nothing more meanwhile, so the
/// member's next publication follows its join everywhere). A join the script refuses completes with why; the session
/// tells the client and ends that subscription's join. <see cref="PresenceOptions.MaxPerIdentity"/> and
/// <see cref="PresenceOptions.MaxEntries"/> bound this node's members (its memory and its share of Redis), checked here
/// before anything is sent. Each shard keeps its own table of this node's topics (<c>pn</c>) and of the live nodes
/// (<c>pnodes</c>): at every heartbeat of a shard, each shard on its own timer (<see cref="RunHeartbeatsAsync"/>), the
/// node renews its keys' time to live there and removes there the members of a node silent on that shard for three
/// heartbeats (one script per dead node, which publishes their leaves: the first node to run it does); a shard that
/// comes back, or lost the table, gets this node's members of its topics again (<see cref="Reconcile"/>). A shard unreachable: a join or a read of one of its topics
/// raises <see cref="ClusterUnavailableException"/>; the other shards' topics are served as before.
/// Threading: the tables take <c>_gate</c>; flushes are scheduled after it is released.
/// </remarks>
internal sealed class RedisPresence : IPresence
{
    private const int SweepBudget = 1_000;

    private readonly ClusterShards _shards;
    private readonly ClusterOutbound _out;
    private readonly PresenceOptions _options;
    private readonly string _node;
    private readonly long _timeToLiveMs;
    private readonly Lock _gate = new();
    private readonly Dictionary<(string Topic, string Client), Joined> _members = [];
    private readonly Dictionary<string, int> _topics = new(StringComparer.Ordinal);
    private readonly Dictionary<string, int> _perQuota = new(StringComparer.Ordinal);
    private readonly Dictionary<string, List<Watcher>> _watchers = new(StringComparer.Ordinal);
    private long _watcherCount;
    private readonly long[] _confirmed; // per shard, members whose join it confirmed: the heartbeat's test of a lost table counts only these
    private long _events;
    private long _suppressed;
    private long _swept;

    public RedisPresence(ClusterShards shards, ClusterOutbound outbound, PresenceOptions options)
    {
        _shards = shards;
        _out = outbound;
        _options = options;
        _node = shards.NodeId.ToString("x16", CultureInfo.InvariantCulture);
        _confirmed = new long[shards.Count];
        _timeToLiveMs = (long)(shards.First.Options.HeartbeatInterval.TotalMilliseconds * 6); // outlives a dead node's detection (3), so its leaves are still sent
    }

    public bool Enabled => _options.Enabled;

    public PresenceOptions Options => _options;

    /// <summary>This node's id: a client id is unique in the cluster, and one node's members of a topic are one range in Redis.</summary>
    public string ClientPrefix => _node;

    /// <summary>Members of dead nodes this node removed from Redis (their leaves published).</summary>
    public long Swept => Interlocked.Read(ref _swept);

    public PresenceCounts Counts
    {
        get
        {
            lock (_gate)
            {
                return new PresenceCounts(_members.Count, _topics.Count, _watcherCount, _events, _suppressed);
            }
        }
    }

    public ValueTask<string?> JoinAsync(string topic, PresenceMember member)
    {
        Joined entry;
        lock (_gate)
        {
            if (_members.TryGetValue((topic, member.Client), out Joined? present))
            {
                present.Joins++;
                return new(present.Outcome.Task); // one member per connection: its first join's outcome is every one's
            }

            _perQuota.TryGetValue(member.Quota, out int held);
            if (held >= _options.MaxPerIdentity)
            {
                return new($"'{member.Quota}' is present {held} times on this node, its maximum (Herald:Presence:MaxPerIdentity).");
            }

            if (_members.Count >= _options.MaxEntries)
            {
                return new($"This node holds its maximum of {_options.MaxEntries} presence entries (Herald:Presence:MaxEntries).");
            }

            ClusterConnection shard = _shards.For(topic);
            if (!shard.IsConnected)
            {
                throw new ClusterUnavailableException($"Redis shard {shard.Index} (of topic '{topic}') is unreachable.");
            }

            entry = new Joined(topic, member, shard);
            _members.Add((topic, member.Client), entry);
            _perQuota[member.Quota] = held + 1;
            _topics[topic] = _topics.GetValueOrDefault(topic) + 1;
        }

        if (!_out.Run(entry.Shard, server => JoinIn(server, entry)))
        {
            Drop(entry);
            entry.Outcome.TrySetException(new ClusterUnavailableException("The node is stopping."));
        }

        return new(entry.Outcome.Task);
    }

    /// <summary>The join script, sent by the writer in order with this node's publications. Caller: the writer.</summary>
    private void JoinIn(IServer? server, Joined entry)
    {
        try
        {
            if (server is null)
            {
                Drop(entry);
                entry.Outcome.TrySetException(new ClusterUnavailableException("Redis is unreachable."));
                return;
            }

            _ = AfterJoinAsync(server.ExecuteAsync("EVAL", JoinArguments(entry.Shard.Prefix, entry.Topic, entry.Member)), entry);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            Drop(entry);
            entry.Outcome.TrySetException(new ClusterUnavailableException(e.Message, e));
        }
    }

    private object[] JoinArguments(string prefix, string topic, PresenceMember member) =>
    [
        PresenceScripts.Join, 5, PresenceScripts.Members(prefix, topic), PresenceScripts.Entries(prefix, topic), PresenceScripts.Identities(prefix, topic),
        PresenceScripts.NodeTopics(prefix, _node), PresenceScripts.Nodes(prefix),
        prefix, topic, member.Client, PresenceScripts.Entry(member.Identity, member.Info), _options.MaxMembersPerTopic, _timeToLiveMs,
        _options.MaxEventsMembers, _node, "0",
    ];

    private async Task AfterJoinAsync(Task<RedisResult> call, Joined entry)
    {
        try
        {
            var result = (RedisResult[])(await call.ConfigureAwait(false))!;
            if ((long)result[0] == 0)
            {
                Drop(entry);
                entry.Outcome.TrySetResult($"Topic '{entry.Topic}' holds its maximum of {_options.MaxMembersPerTopic} members in the cluster (Herald:Presence:MaxMembersPerTopic).");
                return;
            }

            lock (_gate)
            {
                if (_members.TryGetValue((entry.Topic, entry.Member.Client), out Joined? held) && ReferenceEquals(held, entry))
                {
                    entry.Confirmed = true;
                    _confirmed[entry.Shard.Index]++;
                }
            }

            if ((byte[]?)result[1] is { Length: > 0 } joined)
            {
                DeliverHere(joined, entry.Member.Sink); // this node's events subscribers, before the member goes on
            }

            entry.Outcome.TrySetResult(null);
        }
        catch (Exception e)
        {
            // Any failure (Redis's, or an answer that is not the script's) is "unavailable": the join must complete, since
            // its session reads nothing more from the client until it does.
            Drop(entry);
            entry.Outcome.TrySetException(new ClusterUnavailableException(e.Message, e));
        }
    }

    /// <summary>A join that did not happen: its entry here goes (if it is still this one).</summary>
    private void Drop(Joined entry)
    {
        lock (_gate)
        {
            if (_members.TryGetValue((entry.Topic, entry.Member.Client), out Joined? held) && ReferenceEquals(held, entry))
            {
                Forget(entry);
            }
        }
    }

    /// <summary>Removes <paramref name="entry"/> from this node's tables. Caller holds <c>_gate</c>.</summary>
    private void Forget(Joined entry)
    {
        _members.Remove((entry.Topic, entry.Member.Client));
        if (entry.Confirmed)
        {
            _confirmed[entry.Shard.Index]--;
        }

        if (--_perQuota[entry.Member.Quota] == 0)
        {
            _perQuota.Remove(entry.Member.Quota);
        }

        if (--_topics[entry.Topic] == 0)
        {
            _topics.Remove(entry.Topic);
        }
    }

    public void Leave(string topic, PresenceMember member, PresenceReason reason)
    {
        Joined? entry;
        lock (_gate)
        {
            if (!_members.TryGetValue((topic, member.Client), out entry) || --entry.Joins > 0)
            {
                return;
            }

            Forget(entry);
        }

        // After the member's publications (queued before), so its leave follows them on every node. The shard unreachable:
        // the entry stays there until this node writes its table again (Reconcile) or it expires.
        string prefix = entry.Shard.Prefix;
        _out.Run(entry.Shard, server =>
        {
            try
            {
                if (server is not null)
                {
                    _ = AfterLeaveAsync(server.ExecuteAsync("EVAL",
                    [
                        PresenceScripts.Leave, 4, PresenceScripts.Members(prefix, topic), PresenceScripts.Entries(prefix, topic), PresenceScripts.Identities(prefix, topic),
                        PresenceScripts.NodeTopics(prefix, _node), prefix, topic, member.Client, PresenceScripts.ReasonCode(reason), _options.MaxEventsMembers, _node,
                    ]), member.Sink);
                }
            }
            catch (Exception e) when (e is RedisException or TimeoutException)
            {
                // Unreachable: as above.
            }
        });
    }

    private async Task AfterLeaveAsync(Task<RedisResult> call, IMessageSink member)
    {
        try
        {
            if ((byte[]?)(await call.ConfigureAwait(false)) is { Length: > 0 } left)
            {
                DeliverHere(left, member);
            }
        }
        catch (Exception e) when (e is RedisException or TimeoutException or InvalidCastException)
        {
            // Unreachable: the entry is written again or expires (Leave).
        }
    }

    public void Watch(string topic, IMessageSink sink, uint sid, bool noEcho)
    {
        lock (_gate)
        {
            if (!_watchers.TryGetValue(topic, out List<Watcher>? watchers))
            {
                _watchers.Add(topic, watchers = []);
            }

            watchers.Add(new Watcher(sink, sid, noEcho));
            _watcherCount++;
        }
    }

    public void Unwatch(string topic, IMessageSink sink, uint sid)
    {
        lock (_gate)
        {
            if (_watchers.TryGetValue(topic, out List<Watcher>? watchers)
                && watchers.FindIndex(w => ReferenceEquals(w.Sink, sink) && w.Sid == sid) is var at and >= 0)
            {
                watchers.RemoveAt(at);
                _watcherCount--;
                if (watchers.Count == 0)
                {
                    _watchers.Remove(topic);
                }
            }
        }
    }

    public async ValueTask<PresencePage> ReadAsync(string topic, int limit, string? cursor)
    {
        ClusterConnection shard = _shards.For(topic);
        IServer server = shard.PublishServer() ?? throw new ClusterUnavailableException($"Redis shard {shard.Index} (of topic '{topic}') is unreachable.");
        string prefix = shard.Prefix;
        RedisResult[] result;
        try
        {
            result = (RedisResult[])(await server.ExecuteAsync("EVAL",
            [
                PresenceScripts.Read, 3, PresenceScripts.Members(prefix, topic), PresenceScripts.Entries(prefix, topic), PresenceScripts.Identities(prefix, topic),
                cursor is null ? "-" : "(" + cursor, Math.Max(0, limit),
            ]).ConfigureAwait(false))!;
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            throw new ClusterUnavailableException(e.Message, e);
        }

        var occupancy = new PresenceOccupancy((long)result[0], (long)result[1]);
        var clients = (RedisResult[])result[2]!;
        var values = (RedisResult[])result[3]!;
        var entries = new List<PresenceEntry>(clients.Length);
        for (int i = 0; i < clients.Length && i < values.Length; i++)
        {
            if (ParseEntry((byte[]?)values[i]) is { } entry)
            {
                entries.Add(new PresenceEntry((string)clients[i]!, entry.Identity, entry.Info));
            }
        }

        return new PresencePage(occupancy, entries, (long)result[4] == 1 && clients.Length > 0 ? (string)clients[^1]! : null);
    }

    /// <summary>A member's value in Redis (<see cref="PresenceScripts.Entry"/>) as its identity and info; null when it is not one.</summary>
    private static (string Identity, string? Info)? ParseEntry(byte[]? value)
    {
        ReadOnlySpan<byte> span = value;
        int colon = span.IndexOf((byte)':');
        if (colon <= 0 || !int.TryParse(span[..colon], NumberStyles.None, CultureInfo.InvariantCulture, out int length) || span.Length < colon + 2 + length)
        {
            return null;
        }

        ReadOnlySpan<byte> rest = span[(colon + 1 + length)..];
        return (System.Text.Encoding.UTF8.GetString(span.Slice(colon + 1, length)), rest[0] == (byte)'+' ? System.Text.Encoding.UTF8.GetString(rest[1..]) : null);
    }

    /// <summary>An event another node's script published, read from this node's Redis subscription: to this node's events subscribers. Caller: the subscription's reader.</summary>
    public void Receive(ReadOnlySpan<byte> bytes, List<IMessageSink> toFlush)
    {
        if (PresenceScripts.TryRead(bytes, out PresenceEvent read) && read.Origin != _node)
        {
            Deliver(read, member: null, toFlush);
        }
    }

    /// <summary>An event this node's own script returned: to this node's events subscribers now (the other nodes get it through Redis).</summary>
    private void DeliverHere(byte[] bytes, IMessageSink member)
    {
        if (PresenceScripts.TryRead(bytes, out PresenceEvent read))
        {
            var wake = new List<IMessageSink>();
            Deliver(read, member, wake);
            foreach (IMessageSink sink in wake)
            {
                sink.ScheduleFlush();
            }
        }
    }

    /// <summary>Encodes an event once (spec §15.2) and queues it by reference to the topic's events subscribers here.</summary>
    private void Deliver(in PresenceEvent read, IMessageSink? member, List<IMessageSink> wake)
    {
        lock (_gate)
        {
            if (!_watchers.TryGetValue(read.Topic, out List<Watcher>? watchers))
            {
                return;
            }

            if (read.State is 'q' or 's' or 'r')
            {
                _suppressed += watchers.Count;
                if (read.State == 'q')
                {
                    return;
                }
            }

            int receivers = 0;
            foreach (Watcher w in watchers)
            {
                receivers += w.NoEcho && member is not null && ReferenceEquals(w.Sink, member) ? 0 : 1;
            }

            if (receivers == 0)
            {
                return;
            }

            string kind = read.State switch { 'j' => "join", 'l' => "leave", 's' => "suppressed", _ => "resumed" };
            bool who = read.State is 'j' or 'l';
            MessageBuffer frame = LocalPresence.Encode(read.Topic, kind, who ? read.Client : null, who ? read.Identity : null, read.State == 'l' ? LocalPresence.ReasonText(ReasonOf(read.Reason)) : null, read.State == 'j' ? read.Info : null, read.Members);
            frame.Retain(receivers - 1);
            foreach (Watcher w in watchers)
            {
                if (w.NoEcho && member is not null && ReferenceEquals(w.Sink, member))
                {
                    continue;
                }

                if ((w.Sink.Enqueue(frame, w.Sid) & Enqueued.Wake) != 0)
                {
                    wake.Add(w.Sink);
                }
            }

            _events += receivers;
        }
    }

    private static PresenceReason ReasonOf(char code) => code switch
    {
        'u' => PresenceReason.Unsubscribe,
        'd' => PresenceReason.Disconnect,
        'e' => PresenceReason.Expired,
        'r' => PresenceReason.Revoked,
        _ => PresenceReason.Node,
    };

    /// <summary>
    /// The heartbeats, until <paramref name="stop"/>: one per shard, each on its own timer of <c>HeartbeatInterval</c>
    /// (<see cref="BeatAsync"/>), so a shard that fails or stalls (a Redis that answers nothing until each command times
    /// out) delays no other shard's beat, and no node is taken for dead on a shard it still reaches.
    /// </summary>
    public Task RunHeartbeatsAsync(CancellationToken stop) =>
        Task.WhenAll(_shards.All.Select(shard => Task.Run(() => HeartbeatLoopAsync(shard, stop), CancellationToken.None)));

    private async Task HeartbeatLoopAsync(ClusterConnection shard, CancellationToken stop)
    {
        using var timer = new PeriodicTimer(shard.Options.HeartbeatInterval);
        try
        {
            do
            {
                try
                {
                    await BeatAsync(shard).ConfigureAwait(false);
                }
                catch (Exception e) when (e is RedisException or TimeoutException)
                {
                    // This shard is unreachable now: the next beat tries again (the loss itself is logged by the connection events).
                }
            }
            while (await timer.WaitForNextTickAsync(stop).ConfigureAwait(false));
        }
        catch (OperationCanceledException)
        {
            // Stopping.
        }
    }

    /// <summary>
    /// One heartbeat on <paramref name="shard"/>, when it is reachable: this node is alive there and its keys there live
    /// on (a shard that lost its table gets it again), then the members of nodes silent there for three heartbeats leave,
    /// a bounded number per script. Throws what Redis throws.
    /// </summary>
    private async Task BeatAsync(ClusterConnection shard)
    {
        if (shard.PublishServer() is not { } server)
        {
            return;
        }

        long held;
        lock (_gate)
        {
            held = _confirmed[shard.Index]; // a join still on its way is not missing from Redis: no needless rewrite
        }

        string prefix = shard.Prefix;
        RedisResult lost = await server.ExecuteAsync("EVAL", [PresenceScripts.Beat, 2, PresenceScripts.Nodes(prefix), PresenceScripts.NodeTopics(prefix, _node), prefix, _node, _timeToLiveMs, held]).ConfigureAwait(false);
        if ((long)lost == 1)
        {
            Reconcile(shard);
        }

        long silence = (long)(shard.Options.HeartbeatInterval.TotalMilliseconds * 3); // dead as in the member list (cluster.md §5)
        for (int i = 0; i < 64; i++)
        {
            var swept = (RedisResult[])(await server.ExecuteAsync("EVAL", [PresenceScripts.Sweep, 1, PresenceScripts.Nodes(prefix), prefix, silence, _options.MaxEventsMembers, SweepBudget, "", "0"]).ConfigureAwait(false))!;
            Interlocked.Add(ref _swept, (long)swept[0]);
            if ((long)swept[1] == 1 && (long)swept[0] == 0)
            {
                break; // no node is dead
            }
        }
    }

    /// <summary>
    /// Writes this node's table of <paramref name="shard"/> (its members of the topics that live there) into that shard
    /// again, after it came back or lost it, in one script (<see cref="PresenceScripts.Restore"/>): what the shard holds of
    /// this node and it no longer has goes (quietly), every member here of its topics is there afterwards (quietly: they
    /// never left). Queued with the node's publications to that shard, so joins and leaves before it are there first and
    /// the ones after it follow.
    /// </summary>
    public void Reconcile(ClusterConnection shard) => _out.Run(shard, server =>
    {
        if (server is null)
        {
            return;
        }

        string prefix = shard.Prefix;
        var arguments = new List<object> { PresenceScripts.Restore, 2, PresenceScripts.Nodes(prefix), PresenceScripts.NodeTopics(prefix, _node), prefix, _node, _timeToLiveMs, _options.MaxEventsMembers };
        lock (_gate)
        {
            foreach (Joined entry in _members.Values)
            {
                if (ReferenceEquals(entry.Shard, shard))
                {
                    arguments.Add(entry.Topic);
                    arguments.Add(entry.Member.Client);
                    arguments.Add(PresenceScripts.Entry(entry.Member.Identity, entry.Member.Info));
                }
            }
        }

        try
        {
            Observe(server.ExecuteAsync("EVAL", [.. arguments])); // one script: no reader sees the table half-written
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Unreachable again: the next restore or heartbeat tries again.
        }
    });

    private static void Observe(Task task) => task.ContinueWith(static t => _ = t.Exception, CancellationToken.None, TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);

    /// <summary>At a graceful stop: this node is no longer counted alive on any shard (its members left with its sessions).</summary>
    public Task LeaveAsync() => Task.WhenAll(_shards.All.Where(shard => shard.IsConnected).Select(shard => shard.Database.SortedSetRemoveAsync(PresenceScripts.Nodes(shard.Prefix), _node)));

    /// <summary>One connection present on a topic from this node, with its joined subscriptions and the outcome of its join in Redis.</summary>
    private sealed class Joined(string topic, PresenceMember member, ClusterConnection shard)
    {
        public string Topic { get; } = topic;

        public PresenceMember Member { get; } = member;

        /// <summary>The shard the topic lives on, where this member is kept.</summary>
        public ClusterConnection Shard { get; } = shard;

        public int Joins { get; set; } = 1;

        /// <summary>Redis confirmed the join. Guarded by <c>_gate</c>.</summary>
        public bool Confirmed { get; set; }

        public TaskCompletionSource<string?> Outcome { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
    }

    private readonly record struct Watcher(IMessageSink Sink, uint Sid, bool NoEcho);
}
