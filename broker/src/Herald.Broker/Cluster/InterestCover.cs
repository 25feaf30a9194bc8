namespace Herald.Broker.Cluster;

/// <summary>
/// The Redis subscriptions a node needs for its local patterns (spec cluster.md §2): each pattern's
/// <see cref="CoverKey"/>, less every key another prefix key covers. What is left is prefix-free: no topic
/// matches two of its keys, so Redis sends the node each publication once, on one subscription, in the
/// order it was published.
/// </summary>
/// <remarks>Not thread-safe: the cluster engine's interest worker owns it.</remarks>
internal sealed class InterestCover
{
    private readonly Dictionary<CoverKey, int> _keys = [];
    private readonly Dictionary<string, int> _prefixes = new(StringComparer.Ordinal);

    /// <summary>Distinct keys the local patterns need (before covered ones are left out).</summary>
    public int KeyCount => _keys.Count;

    public void Add(string pattern)
    {
        CoverKey key = CoverKey.Of(pattern);
        _keys[key] = _keys.GetValueOrDefault(key) + 1;
        if (key.IsPrefix)
        {
            _prefixes[key.Literal] = _prefixes.GetValueOrDefault(key.Literal) + 1;
        }
    }

    public void Remove(string pattern)
    {
        CoverKey key = CoverKey.Of(pattern);
        if (!_keys.TryGetValue(key, out int count))
        {
            return;
        }

        if (count == 1)
        {
            _keys.Remove(key);
        }
        else
        {
            _keys[key] = count - 1;
        }

        if (key.IsPrefix)
        {
            int prefixes = _prefixes[key.Literal];
            if (prefixes == 1)
            {
                _prefixes.Remove(key.Literal);
            }
            else
            {
                _prefixes[key.Literal] = prefixes - 1;
            }
        }
    }

    /// <summary>The keys no other prefix key covers: O(keys x tokens).</summary>
    public HashSet<CoverKey> Compute()
    {
        var cover = new HashSet<CoverKey>();
        foreach (CoverKey key in _keys.Keys)
        {
            if (!IsCovered(key))
            {
                cover.Add(key);
            }
        }

        return cover;
    }

    /// <summary>
    /// One glob over every topic while any pattern is held (<see cref="ClusterOptions.ReceiveAll"/>), none
    /// otherwise: one subscription, so one ordered queue for everything the node receives.
    /// </summary>
    public HashSet<CoverKey> All() => _keys.Count == 0 ? [] : [new CoverKey("", IsPrefix: true)];

    // A shorter prefix of the key's literal, ending at a token boundary ("" included), that is itself a prefix key.
    private bool IsCovered(CoverKey key)
    {
        string literal = key.Literal;
        int limit = key.IsPrefix ? literal.Length - 1 : literal.Length; // a prefix key never covers itself
        if (limit > 0 && _prefixes.ContainsKey(""))
        {
            return true;
        }

        for (int i = 0; i < limit; i++)
        {
            if (literal[i] == '.' && _prefixes.ContainsKey(literal[..(i + 1)]))
            {
                return true;
            }
        }

        return false;
    }
}
