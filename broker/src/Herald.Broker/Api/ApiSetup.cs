using System.Globalization;
using System.Threading.RateLimiting;
using Herald.Broker.Transports;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.RateLimiting;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Api;

/// <summary>
/// The server API's services, middleware and routes, added to the host only when <see cref="ApiOptions.Enabled"/>:
/// a broker without keys has no API listener, no API routes and pays nothing.
/// </summary>
internal static class ApiSetup
{
    /// <summary>The rate-limit policy every API route carries: a token bucket per key (<see cref="ApiOptions.RequestsPerSecond"/>).</summary>
    public const string RateLimitPolicy = "herald-api";

    /// <summary>The keys, the publishers and the per-key rate limiter (ASP.NET Core's, partitioned by the key's name).</summary>
    public static void AddServerApi(this IServiceCollection services, ApiOptions options)
    {
        services.AddSingleton(options);
        services.AddSingleton<ApiKeys>();
        services.AddSingleton<ApiPublishers>();
        services.AddRateLimiter(limiter =>
        {
            limiter.AddPolicy(RateLimitPolicy, context => PartitionOf(context, options));
            limiter.OnRejected = (rejected, cancellation) =>
            {
                HttpContext context = rejected.HttpContext;
                TimeSpan after = rejected.Lease.TryGetMetadata(MetadataName.RetryAfter, out TimeSpan retryAfter) ? retryAfter : TimeSpan.FromSeconds(1);
                context.Response.Headers.RetryAfter = Math.Max(1, (int)Math.Ceiling(after.TotalSeconds)).ToString(CultureInfo.InvariantCulture);
                context.Response.StatusCode = StatusCodes.Status429TooManyRequests;
                ApiKey? key = context.Features.Get<ApiKey>();
                return new ValueTask(Results.Problem(
                    $"The key '{key?.Name}' is over its rate of {RateOf(key, options)} requests/s (burst {options.RequestBurst}).",
                    statusCode: StatusCodes.Status429TooManyRequests,
                    title: "RateLimited",
                    extensions: new Dictionary<string, object?> { ["code"] = "RateLimited" }).ExecuteAsync(context));
            };
        });
    }

    /// <summary>The API's access check then its rate limiter, ahead of the other middleware (the monitoring access, CORS).</summary>
    public static void UseServerApi(this WebApplication app, ApiOptions options)
    {
        if (options.Enabled)
        {
            app.UseMiddleware<ApiAccess>();
            app.UseRateLimiter();
        }
    }

    /// <summary>The API's routes (<see cref="ApiEndpoints.Map"/>).</summary>
    public static void MapServerApi(this WebApplication app, ApiOptions options)
    {
        if (options.Enabled)
        {
            ApiEndpoints.Map(app);
            app.Lifetime.ApplicationStarted.Register(() =>
            {
                ILogger log = app.Services.GetRequiredService<ILoggerFactory>().CreateLogger(typeof(ApiSetup));
                int port = app.Services.GetRequiredService<Listeners>().ApiPort ?? options.Port;
                log.Listening(options.Host, port, options.Keys.Count, string.Join(", ", options.Keys.Select(k => $"{k.Name}: {k.Scope}"))); // names and scopes, never a key or its hash
            });
        }
    }

    private static int RateOf(ApiKey? key, ApiOptions options) => key?.RequestsPerSecond ?? options.RequestsPerSecond;

    private static RateLimitPartition<string> PartitionOf(HttpContext context, ApiOptions options)
    {
        ApiKey? key = context.Features.Get<ApiKey>();
        int rate = RateOf(key, options);
        if (key is null || rate <= 0)
        {
            return RateLimitPartition.GetNoLimiter(key?.Name ?? "");
        }

        return RateLimitPartition.GetTokenBucketLimiter(key.Name, _ => new TokenBucketRateLimiterOptions
        {
            TokenLimit = Math.Max(options.RequestBurst, 1),
            TokensPerPeriod = Math.Max(1, rate / 10),
            ReplenishmentPeriod = TimeSpan.FromMilliseconds(rate >= 10 ? 100 : 1000 / rate),
            QueueLimit = 0,
            AutoReplenishment = true,
        });
    }
}
