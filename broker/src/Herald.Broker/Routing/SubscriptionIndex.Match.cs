using System.Buffers;
using System.Text;

namespace Herald.Broker.Routing;

/// <summary>Matching: a topic's subscriptions, from the match cache without a lock, else from the trie under the read lock.</summary>
internal sealed partial class SubscriptionIndex
{
    /// <summary>Every subscription matching a topic given as (already validated) ASCII bytes.</summary>
    public Subscription[] Match(in ReadOnlySequence<byte> topic)
    {
        int length = (int)topic.Length;
        char[]? rented = null;
        Span<char> chars = length <= StackTopic ? stackalloc char[StackTopic] : (rented = ArrayPool<char>.Shared.Rent(length));
        chars = chars[..length];
        if (topic.IsSingleSegment)
        {
            Ascii.ToUtf16(topic.FirstSpan, chars, out _);
        }
        else
        {
            Encoding.ASCII.GetChars(topic, chars);
        }

        Subscription[] result = Match(chars);
        if (rented is not null)
        {
            ArrayPool<char>.Shared.Return(rented);
        }

        return result;
    }

    /// <summary>Every subscription matching <paramref name="topic"/> (a valid topic name).</summary>
    public Subscription[] Match(ReadOnlySpan<char> topic)
    {
        if (_cacheBySpan.TryGetValue(topic, out Subscription[]? cached))
        {
            return cached; // a hit costs no counter: hits are derived, every publication minus the misses
        }

        _metrics?.RouterCacheMiss();
        return MatchSlow(topic.ToString());
    }

    private Subscription[] MatchSlow(string topic)
    {
        _gate.EnterReadLock();
        try
        {
            if (_cache.TryGetValue(topic, out Subscription[]? cached))
            {
                return cached;
            }

            var found = new List<Subscription>();
            Collect(_root, topic, 0, found);
            Subscription[] result = found.Count == 0 ? [] : found.ToArray();
            GroupMembersTogether(result);

            // Still under the read lock: no writer can invalidate between computing and caching.
            lock (_fill)
            {
                if (_cachedTopics >= _cacheCapacity)
                {
                    Sweep(); // rare: a flood of distinct topics; the hot ones come back on their next publish
                }

                if (_cachedTopicIndex.Add(topic))
                {
                    _cachedTopics++;
                    _metrics?.RouterCacheSize(_cachedTopics);
                }

                _cache[topic] = result;
            }

            return result;
        }
        finally
        {
            _gate.ExitReadLock();
        }
    }

    // Caller holds the read lock. `start` indexes the first character of the token to match.
    private static void Collect(Node node, string topic, int start, List<Subscription> found)
    {
        int end = topic.IndexOf('.', start);
        bool last = end < 0;
        if (last)
        {
            end = topic.Length;
        }

        if (node.Tail is { } tail)
        {
            AddAll(tail, found); // '>' matches this token and everything after it
        }

        if (node.Children is { } children && children.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(topic.AsSpan(start, end - start), out Node? literal))
        {
            Visit(literal, topic, end, last, found);
        }

        if (node.Star is { } star)
        {
            Visit(star, topic, end, last, found);
        }
    }

    private static void Visit(Node child, string topic, int end, bool last, List<Subscription> found)
    {
        if (last)
        {
            AddAll(child, found);
        }
        else
        {
            Collect(child, topic, end + 1, found);
        }
    }

    private static void AddAll(Node node, List<Subscription> found)
    {
        found.AddRange(node.Subscriptions);
        if (node.Elsewhere is { Count: > 0 } elsewhere)
        {
            found.AddRange(elsewhere);
        }
    }

    /// <summary>
    /// Orders a match so that each queue group's members are next to each other, after every plain subscription.
    /// Done once per cached topic.
    /// </summary>
    private static void GroupMembersTogether(Subscription[] matched)
    {
        if (Array.Exists(matched, s => s.Group is not null))
        {
            Array.Sort(matched, static (a, b) => string.CompareOrdinal(a.Group, b.Group)); // null (plain) first
        }
    }
}
