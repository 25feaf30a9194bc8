using Herald.Broker.Transports;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;

namespace Herald.Broker.Api;

/// <summary>Marks an endpoint as the server API's: served on the API listener only, which serves nothing else.</summary>
internal sealed class ApiEndpoint
{
    public static readonly ApiEndpoint Instance = new();

    private ApiEndpoint()
    {
    }
}

/// <summary>
/// Who may reach the server API, per request, before rate limiting and before any endpoint runs. Decided by the listener
/// the request came in on (the connection's local port, as <c>MonitoringAccess</c> decides), never by a header:
/// <list type="bullet">
/// <item>the API listener serves the API endpoints and nothing else (no long-poll, no monitoring): anything else is 404;
/// the API endpoints are 404 on every other listener;</item>
/// <item>every request on the API listener carries <c>Authorization: Bearer &lt;key&gt;</c> naming a configured key
/// (<see cref="ApiKeys"/>), checked before the path is looked at: otherwise 401 with an empty body, the same for a
/// missing, malformed or wrong key and for any path, so a caller without a key learns nothing;</item>
/// <item>the key found is set as a request feature (<see cref="ApiKey"/>): the rate limiter partitions by its name,
/// <see cref="ApiEndpoints.RequireScope"/> checks its scope; the key itself is never logged or kept.</item>
/// </list>
/// Not on the message path: one metadata lookup per HTTP request, and a SHA-256 per API request.
/// </summary>
internal sealed class ApiAccess(RequestDelegate next, Listeners listeners, ApiKeys keys, ApiOptions options)
{
    public Task InvokeAsync(HttpContext context)
    {
        bool apiEndpoint = context.GetEndpoint()?.Metadata.GetMetadata<ApiEndpoint>() is not null;
        bool onApiListener = listeners.ApiPort is { } port && context.Connection.LocalPort == port;
        if (!onApiListener)
        {
            return apiEndpoint ? NotFound(context) : next(context);
        }

        string? header = context.Request.Headers.Authorization;
        ApiKey? key = header is not null && header.StartsWith("Bearer ", StringComparison.OrdinalIgnoreCase) ? keys.Find(header.AsSpan("Bearer ".Length).Trim()) : null;
        if (key is null)
        {
            context.Response.StatusCode = StatusCodes.Status401Unauthorized;
            context.Response.Headers.WWWAuthenticate = "Bearer";
            return Task.CompletedTask;
        }

        if (!apiEndpoint)
        {
            return NotFound(context);
        }

        context.Features.Set(key);
        if (context.Features.Get<IHttpMaxRequestBodySizeFeature>() is { IsReadOnly: false } limit)
        {
            limit.MaxRequestBodySize = options.MaxBodyBytes; // this listener's bodies: the API's limit, not long-poll's
        }

        return next(context);
    }

    private static Task NotFound(HttpContext context)
    {
        context.Response.StatusCode = StatusCodes.Status404NotFound;
        return Task.CompletedTask;
    }
}
