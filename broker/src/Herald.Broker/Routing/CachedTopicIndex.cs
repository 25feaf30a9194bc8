namespace Herald.Broker.Routing;

/// <summary>
/// Where a subscription change finds the match cache's topics its pattern matches: the cached topics in two tries of
/// literal tokens, one read from the first token (<see cref="_forward"/>) and one, per token count, from the last
/// (<see cref="_backward"/>). Each node counts the topics at or below it, so a wildcard pattern is looked for from the
/// side whose literal tokens leave fewer candidates: <c>device.*.alarm</c> beside 65,536 cached <c>device.N.status</c>
/// finds no three-token topic ending in <c>alarm</c> and looks at nothing, where a walk from <c>device</c> would
/// have looked at every <c>N</c>.
/// </summary>
/// <remarks>
/// A change still costs what its pattern matches, and a pattern whose literal tokens on both sides are each shared
/// by many cached topics that it does not match (<c>a.*.d</c> beside many <c>a.N.b</c> and <c>c.N.d</c>; or one with
/// literal tokens only in the middle, <c>*.x.*</c>) makes the walk long: the caller bounds it and drops the cache
/// instead (<see cref="SubscriptionIndex.MaxInvalidationVisits"/>). Not thread-safe: the caller's locks order
/// every call (<see cref="SubscriptionIndex"/>). Costs two tries of the cached topics' tokens, counted in README's
/// memory formula with the cache.
/// </remarks>
internal sealed class CachedTopicIndex
{
    /// <summary>Longest topic, in tokens, a stack buffer holds; longer ones rent an array.</summary>
    private const int StackTokens = 64;

    private readonly CachedNode _forward = new();
    private readonly Dictionary<int, CachedNode> _backward = [];

    /// <summary>Topics indexed.</summary>
    public int Count => _forward.Count;

    /// <summary>Adds a cached topic (a valid topic name, no wildcard); false if it was there.</summary>
    public bool Add(string topic)
    {
        Span<Range> tokens = Split(topic, stackalloc Range[StackTokens]);
        if (!_forward.Add(topic, tokens, 0, forward: true))
        {
            return false;
        }

        if (!_backward.TryGetValue(tokens.Length, out CachedNode? root))
        {
            _backward[tokens.Length] = root = new CachedNode();
        }

        root.Add(topic, tokens, 0, forward: false);
        return true;
    }

    /// <summary>Removes a cached topic; false if it was not there.</summary>
    public bool Remove(string topic)
    {
        Span<Range> tokens = Split(topic, stackalloc Range[StackTokens]);
        if (!_forward.Remove(topic, tokens, 0, forward: true))
        {
            return false;
        }

        CachedNode root = _backward[tokens.Length];
        root.Remove(topic, tokens, 0, forward: false);
        if (root.Count == 0)
        {
            _backward.Remove(tokens.Length);
        }

        return true;
    }

    /// <summary>
    /// Adds to <paramref name="matched"/> the indexed topics <paramref name="pattern"/> (with at least one wildcard)
    /// matches; false when that took more than <paramref name="maxVisits"/> node visits (then
    /// <paramref name="matched"/> is incomplete). <paramref name="visits"/> counts the visits made.
    /// </summary>
    public bool Collect(string pattern, List<string> matched, int maxVisits, ref int visits)
    {
        Span<Range> tokens = Split(pattern, stackalloc Range[StackTokens]);

        // From the front: down the literal tokens before the first wildcard.
        int front = 0;
        CachedNode? fromFront = _forward;
        while (fromFront is not null && front < tokens.Length && !IsWildcard(pattern, tokens[front]))
        {
            fromFront = fromFront.Child(pattern.AsSpan()[tokens[front]]);
            front++;
        }

        if (fromFront is null)
        {
            return true; // no cached topic starts that way
        }

        bool tail = pattern.AsSpan()[tokens[^1]] is ">";
        if (!tail)
        {
            // From the back, among the topics of the pattern's length: up the literal tokens after the last wildcard.
            int back = tokens.Length;
            CachedNode? fromBack = _backward.GetValueOrDefault(tokens.Length);
            while (fromBack is not null && back > 0 && !IsWildcard(pattern, tokens[back - 1]))
            {
                back--;
                fromBack = fromBack.Child(pattern.AsSpan()[tokens[back]]);
            }

            if (fromBack is null)
            {
                return true; // no cached topic of that length ends that way
            }

            if (fromBack.Count < fromFront.Count)
            {
                return fromBack.Collect(pattern, tokens[..back], forward: false, matched, maxVisits, ref visits);
            }
        }

        return fromFront.Collect(pattern, tokens[front..], forward: true, matched, maxVisits, ref visits);
    }

    private static bool IsWildcard(string pattern, Range token) => pattern.AsSpan()[token] is "*" or ">";

    private static Span<Range> Split(string topic, Span<Range> buffer)
    {
        int count = topic.AsSpan().Count('.') + 1;
        Span<Range> tokens = count <= buffer.Length ? buffer[..count] : new Range[count];
        topic.AsSpan().Split(tokens, '.');
        return tokens;
    }

