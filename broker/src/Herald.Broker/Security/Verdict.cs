using System.Net;

namespace Herald.Broker.Security;

/// <summary>What an access decision came to.</summary>
internal enum VerdictKind
{
    Allow,

    /// <summary>Refused: told to the client as <c>PermissionDenied</c> (a connection: <c>AuthenticationFailed</c>).</summary>
    Refuse,

    /// <summary>The backend did not decide (a hook's failure under the <c>Refuse</c> policy): <c>HookUnavailable</c>.</summary>
    Unavailable,
}

/// <summary>
/// One access decision (<see cref="IAccessDecisions"/>): allowed, refused with the reason the client is told, or not
/// decided; a connection's allowed verdict carries its identity. <see cref="CacheSeconds"/>: how long the backend said
/// the answer holds.
/// </summary>
internal sealed record Verdict(VerdictKind Kind, string? Reason = null, Identity? Identity = null, int CacheSeconds = 0)
{
    public static readonly Verdict Allowed = new(VerdictKind.Allow);

    public static ValueTask<Verdict> AllowedNow => new(Allowed);

    public static Verdict Refused(string? reason) => new(VerdictKind.Refuse, reason);

    public static Verdict Unavailable(string reason) => new(VerdictKind.Unavailable, reason);
}

/// <summary>A connecting client as the connect decision sees it: its credential, how and where from it came, what it says of itself.</summary>
internal readonly record struct ConnectQuestion(string? Credential, string Transport, EndPoint? Remote, string? ClientName, string? Info);
