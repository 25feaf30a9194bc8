using System.Globalization;
using System.Net;
using System.Runtime.InteropServices;
using Herald.Broker.Compression;
using Herald.Broker.Engines;
using Herald.Broker.Routing;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Broker.Transports;
using Herald.Broker.Transports.LongPoll;
using Herald.Broker.Transports.Tcp;
using Herald.Protocol;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Monitoring;

/// <summary>
/// Health (<c>/healthz</c>, <c>/readyz</c>), the JSON monitoring endpoints in the spirit of NATS's
/// (<c>/varz</c>, <c>/connz</c>, <c>/subsz</c>) and the status page with its data (<c>/</c>, <c>/statusz</c>), on the monitoring listener (<see cref="MonitoringAccess"/>
/// says who else may reach them). Each request reads the broker's state
/// once (a snapshot of the session tables, a walk of the router under its read lock): nothing here runs
/// on the message path.
/// </summary>
internal static class MonitoringEndpoints
{
    private const int DefaultPageSize = 1024;

    /// <summary>Most patterns <c>/subsz</c> sorts; past it the answer says <c>truncated</c>.</summary>
    private const int MaxSortedPatterns = 100_000;

    public static void MapHealth(this IEndpointRouteBuilder app)
    {
        // Alive: the process answers HTTP. Stays 200 while draining, so an orchestrator does not kill a broker that is finishing its work.
        app.MapGet("/healthz", (HttpContext context) => Health(context, alive: true)).AsProbe();

        // Ready: every listener is bound and the broker is not shutting down.
        app.MapGet("/readyz", (HttpContext context) => Health(context, alive: false)).AsProbe();
    }

    public static void MapMonitoring(this IEndpointRouteBuilder app)
    {
        app.MapGet("/varz", Varz).AsMonitoring();
        app.MapGet("/connz", Connz).AsMonitoring();
        app.MapGet("/subsz", Subsz).AsMonitoring();
        app.MapGet("/statusz", Statusz).AsMonitoring();
        StatusPage.MapStatusPage(app);
    }

    /// <summary>Presence's counts and busiest topics, for <c>/varz</c> and <c>/statusz</c>; null when the broker does not grant presence.</summary>
    internal static VarzPresence? Presence(IPresence presence)
    {
        if (!presence.Enabled)
        {
            return null;
        }

        PresenceCounts counts = presence.Counts;
        List<PresenceTopicInfo>? busiest = presence.Busiest(StatusSampler.Rows)?.Select(t => new PresenceTopicInfo(t.Topic, t.Occupancy.Members, t.Occupancy.Identities)).ToList();
        return new VarzPresence(counts.Entries, presence.Options.MaxEntries, counts.Topics, counts.Watchers, counts.Events, counts.Suppressed, busiest);
    }

    /// <summary><c>/statusz</c>: the status page's data, compact (see <see cref="StatusSampler"/>).</summary>
    private static IResult Statusz(HttpContext context)
    {
        context.Response.Headers.CacheControl = "no-store";
        context.Response.Headers.XContentTypeOptions = "nosniff";
        return Results.Json(context.RequestServices.GetRequiredService<StatusSampler>().Current(), StatusJsonContext.Default.Statusz);
    }

    private static IResult Health(HttpContext context, bool alive)
    {
        BrokerHealth health = context.RequestServices.GetRequiredService<BrokerHealth>();
        Readiness state = health.State;
        Listeners listeners = health.Listeners;
        IReadOnlyList<int> tcp = state == Readiness.Starting ? [] : listeners.TcpPorts;
        string policy = listeners.PolicyPort is { } port ? port.ToString(CultureInfo.InvariantCulture)
            : listeners.PolicyUnavailable is { } reason ? "unavailable: " + reason
            : "off";
        var report = new HealthReport(
            alive ? "alive" : state.ToString().ToLowerInvariant(),
            tcp.Count == 0 ? null : tcp.Count == 1 ? tcp[0].ToString(CultureInfo.InvariantCulture) : $"{tcp.Min()}-{tcp.Max()}",
            state == Readiness.Starting ? null : listeners.HttpPort,
            policy,
            context.RequestServices.GetRequiredService<BrokerCore>().ClusterStatus.Connected is { } connected ? connected ? "connected" : "redis unreachable" : null);
        int status = alive || state == Readiness.Ready ? StatusCodes.Status200OK : StatusCodes.Status503ServiceUnavailable;
        context.Response.Headers.CacheControl = "no-store";
        return Results.Json(report, MonitoringJsonContext.Default.HealthReport, statusCode: status);
    }

