using Herald.Broker.Delivery;

namespace Herald.Broker.Routing;

/// <summary>One SUBSCRIBE of one connection or session (spec §4.3). Immutable once routed, but for <see cref="Replies"/>.</summary>
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
    }

    /// <summary>The queue group's name (spec §14), or null for a plain subscription.</summary>
    public string? Queue { get; }

    /// <summary>
    /// Which queue group this member is in: its identity, pattern and name. A group belongs to one identity:
    /// another identity naming the same group is in a group of its own and cannot draw this one's publications
    /// away. Null for a plain subscription.
    /// </summary>
    public string? Group { get; }

    /// <summary>The key of the group <paramref name="queue"/> on <paramref name="pattern"/> of <paramref name="owner"/>.</summary>
    public static string GroupKey(string owner, string pattern, string queue) => $"{owner}\n{pattern}\n{queue}";

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

    private ReplyPermits? _replies;
    private bool _held;
}
