using Herald.Broker.Engines;
using Herald.Broker.Monitoring;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Api;

/// <summary><c>GET /api/v1/info</c>: the node that answers, the useful part of <c>/varz</c> (scope <c>read</c>).</summary>
internal static class NodeEndpoints
{
    public static void Map(RouteGroupBuilder api) =>
        api.MapGet("/info", Info).RequireScope(ApiScope.Read);

    private static IResult Info(HttpContext context)
    {
        IServiceProvider services = context.RequestServices;
        BrokerCore broker = services.GetRequiredService<BrokerCore>();
        BrokerHealth health = services.GetRequiredService<BrokerHealth>();
        BrokerMetrics metrics = broker.Metrics;
        ClusterSnapshot? cluster = broker.ClusterStatus.Snapshot();
        DateTimeOffset now = DateTimeOffset.UtcNow;
        var info = new NodeInfo(
            broker.ServerName,
            BrokerVersion.Value,
            cluster?.Node,
            health.State.ToString().ToLowerInvariant(),
            health.StartedAt,
            Math.Round((now - health.StartedAt).TotalSeconds, 3),
            services.GetRequiredService<SessionRegistry>().Count,
            broker.Router.SubscriptionCount,
            broker.Router.PatternCount,
            metrics.TotalPublished,
            metrics.TotalDelivered,
            metrics.TotalDropped,
            cluster is null ? null : [.. cluster.Members.Select(m => new NodeInfoMember(m.Id, m.Name, m.Self, m.LastSeen))]);
        return Results.Json(info, ApiJsonContext.Default.NodeInfo);
    }
}
