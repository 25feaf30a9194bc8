using System.Buffers.Text;
using System.Collections.Concurrent;
using System.Globalization;
using System.Net;
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
/// herald-monitoring-&lt;port&gt; = &lt;expiry, unix seconds&gt;.&lt;session id&gt;.&lt;base64url HMAC-SHA256(key: SHA-256 of the token, "herald-monitoring.v2.&lt;port&gt;.&lt;expiry&gt;.&lt;session id&gt;")&gt;
/// HttpOnly; SameSite=Strict; Path=/; Max-Age=43200
/// </code>
/// The cookie carries no token: it proves its holder knew the token, while its session id is live on the broker
/// (at most <see cref="MaxSessions"/>, the oldest forgotten first), until it expires (<see cref="Lifetime"/>), the
/// token changes, the broker restarts, or "Log out" ends that session (a copy of the cookie is then worth nothing).
/// A wrong token (bearer or login form) puts its source address's next check <c>FailureDelay</c> later (see
/// <see cref="CheckTurnAsync"/>). HttpOnly keeps it from scripts, SameSite=Strict from
/// other sites' requests. Browsers keep cookies per host, not per port, so the client HTTP port of the same
/// host receives it too: <see cref="MonitoringAccess"/> honours it on the monitoring listener only. Not
/// <c>Secure</c>: the monitoring listener speaks plain HTTP (loopback by default); behind a TLS proxy, the
/// proxy may add it. Thread-safe (the sessions and failing addresses in concurrent maps).
/// </summary>
internal sealed class MonitoringLogin
{
    /// <summary>How long a login lasts.</summary>
    public static readonly TimeSpan Lifetime = TimeSpan.FromHours(12);

    private const string Scheme = "Bearer ";

    /// <summary>Most live logins kept; a login beyond it forgets the one that expires first.</summary>
    public const int MaxSessions = 1000;

    /// <summary>Most source addresses whose failures are remembered; past it, those whose delay has run out are forgotten.</summary>
    private const int MaxFailingAddresses = 10_000;

    private readonly byte[]? _tokenHash;
    private readonly TimeProvider _time;
    private readonly long _failureDelay; // milliseconds
    private readonly ConcurrentDictionary<string, long> _sessions = new(StringComparer.Ordinal); // live session id -> its expiry
    private readonly ConcurrentDictionary<IPAddress, long> _nextTry = new(); // a failing address -> when its next check may run (TickCount64)

    public MonitoringLogin(MonitoringOptions options, TimeProvider time)
    {
        _tokenHash = string.IsNullOrEmpty(options.Token) ? null : SHA256.HashData(Encoding.UTF8.GetBytes(options.Token));
        _time = time;
        _failureDelay = (long)options.FailureDelay.TotalMilliseconds;
    }

    /// <summary>
    /// Waits for <paramref name="source"/>'s turn to have a token checked: at once unless it failed before; after a
    /// failure, each try from it waits <c>FailureDelay</c> after the previous one (tries in parallel queue up, so one
    /// address gets one guess per delay). Asynchronous: no thread is held and no other address waits. Pair with
    /// <see cref="Checked"/>.
    /// </summary>
    public Task CheckTurnAsync(IPAddress? source, CancellationToken cancellationToken)
    {
        if (source is null || _failureDelay <= 0 || !_nextTry.ContainsKey(source))
        {
            return Task.CompletedTask;
        }

        long now = Environment.TickCount64;
        long turn = now;
        _nextTry.AddOrUpdate(source, now + _failureDelay, (_, next) =>
        {
            turn = Math.Max(next, now);
            return turn + _failureDelay;
        });
        return turn > now ? Task.Delay(TimeSpan.FromMilliseconds(turn - now), cancellationToken) : Task.CompletedTask;
    }

