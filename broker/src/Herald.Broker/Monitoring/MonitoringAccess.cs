using System.Security.Cryptography;
using System.Text;
using Herald.Broker.Transports;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Cors;
using Microsoft.AspNetCore.Http;

namespace Herald.Broker.Monitoring;

/// <summary>What an operations endpoint is, as endpoint metadata: <see cref="MonitoringAccess"/> decides by it.</summary>
internal sealed class OperationsEndpoint
{
    /// <summary><c>/healthz</c>, <c>/readyz</c>: status and ports only; never behind the token (kubelets and HEALTHCHECKs send none).</summary>
    public static readonly OperationsEndpoint Probe = new();

    /// <summary><c>/metrics</c>, <c>/varz</c>, <c>/connz</c>, <c>/subsz</c>: what clients do; behind the token when one is set.</summary>
    public static readonly OperationsEndpoint Guarded = new();

    private OperationsEndpoint()
    {
    }
}

/// <summary>Marks endpoints as operations endpoints, outside the client CORS policy.</summary>
internal static class OperationsEndpointConventions
{
    public static TBuilder AsProbe<TBuilder>(this TBuilder builder)
        where TBuilder : IEndpointConventionBuilder => builder.WithMetadata(OperationsEndpoint.Probe).WithMetadata(new DisableCorsAttribute());

    public static TBuilder AsMonitoring<TBuilder>(this TBuilder builder)
        where TBuilder : IEndpointConventionBuilder => builder.WithMetadata(OperationsEndpoint.Guarded).WithMetadata(new DisableCorsAttribute());
}

/// <summary>
/// Who may reach the operations endpoints, decided per request by the listener it came in on (the local
/// port of the connection, never the client's <c>Host</c> header) and the endpoint's
/// <see cref="OperationsEndpoint"/> mark. Runs after routing and before CORS, so a refusal carries no CORS header:
/// <list type="bullet">
/// <item>the monitoring listener serves the operations endpoints and nothing else (no long-poll, no policy files);</item>
/// <item>the client HTTP port serves the probes only with <see cref="MonitoringOptions.ProbesOnHttpPort"/>, and
/// <c>/metrics</c>, <c>/varz</c>, <c>/connz</c>, <c>/subsz</c> only when a <see cref="MonitoringOptions.Token"/> is set;</item>
/// <item>with a token, those four need <c>Authorization: Bearer &lt;token&gt;</c> on either listener (401 otherwise).</item>
/// </list>
/// Not on the message path: one metadata lookup per HTTP request.
/// </summary>
internal sealed class MonitoringAccess
{
    private readonly RequestDelegate _next;
    private readonly MonitoringOptions _options;
    private readonly Listeners _listeners;
    private readonly byte[]? _tokenHash;

    public MonitoringAccess(RequestDelegate next, MonitoringOptions options, Listeners listeners)
    {
        _next = next;
        _options = options;
        _listeners = listeners;
        _tokenHash = string.IsNullOrEmpty(options.Token) ? null : SHA256.HashData(Encoding.UTF8.GetBytes(options.Token));
    }

    public Task InvokeAsync(HttpContext context)
    {
        OperationsEndpoint? kind = context.GetEndpoint()?.Metadata.GetMetadata<OperationsEndpoint>();
        bool onMonitoringListener = _listeners.MonitoringPort is { } port && context.Connection.LocalPort == port;
        bool served = onMonitoringListener
            ? kind is not null
            : kind is null || (kind == OperationsEndpoint.Probe ? _options.ProbesOnHttpPort : _tokenHash is not null);
        if (!served)
        {
            context.Response.StatusCode = StatusCodes.Status404NotFound;
            return Task.CompletedTask;
        }

        if (kind == OperationsEndpoint.Guarded && _tokenHash is not null && !Authorized(context.Request))
        {
            context.Response.StatusCode = StatusCodes.Status401Unauthorized;
            context.Response.Headers.WWWAuthenticate = "Bearer realm=\"herald-monitoring\"";
            return Task.CompletedTask;
        }

        return _next(context);
    }

    /// <summary>The bearer token, compared by its SHA-256 in fixed time.</summary>
    private bool Authorized(HttpRequest request)
    {
        string? header = request.Headers.Authorization;
        const string Scheme = "Bearer ";
        if (header is null || !header.StartsWith(Scheme, StringComparison.OrdinalIgnoreCase))
        {
            return false;
        }

        byte[] presented = SHA256.HashData(Encoding.UTF8.GetBytes(header.AsSpan(Scheme.Length).Trim().ToString()));
        return CryptographicOperations.FixedTimeEquals(presented, _tokenHash);
    }
}
