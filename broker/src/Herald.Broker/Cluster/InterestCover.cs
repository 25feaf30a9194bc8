using Herald.Protocol;

namespace Herald.Broker.Cluster;

/// <summary>
/// The Redis subscriptions a node needs for its local patterns (spec cluster.md §2): each pattern's
/// <see cref="CoverKey"/>, less every key another prefix key covers. What is left is prefix-free: no topic
/// matches two of its keys, so Redis sends the node each publication once, on one subscription, in the
/// order it was published.
/// </summary>
/// <remarks>
/// <para>
/// <b>Inbox interest is aggregated.</b> The keys under one reply inbox prefix (<c>_INBOX.</c> and one more token: an
/// identity's own part of the inbox space, spec §7, or an anonymous client's) are counted; past
/// <c>maxKeysPerInbox</c> of them they are all replaced by that prefix's one key (a glob). Any identity may subscribe
/// under its inbox, with no permission at all, so without this one identity's patterns there would each be a Redis
/// subscription, and Redis checks every glob against every publication of the cluster. With it, one identity's inbox
/// costs a node at most <c>maxKeysPerInbox</c> Redis subscriptions, whatever it subscribes. The node's router still
/// matches exactly (spec cluster.md §2), so nothing is delivered beyond its pattern.
/// </para>
/// Not thread-safe: the cluster engine's interest worker owns it.
/// </remarks>
internal sealed class InterestCover(int maxKeysPerInbox = 16)
{
    private readonly Dictionary<CoverKey, KeyUse> _keys = []; // each key: its patterns, and its inbox prefix (found once)
    private readonly Dictionary<string, int> _prefixes = new(StringComparer.Ordinal);
    private readonly Dictionary<string, int> _inboxes = new(StringComparer.Ordinal); // inbox prefix -> distinct keys under it

    /// <summary>Distinct keys the local patterns need (before covered ones are left out).</summary>
    public int KeyCount => _keys.Count;

    public void Add(string pattern)
    {
        CoverKey key = CoverKey.Of(pattern);
        if (_keys.TryGetValue(key, out KeyUse use))
        {
            _keys[key] = use with { Patterns = use.Patterns + 1 };
        }
        else
        {
            string? inbox = InboxOf(key.Literal);
            _keys[key] = new KeyUse(1, inbox);
            if (inbox is not null)
            {
                _inboxes[inbox] = _inboxes.GetValueOrDefault(inbox) + 1;
            }
        }

        if (key.IsPrefix)
        {
            _prefixes[key.Literal] = _prefixes.GetValueOrDefault(key.Literal) + 1;
        }
    }

    public void Remove(string pattern)
    {
        CoverKey key = CoverKey.Of(pattern);
        if (!_keys.TryGetValue(key, out KeyUse use))
        {
            return;
        }

        if (use.Patterns == 1)
        {
            _keys.Remove(key);
            if (use.Inbox is { } inbox)
            {
                Decrement(_inboxes, inbox);
            }
        }
        else
        {
            _keys[key] = use with { Patterns = use.Patterns - 1 };
        }

        if (key.IsPrefix)
        {
            Decrement(_prefixes, key.Literal);
        }
    }

    private static void Decrement(Dictionary<string, int> counts, string name)
    {
        int count = counts[name];
        if (count == 1)
        {
            counts.Remove(name);
        }
        else
        {
            counts[name] = count - 1;
        }
    }

    /// <summary>
    /// The keys no other prefix key covers, those under an inbox prefix with more than <c>maxKeysPerInbox</c> keys
    /// replaced by the prefix's one key: O(keys x tokens).
    /// </summary>
    public HashSet<CoverKey> Compute()
    {
        var cover = new HashSet<CoverKey>();
        foreach ((CoverKey key, KeyUse use) in _keys)
        {
            CoverKey needed = use.Inbox is { } inbox && _inboxes[inbox] > maxKeysPerInbox ? new CoverKey(inbox, IsPrefix: true) : key;
            if (!IsCovered(needed))
            {
                cover.Add(needed);
            }
        }

        return cover;
    }

    /// <summary>
    /// The inbox prefix <paramref name="literal"/> is under (<c>_INBOX.</c>, a token, <c>.</c>), when it goes past it;
    /// else null (a topic outside the inbox space, <c>_INBOX.x</c> itself, or the key of <c>_INBOX.&gt;</c>).
    /// </summary>
    internal static string? InboxOf(string literal)
    {
        if (!literal.StartsWith(ProtocolConstants.InboxPrefix, StringComparison.Ordinal))
        {
            return null;
        }

        int end = literal.IndexOf('.', ProtocolConstants.InboxPrefix.Length);
        return end > ProtocolConstants.InboxPrefix.Length && end + 1 < literal.Length ? literal[..(end + 1)] : null;
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

    private readonly record struct KeyUse(int Patterns, string? Inbox);
}