    /// <summary>
    /// A node of either trie: its children by token, and how many topics end at or below it. Most nodes of a cache of
    /// many distinct topics have one child (the <c>status</c> after each <c>device.N</c>), kept in two fields rather
    /// than a dictionary of one: the index then costs about what one trie of dictionaries cost.
    /// </summary>
    private sealed class CachedNode
    {
        private string? _onlyToken;
        private CachedNode? _only;
        private Dictionary<string, CachedNode>? _children;

        /// <summary>The topic ending at this node, if any.</summary>
        private string? _topic;

        /// <summary>Topics ending at or below this node.</summary>
        public int Count { get; private set; }

        public CachedNode? Child(ReadOnlySpan<char> token)
        {
            if (_only is not null)
            {
                return token.SequenceEqual(_onlyToken) ? _only : null;
            }

            return _children is not null && _children.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(token, out CachedNode? child) ? child : null;
        }

        /// <summary>Adds <paramref name="topic"/> (its tokens from <paramref name="depth"/> on), read first to last or last to first; false if it was there.</summary>
        public bool Add(string topic, ReadOnlySpan<Range> tokens, int depth, bool forward)
        {
            if (depth == tokens.Length)
            {
                if (_topic is not null)
                {
                    return false;
                }

                _topic = topic;
                Count++;
                return true;
            }

            ReadOnlySpan<char> token = topic.AsSpan()[tokens[forward ? depth : tokens.Length - 1 - depth]];
            CachedNode child = Child(token) ?? AddChild(token);
            if (!child.Add(topic, tokens, depth + 1, forward))
            {
                return false;
            }

            Count++;
            return true;
        }

        private CachedNode AddChild(ReadOnlySpan<char> token)
        {
            var child = new CachedNode();
            if (_only is null && _children is null)
            {
                _onlyToken = token.ToString();
                _only = child;
                return child;
            }

            if (_only is not null)
            {
                _children = new Dictionary<string, CachedNode>(StringComparer.Ordinal) { [_onlyToken!] = _only };
                _onlyToken = null;
                _only = null;
            }

            _children!.GetAlternateLookup<ReadOnlySpan<char>>()[token] = child;
            return child;
        }

        private void RemoveChild(ReadOnlySpan<char> token)
        {
            if (_only is not null)
            {
                _onlyToken = null;
                _only = null;
            }
            else if (_children!.GetAlternateLookup<ReadOnlySpan<char>>().Remove(token) && _children.Count == 0)
            {
                _children = null;
            }
        }

        /// <summary>Removes <paramref name="topic"/> (its tokens from <paramref name="depth"/> on), pruning empty nodes; false if it was not there.</summary>
        public bool Remove(string topic, ReadOnlySpan<Range> tokens, int depth, bool forward)
        {
            if (depth == tokens.Length)
            {
                if (_topic is null)
                {
                    return false;
                }

                _topic = null;
                Count--;
                return true;
            }

            ReadOnlySpan<char> token = topic.AsSpan()[tokens[forward ? depth : tokens.Length - 1 - depth]];
            if (Child(token) is not { } child || !child.Remove(topic, tokens, depth + 1, forward))
            {
                return false;
            }

            Count--;
            if (child.Count == 0)
            {
                RemoveChild(token);
            }

            return true;
        }

        /// <summary>
        /// Adds to <paramref name="matched"/> the topics below this node that the pattern's <paramref name="tokens"/>
        /// match (read first to last, or last to first); false past <paramref name="maxVisits"/> visits.
        /// </summary>
        public bool Collect(string pattern, ReadOnlySpan<Range> tokens, bool forward, List<string> matched, int maxVisits, ref int visits)
        {
            if (tokens.IsEmpty)
            {
                if (_topic is not null)
                {
                    matched.Add(_topic);
                }

                return true;
            }

            Range next = forward ? tokens[0] : tokens[^1];
            ReadOnlySpan<Range> rest = forward ? tokens[1..] : tokens[..^1];
            ReadOnlySpan<char> token = pattern.AsSpan()[next];
            if (token is ">")
            {
                // Every topic strictly below: known in advance, so a '>' too wide costs nothing to refuse.
                int below = Count - (_topic is null ? 0 : 1);
                if (visits + below > maxVisits)
                {
                    return false;
                }

                visits += below;
                CollectBelow(matched);
                return true;
            }

            if (token is not "*")
            {
                return Child(token) is not { } literal || literal.Collect(pattern, rest, forward, matched, maxVisits, ref visits);
            }

            if (_only is not null)
            {
                return ++visits <= maxVisits && _only.Collect(pattern, rest, forward, matched, maxVisits, ref visits);
            }

            if (_children is not null)
            {
                foreach (CachedNode child in _children.Values)
                {
                    if (++visits > maxVisits || !child.Collect(pattern, rest, forward, matched, maxVisits, ref visits))
                    {
                        return false;
                    }
                }
            }

            return true;
        }

        private void CollectBelow(List<string> matched)
        {
            if (_only is not null)
            {
                _only.CollectHere(matched);
            }
            else if (_children is not null)
            {
                foreach (CachedNode child in _children.Values)
                {
                    child.CollectHere(matched);
                }
            }
        }

        private void CollectHere(List<string> matched)
        {
            if (_topic is not null)
            {
                matched.Add(_topic);
            }

            CollectBelow(matched);
        }
    }
}
