namespace Herald.Broker.Routing;

/// <summary>
/// The match cache's upkeep: a subscription change removes the cached topics its pattern matches, found through the
/// trie of cached topics (<see cref="CachedNode"/>), or drops the whole cache when that walk would pass
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
            if (_cache.TryRemove(pattern, out _) && _cachedRoot.Remove(pattern, 0))
            {
                _cachedTopics--;
                _metrics?.RouterCacheSize(_cachedTopics);
            }

            return;
        }

        int visits = 0;
        bool bounded = CollectCached(_cachedRoot, pattern, 0, ref visits);
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
                _cachedRoot.Remove(topic, 0);
            }

            _cachedTopics -= _matched.Count;
            _metrics?.RouterCacheSize(_cachedTopics);
        }

        _matched.Clear();
    }

    /// <summary>
    /// Adds to <see cref="_matched"/> the cached topics below <paramref name="node"/> that the pattern's
    /// tokens from <paramref name="start"/> on match; false when that took more than
    /// <see cref="MaxInvalidationVisits"/> visits (then <see cref="_matched"/> is incomplete).
    /// Caller holds the write lock.
    /// </summary>
    private bool CollectCached(CachedNode node, string pattern, int start, ref int visits)
    {
        if (node.Children is not { } children)
        {
            return true;
        }

        int end = pattern.IndexOf('.', start);
        bool last = end < 0;
        if (last)
        {
            end = pattern.Length;
        }

        ReadOnlySpan<char> token = pattern.AsSpan(start, end - start);
        if (token is ">")
        {
            foreach (CachedNode child in children.Values)
            {
                if (!CollectSubtree(child, ref visits))
                {
                    return false;
                }
            }

            return true;
        }

        if (token is "*")
        {
            foreach (CachedNode child in children.Values)
            {
                if (!CollectChild(child, pattern, end, last, ref visits))
                {
                    return false;
                }
            }

            return true;
        }

        return !children.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(token, out CachedNode? literal)
            || CollectChild(literal, pattern, end, last, ref visits);
    }

    private bool CollectChild(CachedNode child, string pattern, int end, bool last, ref int visits)
    {
        if (++visits > MaxInvalidationVisits)
        {
            return false;
        }

        if (!last)
        {
            return CollectCached(child, pattern, end + 1, ref visits);
        }

        if (child.Topic is { } topic)
        {
            _matched.Add(topic);
        }

        return true;
    }

    // '>' matched: every cached topic at or below `node`.
    private bool CollectSubtree(CachedNode node, ref int visits)
    {
        if (++visits > MaxInvalidationVisits)
        {
            return false;
        }

        if (node.Topic is { } topic)
        {
            _matched.Add(topic);
        }

        if (node.Children is { } children)
        {
            foreach (CachedNode child in children.Values)
            {
                if (!CollectSubtree(child, ref visits))
                {
                    return false;
                }
            }
        }

        return true;
    }

    // Caller holds the write lock. O(1) for the caller: the old tables go to the collector.
    private void DropCache()
    {
        _cache.Clear();
        _cachedRoot = new CachedNode();
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

            if (_cache.TryRemove(entry.Key, out _) && _cachedRoot.Remove(entry.Key, 0))
            {
                evicted++;
            }
        }

        _cachedTopics -= evicted;
        _metrics?.RouterCacheEvicted(evicted);
    }

    /// <summary>
    /// A node of the match cache's trie of topics (literal tokens only): where subscription changes find
    /// the cached topics their pattern matches. Changed under the write lock, or under the read lock and
    /// <see cref="_fill"/>; never read by publishers.
    /// </summary>
    private sealed class CachedNode
    {
        public Dictionary<string, CachedNode>? Children { get; private set; }

        /// <summary>The cached topic this node ends, if any.</summary>
        public string? Topic { get; private set; }

        /// <summary>Adds <paramref name="topic"/>; false if it was there.</summary>
        public bool Add(string topic)
        {
            CachedNode node = this;
            int start = 0;
            while (true)
            {
                int end = topic.IndexOf('.', start);
                if (end < 0)
                {
                    end = topic.Length;
                }

                node.Children ??= new Dictionary<string, CachedNode>(StringComparer.Ordinal);
                Dictionary<string, CachedNode>.AlternateLookup<ReadOnlySpan<char>> lookup = node.Children.GetAlternateLookup<ReadOnlySpan<char>>();
                ReadOnlySpan<char> token = topic.AsSpan(start, end - start);
                if (!lookup.TryGetValue(token, out CachedNode? child))
                {
                    child = new CachedNode();
                    lookup[token] = child;
                }

                node = child;
                if (end == topic.Length)
                {
                    break;
                }

                start = end + 1;
            }

            bool added = node.Topic is null;
            node.Topic = topic;
            return added;
        }

        /// <summary>Removes <paramref name="topic"/> (its tokens from <paramref name="start"/> on, below this node), pruning empty nodes; false if it was not there.</summary>
        public bool Remove(string topic, int start)
        {
            int end = topic.IndexOf('.', start);
            if (end < 0)
            {
                end = topic.Length;
            }

            ReadOnlySpan<char> token = topic.AsSpan(start, end - start);
            if (Children is null || !Children.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(token, out CachedNode? child))
            {
                return false;
            }

            bool removed;
            if (end == topic.Length)
            {
                removed = child.Topic is not null;
                child.Topic = null;
            }
            else
            {
                removed = child.Remove(topic, end + 1);
            }

            if (child.Topic is null && (child.Children is null || child.Children.Count == 0))
            {
                Children.GetAlternateLookup<ReadOnlySpan<char>>().Remove(token);
            }

            return removed;
        }
    }
}
