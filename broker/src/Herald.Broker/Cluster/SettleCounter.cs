namespace Herald.Broker.Cluster;

/// <summary>
/// Changes recorded (any thread, under the router's lock: a counter only) against changes a worker has applied to
/// Redis, with waiters for "everything recorded so far is applied". The cluster's interest worker and its queue
/// group worker each keep one; a SUBSCRIBE is answered once both have caught up with it (cluster.md §5, §11).
/// </summary>
internal sealed class SettleCounter
{
    private readonly Lock _gate = new();
    private readonly List<(long Target, TaskCompletionSource Done)> _waiters = [];
    private long _requested;
    private long _applied;

    /// <summary>Recorded and not yet applied.</summary>
    public long Pending => Math.Max(0, Interlocked.Read(ref _requested) - Interlocked.Read(ref _applied));

    /// <summary>Whether every change recorded so far is applied.</summary>
    public bool IsSettled => Interlocked.Read(ref _applied) >= Interlocked.Read(ref _requested);

    /// <summary>One change recorded. Any thread, lock-free.</summary>
    public void Requested() => Interlocked.Increment(ref _requested);

    /// <summary>The worker applied <paramref name="taken"/> more changes (or gave up on them: Redis unreachable); waiters up to there go.</summary>
    public void Applied(long taken) => Release(Interlocked.Add(ref _applied, taken));

    /// <summary>Completes when every change recorded before this call is applied.</summary>
    public Task WhenSettledAsync()
    {
        long target = Interlocked.Read(ref _requested);
        if (Interlocked.Read(ref _applied) >= target)
        {
            return Task.CompletedTask;
        }

        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        lock (_gate)
        {
            if (Interlocked.Read(ref _applied) >= target)
            {
                return Task.CompletedTask;
            }

            _waiters.Add((target, done));
        }

        return done.Task;
    }

    /// <summary>Lets every waiter go (stopping: nothing more will be applied).</summary>
    public void ReleaseAll() => Release(long.MaxValue);

    private void Release(long applied)
    {
        lock (_gate)
        {
            for (int i = _waiters.Count - 1; i >= 0; i--)
            {
                if (_waiters[i].Target <= applied)
                {
                    _waiters[i].Done.TrySetResult();
                    _waiters.RemoveAt(i);
                }
            }
        }
    }
}
