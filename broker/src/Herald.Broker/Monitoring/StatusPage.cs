using System.Collections.Frozen;
using System.Reflection;
using System.Security.Cryptography;
using System.Text;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Primitives;

namespace Herald.Broker.Monitoring;

/// <summary>
/// The live status page, served by the broker itself on the monitoring listener (README "Status page"):
/// <c>/</c> is the page, <c>/assets/{name}</c> its script, style sheet and icon, all compiled into the
/// assembly as embedded resources (<c>Monitoring/StatusPage/</c>) and read once at start. Nothing is
/// fetched from elsewhere: no CDN, fonts or chart library; the page draws its charts on a canvas and
/// reads <c>/statusz</c> every second.
/// </summary>
/// <remarks>
/// There is no file-system route: an asset is found by its exact name in a fixed table, so no request
/// reaches a file, and <see cref="MonitoringAccess"/> refuses any spelling of these routes but the plain one.
/// Every answer carries a Content-Security-Policy that allows the page's own script, style sheet, icon and
/// requests to this origin, and nothing else: no inline script or style, no other origin, no frames.
/// With a token, <c>/</c> without it is refused (401) with the login form (<see cref="MonitoringLogin"/>),
/// a page of its own that needs no script.
/// </remarks>
internal sealed class StatusPage
{
    /// <summary>The page's Content-Security-Policy.</summary>
    public const string ContentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

    private const string ResourcePrefix = "Herald.Broker.StatusPage.";

    private static readonly FrozenDictionary<string, string> ContentTypes = new Dictionary<string, string>(StringComparer.Ordinal)
    {
        [".html"] = "text/html; charset=utf-8",
        [".js"] = "text/javascript; charset=utf-8",
        [".css"] = "text/css; charset=utf-8",
        [".svg"] = "image/svg+xml",
    }.ToFrozenDictionary(StringComparer.Ordinal);

    private readonly Asset _index;
    private readonly Asset _login;
    private readonly Asset _loginFailed;
    private readonly FrozenDictionary<string, Asset> _assets;

    public StatusPage()
    {
        Assembly assembly = typeof(StatusPage).Assembly;
        var assets = new Dictionary<string, Asset>(StringComparer.Ordinal);
        foreach (string resource in assembly.GetManifestResourceNames())
        {
            if (!resource.StartsWith(ResourcePrefix, StringComparison.Ordinal))
            {
                continue;
            }

            string name = resource[ResourcePrefix.Length..];
            using Stream stream = assembly.GetManifestResourceStream(resource)!;
            using var copy = new MemoryStream();
            stream.CopyTo(copy);
            assets[name] = new Asset(copy.ToArray(), ContentTypes[Path.GetExtension(name)]);
        }

        _index = assets["index.html"];
        byte[] login = assets["login.html"].Bytes;
        _login = new Asset(login, assets["login.html"].ContentType);
        string failed = Encoding.UTF8.GetString(login).Replace("<p class=\"error\" hidden>", "<p class=\"error\">", StringComparison.Ordinal);
        _loginFailed = new Asset(Encoding.UTF8.GetBytes(failed), _login.ContentType);
        _assets = assets.Where(a => !a.Key.EndsWith(".html", StringComparison.Ordinal)).ToFrozenDictionary(StringComparer.Ordinal);
    }

    /// <summary>The names under <c>/assets/</c>.</summary>
    public IEnumerable<string> AssetNames => _assets.Keys;

    public static void MapStatusPage(IEndpointRouteBuilder app)
    {
        app.MapGet("/", (HttpContext context) => context.RequestServices.GetRequiredService<StatusPage>().ServeAsync(context, null)).AsStatusPage();
        app.MapGet("/assets/{name}", (HttpContext context, string name) => context.RequestServices.GetRequiredService<StatusPage>().ServeAsync(context, name)).AsStatusPage(support: true);
        app.MapPost("/login", LoginAsync).AsStatusPage(support: true);
        app.MapPost("/logout", Logout).AsStatusPage(support: true);
    }

    /// <summary>The login form (401), or with the "wrong token" line shown.</summary>
    public Task WriteLoginAsync(HttpContext context, bool failed)
    {
        context.Response.StatusCode = StatusCodes.Status401Unauthorized;
        context.Response.Headers.CacheControl = "no-store";
        return WriteAsync(context, failed ? _loginFailed : _login);
    }

