using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;

namespace Herald.Broker.Tests.Presence;

/// <summary>
/// The identities the presence tests play (token auth): alice may publish, subscribe, join and read presence under
/// <c>room.&gt;</c>; bob the same; eve may publish and subscribe there but join only <c>lobby</c> and is denied reading
/// presence under <c>room.&gt;</c> (the adversary).
/// </summary>
internal static class PresenceIdentities
{
    public static void Configure(HeraldOptions o)
    {
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.Zero;
        o.Security.Auth.Tokens.Add(new TokenOptions
        {
            Name = "alice",
            Sha256 = TestTokens.Sha256("alice-token"),
            Permissions = { Publish = { "room.>" }, Subscribe = { "room.>" }, Join = { "room.>" }, Presence = { "room.>" } },
        });
        o.Security.Auth.Tokens.Add(new TokenOptions
        {
            Name = "bob",
            Sha256 = TestTokens.Sha256("bob-token"),
            Permissions = { Publish = { "room.>" }, Subscribe = { "room.>" }, Join = { "room.>" }, Presence = { "room.>" } },
        });
        o.Security.Auth.Tokens.Add(new TokenOptions
        {
            Name = "eve",
            Sha256 = TestTokens.Sha256("eve-token"),
            Permissions = { Publish = { "room.>" }, Subscribe = { "room.>" }, Join = { "lobby" }, DenyPresence = { "room.>" } },
        });
    }

    /// <summary>A broker with these identities, and <paramref name="more"/> options.</summary>
    public static Task<TestBroker> StartBrokerAsync(Action<HeraldOptions>? more = null) => TestBroker.StartAsync(o =>
    {
        Configure(o);
        more?.Invoke(o);
    });
}
