using System.IdentityModel.Tokens.Jwt;
using System.Security.Claims;
using System.Security.Cryptography;
using System.Text;
using Microsoft.IdentityModel.Tokens;

namespace Herald.Broker.Security;

/// <summary>
/// Turns the credential a client presents (HELLO's <c>auth</c>, or an HTTP bearer token) into an
/// <see cref="Identity"/>, by the configured mode. Never logs a credential.
/// </summary>
internal sealed class Authenticator
{
    private readonly SecurityOptions _options;
    private readonly TimeProvider _time;
    private readonly (byte[] Hash, Identity Identity)[] _tokens;
    private readonly TokenValidationParameters? _jwt;

    public Authenticator(SecurityOptions options, TimeProvider time)
    {
        _options = options;
        _time = time;
        _tokens = _options.Auth.Tokens
            .Select(t => (Convert.FromHexString(t.Sha256), Create(t.Name, t.Permissions.Publish, t.Permissions.Subscribe, t.Permissions.DenyPublish, t.Permissions.DenySubscribe, null,
                new PresenceRights(t.Permissions.Join, t.Permissions.DenyJoin, t.Permissions.Presence, t.Permissions.DenyPresence), info: null)))
            .ToArray();
        if (_options.Auth.Mode == AuthMode.Jwt)
        {
            _jwt = JwtParameters(_options.Auth.Jwt);
        }
    }

    public AuthMode Mode => _options.Auth.Mode;

    public TimeSpan FailureDelay => _options.Auth.FailureDelay;

    /// <summary>The identity for <paramref name="credential"/>, or null with <paramref name="failure"/> saying why (without the credential).</summary>
    public Identity? Authenticate(string? credential, out string failure)
    {
        failure = "";
        switch (_options.Auth.Mode)
        {
            case AuthMode.None:
                return Identity.Anonymous;
            case AuthMode.Token:
                if (string.IsNullOrEmpty(credential))
                {
                    failure = "A token is required.";
                    return null;
                }

                byte[] hash = SHA256.HashData(Encoding.UTF8.GetBytes(credential));
                foreach ((byte[] expected, Identity identity) in _tokens)
                {
                    if (CryptographicOperations.FixedTimeEquals(hash, expected))
                    {
                        return identity;
                    }
                }

                failure = "The token is not valid.";
                return null;
            default:
                return ValidateJwt(credential, out failure);
        }
    }

    private Identity? ValidateJwt(string? credential, out string failure)
    {
        failure = "";
        if (string.IsNullOrEmpty(credential))
        {
            failure = "A JWT is required.";
            return null;
        }

        try
        {
            var handler = new JwtSecurityTokenHandler { MapInboundClaims = false };
            ClaimsPrincipal principal = handler.ValidateToken(credential, _jwt, out SecurityToken token);
            if (principal.FindFirst("sub")?.Value is not { Length: > 0 } subject)
            {
                failure = "The JWT has no sub claim: every identity is its token's subject.";
                return null;
            }

            var presence = new PresenceRights(Claims(principal, "herald_join"), Claims(principal, "herald_deny_join"), Claims(principal, "herald_presence"), Claims(principal, "herald_deny_presence"));
            string? info = principal.FindFirst("herald_info")?.Value; // its size is held to Herald:Presence:MaxInfoBytes where it is used
            return Create(subject, Claims(principal, "herald_pub"), Claims(principal, "herald_sub"), Claims(principal, "herald_deny_pub"), Claims(principal, "herald_deny_sub"), token.ValidTo == DateTime.MinValue ? null : new DateTimeOffset(token.ValidTo, TimeSpan.Zero), presence, info);
        }
        catch (Exception e) when (e is SecurityTokenException or ArgumentException or FormatException)
        {
            failure = e switch
            {
                SecurityTokenExpiredException => "The JWT has expired.",
                SecurityTokenNotYetValidException => "The JWT is not valid yet.",
                SecurityTokenInvalidAudienceException => "The JWT is for another audience.",
                SecurityTokenInvalidIssuerException => "The JWT is from another issuer.",
                SecurityTokenNoExpirationException => "The JWT has no exp claim (Herald:Security:Auth:Jwt:RequireExpiration).",
                SecurityTokenSignatureKeyNotFoundException or SecurityTokenInvalidSignatureException => "The JWT signature is not valid.",
                _ => "The JWT is not valid.",
            };
            return null;
        }
    }