    private static IResult Varz(HttpContext context)
    {
        IServiceProvider services = context.RequestServices;
        BrokerCore broker = services.GetRequiredService<BrokerCore>();
        BrokerHealth health = services.GetRequiredService<BrokerHealth>();
        SessionRegistry sessions = services.GetRequiredService<SessionRegistry>();
        PollSessionStore polls = services.GetRequiredService<PollSessionStore>();
        ProcessUsage usage = services.GetRequiredService<ProcessUsage>();
        BrokerMetrics metrics = broker.Metrics;
        Listeners listeners = health.Listeners;
        int topics = broker.Router.PatternCount;

        DateTimeOffset now = DateTimeOffset.UtcNow;
        TimeSpan uptime = now - health.StartedAt;
        IReadOnlyList<int> tcp = listeners.TcpPorts;
        GCMemoryInfo gc = GC.GetGCMemoryInfo();
        var varz = new Varz(
            broker.ServerName,
            BrokerVersion.Value,
            RuntimeInformation.FrameworkDescription,
            Environment.MachineName,
            Environment.ProcessId,
            health.State.ToString().ToLowerInvariant(),
            health.StartedAt,
            now,
            FormatUptime(uptime),
            Math.Round(uptime.TotalSeconds, 3),
            new VarzPorts(tcp.Count > 0 ? tcp.Min() : null, tcp.Count > 0 ? tcp.Max() : null, listeners.HttpPort, listeners.PolicyPort, listeners.PolicyUnavailable, listeners.MonitoringPort),
            sessions.Count - polls.Count,
            polls.Count,
            metrics.TotalConnectionsOpened,
            metrics.TotalConnectionsClosed,
            polls.HeldPolls,
            broker.Router.SubscriptionCount,
            topics,
            new VarzMessages(metrics.TotalPublished, metrics.TotalPublishedBytes, metrics.TotalDelivered, metrics.TotalSent, metrics.TotalSentBytes, metrics.TotalDropped),
            metrics.TotalSlowConsumers,
            metrics.TotalProtocolErrors,
            broker.PartialFrames.Used,
            new VarzProcess(
                Environment.ProcessorCount,
                Math.Round(ProcessUsage.CpuSeconds, 3),
                Math.Round(usage.SampleCpuPercent(), 1),
                Environment.WorkingSet,
                gc.HeapSizeBytes,
                GC.GetTotalAllocatedBytes(),
                [GC.CollectionCount(0), GC.CollectionCount(1), GC.CollectionCount(2)],
                ThreadPool.ThreadCount),
            broker.Limits,
            services.GetRequiredService<LongPollOptions>(),
            services.GetRequiredService<CompressionOptions>(),
            broker.ClusterStatus.Snapshot() is { } cluster ? ClusterOf(cluster, services.GetRequiredService<LongPollOptions>()) : null,
            broker.History is { } history ? new VarzHistory(history.TopicCount, history.Options.MaxTopics, history.Bytes, history.Options.MaxBytes, history.EvictedTopics, history.Recovered, history.NotRecovered) : null,
            Presence(broker.Presence),
            broker.Encoder.Deltas is { } deltas ? new VarzDeltas(deltas.Topics, deltas.KeptBytes, deltas.MaxKeptBytes, deltas.Deltas, deltas.SavedBytes, deltas.Skipped, deltas.Count(DeltaDecision.NotPaying), deltas.Count(DeltaDecision.OverBudget)) : null);
        return Results.Json(varz, MonitoringJsonContext.Default.Varz);
    }

