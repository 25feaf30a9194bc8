namespace Herald.Broker.Sessions;

/// <summary>
/// The bytes all TCP connections together may hold of large frames not yet complete
/// (<see cref="LimitOptions.MaxPartialFrameBytesTotal"/>). A frame up to <see cref="LimitOptions.PartialFrameAllowance"/>
/// never comes here: the common case costs no shared write. A larger one takes its whole size when its
/// length prefix is read without its body, and gives it back when the body is complete or the connection ends.
/// </summary>
/// <remarks>Thread-safe: one compare-and-swap per take, one atomic add per release; no lock.</remarks>
internal sealed class PartialFrameBudget(long maxBytes)
{
    private long _used;

    /// <summary>Bytes held now, for monitoring.</summary>
    public long Used => Volatile.Read(ref _used);

    public long MaxBytes => maxBytes;

    /// <summary>Takes <paramref name="bytes"/> if they fit beside what is held; otherwise takes nothing.</summary>
    public bool TryTake(long bytes)
    {
        long used = Volatile.Read(ref _used);
        while (true)
        {
            if (used + bytes > maxBytes)
            {
                return false;
            }

            long seen = Interlocked.CompareExchange(ref _used, used + bytes, used);
            if (seen == used)
            {
                return true;
            }

            used = seen;
        }
    }

    public void Release(long bytes) => Interlocked.Add(ref _used, -bytes);
}
