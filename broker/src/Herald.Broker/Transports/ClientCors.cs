using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Transports;

/// <summary>
/// The CORS policy of the client endpoints (long-poll, WebSocket, SSE, policy files): a named policy, not a default one,
/// so an operations endpoint never answers a browser's preflight or request with CORS headers.
/// </summary>
internal static class ClientCors
{
    /// <summary>The policy's name: the client endpoints require it, and <see cref="HttpExchange.IsOriginAllowedAsync"/> reads it.</summary>
    public const string Policy = "clients";

    /// <summary>
    /// Registers the policy: pages from <paramref name="allowedDomains"/> (<c>Herald:Policy:AllowedDomains</c>; "*" is any
    /// origin, a domain without a scheme is allowed over http and https, wildcard subdomains allowed) may call the client
    /// endpoints and read the transports' response headers.
    /// </summary>
    public static IServiceCollection AddClientCors(this IServiceCollection services, string[] allowedDomains) =>
        services.AddCors(cors => cors.AddPolicy(Policy, policy =>
        {
            if (allowedDomains.Contains("*"))
            {
                policy.AllowAnyOrigin();
            }
            else
            {
                policy.WithOrigins(allowedDomains.SelectMany(d => d.Contains("://", StringComparison.Ordinal) ? [d] : new[] { "http://" + d, "https://" + d }).ToArray())
                    .SetIsOriginAllowedToAllowWildcardSubdomains();
            }

            policy.AllowAnyHeader().AllowAnyMethod()
                .WithExposedHeaders("Herald-First-Sequence", "Herald-Count", "Herald-Dropped", "Herald-Gaps", "Herald-Notice", "Retry-After", "Location");
        }));
}
