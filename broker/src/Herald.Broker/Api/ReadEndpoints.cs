using System.Buffers;
using System.Globalization;
using System.Text;
using Herald.Broker.Compression;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Broker.Sessions;
using Herald.Broker.Transports;
using Herald.Protocol;
using MessagePack;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Api;

/// <summary>
/// What a backend reads (scope <c>read</c>): a topic's history by position (<c>GET /api/v1/history</c>: this node's
/// kept messages, or Redis's on a cluster node, so every node answers the same), presence and occupancy
/// (<c>GET /api/v1/presence</c>, through <see cref="IPresence"/>: the cluster's members on a cluster node), and the
/// patterns subscribed on every node with their subscriber counts added up (<c>GET /api/v1/topics</c>, paged by pattern).
/// </summary>
internal static class ReadEndpoints
{
    /// <summary>Most history entries one read returns.</summary>
    public const int MaxHistoryPage = 1000;

    public static void Map(RouteGroupBuilder api)
    {
        api.MapGet("/history", History).RequireScope(ApiScope.Read);
        api.MapGet("/presence", Presence).RequireScope(ApiScope.Read);
        api.MapGet("/topics", Topics).RequireScope(ApiScope.Read);
    }

    private static Task History(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        BrokerCore broker = context.RequestServices.GetRequiredService<BrokerCore>();
        string topic = TopicOf(context, broker);
        ulong after = QueryNumber(context, "after", 0, ulong.MaxValue);
        int limit = (int)QueryNumber(context, "limit", 100, MaxHistoryPage);
        HistoryStore store = broker.History is { } histories && histories.Keeps(topic)
            ? histories
            : throw new HttpProblem(StatusCodes.Status404NotFound, "NoHistory", $"Topic '{topic}' keeps no history (Herald:History:Topics).");
        var entries = new List<HistoryEntry>();
        string epoch;
        ulong last;
        if (store.Shared)
        {
            TopicHistory history = store.FindForResume(topic) ?? throw HttpProblem.Unavailable("HistoryFull", $"This node holds its maximum of {store.Options.MaxTopics} topic histories.", 1);
            SharedRead read;
            try
            {
                read = await broker.SharedHistory.ReadAsync(history, new StreamPosition(after, "api"), limit, broker.Limits.MaxPendingBytes).ConfigureAwait(false);
            }
            catch (ClusterUnavailableException e)
            {
                throw HttpProblem.Unavailable("ClusterUnavailable", e.Message, 1);
            }

            (epoch, last) = (read.Epoch, read.Top);
            foreach ((ulong offset, _, byte[] envelope) in read.Entries)
            {
                if (broker.SharedHistory.DecodeKept(envelope) is { } kept && entries.Count < limit)
                {
                    entries.Add(EntryOf(offset, kept, broker.Limits.MaxPayloadBytes));
                }
            }
        }
        else
        {
            TopicHistory? history = store.FindExisting(topic);
            (epoch, last, List<(ulong Offset, byte[] Frame)> frames) = history?.Read(after, limit) ?? ("", 0, []);
            foreach ((ulong offset, byte[] frame) in frames)
            {
                var body = new ReadOnlySequence<byte>(frame);
                if (FrameReader.TryReadFrame(ref body, int.MaxValue, out ReadOnlySequence<byte> read))
                {
                    var reader = new MessagePackReader(read);
                    FrameDecoder.ReadHeader(ref reader, out int count);
                    entries.Add(EntryOf(offset, FrameDecoder.ReadMessage(ref reader, count), broker.Limits.MaxPayloadBytes));
                }
            }
        }

        ulong? next = entries.Count == limit && entries[^1].Offset < last ? entries[^1].Offset : null;
        await Results.Json(new HistoryPage(topic, epoch, last, entries, next), ApiJsonContext.Default.HistoryPage).ExecuteAsync(context).ConfigureAwait(false);
    });

    private static Task Presence(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        BrokerCore broker = context.RequestServices.GetRequiredService<BrokerCore>();
        string topic = TopicOf(context, broker);
        IPresence presence = broker.Presence;
        if (!presence.Enabled)
        {
            throw new HttpProblem(StatusCodes.Status404NotFound, "PresenceOff", "This broker keeps no presence (Herald:Presence:Enabled).");
        }

        int limit = (int)QueryNumber(context, "limit", (ulong)presence.Options.MaxPageSize, (ulong)presence.Options.MaxPageSize);
        string? cursor = context.Request.Query["cursor"];
        PresencePage page;
        try
        {
            page = await presence.ReadAsync(topic, limit, string.IsNullOrEmpty(cursor) ? null : cursor).ConfigureAwait(false);
        }
        catch (ClusterUnavailableException e)
        {
            throw HttpProblem.Unavailable("PresenceUnavailable", $"Presence is unavailable: {e.Message}", 1);
        }

        var members = page.Entries.Select(e => new PresenceMemberInfo(e.Client, e.Identity, e.Info)).ToList();
        await Results.Json(new PresenceInfo(topic, page.Occupancy.Members, page.Occupancy.Identities, members, page.Next), ApiJsonContext.Default.PresenceInfo).ExecuteAsync(context).ConfigureAwait(false);
    });

    /// <summary>
    /// Every node's subscriptions (through <see cref="ITopicCensus"/>): each node answers its first <c>limit + 1</c> matching
    /// patterns, the answers are added up per pattern, and the page is the first <c>limit</c> of the sum; the nodes that
    /// answered are listed with their totals, the members that did not are named in <c>silent</c>.
    /// </summary>
    private static Task Topics(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        IServiceProvider services = context.RequestServices;
        ApiOptions options = services.GetRequiredService<ApiOptions>();
        int limit = (int)QueryNumber(context, "limit", (ulong)options.MaxTopicsPage, (ulong)options.MaxTopicsPage);
        var query = new TopicQuery(context.Request.Query["prefix"].ToString(), context.Request.Query["after"].ToString(), limit);
        TopicCensus census;
        try
        {
            census = await services.GetRequiredService<BrokerCore>().Census.CountAsync(query, context.RequestAborted).ConfigureAwait(false);
        }
        catch (ClusterUnavailableException e)
        {
            throw HttpProblem.Unavailable("ClusterUnavailable", $"The cluster could not be reached: {e.Message}", 1);
        }

        (IReadOnlyList<(string Pattern, int Subscribers)> entries, string? next) = census.Page(query);
        var body = new TopicsPage(
            census.Answered.Sum(n => n.Subscriptions),
            census.Answered.Sum(n => n.Patterns),
            census.Answered.Any(n => n.Truncated),
            [.. entries.Select(p => new TopicInfo(p.Pattern, p.Subscribers))],
            next,
            [.. census.Answered.Select(n => new TopicsNode(n.Node, n.Subscriptions, n.Patterns, n.Truncated))],
            census.Silent);
        await Results.Json(body, ApiJsonContext.Default.TopicsPage).ExecuteAsync(context).ConfigureAwait(false);
    });

    /// <summary>The <c>topic</c> query parameter, a valid topic name (not a pattern).</summary>
    private static string TopicOf(HttpContext context, BrokerCore broker)
    {
        string topic = context.Request.Query["topic"].ToString();
        if (topic.Length == 0)
        {
            throw HttpProblem.Malformed("The topic query parameter is required.");
        }

        TopicRules.CheckName(new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(topic)), broker.Limits.MaxTopicLength);
        return topic;
    }

    private static ulong QueryNumber(HttpContext context, string name, ulong fallback, ulong max)
    {
        string text = context.Request.Query[name].ToString();
        if (text.Length == 0)
        {
            return Math.Min(fallback, max);
        }

        return ulong.TryParse(text, NumberStyles.None, CultureInfo.InvariantCulture, out ulong value) && (name == "after" || value > 0)
            ? Math.Min(value, max)
            : throw HttpProblem.Malformed($"'{name}' must be a {(name == "after" ? "non-negative" : "positive")} integer.");
    }

    /// <summary>A kept publication as the API shows it: its payload (decompressed when it was kept compressed) and headers.</summary>
    private static HistoryEntry EntryOf(ulong offset, in PublishFrame message, int maxPayload)
    {
        byte[] payload;
        if ((message.Flags & PayloadFlags.Zstd) != 0)
        {
            int length = Zstd.Decompress(message.Payload, maxPayload, out byte[] plain);
            payload = plain.AsSpan(0, length).ToArray();
            ArrayPool<byte>.Shared.Return(plain);
        }
        else
        {
            payload = message.Payload.ToArray();
        }

        Dictionary<string, string[]>? headers = message.HasHeaders ? HeaderBlock.Read(message.Headers).ToDictionary(h => h.Key, h => h.Value, StringComparer.Ordinal) : null;
        return new HistoryEntry(offset, Convert.ToBase64String(payload), headers);
    }
}
