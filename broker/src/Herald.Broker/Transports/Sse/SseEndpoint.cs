using System.Buffers;
using System.Text;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Protocol;
using Microsoft.Extensions.Primitives;

namespace Herald.Broker.Transports.Sse;

/// <summary>
/// Server-Sent Events at <c>GET /sse?topic=...</c> on the HTTP port (protocol-spec/sse.md): a receive-only
/// stream for <c>EventSource</c> and <c>curl</c>. The request is checked here (Origin, topics, format,
/// <c>Last-Event-ID</c>, the credential), the subscriptions are the session's, as any transport's; only
/// once every one is made does the response start, so a refused topic is an HTTP error, not an event.
/// </summary>
internal static class SseEndpoint
{
    public const string Path = "/sse";

    public const string MediaType = "text/event-stream";

    /// <summary>The credential for clients that cannot set a header (<c>EventSource</c>); the Authorization header wins.</summary>
    public const string TokenParameter = "access_token";

    public static void MapSse(this IEndpointRouteBuilder app) => app.MapGet(Path, StreamAsync);

    private static Task StreamAsync(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        IServiceProvider services = context.RequestServices;
        SseOptions options = services.GetRequiredService<SseOptions>();
        if (!options.Enabled)
        {
            throw new HttpProblem(StatusCodes.Status404NotFound, "NotFound", "Server-Sent Events are turned off (Herald:Sse:Enabled).");
        }

        if (context.Request.Headers.Origin is { Count: > 0 } origin && !await HttpExchange.IsOriginAllowedAsync(context, origin.ToString()).ConfigureAwait(false))
        {
            throw new HttpProblem(StatusCodes.Status403Forbidden, "OriginNotAllowed", $"Origin '{origin}' is not in Herald:Policy:AllowedDomains.");
        }

        StringValues topics = context.Request.Query["topic"];
        if (topics.Count == 0)
        {
            throw HttpProblem.Malformed("Name at least one topic or pattern: /sse?topic=<pattern>, repeatable.");
        }

        if (topics.Count > options.MaxTopics)
        {
            throw HttpProblem.Malformed($"{topics.Count} topics named; a stream may name at most {options.MaxTopics} (Herald:Sse:MaxTopics).");
        }

        if (FirstRepeated(topics) is { } repeated)
        {
            throw HttpProblem.Malformed($"'{repeated}' is named more than once: a stream names each topic once (sse.md §1), so it is subscribed, and its history read, once.");
        }

        SseDataFormat format = context.Request.Query["format"].ToString() switch
        {
            "" or "json" => SseDataFormat.Json,
            "base64" => SseDataFormat.Base64,
            var other => throw HttpProblem.Malformed($"format '{other}' is not json or base64."),
        };

        SubscribeOptions[] presence = PresenceOf(topics, context.Request.Query["join"], context.Request.Query["presence"]);
        StreamPosition?[] resumeFrom = new StreamPosition?[topics.Count];
        string? lastEventId = context.Request.Headers["Last-Event-ID"];
        bool resuming = !string.IsNullOrEmpty(lastEventId);
        if (resuming && !SseFormat.TryParseId(lastEventId!, topics.Count, out resumeFrom))
        {
            throw HttpProblem.Malformed($"Last-Event-ID must be one entry per topic, comma separated, each 'offset:epoch' or '-' (sse.md §2); this stream names {topics.Count} topics.");
        }

        BrokerCore broker = services.GetRequiredService<BrokerCore>();
        SessionRegistry sessions = services.GetRequiredService<SessionRegistry>();
        Identity identity = await HttpExchange.AuthenticateAsync(context, broker, SseSession.TransportName, context.Request.Query[TokenParameter]).ConfigureAwait(false);
        string? info = ProtocolSession.CheckedInfo(broker, context.Request.Query["info"].FirstOrDefault()); // over the limit: 400, nothing made
        var session = new SseSession(broker, sessions.NextId(), HttpExchange.RemoteOf(context), options);
        Capabilities server = context.Request.Query["server_subscriptions"] == "true" ? Capabilities.ServerSubscriptions : Capabilities.None; // sse.md §1: off unless asked
        session.Open(identity, context.Request.Query["client"], Capabilities.Headers | Capabilities.History | Capabilities.Presence | server);
        session.HelloInfo = info;
        Refusal admitted = sessions.Add(session);
        try
        {
            if (!admitted.IsNone)
            {
                session.Discard();
                HttpExchange.Outcome(admitted, StatusCodes.Status200OK); // throws its problem
            }

            bool[] tracked = await SubscribeAsync(session, broker, topics, presence, resuming, resumeFrom, context.RequestAborted).ConfigureAwait(false);
            session.SubscriptionsMade();
            if (session.AwaitsInterest)
            {
                await session.InterestSettledAsync().ConfigureAwait(false); // cluster: live on every node before the client is told
            }

            for (int i = 0; i < presence.Length; i++)
            {
                if ((presence[i] & SubscribeOptions.Join) != 0 && await session.JoinDecidedAsync((uint)(i + 1)).ConfigureAwait(false) is { IsNone: false } late)
                {
                    HttpExchange.Outcome(late, StatusCodes.Status200OK); // a cluster refused a join after its subscription: the stream is refused
                }
            }

            HttpResponse response = context.Response;
            response.StatusCode = StatusCodes.Status200OK;
            response.ContentType = MediaType;
            response.Headers.CacheControl = "no-cache, no-transform";
            response.Headers["X-Accel-Buffering"] = "no"; // proxies that buffer (nginx) pass events at once
            await response.StartAsync(context.RequestAborted).ConfigureAwait(false);
            await response.BodyWriter.FlushAsync(context.RequestAborted).ConfigureAwait(false); // the client's open: every subscription is live
            using var events = new SseFormat(format, tracked, resumeFrom);
            await session.StreamAsync(context, events).ConfigureAwait(false);
        }
        catch (Exception e) when (e is HttpProblem or ProtocolException or OperationCanceledException)
        {
            session.Discard();
            if (e is OperationCanceledException)
            {
                return; // the client left while it was being subscribed
            }

            throw;
        }
        finally
        {
            sessions.Remove(session);
        }
    });

    /// <summary>
    /// Subscription <c>i + 1</c> to topic <c>i</c>. Fresh, an exact topic that keeps a history is asked from an
    /// empty position, so its status ("Live") gives the stream its position before any message; resumed, every
    /// topic is asked from its <c>Last-Event-ID</c> entry, so each says what was recovered or missed (spec §13).
    /// Each topic named by <c>join</c> or <c>presence</c> is subscribed with those bits (spec §15.1, §15.2). Returns which
    /// topics' positions the event id carries.
    /// </summary>
    private static async Task<bool[]> SubscribeAsync(SseSession session, BrokerCore broker, StringValues topics, SubscribeOptions[] presence, bool resuming, StreamPosition?[] resumeFrom, CancellationToken cancellation)
    {
        var tracked = new bool[topics.Count];
        for (int i = 0; i < topics.Count; i++)
        {
            string topic = topics[i] ?? "";
            tracked[i] = topic.AsSpan().IndexOfAny('*', '>') < 0 && broker.History is { } history && history.Keeps(topic); // asks, makes nothing
            StreamPosition? since = resuming ? resumeFrom[i] ?? new StreamPosition(0, NoPosition)
                : tracked[i] ? new StreamPosition(0, "") : null;
            var pattern = new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(topic));
            SubscribeOptions bits = presence[i];
            uint sid = (uint)(i + 1);
            Refusal refused = await session.DecidedAsync(() => session.Subscribe(sid, pattern, noEcho: false, since, presence: bits), cancellation).ConfigureAwait(false);
            if (refused.Code != ErrorCode.RateLimited)
            {
                HttpExchange.Outcome(refused, StatusCodes.Status200OK); // a refusal throws its problem
            }
        }

        return tracked;
    }

    /// <summary>
    /// Per topic, the presence bits the URL asks for (sse.md §1): <c>join=T</c> makes the stream present on topic
    /// <c>T</c>, <c>presence=T</c> sends it <c>T</c>'s join and leave events; each must name one of the stream's topics.
    /// </summary>
    private static SubscribeOptions[] PresenceOf(StringValues topics, StringValues joins, StringValues watches)
    {
        var bits = new SubscribeOptions[topics.Count];
        Mark(joins, SubscribeOptions.Join, "join");
        Mark(watches, SubscribeOptions.PresenceEvents, "presence");
        return bits;

        void Mark(StringValues named, SubscribeOptions bit, string parameter)
        {
            foreach (string? topic in named)
            {
                int at = Array.IndexOf(topics.ToArray(), topic);
                if (at < 0)
                {
                    throw HttpProblem.Malformed($"{parameter}='{topic}' names no topic of this stream: name it as a topic too.");
                }

                bits[at] |= bit;
            }
        }
    }

    /// <summary>The first topic or pattern the URL names twice (exactly the same), or null.</summary>
    private static string? FirstRepeated(StringValues topics)
    {
        var seen = new HashSet<string>(topics.Count, StringComparer.Ordinal);
        foreach (string? topic in topics)
        {
            if (!seen.Add(topic ?? ""))
            {
                return topic;
            }
        }

        return null;
    }

    /// <summary>
    /// The epoch asked for a topic whose <c>Last-Event-ID</c> entry is <c>-</c>: never a history's, so the status
    /// says what was missed cannot be replayed (or that the topic keeps no history), never "Live".
    /// </summary>
    private const string NoPosition = "-";
}
