namespace Herald.Broker.Delivery;

/// <summary>
/// A memory budget several backlogs share (long-poll's <c>MaxPendingBytesTotal</c>): the bytes they hold
/// together. While it is full, a backlog over its fair share (the budget over the number of holders) meets
/// its own slow-consumer policy, as if over its own limit; one under its share still takes frames. So the
/// holders' total stays below twice the budget (plus one frame each), and a new holder is refused while the budget has no room for a full backlog more.
/// </summary>
/// <remarks>Thread-safe: one atomic add per change of a holder's pending bytes; no lock.</remarks>
internal sealed class PendingBudget(long maxBytes)
{
    private long _used;
    private int _holders;

    public long MaxBytes => maxBytes;

    public long Used => Volatile.Read(ref _used);

    /// <summary>Whether <paramref name="bytes"/> more would fit now (a new holder is admitted only with room for a full backlog).</summary>
    public bool HasRoomFor(long bytes) => Used + bytes <= maxBytes;

    public void Join() => Interlocked.Increment(ref _holders);

    public void Leave() => Interlocked.Decrement(ref _holders);

    /// <summary>Counts <paramref name="bytes"/> (negative: released) held by a holder.</summary>
    public void Add(long bytes) => Interlocked.Add(ref _used, bytes);

    /// <summary>Whether a holder with <paramref name="pending"/> bytes must make room before taking <paramref name="incoming"/> more.</summary>
    public bool Squeezes(long pending, int incoming) =>
        Used + incoming > maxBytes && pending + incoming > maxBytes / Math.Max(1, Volatile.Read(ref _holders));
}
