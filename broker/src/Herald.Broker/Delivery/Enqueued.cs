namespace Herald.Broker.Delivery;

/// <summary>What <see cref="IMessageSink.Enqueue"/> did with a frame: a flag test for the router, nothing to allocate.</summary>
[Flags]
internal enum Enqueued : byte
{
    /// <summary>Not queued: dropped (the backlog is over its limits with the <c>Disconnect</c> policy, or closing).</summary>
    Dropped = 0,

    /// <summary>Queued.</summary>
    Queued = 1,

    /// <summary>The sink was idle: the caller must <see cref="IMessageSink.Flush"/> it once its batch is queued.</summary>
    Wake = 2,

    /// <summary>Queued after dropping older messages to make room (the <c>DropOldest</c> policy).</summary>
    Evicted = 4,
}
