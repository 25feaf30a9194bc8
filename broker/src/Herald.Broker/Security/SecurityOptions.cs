using System.ComponentModel.DataAnnotations;

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

    public TlsOptions Tls { get; set; } = new();

    /// <summary>
    /// Let every identity subscribe to and publish under its own inbox prefix (spec §7, sent in WELCOME),
    /// and answer the requests delivered to it (<see cref="Responses"/>), so request/reply works without
    /// granting everything. No identity reaches another's inboxes unless its permissions grant them outright.
    /// </summary>
    public bool AllowInboxReplies { get; set; } = true;

    /// <summary>The reply permission a delivered request grants a restricted receiver (spec §10, NATS's <c>allow_responses</c>).</summary>
    public ResponseOptions Responses { get; set; } = new();

    /// <summary>Close a TCP connection after a refused SUBSCRIBE or PUBLISH (fatal <c>PermissionDenied</c>) instead of only telling it.</summary>
    public bool DisconnectOnPermissionDenied { get; set; }

    /// <summary>
    /// Identities the server API may hold revoked at once (spec §8 <c>Revoked</c>); a revocation past it is refused (the API
    /// answers 409), expired ones are dropped first. In a cluster the same bound holds the Redis hash of revocations.
    /// </summary>
    [Range(1, 10_000_000)]
    public int MaxRevocations { get; set; } = 10_000;
}

/// <summary>
/// A MESSAGE with a <c>reply_to</c>, delivered to a restricted identity, lets that session publish to the
/// reply topic <see cref="MaxMessages"/> times within <see cref="Expires"/> (Herald:Security:Responses).
/// A session holds at most <see cref="MaxPerSession"/> such permissions; past it the oldest is dropped.
/// </summary>
public sealed class ResponseOptions
{
    /// <summary>Replies one delivered request allows (NATS's default: 1).</summary>
    [Range(1, 1_000_000)]
    public int MaxMessages { get; set; } = 1;

    /// <summary>How long after the delivery the replies are allowed.</summary>
    public TimeSpan Expires { get; set; } = TimeSpan.FromMinutes(2);

    /// <summary>Reply permissions one session holds at once (the oldest goes first).</summary>
    [Range(1, 1_000_000)]
    public int MaxPerSession { get; set; } = 1024;
}

/// <summary>TLS on the TCP listeners and the HTTP port (Kestrel's TLS; TLS 1.2 and 1.3 only).</summary>
public sealed class TlsOptions
{
    /// <summary>Certificate: a PKCS#12 (.pfx) file, or a PEM certificate with <see cref="KeyPath"/>. Reloaded when the file changes.</summary>
    public string? CertificatePath { get; set; }

    /// <summary>PEM private key, when <see cref="CertificatePath"/> is a PEM certificate.</summary>
    public string? KeyPath { get; set; }

    /// <summary>Password of the .pfx (or of an encrypted PEM key).</summary>
    public string? Password { get; set; }

    /// <summary>Which TCP ports use TLS: empty (none), <c>all</c>, or a range <c>4502-4517</c> (plain and TLS side by side).</summary>
    public string TcpPorts { get; set; } = "";

    /// <summary>Serve HTTP (long-poll, monitoring) over TLS.</summary>
    public bool Http { get; set; }

    /// <summary>Time a client has to complete the TLS handshake.</summary>
    public TimeSpan HandshakeTimeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>Whether TCP <paramref name="port"/> (of the range starting at <paramref name="first"/>) uses TLS.</summary>
    public bool IsTlsPort(int port)
    {
        if (string.IsNullOrWhiteSpace(TcpPorts))
        {
            return false;
        }

        if (TcpPorts.Trim() is "all" or "*")
        {
            return true;
        }

        string[] range = TcpPorts.Split('-', StringSplitOptions.TrimEntries);
        return int.TryParse(range[0], out int low) && int.TryParse(range[^1], out int high) && port >= low && port <= high;
    }

    public bool Enabled => !string.IsNullOrWhiteSpace(TcpPorts) || Http;
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

    /// <summary>Topics the identity may be present on (spec §15.1, SUBSCRIBE's join bit); none unless named.</summary>
    public List<string> Join { get; set; } = [];

    public List<string> DenyJoin { get; set; } = [];

    /// <summary>Topics whose presence the identity may read (members, occupancy, join and leave events; spec §15); none unless named.</summary>
    public List<string> Presence { get; set; } = [];

    public List<string> DenyPresence { get; set; } = [];
}

/// <summary>
/// JWT validation. The identity is the token's <c>sub</c> (required); permissions come from the claims
/// <c>herald_pub</c>, <c>herald_sub</c>, <c>herald_deny_pub</c> and <c>herald_deny_sub</c> (string or
/// array of strings), presence's from <c>herald_join</c>, <c>herald_deny_join</c>, <c>herald_presence</c> and
/// <c>herald_deny_presence</c>; <c>herald_info</c> (a string) is the client info others see, replacing HELLO's.
/// </summary>
public sealed class JwtOptions
{
    /// <summary>HMAC secret (HS256/384/512), at least 32 bytes of UTF-8.</summary>
    public string? HmacSecret { get; set; }

    /// <summary>A PEM file with the RSA or ECDSA public key (RS*/PS*/ES*).</summary>
    public string? PublicKeyPemFile { get; set; }

    /// <summary>A JWKS file (JSON Web Key Set) whose keys may sign tokens; the token's <c>kid</c> picks one.</summary>
    public string? JwksFile { get; set; }

    /// <summary>Required <c>iss</c>; not checked when empty.</summary>
    public string? Issuer { get; set; }

    /// <summary>Required <c>aud</c>; not checked when empty.</summary>
    public string? Audience { get; set; }

    /// <summary>Refuse a JWT without <c>exp</c> (one that never expires).</summary>
    public bool RequireExpiration { get; set; } = true;

    /// <summary>Tolerance on <c>exp</c> and <c>nbf</c>.</summary>
    public TimeSpan ClockSkew { get; set; } = TimeSpan.FromSeconds(30);
}
