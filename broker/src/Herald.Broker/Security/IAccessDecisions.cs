using Herald.Protocol;

namespace Herald.Broker.Security;

/// <summary>
/// The seam access decisions enter through: who a connecting client is, and whether a subscription or a publication
/// the identity's own permissions allow is also allowed at the moment it is made. <see cref="LocalAccess"/> (the
/// default) decides from configuration alone (<c>Herald:Security:Auth</c> and the identity's permissions);
/// <see cref="HookedAccess"/> asks the application's backend where a hook is configured (protocol-spec/hooks.md) and
/// leaves the rest to the local decisions it wraps. The session asks it once per HELLO (or HTTP credential), per
/// SUBSCRIBE, and per PUBLISH only when <see cref="DecidesPublications"/>; a decision that completes at once costs no
/// allocation and no await, and one that does not is awaited by the transport, which then carries the operation out.
/// </summary>
internal interface IAccessDecisions
{
    /// <summary>Whether the backend names a connecting client's identity (a connect hook), whatever <c>Herald:Security:Auth:Mode</c> says.</summary>
    bool DecidesConnections { get; }

    /// <summary>Whether a subscription may need the backend's decision (false: <see cref="SubscribeAsync"/> is never asked).</summary>
    bool DecidesSubscriptions { get; }

    /// <summary>Whether a publication may need the backend's decision (false: the publish path asks nothing).</summary>
    bool DecidesPublications { get; }

    /// <summary>The connecting client's identity (an allowed verdict's <see cref="Verdict.Identity"/>), or why not.</summary>
    ValueTask<Verdict> ConnectAsync(ConnectQuestion question);

    /// <summary>Whether <paramref name="identity"/> may subscribe to <paramref name="pattern"/> (which its permissions allow); its key names the answer.</summary>
    ValueTask<Verdict> SubscribeAsync(Identity identity, string pattern, string transport, string client);

    /// <summary>Whether the backend decides <paramref name="pattern"/> at all (a hook's patterns reach it).</summary>
    bool DecidesSubscription(string pattern);

    /// <summary>Whether the backend decides publications to <paramref name="topic"/> (a hook's patterns match it).</summary>
    bool DecidesPublication(ReadOnlySpan<char> topic);

    /// <summary>Whether <paramref name="identity"/> may publish <paramref name="publish"/> to <paramref name="topic"/> (which its permissions allow).</summary>
    ValueTask<Verdict> PublishAsync(Identity identity, string topic, in PublishFrame publish, string transport, string client);
}

/// <summary>The decisions configuration makes alone: the configured authentication; nothing beyond an identity's permissions.</summary>
internal sealed class LocalAccess(Authenticator authenticator) : IAccessDecisions
{
    public bool DecidesConnections => false;

    public bool DecidesSubscriptions => false;

    public bool DecidesPublications => false;

    public ValueTask<Verdict> ConnectAsync(ConnectQuestion question) => new(Connect(question));

    /// <summary>The configured authentication's verdict (<c>Herald:Security:Auth</c>).</summary>
    public Verdict Connect(ConnectQuestion question) =>
        authenticator.Authenticate(question.Credential, out string failure) is { } identity ? new Verdict(VerdictKind.Allow, Identity: identity) : Verdict.Refused(failure);

    public bool DecidesSubscription(string pattern) => false;

    public bool DecidesPublication(ReadOnlySpan<char> topic) => false;

    public ValueTask<Verdict> SubscribeAsync(Identity identity, string pattern, string transport, string client) => Verdict.AllowedNow;

    public ValueTask<Verdict> PublishAsync(Identity identity, string topic, in PublishFrame publish, string transport, string client) => Verdict.AllowedNow;
}