    private static VarzCluster ClusterOf(ClusterSnapshot cluster, LongPollOptions longPoll) => new(
        cluster.Node,
        cluster.Endpoints,
        cluster.Connected,
        cluster.ChannelPrefix,
        cluster.Subscriptions,
        cluster.PendingInterest,
        cluster.Sent,
        cluster.Received,
        cluster.Dropped,
        cluster.Duplicates,
        cluster.Invalid,
        cluster.ForwardQueueBytes,
        cluster.InboundQueued,
        [.. cluster.Members.Select(NodeOf)],
        cluster.HistoryRulesMatch,
        cluster.SessionsTakenOver,
        cluster.SessionRequestsForwarded,
        ShardsOf(cluster),
        cluster.SessionsKept is { } kept
            ? new VarzSessionsKept(kept.Owned, kept.Sessions, kept.Appends, kept.Messages, (long)kept.Owned * longPoll.MaxPendingMessagesPerSession, kept.Bytes, kept.FrameBytes, kept.MaxFrameBytes)
            : null);

    /// <summary>The cluster's shards (spec cluster.md §13) as <c>/varz</c> and <c>/statusz</c> show them.</summary>
    internal static IReadOnlyList<VarzShard>? ShardsOf(ClusterSnapshot cluster) =>
        cluster.Shards is { } shards ? [.. shards.Select(s => new VarzShard(s.Index, s.Endpoints, s.Prefix, s.Connected, s.Sent, s.Received, s.Dropped, s.Subscriptions, s.InboundQueued, s.LossNotices, s.SubscribeFailures))] : null;

    /// <summary>A member of the cluster with the queue groups this node knows it holds (cluster.md §11).</summary>
    internal static VarzNode NodeOf(ClusterMember node) =>
        new(node.Id, node.Name, node.Host, node.Started, node.LastSeen, node.Self, node.History, node.Groups, node.GroupMembers, node.GroupsVersion);

    /// <summary><c>/connz?offset=&amp;limit=&amp;transport=</c>: TCP connections by id, then long-poll sessions by id.</summary>
    private static IResult Connz(HttpContext context)
    {
        IServiceProvider services = context.RequestServices;
        if (!TryPage(context, services, out int offset, out int limit, out IResult? problem))
        {
            return problem;
        }

        string? transport = context.Request.Query["transport"];
        var rows = new List<ProtocolSession>();
        foreach (ProtocolSession session in services.GetRequiredService<SessionRegistry>().Sessions)
        {
            if (transport is null || transport == session.Transport)
            {
                rows.Add(session);
            }
        }

        rows.Sort((a, b) => a.Transport != b.Transport ? (a.Transport == TcpConnectionHandler.Transport ? -1 : b.Transport == TcpConnectionHandler.Transport ? 1 : string.CompareOrdinal(a.Transport, b.Transport)) : a.Id.CompareTo(b.Id));
        DateTimeOffset now = DateTimeOffset.UtcNow;
        var page = new List<ConnectionInfo>(Math.Max(0, Math.Min(limit, rows.Count - offset)));
        for (int i = offset; i < rows.Count && page.Count < limit; i++)
        {
            page.Add(Describe(rows[i], now));
        }

        return Results.Json(new Connz(now, rows.Count, offset, limit, page.Count, page), MonitoringJsonContext.Default.Connz);
    }

    /// <summary><c>/subsz?offset=&amp;limit=&amp;topic=</c>: patterns by subscriptions (most first); <c>topic</c> keeps those matching it.</summary>
    private static IResult Subsz(HttpContext context)
    {
        IServiceProvider services = context.RequestServices;
        if (!TryPage(context, services, out int offset, out int limit, out IResult? problem))
        {
            return problem;
        }

        string? topic = context.Request.Query["topic"];
        TopicRouter router = services.GetRequiredService<TopicRouter>();
        IReadOnlyList<(string Pattern, int Subscribers)> snapshot = router.Snapshot(MaxSortedPatterns, out int patterns);
        var matching = new List<(string Pattern, int Subscribers)>(snapshot.Count);
        int inboxes = 0;
        foreach ((string Pattern, int Subscribers) entry in snapshot)
        {
            if (entry.Pattern.StartsWith(ProtocolConstants.InboxPrefix, StringComparison.Ordinal))
            {
                inboxes++; // a reply address: counted, never named
            }
            else if (string.IsNullOrEmpty(topic) || Topic.Matches(entry.Pattern, topic))
            {
                matching.Add(entry);
            }
        }

        matching.Sort((a, b) => a.Subscribers != b.Subscribers ? b.Subscribers.CompareTo(a.Subscribers) : string.CompareOrdinal(a.Pattern, b.Pattern));
        var page = new List<PatternInfo>(Math.Max(0, Math.Min(limit, matching.Count - offset)));
        for (int i = offset; i < matching.Count && page.Count < limit; i++)
        {
            page.Add(new PatternInfo(matching[i].Pattern, matching[i].Subscribers));
        }

        var subsz = new Subsz(DateTimeOffset.UtcNow, router.SubscriptionCount, patterns, inboxes, string.IsNullOrEmpty(topic) ? null : topic, matching.Count, offset, limit, patterns > snapshot.Count, page);
        return Results.Json(subsz, MonitoringJsonContext.Default.Subsz);
    }

