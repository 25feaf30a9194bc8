using System.Globalization;
using System.Text;
using Herald.Broker.Engines;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Protocol;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// <c>GET /presence?topic=T[&amp;limit=N][&amp;cursor=C]</c> (longpoll §6; spec §15.3 as JSON): a topic's members and
/// occupancy for the clients that speak HTTP (long-poll, SSE). The request carries its own bearer credential (a session's
/// client sends the one its session's requests carry) and is answered by the one-shot session of that identity
/// (authentication on) or address (off): the PRESENCE checks of <see cref="ProtocolSession.CheckPresenceQuery"/>, charged
/// to that session's subscription-change rate (over it, the answer is held, as a TCP connection's reading is paused).
/// </summary>
internal static class PresenceEndpoint
{
    public const string Path = "/presence";

    /// <summary>Members listed when the request names no <c>limit</c> (the SDKs' page, spec §9).</summary>
    public const ulong DefaultLimit = 100;

    public static void MapPresence(this IEndpointRouteBuilder app) => app.MapGet(Path, ReadAsync);

    private static Task ReadAsync(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        PollSessionStore store = context.RequestServices.GetRequiredService<PollSessionStore>();
        BrokerCore broker = store.Broker;
        if (!broker.Presence.Enabled)
        {
            throw new HttpProblem(StatusCodes.Status404NotFound, "NotFound", "Presence is turned off (Herald:Presence:Enabled).");
        }

        Identity identity = await HttpExchange.AuthenticateAsync(context, broker, PollSession.TransportName).ConfigureAwait(false);
        IQueryCollection query = context.Request.Query;
        string topic = query["topic"].FirstOrDefault() ?? throw HttpProblem.Malformed("The topic query parameter is required.");
        ulong limit = DefaultLimit;
        if (query["limit"].ToString() is { Length: > 0 } text && !ulong.TryParse(text, NumberStyles.None, CultureInfo.InvariantCulture, out limit))
        {
            throw HttpProblem.Malformed("limit must be a non-negative integer.");
        }

        string? cursor = query["cursor"].FirstOrDefault() is { Length: > 0 } after ? after : null;
        PollSession owner = store.OneShots.Of(identity, HttpExchange.RemoteOf(context));
        await owner.Requests.WaitAsync(context.RequestAborted).ConfigureAwait(false);
        PresencePage page;
        string? notice;
        try
        {
            owner.Open(identity, clientName: null, Capabilities.Headers | Capabilities.Presence); // this request's credential, the rate its owner's
            owner.Touch();
            ProtocolSession.PresenceQuery checkedQuery = owner.CheckPresenceQuery(Encoding.UTF8.GetBytes(topic), limit, out Refusal charged);
            notice = charged.Code == ErrorCode.RateLimited ? nameof(ErrorCode.RateLimited) : null;
            await LongPollEndpoints.HoldAsync(owner, context.RequestAborted).ConfigureAwait(false); // a refusal waits out the rate too
            page = checkedQuery.Code switch
            {
                ErrorCode.None => await ReadPageAsync(broker.Presence, checkedQuery, cursor).ConfigureAwait(false),
                ErrorCode.InvalidTopic => throw new HttpProblem(StatusCodes.Status400BadRequest, nameof(ErrorCode.InvalidTopic), $"'{topic}' has wildcards: presence is one topic's."),
                _ => throw new HttpProblem(StatusCodes.Status403Forbidden, nameof(ErrorCode.PermissionDenied), $"Reading the presence of '{topic}' is not permitted for '{identity.Name}'."),
            };
        }
        finally
        {
            owner.Requests.Release();
        }

        if (notice is not null)
        {
            context.Response.Headers[LongPollEndpoints.NoticeHeader] = notice;
        }

        var entries = new List<PresenceEntryJson>(page.Entries?.Count ?? 0);
        foreach (PresenceEntry entry in page.Entries ?? [])
        {
            entries.Add(new PresenceEntryJson(entry.Client, entry.Identity, entry.Info));
        }

        await context.Response.WriteAsJsonAsync(
            new PresenceResponse(page.Occupancy.Members, page.Occupancy.Identities, entries, page.Next),
            LongPollJsonContext.Default.PresenceResponse,
            cancellationToken: context.RequestAborted).ConfigureAwait(false);
    });

    /// <summary>
    /// One page from the engine. Presence that cannot be reached (a cluster's Redis) is 503 <c>PresenceUnavailable</c>
    /// (spec §15.5), never an empty answer.
    /// </summary>
    private static async Task<PresencePage> ReadPageAsync(IPresence presence, ProtocolSession.PresenceQuery query, string? cursor)
    {
        try
        {
            return await presence.ReadAsync(query.Topic, query.Limit, cursor).ConfigureAwait(false);
        }
        catch (ClusterUnavailableException e)
        {
            throw HttpProblem.Unavailable(nameof(ErrorCode.PresenceUnavailable), $"Presence cannot be read now: {e.Message}", 1);
        }
    }
}