    private TokenValidationParameters JwtParameters(JwtOptions jwt)
    {
        IList<SecurityKey> keys;
        if (!string.IsNullOrEmpty(jwt.JwksFile))
        {
            keys = new JsonWebKeySet(File.ReadAllText(jwt.JwksFile)).GetSigningKeys();
        }
        else if (!string.IsNullOrEmpty(jwt.HmacSecret))
        {
            keys = [new SymmetricSecurityKey(Encoding.UTF8.GetBytes(jwt.HmacSecret))];
        }
        else
        {
            string pem = File.ReadAllText(jwt.PublicKeyPemFile!);
            keys = [TryEcdsa(pem, out ECDsa? ecdsa) ? new ECDsaSecurityKey(ecdsa) : Rsa(pem)];
        }

        return new TokenValidationParameters
        {
            IssuerSigningKeys = keys,
            ValidateIssuerSigningKey = true,
            ValidateIssuer = !string.IsNullOrEmpty(jwt.Issuer),
            ValidIssuer = jwt.Issuer,
            ValidateAudience = !string.IsNullOrEmpty(jwt.Audience),
            ValidAudience = jwt.Audience,
            ValidateLifetime = true,
            RequireExpirationTime = jwt.RequireExpiration,
            ClockSkew = jwt.ClockSkew,
            LifetimeValidator = (notBefore, expires, _, p) => Lifetime(notBefore, expires, p.ClockSkew),
        };
    }

    private bool Lifetime(DateTime? notBefore, DateTime? expires, TimeSpan skew)
    {
        if (expires is null && _options.Auth.Jwt.RequireExpiration)
        {
            throw new SecurityTokenNoExpirationException("no exp");
        }

        DateTime now = _time.GetUtcNow().UtcDateTime;
        if (notBefore is { } nbf && now + skew < nbf)
        {
            throw new SecurityTokenNotYetValidException("not yet valid");
        }

        if (expires is { } exp && now - skew >= exp)
        {
            throw new SecurityTokenExpiredException("expired");
        }

        return true;
    }

    private static RsaSecurityKey Rsa(string pem)
    {
        var rsa = RSA.Create();
        rsa.ImportFromPem(pem);
        return new RsaSecurityKey(rsa);
    }

    private static bool TryEcdsa(string pem, [System.Diagnostics.CodeAnalysis.NotNullWhen(true)] out ECDsa? ecdsa)
    {
        ecdsa = ECDsa.Create();
        try
        {
            ecdsa.ImportFromPem(pem);
            return true;
        }
        catch (CryptographicException)
        {
            ecdsa.Dispose();
            ecdsa = null;
            return false;
        }
        catch (ArgumentException)
        {
            ecdsa.Dispose();
            ecdsa = null;
            return false;
        }
    }

    /// <summary>The identity a backend's connect hook named (protocol-spec/hooks.md §2): permissions of the shape a configured token has.</summary>
    public Identity IdentityOf(string name, PermissionOptions? permissions, DateTimeOffset? expiresAt, string? info)
    {
        PermissionOptions p = permissions ?? new PermissionOptions();
        return Create(name, p.Publish, p.Subscribe, p.DenyPublish, p.DenySubscribe, expiresAt, new PresenceRights(p.Join, p.DenyJoin, p.Presence, p.DenyPresence), info);
    }

    private static IEnumerable<string> Claims(ClaimsPrincipal principal, string type) => principal.FindAll(type).Select(c => c.Value);

    /// <summary>An identity named <paramref name="name"/>, with its own inbox prefix (spec §7) granted when inbox replies are on.</summary>
    private Identity Create(string name, IEnumerable<string> publish, IEnumerable<string> subscribe, IEnumerable<string> denyPublish, IEnumerable<string> denySubscribe, DateTimeOffset? expiresAt, PresenceRights presence, string? info)
    {
        string inboxPrefix = Identity.InboxPrefixOf(name);
        var permissions = new Permissions(publish, subscribe, denyPublish, denySubscribe, _options.AllowInboxReplies ? inboxPrefix : null)
        {
            Join = [.. presence.Join],
            DenyJoin = [.. presence.DenyJoin],
            Presence = [.. presence.Read],
            DenyPresence = [.. presence.DenyRead],
        };
        return new Identity(name, permissions, expiresAt, inboxPrefix) { Info = info };
    }

    /// <summary>A credential's presence permissions (spec §10): join and read, each allowed and denied.</summary>
    private readonly record struct PresenceRights(IEnumerable<string> Join, IEnumerable<string> DenyJoin, IEnumerable<string> Read, IEnumerable<string> DenyRead);
}