    /// <summary>The outcome of a check <see cref="CheckTurnAsync"/> let run: a success forgets the address's failures, a failure delays its next try.</summary>
    public void Checked(IPAddress? source, bool valid)
    {
        if (source is null || _failureDelay <= 0)
        {
            return;
        }

        if (valid)
        {
            _nextTry.TryRemove(source, out _);
            return;
        }

        long now = Environment.TickCount64;
        if (_nextTry.Count >= MaxFailingAddresses)
        {
            foreach (KeyValuePair<IPAddress, long> entry in _nextTry)
            {
                if (entry.Value <= now)
                {
                    _nextTry.TryRemove(entry);
                }
            }
        }

        _nextTry.AddOrUpdate(source, now + _failureDelay, (_, next) => Math.Max(next, now + _failureDelay));
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

    /// <summary>Whether the request carries a valid, unexpired session cookie of the listener it came in on, whose session is live.</summary>
    public bool HasSession(HttpContext context) =>
        TryReadSession(context, out string? id, out long expiry) && _sessions.TryGetValue(id, out long live) && live == expiry;

    /// <summary>The session a cookie names, when its signature is this broker's and it has not expired.</summary>
    private bool TryReadSession(HttpContext context, [System.Diagnostics.CodeAnalysis.NotNullWhen(true)] out string? id, out long expiry)
    {
        id = null;
        expiry = 0;
        int port = context.Connection.LocalPort;
        string? cookie = context.Request.Cookies[CookieName(port)];
        if (_tokenHash is null || cookie is null)
        {
            return false;
        }

        int dot = cookie.IndexOf('.', StringComparison.Ordinal);
        int last = cookie.LastIndexOf('.');
        if (dot <= 0 || last <= dot + 1
            || !long.TryParse(cookie.AsSpan(0, dot), NumberStyles.None, CultureInfo.InvariantCulture, out expiry)
            || expiry <= _time.GetUtcNow().ToUnixTimeSeconds())
        {
            return false;
        }

        string session = cookie[(dot + 1)..last];
        Span<byte> presented = stackalloc byte[HMACSHA256.HashSizeInBytes];
        if (!TryDecode(cookie.AsSpan(last + 1), presented) || !CryptographicOperations.FixedTimeEquals(presented, Sign(port, expiry, session)))
        {
            return false;
        }

        id = session;
        return true;
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

    /// <summary>Gives the browser its session cookie (after the token was checked): a new session, live until it expires or is logged out.</summary>
    public void SignIn(HttpContext context)
    {
        int port = context.Connection.LocalPort;
        long now = _time.GetUtcNow().ToUnixTimeSeconds();
        long expiry = _time.GetUtcNow().Add(Lifetime).ToUnixTimeSeconds();
        string id = Base64Url.EncodeToString(RandomNumberGenerator.GetBytes(16));
        if (_sessions.Count >= MaxSessions)
        {
            foreach (KeyValuePair<string, long> session in _sessions)
            {
                if (session.Value <= now)
                {
                    _sessions.TryRemove(session);
                }
            }

            if (_sessions.Count >= MaxSessions && _sessions.MinBy(static s => s.Value) is { Key: not null } oldest)
            {
                _sessions.TryRemove(oldest);
            }
        }

        _sessions[id] = expiry;
        string value = expiry.ToString(CultureInfo.InvariantCulture) + "." + id + "." + Base64Url.EncodeToString(Sign(port, expiry, id));
        context.Response.Cookies.Append(CookieName(port), value, Options(Lifetime));
    }

    /// <summary>Ends the session the request's cookie names (a copy of it is no login any more) and tells the browser to forget the cookie.</summary>
    public void SignOut(HttpContext context)
    {
        if (TryReadSession(context, out string? id, out _))
        {
            _sessions.TryRemove(id, out _);
        }

        context.Response.Cookies.Append(CookieName(context.Connection.LocalPort), "", Options(TimeSpan.Zero));
    }

    private byte[] Sign(int port, long expiry, string id) =>
        HMACSHA256.HashData(_tokenHash!, Encoding.ASCII.GetBytes(string.Create(CultureInfo.InvariantCulture, $"herald-monitoring.v2.{port}.{expiry}.{id}")));

    private static CookieOptions Options(TimeSpan maxAge) => new()
    {
        HttpOnly = true,
        SameSite = SameSiteMode.Strict,
        Path = "/",
        MaxAge = maxAge,
        IsEssential = true,
    };
}