    /// <summary>One row of <c>/connz</c>: what every session has, and a long-poll session's idle time and held poll.</summary>
    private static ConnectionInfo Describe(ProtocolSession session, DateTimeOffset now)
    {
        var poll = session as PollSession;
        IPEndPoint? remote = poll is null ? session.RemoteEndPoint as IPEndPoint : null; // a long-poll session has no one connection
        IPAddress? address = remote?.Address is { IsIPv4MappedToIPv6: true } mapped ? mapped.MapToIPv4() : remote?.Address;
        (long messages, long bytes) = session.Backlog.Pending;
        return new ConnectionInfo(
            session.Id,
            session.Transport,
            address?.ToString(),
            remote?.Port,
            poll is null ? session.Since : null,
            poll is null ? Math.Round((now - session.Since).TotalSeconds, 3) : null,
            poll is null ? null : Math.Round(poll.Idle.TotalSeconds, 3),
            poll?.IsPolling,
            session.ClientName,
            session.SubscriptionCount,
            messages,
            bytes,
            session.Backlog.Dropped,
            session.PresenceClient,
            session.IsOpen ? session.Identity.Name : null);
    }

    private static bool TryPage(HttpContext context, IServiceProvider services, out int offset, out int limit, [System.Diagnostics.CodeAnalysis.NotNullWhen(false)] out IResult? problem)
    {
        int max = services.GetRequiredService<MonitoringOptions>().MaxPageSize;
        offset = 0;
        limit = Math.Min(DefaultPageSize, max);
        problem = null;
        string? offsetText = context.Request.Query["offset"];
        string? limitText = context.Request.Query["limit"];
        if (offsetText is not null && (!int.TryParse(offsetText, NumberStyles.None, CultureInfo.InvariantCulture, out offset) || offset < 0))
        {
            problem = BadRequest("offset must be a whole number, 0 or more.");
            return false;
        }

        if (limitText is not null)
        {
            if (!int.TryParse(limitText, NumberStyles.None, CultureInfo.InvariantCulture, out limit) || limit < 1)
            {
                problem = BadRequest($"limit must be a whole number from 1 to {max}.");
                return false;
            }

            limit = Math.Min(limit, max);
        }

        return true;
    }

    private static IResult BadRequest(string detail) =>
        Results.Problem(detail, statusCode: StatusCodes.Status400BadRequest, title: "MalformedRequest", extensions: new Dictionary<string, object?> { ["code"] = "MalformedRequest" });

    /// <summary>NATS-style uptime: <c>3d4h5m6s</c>.</summary>
    private static string FormatUptime(TimeSpan uptime)
    {
        var text = new System.Text.StringBuilder();
        if (uptime.Days > 0)
        {
            text.Append(CultureInfo.InvariantCulture, $"{uptime.Days}d");
        }

        if (uptime.Days > 0 || uptime.Hours > 0)
        {
            text.Append(CultureInfo.InvariantCulture, $"{uptime.Hours}h");
        }

        if (uptime.TotalMinutes >= 1)
        {
            text.Append(CultureInfo.InvariantCulture, $"{uptime.Minutes}m");
        }

        text.Append(CultureInfo.InvariantCulture, $"{uptime.Seconds}s");
        return text.ToString();
    }
}
