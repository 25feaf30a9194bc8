namespace Herald.Broker.Routing;

/// <summary>
/// The match cache's upkeep: a subscription change removes the cached topics its pattern matches, found through the
/// cache's index of its topics (<see cref="CachedTopicIndex"/>), or drops the whole cache when that walk would pass
/// <see cref="MaxInvalidationVisits"/>; a fill into a full cache evicts a quarter of it.
/// </summary>
internal sealed partial class SubscriptionIndex
{
    // Caller holds the write lock (so no fill runs).
    private void Invalidate(string pattern)
    {
        if (pattern.AsSpan().IndexOfAny('*', '>') < 0) // validated: '*' and '>' only occur as wildcard tokens
        {
            Interlocked.Increment(ref _invalidationVisits);
            if (_cache.TryRemove(pattern, out _) && _cachedTopicIndex.Remove(pattern))
            {
                _cachedTopics--;
                _metrics?.RouterCacheSize(_cachedTopics);
            }

            return;
        }

        int visits = 0;
        bool bounded = _cachedTopicIndex.Collect(pattern, _matched, MaxInvalidationVisits, ref visits);
        Interlocked.Add(ref _invalidationVisits, visits);
        if (!bounded)
        {
            DropCache();
        }
        else if (_matched.Count > 0)
        {
            foreach (string topic in _matched)
            {
                _cache.TryRemove(topic, out _);
                _cachedTopicIndex.Remove(topic);
            }

            _cachedTopics -= _matched.Count;
            _metrics?.RouterCacheSize(_cachedTopics);
        }

        _matched.Clear();
    }

    // Caller holds the write lock. O(1) for the caller: the old tables go to the collector.
    private void DropCache()
    {
        _cache.Clear();
        _cachedTopicIndex = new CachedTopicIndex();
        _metrics?.RouterCacheEvicted(_cachedTopics);
        _cachedTopics = 0;
        _metrics?.RouterCacheSize(0);
    }

    // Caller holds the read lock and _fill (so no other fill runs): evicts a quarter of the cache.
    private void Sweep()
    {
        int target = _cacheCapacity - Math.Max(1, _cacheCapacity / 4);
        int evicted = 0;
        foreach (KeyValuePair<string, Subscription[]> entry in _cache)
        {
            if (_cachedTopics - evicted <= target)
            {
                break;
            }

            if (_cache.TryRemove(entry.Key, out _) && _cachedTopicIndex.Remove(entry.Key))
            {
                evicted++;
            }
        }

        _cachedTopics -= evicted;
        _metrics?.RouterCacheEvicted(evicted);
    }
}