    private Task ServeAsync(HttpContext context, string? name)
    {
        Asset? asset = name is null ? _index : _assets.GetValueOrDefault(name);
        if (asset is null)
        {
            context.Response.StatusCode = StatusCodes.Status404NotFound;
            return Task.CompletedTask;
        }

        context.Response.Headers.CacheControl = "no-cache"; // revalidated: a new broker version serves its own page
        context.Response.Headers.ETag = asset.ETag;
        if (context.Request.Headers.IfNoneMatch == asset.ETag)
        {
            SecurityHeaders(context.Response);
            context.Response.StatusCode = StatusCodes.Status304NotModified;
            return Task.CompletedTask;
        }

        return WriteAsync(context, asset);
    }

    /// <summary>
    /// <c>POST /login</c> with the form field <c>token</c>: the session cookie and back to the page (303), or
    /// the form again (401). Only from the page itself: a request that names another origin is refused (403),
    /// so another site cannot log a browser in. Without a token configured there is nothing to log in to (404).
    /// </summary>
    private static async Task LoginAsync(HttpContext context)
    {
        MonitoringLogin login = context.RequestServices.GetRequiredService<MonitoringLogin>();
        if (!login.Required)
        {
            context.Response.StatusCode = StatusCodes.Status404NotFound;
            return;
        }

        if (!FromThisOrigin(context.Request))
        {
            context.Response.StatusCode = StatusCodes.Status403Forbidden;
            return;
        }

        if (!context.Request.HasFormContentType)
        {
            context.Response.StatusCode = StatusCodes.Status415UnsupportedMediaType;
            return;
        }

        IFormCollection form = await context.Request.ReadFormAsync(context.RequestAborted).ConfigureAwait(false);
        StringValues token = form["token"];
        await login.CheckTurnAsync(context.Connection.RemoteIpAddress, context.RequestAborted).ConfigureAwait(false); // a guesser's next try waits
        bool valid = token.Count == 1 && login.IsToken(token[0]);
        login.Checked(context.Connection.RemoteIpAddress, valid);
        if (!valid)
        {
            await context.RequestServices.GetRequiredService<StatusPage>().WriteLoginAsync(context, failed: true).ConfigureAwait(false);
            return;
        }

        login.SignIn(context);
        SeeOther(context);
    }

    /// <summary><c>POST /logout</c>: ends the session on the broker and forgets the cookie, back to the page (303), which asks for the token again.</summary>
    private static void Logout(HttpContext context)
    {
        if (!FromThisOrigin(context.Request))
        {
            context.Response.StatusCode = StatusCodes.Status403Forbidden;
            return;
        }

        context.RequestServices.GetRequiredService<MonitoringLogin>().SignOut(context); // the session ends on the broker too
        SeeOther(context);
    }

    /// <summary>Back to the page, relative: it works under a proxy's path prefix too.</summary>
    private static void SeeOther(HttpContext context)
    {
        context.Response.StatusCode = StatusCodes.Status303SeeOther;
        context.Response.Headers.Location = "./";
        context.Response.Headers.CacheControl = "no-store";
    }

    /// <summary>
    /// No <c>Origin</c> (curl, an old browser) or this very origin (<c>null</c>, a sandboxed frame's or a
    /// no-referrer page's, is refused); <c>Sec-Fetch-Site</c>, when sent, same-origin.
    /// </summary>
    private static bool FromThisOrigin(HttpRequest request)
    {
        string? site = request.Headers["Sec-Fetch-Site"];
        if (site is not null && site != "same-origin")
        {
            return false;
        }

        string? origin = request.Headers.Origin;
        return origin is null || string.Equals(origin, request.Scheme + "://" + request.Host.Value, StringComparison.OrdinalIgnoreCase);
    }

    private static Task WriteAsync(HttpContext context, Asset asset)
    {
        HttpResponse response = context.Response;
        SecurityHeaders(response);
        response.ContentType = asset.ContentType;
        response.ContentLength = asset.Bytes.Length;
        return response.Body.WriteAsync(asset.Bytes, context.RequestAborted).AsTask();
    }

    private static void SecurityHeaders(HttpResponse response)
    {
        response.Headers.ContentSecurityPolicy = ContentSecurityPolicy;
        response.Headers.XContentTypeOptions = "nosniff";
        response.Headers.XFrameOptions = "DENY";
        response.Headers["Referrer-Policy"] = "same-origin"; // not no-referrer: then a browser's form POST says Origin: null, and the login could not tell its own page from any other
        response.Headers["Cross-Origin-Opener-Policy"] = "same-origin";
        response.Headers["Cross-Origin-Resource-Policy"] = "same-origin";
    }

    private sealed class Asset(byte[] bytes, string contentType)
    {
        public byte[] Bytes { get; } = bytes;

        public string ContentType { get; } = contentType;

        public string ETag { get; } = "\"" + Convert.ToHexStringLower(SHA256.HashData(bytes).AsSpan(0, 8)) + "\"";
    }
}
