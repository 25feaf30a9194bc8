using Herald.Broker.Delivery;

namespace Herald.Broker.Routing;

/// <summary>
/// One SUBSCRIBE of one connection or session (spec §4.3), or, in a cluster, a queue group's members on another
/// node (<see cref="Elsewhere"/>). Immutable once routed, but for <see cref="Replies"/>, <see cref="Held"/> and
/// <see cref="Members"/>.
/// </summary>
internal sealed class Subscription
{
    public Subscription(IMessageSink sink, uint sid, string pattern, bool noEcho, string? queue = null, string? owner = null)
    {
        Sink = sink;
        Sid = sid;
        Pattern = pattern;
        NoEcho = noEcho;
        Queue = queue;
        Group = queue is null ? null : GroupKey(owner ?? "", pattern, queue);
        GroupId = Group is null ? 0 : IdOf(Group);
        _members = 1;
    }

    private Subscription(ulong node, string pattern, string queue, string owner, int members)
        : this(Nowhere.Instance, 0, pattern, noEcho: false, queue, owner)
    {
        Node = node;
        _members = members;
    }

    /// <summary>
    /// Cluster (spec cluster.md §11): <paramref name="members"/> members of the group <paramref name="queue"/> on
    /// <paramref name="pattern"/> of <paramref name="owner"/> on node <paramref name="node"/>, as one entry of this
    /// node's router: it weighs in the choice of a member for this node's publications, and is never delivered to.
    /// </summary>
    public static Subscription Elsewhere(ulong node, string pattern, string queue, string owner, int members) =>
        node == 0 ? throw new ArgumentOutOfRangeException(nameof(node)) : new(node, pattern, queue, owner, members);

    /// <summary>The queue group's name (spec §14), or null for a plain subscription.</summary>
    public string? Queue { get; }

    /// <summary>
    /// Which queue group this member is in: its identity, pattern and name. A group belongs to one identity:
    /// another identity naming the same group is in a group of its own and cannot draw this one's publications
    /// away. Null for a plain subscription.
    /// </summary>
    public string? Group { get; }

    /// <summary>
    /// The key of the group <paramref name="queue"/> on <paramref name="pattern"/> of <paramref name="owner"/>:
    /// <c>pattern queue identity</c>, one space between (neither a pattern nor a queue name holds one, spec §5, §4.3),
    /// as the cluster writes it in Redis (spec cluster.md §11).
    /// </summary>
    public static string GroupKey(string owner, string pattern, string queue) => $"{pattern} {queue} {owner}";

    /// <summary>
    /// The group's id in a cluster envelope (spec cluster.md §3, §11): the first 8 bytes of SHA-256 over its key's UTF-8
    /// bytes, big-endian. 0 for a plain subscription. Made once per subscription, never per publication.
    /// </summary>
    public ulong GroupId { get; }

    /// <summary>The id of the group whose key (<see cref="GroupKey"/>) is <paramref name="group"/>.</summary>
    public static ulong IdOf(string group)
    {
        Span<byte> hash = stackalloc byte[32];
        System.Security.Cryptography.SHA256.HashData(System.Text.Encoding.UTF8.GetBytes(group), hash);
        return System.Buffers.Binary.BinaryPrimitives.ReadUInt64BigEndian(hash);
    }

    /// <summary>The cluster node whose members this entry stands for (<see cref="Elsewhere"/>); 0 for a subscription of this node.</summary>
    public ulong Node { get; }

    /// <summary>How many members of the group an entry <see cref="Elsewhere"/> stands for (its weight in the choice); 1 for a subscription of this node.</summary>
    public int Members
    {
        get => Volatile.Read(ref _members);
        set => Volatile.Write(ref _members, value);
    }

    /// <summary>Where matching messages are queued; also identifies the owner for no-echo.</summary>
    public IMessageSink Sink { get; }

    public uint Sid { get; }

    public string Pattern { get; }

    /// <summary>Skip publications of the subscription's own connection.</summary>
    public bool NoEcho { get; }

    /// <summary>
    /// Where a delivered request's reply permission is recorded (spec §10): the owner's, when its identity
    /// is restricted; null (nothing recorded) when it may publish everywhere. Set by the owner, read by publishers.
    /// </summary>
    public ReplyPermits? Replies
    {
        get => Volatile.Read(ref _replies);
        set => Volatile.Write(ref _replies, value);
    }

    /// <summary>
    /// Routed but not yet delivered to: a resume in a cluster (spec §13) holds the live stream back until what was
    /// missed, read from Redis, is queued; its topic's history lets it go at the right offset. Only a subscription
    /// to a history topic is ever held.
    /// </summary>
    public bool Held
    {
        get => Volatile.Read(ref _held);
        set => Volatile.Write(ref _held, value);
    }

    /// <summary>
    /// The topic's delta state when this subscription asked for deltas and got them (spec §11.2: a topic without
    /// wildcards, no queue group, the capability granted); null: full messages. Ended with the subscription (<see cref="EndDelta"/>).
    /// </summary>
    public Compression.TopicDelta? Delta => Volatile.Read(ref _delta);

    /// <summary>Starts the delta stream: the sink tracks what the sid holds before any delta can reach it.</summary>
    public void StartDelta(Compression.TopicDelta topic)
    {
        Sink.TrackDelta(Sid, on: true);
        Volatile.Write(ref _delta, topic);
    }

    /// <summary>Ends the delta stream, once, when the subscription leaves the router.</summary>
    public void EndDelta()
    {
        if (Interlocked.Exchange(ref _delta, null) is { } topic)
        {
            topic.Leave();
            Sink.TrackDelta(Sid, on: false);
        }
    }

    private Compression.TopicDelta? _delta;
    private ReplyPermits? _replies;
    private bool _held;
    private int _members;

    /// <summary>The sink of an entry <see cref="Elsewhere"/>: the router never delivers to one.</summary>
    private sealed class Nowhere : IMessageSink
    {
        public static readonly Nowhere Instance = new();

        public bool AcceptsZstd => false;

        public bool AcceptsHeaders => false;

        public Enqueued Enqueue(MessageBuffer frame, uint sid) => throw new InvalidOperationException("Members on another node are chosen, never delivered to here.");

        public void Flush()
        {
        }

        public void ScheduleFlush()
        {
        }
    }
}
