using System.Text;

namespace Herald.Broker.Cluster;

/// <summary>
/// One Redis subscription of a node (spec cluster.md §2): an exact channel for a pattern without wildcards,
/// or a glob over the pattern's literal prefix, the tokens before its first wildcard (<c>a.b.*.d</c> and
/// <c>a.b.&gt;</c> both give <c>a.b.</c>; <c>*.x</c> and <c>&gt;</c> give the empty prefix: every topic).
/// A glob matches more than its pattern; the node's own router matches exactly, so what a subscriber
/// receives is never more than its pattern says.
/// </summary>
internal readonly record struct CoverKey(string Literal, bool IsPrefix)
{
    public static CoverKey Of(string pattern)
    {
        int start = 0;
        while (start <= pattern.Length)
        {
            int end = pattern.IndexOf('.', start);
            if (end < 0)
            {
                end = pattern.Length;
            }

            if (end - start == 1 && pattern[start] is '*' or '>')
            {
                return new CoverKey(pattern[..start], IsPrefix: true); // validated: a wildcard is a whole token
            }

            start = end + 1;
        }

        return new CoverKey(pattern, IsPrefix: false);
    }

    /// <summary>Whether every topic this key matches, <paramref name="other"/> matches too, and they differ.</summary>
    public bool Covers(CoverKey other) => IsPrefix && other != this && other.Literal.StartsWith(Literal, StringComparison.Ordinal);

    /// <summary>Whether <paramref name="topic"/> (ASCII bytes) is a topic of this key.</summary>
    public bool Matches(ReadOnlySpan<byte> topic)
    {
        if (topic.Length < Literal.Length || (!IsPrefix && topic.Length != Literal.Length))
        {
            return false;
        }

        for (int i = 0; i < Literal.Length; i++)
        {
            if (topic[i] != Literal[i])
            {
                return false;
            }
        }

        return true;
    }

    /// <summary>The Redis channel (exact) or glob (prefix) under <paramref name="channelPrefix"/>, glob characters escaped.</summary>
    public string RedisName(string channelPrefix)
    {
        if (!IsPrefix)
        {
            return channelPrefix + Literal;
        }

        var glob = new StringBuilder(channelPrefix.Length + Literal.Length + 8);
        foreach (char c in channelPrefix + Literal)
        {
            if (c is '*' or '?' or '[' or ']' or '\\')
            {
                glob.Append('\\');
            }

            glob.Append(c);
        }

        // The empty prefix (">" or "*.x") would glob the whole prefix, the nodes' own channels under "P." too
        // (queue group announcements, long-poll wakes, commands and replies): no topic starts with '.', so none is lost.
        return glob.Append(Literal.Length == 0 ? "[^.]*" : "*").ToString();
    }

    public override string ToString() => IsPrefix ? Literal + "*" : Literal;
}
