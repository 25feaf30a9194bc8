using System.Net;
using Herald.Broker.Transports;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Cors;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Monitoring;

/// <summary>What an operations endpoint is, as endpoint metadata: <see cref="MonitoringAccess"/> decides by it.</summary>
internal sealed class OperationsEndpoint
{
    /// <summary><c>/healthz</c>, <c>/readyz</c>: status and ports only; never behind the token (kubelets and HEALTHCHECKs send none).</summary>
    public static readonly OperationsEndpoint Probe = new();

    /// <summary><c>/metrics</c>, <c>/varz</c>, <c>/connz</c>, <c>/subsz</c>, <c>/statusz</c>: what clients do; behind the token when one is set.</summary>
    public static readonly OperationsEndpoint Guarded = new();

    /// <summary><c>/</c>, the status page: the monitoring listener only, behind the token (bearer or login cookie); refused with its login form.</summary>
    public static readonly OperationsEndpoint Page = new();

    /// <summary>The status page's static files and its login and logout: the monitoring listener only, no token (they carry no data).</summary>
    public static readonly OperationsEndpoint PageSupport = new();

    private OperationsEndpoint()
    {
    }

    /// <summary>Served on the monitoring listener only, under their one spelling.</summary>
    public bool IsPage => this == Page || this == PageSupport;
}

/// <summary>Marks endpoints as operations endpoints, outside the client CORS policy.</summary>
internal static class OperationsEndpointConventions
{
    public static TBuilder AsProbe<TBuilder>(this TBuilder builder)
        where TBuilder : IEndpointConventionBuilder => builder.WithMetadata(OperationsEndpoint.Probe).WithMetadata(new DisableCorsAttribute());

    public static TBuilder AsMonitoring<TBuilder>(this TBuilder builder)
        where TBuilder : IEndpointConventionBuilder => builder.WithMetadata(OperationsEndpoint.Guarded).WithMetadata(new DisableCorsAttribute());

    public static TBuilder AsStatusPage<TBuilder>(this TBuilder builder, bool support = false)
        where TBuilder : IEndpointConventionBuilder => builder.WithMetadata(support ? OperationsEndpoint.PageSupport : OperationsEndpoint.Page).WithMetadata(new DisableCorsAttribute());
}

/// <summary>
/// Who may reach the operations endpoints, decided per request by the listener it came in on (the local
/// port of the connection, never the client's <c>Host</c> header, which is only checked against the listener's names) and the endpoint's
/// <see cref="OperationsEndpoint"/> mark. Runs after routing and before CORS, so a refusal carries no CORS header:
/// <list type="bullet">
/// <item>the monitoring listener serves the operations endpoints and nothing else (no long-poll, no policy files);</item>
/// <item>the client HTTP port serves the probes only with <see cref="MonitoringOptions.ProbesOnHttpPort"/>, and
/// <c>/metrics</c>, <c>/varz</c>, <c>/connz</c>, <c>/subsz</c>, <c>/statusz</c> only when a <see cref="MonitoringOptions.Token"/> is set;
/// never the status page (<c>/</c>, its files, its login);</item>
/// <item>with a token, those and the status page need it (401 otherwise): <c>Authorization: Bearer &lt;token&gt;</c> on
/// either listener, or on the monitoring listener the status page's login cookie (<see cref="MonitoringLogin"/>);</item>
/// <item>the status page's routes answer only their one spelling: a request whose raw target differs from its
/// decoded path (<c>/%2e%2e/</c>, <c>/assets/..%2f</c>, <c>/assets/status%2ejs</c>) is 404, whatever Kestrel made of it.</item>
/// </list>
/// Not on the message path: one metadata lookup per HTTP request.
/// </summary>
internal sealed class MonitoringAccess
{
    private readonly RequestDelegate _next;
    private readonly MonitoringOptions _options;
    private readonly Listeners _listeners;
    private readonly MonitoringLogin _login;

    public MonitoringAccess(RequestDelegate next, MonitoringOptions options, Listeners listeners, MonitoringLogin login)
    {
        _next = next;
        _options = options;
        _listeners = listeners;
        _login = login;
    }

    public async Task InvokeAsync(HttpContext context)
    {
        OperationsEndpoint? kind = context.GetEndpoint()?.Metadata.GetMetadata<OperationsEndpoint>();
        bool onMonitoringListener = _listeners.MonitoringPort is { } port && context.Connection.LocalPort == port;
        bool served = onMonitoringListener
            ? kind is not null && (!kind.IsPage || IsCanonical(context))
            : kind is null || (kind == OperationsEndpoint.Probe ? _options.ProbesOnHttpPort : kind == OperationsEndpoint.Guarded && _login.Required);
        if (!served)
        {
            context.Response.StatusCode = StatusCodes.Status404NotFound;
            return;
        }

        bool needsCredential = (kind == OperationsEndpoint.Guarded || kind == OperationsEndpoint.Page) && _login.Required;
        bool checksHost = onMonitoringListener && kind != OperationsEndpoint.Probe;
        bool bearer = false;
        if ((needsCredential || checksHost) && _login.Required && context.Request.Headers.Authorization.Count > 0)
        {
            // A token is tried: a source that guessed wrong before waits its turn (MonitoringLogin.CheckTurnAsync).
            IPAddress? source = context.Connection.RemoteIpAddress;
            await _login.CheckTurnAsync(source, context.RequestAborted).ConfigureAwait(false);
            bearer = _login.HasBearer(context.Request);
            _login.Checked(source, bearer);
        }

        if (checksHost && !bearer && !IsAllowedHost(context.Request.Host))
        {
            context.Response.StatusCode = StatusCodes.Status421MisdirectedRequest; // a name this listener is not (DNS rebinding)
            return;
        }

        if (needsCredential && !bearer && !(onMonitoringListener && _login.HasSession(context)))
        {
            context.Response.StatusCode = StatusCodes.Status401Unauthorized;
            context.Response.Headers.WWWAuthenticate = "Bearer realm=\"herald-monitoring\"";
            if (kind == OperationsEndpoint.Page)
            {
                await context.RequestServices.GetRequiredService<StatusPage>().WriteLoginAsync(context, failed: false).ConfigureAwait(false);
            }

            return;
        }

        await _next(context).ConfigureAwait(false);
    }

    /// <summary>
    /// Whether the <c>Host</c> header names this listener: an IP address (a rebinding page always names its own
    /// domain), <c>localhost</c>, or one of <see cref="MonitoringOptions.AllowedHosts"/>; no <c>Host</c> (HTTP/1.0) too.
    /// </summary>
    private bool IsAllowedHost(HostString host)
    {
        if (!host.HasValue)
        {
            return true;
        }

        string name = host.Host;
        if (IPAddress.TryParse(name.AsSpan().Trim('[').TrimEnd(']'), out _) || name.Equals("localhost", StringComparison.OrdinalIgnoreCase))
        {
            return true;
        }

        foreach (string allowed in _options.AllowedHosts)
        {
            if (name.Equals(allowed, StringComparison.OrdinalIgnoreCase))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>Whether the request's raw target (without its query) is its decoded path, character for character.</summary>
    private static bool IsCanonical(HttpContext context)
    {
        string? raw = context.Features.Get<IHttpRequestFeature>()?.RawTarget;
        if (raw is null)
        {
            return false;
        }

        int query = raw.IndexOf('?', StringComparison.Ordinal);
        ReadOnlySpan<char> target = query < 0 ? raw : raw.AsSpan(0, query);
        string path = context.Request.PathBase.Add(context.Request.Path).Value ?? "";
        return target.SequenceEqual(path);
    }
}
