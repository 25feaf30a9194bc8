namespace Herald.Broker.Delivery;

/// <summary>
/// Where the router delivers: a subscriber's backlog (a connection's or a long-poll session's
/// <c>SubscriberBacklog</c>, whatever the transport). Every transport receives the same encoded MESSAGE frames.
/// </summary>
internal interface IMessageSink
{
    /// <summary>Whether this subscriber negotiated Zstd and may be sent compressed MESSAGE frames.</summary>
    bool AcceptsZstd { get; }

    /// <summary>Whether this subscriber negotiated headers and may be sent MESSAGE frames with a header block (spec §4.9).</summary>
    bool AcceptsHeaders { get; }

    /// <summary>
    /// Queues a MESSAGE frame for subscription <paramref name="sid"/>, taking over one reference to
    /// <paramref name="frame"/> (the sink releases it once written or dropped). The result has
    /// <see cref="Enqueued.Wake"/> when the sink was idle: the caller must then call <see cref="Flush"/> once it
    /// has queued the rest of its batch (flushes are coalesced per read batch, never per message).
    /// </summary>
    Enqueued Enqueue(MessageBuffer frame, uint sid);

    /// <summary>
    /// Starts writing what is queued, on the calling thread until the write would wait. Called once per
    /// batch by whoever got <c>true</c> from <see cref="Enqueue"/>.
    /// </summary>
    void Flush();

    /// <summary>As <see cref="Flush"/>, but on the thread pool, so a fan-out spreads over the cores.</summary>
    void ScheduleFlush();

    /// <summary>
    /// Tells the subscriber that <paramref name="count"/> messages for it were lost before they reached it (a node's
    /// queue from the cluster shed them): reported as the messages <c>DropOldest</c> drops are. As <see cref="Enqueue"/>,
    /// <see cref="Enqueued.Wake"/> asks the caller to <see cref="Flush"/>. A sink that reports no losses (a test's) takes none.
    /// </summary>
    Enqueued Lost(long count) => Enqueued.Dropped;

    /// <summary>
    /// Tells the subscriber that its subscriptions <paramref name="sids"/> (ascending, each once) may have lost an unknown
    /// number of messages (a cluster shard it receives them through was unreachable, cluster.md §13): a stream is told
    /// with its next write (README §6.3: <c>MessagesDropped</c> naming the sids), a window keeps it as a loss mark naming
    /// them (longpoll §2, <c>Herald-Gaps</c>). As <see cref="Lost"/>, <see cref="Enqueued.Wake"/> asks the caller to flush;
    /// a sink that reports no losses takes none.
    /// </summary>
    Enqueued Gaps(uint[] sids) => Enqueued.Dropped;

    /// <summary>
    /// Starts (<paramref name="on"/>) or ends tracking which payload subscription <paramref name="sid"/> holds, for the
    /// deltas queued to it (spec §11.2, <see cref="DeltaCursors"/>). A sink that is never given a delta ignores it.
    /// </summary>
    void TrackDelta(uint sid, bool on)
    {
    }
}
