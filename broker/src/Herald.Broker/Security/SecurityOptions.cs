namespace Herald.Broker.Security;

/// <summary>How clients prove who they are (Herald:Security:Auth:Mode).</summary>
public enum AuthMode
{
    /// <summary>Everyone is anonymous and may do everything (development default).</summary>
    None,

    /// <summary>Static tokens, configured by their SHA-256 hash.</summary>
    Token,

    /// <summary>JSON Web Tokens, HMAC-signed or signed with an RSA/ECDSA key.</summary>
    Jwt,
}

/// <summary>Authentication and authorization (Herald:Security). See the README's Security section.</summary>
public sealed class SecurityOptions
{
    public AuthOptions Auth { get; set; } = new();

    /// <summary>
    /// Let every identity publish to <c>_INBOX.</c> topics (replies) and subscribe to its own
    /// <c>_INBOX.&lt;unique&gt;.&gt;</c> (at least 16 characters of unique token), so request/reply works
    /// without granting everything.
    /// </summary>
    public bool AllowInboxReplies { get; set; } = true;
}

public sealed class AuthOptions
{
    public AuthMode Mode { get; set; } = AuthMode.None;

    /// <summary>How long a failed authentication waits before its ERROR, so timing tells nothing.</summary>
    public TimeSpan FailureDelay { get; set; } = TimeSpan.FromMilliseconds(500);

    /// <summary>The static tokens (mode <c>Token</c>).</summary>
    public List<TokenOptions> Tokens { get; set; } = [];

    public JwtOptions Jwt { get; set; } = new();
}

/// <summary>One static token: its SHA-256 (hex) and what its holder may do.</summary>
public sealed class TokenOptions
{
    /// <summary>Name of the identity, for logs and monitoring.</summary>
    public string Name { get; set; } = "";

    /// <summary>Lowercase hex SHA-256 of the token (the token itself is never stored): <c>printf %s "$TOKEN" | sha256sum</c>.</summary>
    public string Sha256 { get; set; } = "";

    public PermissionOptions Permissions { get; set; } = new();
}

/// <summary>Topic patterns an identity may publish to and subscribe to; deny wins over allow.</summary>
public sealed class PermissionOptions
{
    public List<string> Publish { get; set; } = [];

    public List<string> Subscribe { get; set; } = [];

    public List<string> DenyPublish { get; set; } = [];

    public List<string> DenySubscribe { get; set; } = [];
}

/// <summary>
/// JWT validation. Permissions come from the claims <c>herald_pub</c>, <c>herald_sub</c>,
/// <c>herald_deny_pub</c> and <c>herald_deny_sub</c> (string or array of strings).
/// </summary>
public sealed class JwtOptions
{
    /// <summary>HMAC secret (HS256/384/512), at least 32 bytes of UTF-8.</summary>
    public string? HmacSecret { get; set; }

    /// <summary>A PEM file with the RSA or ECDSA public key (RS*/PS*/ES*).</summary>
    public string? PublicKeyPemFile { get; set; }

    /// <summary>Required <c>iss</c>; not checked when empty.</summary>
    public string? Issuer { get; set; }

    /// <summary>Required <c>aud</c>; not checked when empty.</summary>
    public string? Audience { get; set; }

    /// <summary>Tolerance on <c>exp</c> and <c>nbf</c>.</summary>
    public TimeSpan ClockSkew { get; set; } = TimeSpan.FromSeconds(30);
}
