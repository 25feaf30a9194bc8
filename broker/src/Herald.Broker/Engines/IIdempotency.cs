namespace Herald.Broker.Engines;

/// <summary>
/// The idempotency keys of publications made through the server API: a key claimed for a topic is remembered for a
/// window, and a second claim within it fails, so a repeated request is accepted without being delivered twice. On
/// one node the table is this process's (<see cref="LocalIdempotency"/>); on a cluster node it is Redis's, on the
/// topic's shard, so a repeat sent to any node is seen. Not on the message path: one call per API publication that
/// carries a key.
/// </summary>
internal interface IIdempotency
{
    /// <summary>
    /// True when <paramref name="key"/> was not claimed for <paramref name="topic"/> within the window (it is now); false
    /// for a repeat. Throws <see cref="IdempotencyFullException"/> when the table is full, <see cref="ClusterUnavailableException"/>
    /// when Redis cannot be asked.
    /// </summary>
    ValueTask<bool> ClaimAsync(string topic, string key, TimeSpan window);

    /// <summary>Gives back a claim whose publication was refused, so the caller may send it again once it is fixed.</summary>
    ValueTask ForgetAsync(string topic, string key);
}

/// <summary>The idempotency table is at its bound; <see cref="RetryAfter"/>: when its oldest key expires.</summary>
internal sealed class IdempotencyFullException(int max, TimeSpan retryAfter)
    : Exception($"The broker remembers its maximum of {max} idempotency keys (Herald:Api:MaxIdempotencyKeys); the oldest expires in {Math.Ceiling(retryAfter.TotalSeconds)} s.")
{
    public TimeSpan RetryAfter { get; } = retryAfter;
}

/// <summary>
/// A single node's idempotency keys, in memory: a dictionary of (topic, key) and a queue in claim order (every key has
/// the same window, so the queue is in expiry order too and the expired ones are dropped from its head). Bounded by
/// <c>max</c> keys (each of at most <c>Herald:Api:MaxIdempotencyKeyBytes</c>): a claim while it is full of unexpired keys
/// fails with <see cref="IdempotencyFullException"/>, nothing is evicted early (that would deliver a repeat twice).
/// </summary>
internal sealed class LocalIdempotency(int max, TimeProvider time) : IIdempotency
{
    private readonly Lock _gate = new();
    private readonly Dictionary<(string Topic, string Key), long> _expiries = [];
    private readonly Queue<(string Topic, string Key, long ExpiresAt)> _order = new();

    /// <summary>Keys remembered now (expired ones included until the next claim drops them).</summary>
    public int Count
    {
        get
        {
            lock (_gate)
            {
                return _expiries.Count;
            }
        }
    }

    public ValueTask<bool> ClaimAsync(string topic, string key, TimeSpan window)
    {
        long now = time.GetTimestamp();
        lock (_gate)
        {
            DropExpired(now);
            if (_expiries.TryGetValue((topic, key), out long expiresAt) && expiresAt > now)
            {
                return ValueTask.FromResult(false);
            }

            if (_order.Count >= max) // the queue holds every live claim and the forgotten ones until they expire: the tighter bound
            {
                TimeSpan after = _order.TryPeek(out var oldest) ? time.GetElapsedTime(now, oldest.ExpiresAt) : window;
                throw new IdempotencyFullException(max, after);
            }

            long expires = now + (long)(window.TotalSeconds * time.TimestampFrequency);
            _expiries[(topic, key)] = expires;
            _order.Enqueue((topic, key, expires));
            return ValueTask.FromResult(true);
        }
    }

    public ValueTask ForgetAsync(string topic, string key)
    {
        lock (_gate)
        {
            _expiries.Remove((topic, key)); // its queue entry stays until it expires; DropExpired skips what is gone
        }

        return ValueTask.CompletedTask;
    }

    // Caller holds _gate.
    private void DropExpired(long now)
    {
        while (_order.TryPeek(out var head) && head.ExpiresAt <= now)
        {
            _order.Dequeue();
            if (_expiries.TryGetValue((head.Topic, head.Key), out long expiresAt) && expiresAt == head.ExpiresAt)
            {
                _expiries.Remove((head.Topic, head.Key));
            }
        }
    }
}
