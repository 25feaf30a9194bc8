using System.Buffers.Text;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;
using Microsoft.AspNetCore.Http;

namespace Herald.Broker.Monitoring;

/// <summary>
/// The monitoring token, and the browser's way to present it. Programs (curl, Prometheus) send
/// <c>Authorization: Bearer &lt;token&gt;</c>. A browser cannot put a header on a page load, so the status
/// page's login form posts the token once (in the body: never in a URL, where it would reach logs, history
/// and <c>Referer</c>) and gets a session cookie for the monitoring listener:
/// <code>
/// herald-monitoring-&lt;port&gt; = &lt;expiry, unix seconds&gt;.&lt;base64url HMAC-SHA256(key: SHA-256 of the token, "herald-monitoring.v1.&lt;port&gt;.&lt;expiry&gt;")&gt;
/// HttpOnly; SameSite=Strict; Path=/; Max-Age=43200
/// </code>
/// The cookie carries no token and no state on the broker: it proves its holder knew the token, until it
/// expires (<see cref="Lifetime"/>) or the token changes. HttpOnly keeps it from scripts, SameSite=Strict from
/// other sites' requests. Browsers keep cookies per host, not per port, so the client HTTP port of the same
/// host receives it too: <see cref="MonitoringAccess"/> honours it on the monitoring listener only. Not
/// <c>Secure</c>: the monitoring listener speaks plain HTTP (loopback by default); behind a TLS proxy, the
/// proxy may add it. Thread-safe (immutable).
/// </summary>
internal sealed class MonitoringLogin
{
    /// <summary>How long a login lasts.</summary>
    public static readonly TimeSpan Lifetime = TimeSpan.FromHours(12);

    private const string Scheme = "Bearer ";

    private readonly byte[]? _tokenHash;
    private readonly TimeProvider _time;

    public MonitoringLogin(MonitoringOptions options, TimeProvider time)
    {
        _tokenHash = string.IsNullOrEmpty(options.Token) ? null : SHA256.HashData(Encoding.UTF8.GetBytes(options.Token));
        _time = time;
    }

    /// <summary>Whether a token is configured: without one, monitoring is open (on its listener only).</summary>
    public bool Required => _tokenHash is not null;

    /// <summary>The cookie's name on the monitoring listener of <paramref name="port"/>: two brokers on one host keep theirs apart.</summary>
    public static string CookieName(int port) => "herald-monitoring-" + port.ToString(CultureInfo.InvariantCulture);

    /// <summary>Whether <paramref name="presented"/> is the token, compared by its SHA-256 in fixed time.</summary>
    public bool IsToken(ReadOnlySpan<char> presented)
    {
        if (_tokenHash is null)
        {
            return false;
        }

        Span<byte> hash = stackalloc byte[SHA256.HashSizeInBytes];
        byte[] bytes = Encoding.UTF8.GetBytes(presented.ToString());
        SHA256.HashData(bytes, hash);
        return CryptographicOperations.FixedTimeEquals(hash, _tokenHash);
    }

    /// <summary>Whether the request carries <c>Authorization: Bearer &lt;token&gt;</c>.</summary>
    public bool HasBearer(HttpRequest request)
    {
        string? header = request.Headers.Authorization;
        return header is not null && header.StartsWith(Scheme, StringComparison.OrdinalIgnoreCase) && IsToken(header.AsSpan(Scheme.Length).Trim());
    }

    /// <summary>Whether the request carries a valid, unexpired session cookie of the listener it came in on.</summary>
    public bool HasSession(HttpContext context)
    {
        int port = context.Connection.LocalPort;
        string? cookie = context.Request.Cookies[CookieName(port)];
        if (_tokenHash is null || cookie is null)
        {
            return false;
        }

        int dot = cookie.IndexOf('.', StringComparison.Ordinal);
        if (dot <= 0
            || !long.TryParse(cookie.AsSpan(0, dot), NumberStyles.None, CultureInfo.InvariantCulture, out long expiry)
            || expiry <= _time.GetUtcNow().ToUnixTimeSeconds())
        {
            return false;
        }

        Span<byte> presented = stackalloc byte[HMACSHA256.HashSizeInBytes];
        return TryDecode(cookie.AsSpan(dot + 1), presented)
            && CryptographicOperations.FixedTimeEquals(presented, Sign(port, expiry));
    }

    /// <summary>
    /// The signature a cookie presents, or false. <c>Base64Url.TryDecodeFromChars</c> throws (rather than answering false)
    /// for a last character whose unused bits are not zero, which is what a forged cookie may well end with: a forgery
    /// is refused like any other, never answered 500.
    /// </summary>
    private static bool TryDecode(ReadOnlySpan<char> encoded, Span<byte> signature)
    {
        try
        {
            return Base64Url.TryDecodeFromChars(encoded, signature, out int written) && written == signature.Length;
        }
        catch (FormatException)
        {
            return false;
        }
    }

    /// <summary>Gives the browser its session cookie (after the token was checked).</summary>
    public void SignIn(HttpContext context)
    {
        int port = context.Connection.LocalPort;
        long expiry = _time.GetUtcNow().Add(Lifetime).ToUnixTimeSeconds();
        string value = expiry.ToString(CultureInfo.InvariantCulture) + "." + Base64Url.EncodeToString(Sign(port, expiry));
        context.Response.Cookies.Append(CookieName(port), value, Options(Lifetime));
    }

    /// <summary>Tells the browser to forget its session cookie.</summary>
    public static void SignOut(HttpContext context) =>
        context.Response.Cookies.Append(CookieName(context.Connection.LocalPort), "", Options(TimeSpan.Zero));

    private byte[] Sign(int port, long expiry) =>
        HMACSHA256.HashData(_tokenHash!, Encoding.ASCII.GetBytes(string.Create(CultureInfo.InvariantCulture, $"herald-monitoring.v1.{port}.{expiry}")));

    private static CookieOptions Options(TimeSpan maxAge) => new()
    {
        HttpOnly = true,
        SameSite = SameSiteMode.Strict,
        Path = "/",
        MaxAge = maxAge,
        IsEssential = true,
    };
}
