using Herald.Broker.Transports;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Cors;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;

namespace Herald.Broker.Api;

/// <summary>
/// The server API's routes (protocol-spec/server-api.yaml): one group under <c>/api/v1</c>, marked as the API's
/// (<see cref="ApiAccess"/>: its listener only, a key required), outside every CORS policy, rate-limited per key
/// (<see cref="ApiSetup.RateLimitPolicy"/>). Each area maps its own routes from its own file, each route with the scope
/// it needs (<see cref="RequireScope"/>); a new area adds one call here and its paths to the OpenAPI document (a test
/// fails while a mapped route is missing there).
/// </summary>
internal static class ApiEndpoints
{
    /// <summary>The versioned prefix of every route.</summary>
    public const string Prefix = "/api/v1";

    /// <summary>Maps every area's routes into <paramref name="app"/> under <see cref="Prefix"/>.</summary>
    public static RouteGroupBuilder Map(IEndpointRouteBuilder app)
    {
        RouteGroupBuilder group = app.MapGroup(Prefix);
        group.WithMetadata(ApiEndpoint.Instance);
        group.WithMetadata(new DisableCorsAttribute());
        group.RequireRateLimiting(ApiSetup.RateLimitPolicy);
        PublishEndpoints.Map(group);
        ReadEndpoints.Map(group);
        NodeEndpoints.Map(group);
        ClientEndpoints.Map(group);
        return group;
    }

    /// <summary>
    /// Refuses, with 403 and a problem naming the scope, a request whose key lacks <paramref name="scope"/>; runs before
    /// the handler reads the body. Every API route states its scope with this.
    /// </summary>
    public static TBuilder RequireScope<TBuilder>(this TBuilder builder, ApiScope scope)
        where TBuilder : IEndpointConventionBuilder =>
        builder.AddEndpointFilter(async (context, next) =>
        {
            ApiKey key = CallerOf(context.HttpContext);
            if (!key.Allows(scope))
            {
                return Results.Problem(
                    $"The key '{key.Name}' has not the '{ScopeName(scope)}' scope this request needs.",
                    statusCode: StatusCodes.Status403Forbidden,
                    title: "Forbidden",
                    extensions: new Dictionary<string, object?> { ["code"] = "Forbidden" });
            }

            return await next(context).ConfigureAwait(false);
        });

    /// <summary>The key the request was authenticated with (<see cref="ApiAccess"/> set it; every API route has one).</summary>
    public static ApiKey CallerOf(HttpContext context) =>
        context.Features.Get<ApiKey>() ?? throw new HttpProblem(StatusCodes.Status401Unauthorized, "Unauthorized", "No API key.");

    /// <summary>A scope as configured and documented (<c>publish</c>, <c>read</c>, <c>admin</c>).</summary>
    public static string ScopeName(ApiScope scope) => scope switch
    {
        ApiScope.Publish => "publish",
        ApiScope.Read => "read",
        _ => "admin",
    };
}
