using System.Security.Cryptography;
using System.Text;
using Herald.Protocol;

namespace Herald.Broker.Security;

/// <summary>
/// What one identity may do (deny wins over allow). Subscribing is checked against the pattern as a
/// whole: it must be covered by an allowed pattern (everything it can match is allowed) and must not
/// intersect a denied one (it could never receive a denied topic), so no wildcard can leak a topic that
/// was not granted. Checked once per SUBSCRIBE, and per PUBLISH only for restricted identities: the
/// per-PUBLISH checks take the topic's characters as a span and allocate nothing.
/// </summary>
internal sealed class Permissions
{
    public static readonly Permissions AllowAll = new([">"], [">"], [], [], inboxPrefix: null) { Join = [">"], Presence = [">"] };

    private readonly string[] _publish;
    private readonly string[] _subscribe;
    private readonly string[] _denyPublish;
    private readonly string[] _denySubscribe;
    private readonly string? _inbox;

    /// <param name="inboxPrefix">The identity's own inbox prefix (spec §7): it may subscribe to and publish under it; null grants no inbox.</param>
    public Permissions(IEnumerable<string> publish, IEnumerable<string> subscribe, IEnumerable<string> denyPublish, IEnumerable<string> denySubscribe, string? inboxPrefix)
    {
        _publish = [.. publish];
        _subscribe = [.. subscribe];
        _denyPublish = [.. denyPublish];
        _denySubscribe = [.. denySubscribe];
        _inbox = inboxPrefix is null ? null : inboxPrefix + ".>";
        IsAllowAll = _publish.Contains(">") && _subscribe.Contains(">") && _denyPublish.Length == 0 && _denySubscribe.Length == 0;
    }

    /// <summary>Topics the identity may be present on (spec §10, §15.1: SUBSCRIBE's join bit); deny wins.</summary>
    public string[] Join { get; init; } = [];

    public string[] DenyJoin { get; init; } = [];

    /// <summary>Topics whose presence the identity may read (members, occupancy, join and leave events; spec §10, §15); deny wins.</summary>
    public string[] Presence { get; init; } = [];

    public string[] DenyPresence { get; init; } = [];

    /// <summary>Whether the identity may be present on <paramref name="topic"/> (one topic, no wildcards); subscribing to it is checked apart.</summary>
    public bool CanJoin(string topic) => !MatchesAny(DenyJoin, topic) && MatchesAny(Join, topic);

    /// <summary>Whether the identity may read <paramref name="topic"/>'s presence (one topic, no wildcards); subscribing to it is checked apart.</summary>
    public bool CanReadPresence(string topic) => !MatchesAny(DenyPresence, topic) && MatchesAny(Presence, topic);

    /// <summary>Nothing to check per publish, and no reply permission to record per delivery.</summary>
    public bool IsAllowAll { get; }

    public bool CanPublish(ReadOnlySpan<char> topic) =>
        IsAllowAll || (!MatchesAny(_denyPublish, topic) && ((_inbox is not null && Topic.Matches(_inbox, topic)) || MatchesAny(_publish, topic)));

    /// <summary>
    /// Whether the identity may subscribe to this one topic (no wildcards): a PUBLISH's <c>reply_to</c>. For a
    /// topic, "covered by" and "intersects" are both "matches", so this is <see cref="CanSubscribe"/> for it.
    /// </summary>
    public bool CanReceive(ReadOnlySpan<char> topic) =>
        IsAllowAll || (!MatchesAny(_denySubscribe, topic) && ((_inbox is not null && Topic.Matches(_inbox, topic)) || MatchesAny(_subscribe, topic)));

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

        return (_inbox is not null && Covers(_inbox, pattern)) || _subscribe.Any(a => Covers(a, pattern));
    }

    private static bool MatchesAny(string[] patterns, ReadOnlySpan<char> topic)
    {
        foreach (string pattern in patterns)
        {
            if (Topic.Matches(pattern, topic))
            {
                return true;
            }
        }

        return false;
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

/// <summary>
/// Who is on the other end, and until when the proof holds. <see cref="InboxPrefix"/> is the identity's
/// own part of the inbox space (spec §7): <c>_INBOX.</c> and the first 24 hex digits of the SHA-256 of
/// its name, so every identity has its own and only it may subscribe there. Anonymous clients (auth off)
/// may do everything, so theirs is the whole space, <c>_INBOX</c>.
/// </summary>
internal sealed record Identity(string Name, Permissions Permissions, DateTimeOffset? ExpiresAt, string InboxPrefix)
{
    /// <summary>The client info its credential vouches for (a JWT's <c>herald_info</c>, spec §4.1): replaces HELLO's; null: none.</summary>
    public string? Info { get; init; }

    public static readonly Identity Anonymous = new("anonymous", Permissions.AllowAll, null, "_INBOX");

    /// <summary>The inbox prefix of the identity named <paramref name="name"/>.</summary>
    public static string InboxPrefixOf(string name) =>
        ProtocolConstants.InboxPrefix + Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(name)).AsSpan(0, 12));
}
