using Herald.Broker.Cluster;
using Herald.Broker.Compression;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Monitoring;
using Herald.Broker.Policy;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Broker.Transports;
using Herald.Broker.Transports.LongPoll;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace Herald.Broker.Hosting;

/// <summary>
/// The broker's services, one <c>AddX</c> per room, in the order <see cref="HeraldHost.Build"/> calls them. The order
/// matters for the hosted services: the cluster starts before the sessions' registry and stops after it, so what the
/// drained sessions publish is still sent on. Each room gets its own options and nothing of the rooms above it.
/// </summary>
internal static class HostServices
{
    /// <summary>The Herald section, bound and validated at start, and each room's part of it as a service of its own.</summary>
    public static void AddHeraldOptions(this IServiceCollection services, Microsoft.Extensions.Configuration.IConfiguration configuration, Action<HeraldOptions>? configure)
    {
        OptionsBuilder<HeraldOptions> options = services.AddOptions<HeraldOptions>()
            .Bind(configuration.GetSection(HeraldOptions.Section))
            .ValidateOnStart();
        if (configure is not null)
        {
            options.PostConfigure(configure);
        }

        services.AddSingleton<IValidateOptions<HeraldOptions>, HeraldOptionsValidator>();
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Limits);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.LongPoll);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Policy);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Security);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Compression);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Monitoring);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Sse);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Cluster);
    }

    /// <summary>Telemetry: the broker's metrics (with the status page's top topics when monitoring is on) and the rate-limited client-fault log.</summary>
    public static void AddTelemetry(this IServiceCollection services)
    {
        services.AddMetrics();
        services.AddSingleton(sp => new BrokerMetrics(sp.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>())
        {
            Topics = sp.GetRequiredService<MonitoringOptions>().Enabled ? new TopicTraffic() : null,
        });
        services.AddSingleton(TimeProvider.System);
        services.AddSingleton(sp =>
        {
            LoggingOptions logging = sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Logging;
            return new ClientFaultLog(sp.GetRequiredService<ILogger<BrokerCore>>(), logging.ClientFaultsPerInterval, logging.ClientFaultInterval, sp.GetRequiredService<TimeProvider>());
        });
    }

    /// <summary>Routing: the one router.</summary>
    public static void AddTopicRouter(this IServiceCollection services) =>
        services.AddSingleton(sp => new TopicRouter(sp.GetRequiredService<BrokerMetrics>(), sp.GetRequiredService<LimitOptions>().MaxTopics));

    /// <summary>Compression: the adaptive advisor (reading the process's CPU load), its metrics, the delta engine (when deltas are on) and the one encoder.</summary>
    public static void AddCompression(this IServiceCollection services)
    {
        services.AddSingleton<ICpuLoad, ProcessCpuLoad>();
        services.AddSingleton(sp => new CompressionAdvisor(sp.GetRequiredService<CompressionOptions>(), sp.GetRequiredService<ICpuLoad>(), sp.GetRequiredService<TimeProvider>()));
        services.AddSingleton<CompressionMetrics>();
        services.AddSingleton(sp =>
        {
            CompressionOptions options = sp.GetRequiredService<CompressionOptions>();
            DeltaEncoder? deltas = options.Deltas.Enabled ? new DeltaEncoder(options.Deltas, options, sp.GetRequiredService<ICpuLoad>(), sp.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>()) : null;
            return new MessageEncoder(sp.GetRequiredService<CompressionAdvisor>(), sp.GetRequiredService<CompressionMetrics>(), options, deltas);
        });
    }

    /// <summary>
    /// Security: who a client is, and the access decisions: the local ones, or with the application's backend asked where
    /// <c>Herald:Hooks</c> configures a hook (its HTTP client from <c>IHttpClientFactory</c>, its metrics on the broker's meter).
    /// </summary>
    public static void AddSecurity(this IServiceCollection services)
    {
        services.AddSingleton<Authenticator>();
        services.AddHttpClient(HookClient, http => http.Timeout = Timeout.InfiniteTimeSpan); // each hook's own timeout bounds a call
        services.AddSingleton<IAccessDecisions>(sp =>
        {
            HooksOptions hooks = sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Hooks;
            var local = new LocalAccess(sp.GetRequiredService<Authenticator>());
            if (!hooks.Connect.Enabled && !hooks.Subscribe.Enabled && !hooks.Publish.Enabled)
            {
                return local;
            }

            var metrics = new HookMetrics(sp.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>());
            IHttpClientFactory clients = sp.GetRequiredService<IHttpClientFactory>();
            ClientFaultLog log = sp.GetRequiredService<ClientFaultLog>();
            return new HookedAccess(local, sp.GetRequiredService<Authenticator>(), hooks, (name, options) => new BackendHook(name, options, clients.CreateClient(HookClient), metrics, log));
        });
    }

    /// <summary>The named HTTP client of the hooks.</summary>
    private const string HookClient = "herald-hooks";

    /// <summary>
    /// The engines behind the seams (Engines/): the cluster's Redis implementations when <c>Herald:Cluster</c> names a
    /// Redis, the local ones otherwise (<see cref="ClusterSlot"/>); the cluster's lifetime is a hosted service.
    /// </summary>
    public static void AddCluster(this IServiceCollection services)
    {
        services.AddSingleton(sp =>
        {
            ClusterOptions cluster = sp.GetRequiredService<ClusterOptions>();
            if (!cluster.Enabled)
            {
                return new ClusterSlot(null);
            }

            var engine = new ClusterEngine(cluster, sp.GetRequiredService<IOptions<HeraldOptions>>().Value.ServerName, sp.GetRequiredService<TopicRouter>(), sp.GetRequiredService<MessageEncoder>(), sp.GetRequiredService<BrokerMetrics>(), sp.GetRequiredService<LimitOptions>().MaxPayloadBytes, sp.GetRequiredService<LimitOptions>().MaxFrameBytes, sp.GetRequiredService<ILogger<ClusterEngine>>(), sp.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>(), sp.GetRequiredService<HistorySlot>().Store, sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Presence,
                new Revocations(sp.GetRequiredService<SecurityOptions>().MaxRevocations, sp.GetRequiredService<TimeProvider>()));
            return new ClusterSlot(engine);
        });

        // Started before the sessions' registry and stopped after it: what the drained sessions publish is still sent on.
        services.AddHostedService(sp => new ClusterLifetime(sp.GetRequiredService<ClusterSlot>().Engine));
    }

    /// <summary>The server API's idempotency keys: in Redis on each topic's shard on a cluster node, in this process's bounded table otherwise.</summary>
    public static void AddIdempotency(this IServiceCollection services, Api.ApiOptions api) =>
        services.AddSingleton<IIdempotency>(sp => sp.GetRequiredService<ClusterSlot>().Engine is { } cluster
            ? new RedisIdempotency(cluster.Shards)
            : new LocalIdempotency(api.MaxIdempotencyKeys, sp.GetRequiredService<TimeProvider>()));

    /// <summary>History: the topics that keep one (none unless <c>Herald:History:Topics</c> names a pattern), shared through Redis in a cluster.</summary>
    public static void AddHistory(this IServiceCollection services) =>
        services.AddSingleton(sp =>
        {
            HistoryOptions history = sp.GetRequiredService<IOptions<HeraldOptions>>().Value.History;
            if (!history.Enabled)
            {
                return new HistorySlot(null);
            }

            var store = new HistoryStore(history) { Shared = sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Cluster.Enabled };
            HistoryMetrics.Observe(sp.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>(), store);
            return new HistorySlot(store);
        });

    /// <summary>Presence (spec §15): this node's members in memory, or, on a cluster node, the cluster's in Redis (spec §15.5).</summary>
    public static void AddPresence(this IServiceCollection services) =>
        services.AddSingleton<IPresence>(sp =>
        {
            HeraldOptions o = sp.GetRequiredService<IOptions<HeraldOptions>>().Value;
            IPresence presence = (IPresence?)sp.GetRequiredService<ClusterSlot>().Engine?.Presence ?? new LocalPresence(o.Presence, enabled: o.Presence.Enabled);
            PresenceMetrics.Observe(sp.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>(), presence);
            return presence;
        });

    /// <summary>Sessions: what every session shares (the engines included) and the registry of every session of every transport.</summary>
    public static void AddSessions(this IServiceCollection services)
    {
        services.AddSingleton(sp => new BrokerCore(
            sp.GetRequiredService<IOptions<HeraldOptions>>().Value.ServerName,
            sp.GetRequiredService<LimitOptions>(),
            sp.GetRequiredService<SecurityOptions>(),
            sp.GetRequiredService<TopicRouter>(),
            sp.GetRequiredService<MessageEncoder>(),
            sp.GetRequiredService<Authenticator>(),
            sp.GetRequiredService<BrokerMetrics>(),
            sp.GetRequiredService<ClientFaultLog>(),
            sp.GetRequiredService<ClusterSlot>().Engines with { Presence = sp.GetRequiredService<IPresence>() },
            sp.GetRequiredService<HistorySlot>().Store,
            sp.GetRequiredService<TimeProvider>())
        {
            Access = sp.GetRequiredService<IAccessDecisions>(),
            InlineReceivers = sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Tcp.InlineFanout,
        });
        services.AddSingleton(sp => new SessionRegistry(sp.GetRequiredService<BrokerCore>(), SweepPeriod(sp.GetRequiredService<IOptions<HeraldOptions>>().Value)));
        services.AddHostedService(sp => sp.GetRequiredService<SessionRegistry>());
    }

    /// <summary>Long-poll: its session store, a hosted service (sweeps, leases).</summary>
    public static void AddLongPoll(this IServiceCollection services)
    {
        services.AddSingleton<PollSessionStore>();
        services.AddHostedService(sp => sp.GetRequiredService<PollSessionStore>());
    }

    /// <summary>Policy: the socket-policy and HTTP policy documents, built from the ports actually bound.</summary>
    public static void AddPolicy(this IServiceCollection services, Listeners listeners)
    {
        services.AddSingleton(sp =>
        {
            HeraldOptions o = sp.GetRequiredService<IOptions<HeraldOptions>>().Value;
            return new PolicyDocuments(o.Policy, o.Tcp.PortRangeStart, o.Tcp.PortRangeEnd, sp.GetRequiredService<Listeners>());
        });
        services.AddSingleton(listeners);
    }

    /// <summary>How often the registry checks every session's liveness: a quarter of the shortest timeout of any transport, between 5 ms and 1 s.</summary>
    private static TimeSpan SweepPeriod(HeraldOptions options)
    {
        TimeSpan shortest = new[] { options.Limits.HandshakeTimeout, options.Limits.PingInterval, options.Limits.FrameGracePeriod, options.LongPoll.InactivityTimeout }.Min();
        return TimeSpan.FromMilliseconds(Math.Clamp(shortest.TotalMilliseconds / 4, 5, 1000));
    }
}
