using Herald.Protocol;

namespace Herald.Broker.Security;

/// <summary>
/// What one identity may do (deny wins over allow). Subscribing is checked against the pattern as a
/// whole: it must be covered by an allowed pattern (everything it can match is allowed) and must not
/// intersect a denied one (it could never receive a denied topic), so no wildcard can leak a topic that
/// was not granted. Checked once per SUBSCRIBE, and per PUBLISH only for restricted identities.
/// </summary>
internal sealed class Permissions
{
    public static readonly Permissions AllowAll = new([">"], [">"], [], [], allowInbox: true);

    private readonly string[] _publish;
    private readonly string[] _subscribe;
    private readonly string[] _denyPublish;
    private readonly string[] _denySubscribe;
    private readonly bool _allowInbox;

    public Permissions(IEnumerable<string> publish, IEnumerable<string> subscribe, IEnumerable<string> denyPublish, IEnumerable<string> denySubscribe, bool allowInbox)
    {
        _publish = [.. publish];
        _subscribe = [.. subscribe];
        _denyPublish = [.. denyPublish];
        _denySubscribe = [.. denySubscribe];
        _allowInbox = allowInbox;
        IsAllowAll = _publish.Contains(">") && _subscribe.Contains(">") && _denyPublish.Length == 0 && _denySubscribe.Length == 0;
    }

    /// <summary>Nothing to check per publish.</summary>
    public bool IsAllowAll { get; }

    public bool CanPublish(string topic)
    {
        if (IsAllowAll)
        {
            return true;
        }

        if (_denyPublish.Any(d => Topic.Matches(d, topic)))
        {
            return false;
        }

        return (_allowInbox && topic.StartsWith(ProtocolConstants.InboxPrefix, StringComparison.Ordinal)) || _publish.Any(a => Topic.Matches(a, topic));
    }

    public bool CanSubscribe(string pattern)
    {
        if (IsAllowAll)
        {
            return true;
        }

        if (_denySubscribe.Any(d => Intersects(d, pattern)))
        {
            return false;
        }

        return (_allowInbox && IsPrivateInbox(pattern)) || _subscribe.Any(a => Covers(a, pattern));
    }

    /// <summary><c>_INBOX.&lt;unique&gt;.&gt;</c> or below it, with a literal unique token of at least 16 characters.</summary>
    private static bool IsPrivateInbox(string pattern)
    {
        if (!pattern.StartsWith(ProtocolConstants.InboxPrefix, StringComparison.Ordinal))
        {
            return false;
        }

        string rest = pattern[ProtocolConstants.InboxPrefix.Length..];
        int dot = rest.IndexOf('.');
        string unique = dot < 0 ? rest : rest[..dot];
        return unique.Length >= 16 && unique is not ("*" or ">");
    }

    /// <summary>Whether every topic <paramref name="specific"/> can match is also matched by <paramref name="general"/>.</summary>
    internal static bool Covers(string general, string specific)
    {
        string[] g = general.Split('.');
        string[] s = specific.Split('.');
        for (int i = 0; i < g.Length; i++)
        {
            if (g[i] == ">")
            {
                return i < s.Length; // '>' needs at least one token there, and takes everything after
            }

            if (i >= s.Length || s[i] == ">")
            {
                return false; // the specific one goes on (or further) where the general one stops
            }

            if (g[i] != "*" && (s[i] == "*" || g[i] != s[i]))
            {
                return false;
            }
        }

        return g.Length == s.Length;
    }

    /// <summary>Whether some topic is matched by both patterns.</summary>
    internal static bool Intersects(string a, string b)
    {
        string[] x = a.Split('.');
        string[] y = b.Split('.');
        for (int i = 0; ; i++)
        {
            bool xDone = i >= x.Length;
            bool yDone = i >= y.Length;
            if (xDone || yDone)
            {
                return xDone && yDone;
            }

            if (x[i] == ">" || y[i] == ">")
            {
                return true; // the rest of the other one (at least one token: both are here) can be absorbed
            }

            if (x[i] != "*" && y[i] != "*" && x[i] != y[i])
            {
                return false;
            }
        }
    }
}

/// <summary>Who is on the other end, and until when the proof holds.</summary>
internal sealed record Identity(string Name, Permissions Permissions, DateTimeOffset? ExpiresAt)
{
    public static readonly Identity Anonymous = new("anonymous", Permissions.AllowAll, null);
}
