using System.Globalization;
using System.Runtime.CompilerServices;
using Herald.Client.Transports;
using Herald.Protocol;

namespace Herald.Client;

/// <summary>
/// Presence (spec §15): who is on a topic. A subscription joins its topic (<see cref="SubscriptionOptions.Join"/>) and
/// receives its join and leave events (<see cref="SubscriptionOptions.PresenceEvents"/>); these calls read the members a
/// page at a time, or only their number. To follow a topic's members, subscribe with presence events first, then read
/// the pages, and apply the events that overtake the answer by <see cref="HeraldPresenceMember.Client"/>.
/// </summary>
public sealed partial class HeraldClient
{
    /// <summary>Members per page when none is asked for (spec §9: the SDKs' default page).</summary>
    public const int DefaultPresencePageSize = 100;

    /// <summary>
    /// One page of <paramref name="topic"/>'s members (spec §15.3): the topic's occupancy, up to <paramref name="limit"/>
    /// members (default <see cref="DefaultPresencePageSize"/>; the broker lists at most 1 000; 0: the occupancy alone)
    /// ordered by client id after <paramref name="cursor"/> (the previous page's <see cref="HeraldPresencePage.Next"/>;
    /// <c>null</c> for the first), and the cursor of the next page. A topic changing between pages is read as it is then:
    /// a member joining or leaving meanwhile is listed or not, none twice. Waits for the connection (through a
    /// reconnect, asking again on the new one), at most <see cref="HeraldClientOptions.RequestTimeout"/>.
    /// </summary>
    /// <exception cref="HeraldException">
    /// The broker refused (<see cref="ErrorCode.PermissionDenied"/>: this identity may not read the topic's presence, and
    /// learnt nothing, not even the count; <see cref="ErrorCode.PresenceUnavailable"/>: a cluster's presence could not be
    /// reached, never an empty answer instead), the topic breaks the rules (<see cref="ErrorCode.InvalidTopic"/> for a
    /// pattern with wildcards, <see cref="ErrorCode.TopicTooLong"/>: nothing sent), or the broker did not grant presence
    /// (<see cref="HeraldServerInfo.Presence"/> false: <see cref="ErrorCode.UnexpectedFrame"/>, what it would answer).
    /// </exception>
    /// <exception cref="HeraldTimeoutException">No answer within <see cref="HeraldClientOptions.RequestTimeout"/>.</exception>
    public async Task<HeraldPresencePage> PresenceAsync(string topic, int? limit = null, string? cursor = null, CancellationToken cancellationToken = default)
    {
        int asked = limit ?? DefaultPresencePageSize;
        ArgumentOutOfRangeException.ThrowIfNegative(asked, nameof(limit));
        PresenceReplyFrame reply = await AskPresenceAsync(topic, (ulong)asked, cursor, cancellationToken).ConfigureAwait(false);
        var members = new HeraldPresenceMember[reply.Entries.Count];
        for (int i = 0; i < members.Length; i++)
        {
            PresenceEntry entry = reply.Entries[i];
            members[i] = new HeraldPresenceMember(entry.Client, entry.Identity, entry.Info);
        }

        return new HeraldPresencePage(topic, Occupancy(reply), members, reply.Next);
    }

    /// <summary>
    /// Every member of <paramref name="topic"/>, page after page of <paramref name="pageSize"/> (each a
    /// <see cref="PresenceAsync"/>), ordered by client id. Throws as <see cref="PresenceAsync"/> does, at the page that fails.
    /// </summary>
    public async IAsyncEnumerable<HeraldPresenceMember> PresenceMembersAsync(string topic, int pageSize = DefaultPresencePageSize, [EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(pageSize, 1, nameof(pageSize));
        string? cursor = null;
        do
        {
            HeraldPresencePage page = await PresenceAsync(topic, pageSize, cursor, cancellationToken).ConfigureAwait(false);
            foreach (HeraldPresenceMember member in page.Members)
            {
                yield return member;
            }

            cursor = page.Next;
        }
        while (cursor is not null);
    }

    /// <summary>
    /// The number of members of <paramref name="topic"/> and of distinct identities among them (spec §15.3: a PRESENCE
    /// with limit 0), the cheap call for large topics. Throws as <see cref="PresenceAsync"/> does.
    /// </summary>
    public async Task<HeraldOccupancy> OccupancyAsync(string topic, CancellationToken cancellationToken = default) =>
        Occupancy(await AskPresenceAsync(topic, 0, null, cancellationToken).ConfigureAwait(false));

    /// <summary>
    /// Sends one PRESENCE and waits for its answer; a connection lost meanwhile is asked again once reconnected (a query
    /// changes nothing). A non-zero code is the broker's refusal, thrown with that code: never an empty list.
    /// </summary>
    private async Task<PresenceReplyFrame> AskPresenceAsync(string topic, ulong limit, string? cursor, CancellationToken cancellationToken)
    {
        byte[] encoded = EncodeTopic(topic);
        TimeSpan wait = _options.RequestTimeout;
        using var deadline = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        deadline.CancelAfter(wait);
        PresenceReplyFrame reply;
        try
        {
            while (true)
            {
                BrokerConnection connection = await ConnectedAsync(deadline.Token).ConfigureAwait(false);
                try
                {
                    reply = await connection.PresenceAsync(encoded, limit, cursor, deadline.Token).ConfigureAwait(false);
                    break;
                }
                catch (HeraldException) when (connection.Lost.IsCompleted && !deadline.IsCancellationRequested)
                {
                    // Lost before the answer: asked again on the next connection.
                }
            }
        }
        catch (OperationCanceledException e) when (deadline.IsCancellationRequested && !cancellationToken.IsCancellationRequested)
        {
            throw new HeraldTimeoutException($"No answer to the presence query of '{topic}' within {wait.TotalMilliseconds.ToString(CultureInfo.InvariantCulture)} ms.", e)
            {
                Topic = topic,
                Timeout = wait,
            };
        }

        if (reply.Code != ErrorCode.None)
        {
            throw new HeraldException(reply.Code, $"The broker refused the presence of '{topic}': {reply.Code}{Why(reply.Code)} (spec §15.3).");
        }

        return reply;
    }

    private static string Why(ErrorCode code) => code switch
    {
        ErrorCode.PermissionDenied => ", this identity may not read the topic's presence",
        ErrorCode.PresenceUnavailable => ", the cluster's shared presence could not be reached",
        ErrorCode.InvalidTopic => ", presence is of one topic, without wildcards",
        _ => "",
    };

    private static HeraldOccupancy Occupancy(in PresenceReplyFrame reply) =>
        new((long)Math.Min(reply.Members, long.MaxValue), (long)Math.Min(reply.Identities, long.MaxValue));
}
