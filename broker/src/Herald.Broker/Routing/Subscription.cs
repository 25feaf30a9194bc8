using Herald.Broker.Delivery;

namespace Herald.Broker.Routing;

/// <summary>One SUBSCRIBE of one connection or session (spec §4.3). Immutable once routed, but for <see cref="Replies"/>.</summary>
internal sealed class Subscription
{
    public Subscription(IMessageSink sink, uint sid, string pattern, bool noEcho)
    {
        Sink = sink;
        Sid = sid;
        Pattern = pattern;
        NoEcho = noEcho;
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

    private ReplyPermits? _replies;
    private bool _held;
}
