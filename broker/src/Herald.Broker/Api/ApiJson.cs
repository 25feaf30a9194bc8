using System.Text.Json;
using System.Text.Json.Serialization;

namespace Herald.Broker.Api;

/// <summary><c>GET /api/v1/info</c>: the node answering (its cluster id and the members it knows on a cluster node), its clients and traffic.</summary>
internal sealed record NodeInfo(
    string ServerName,
    string Version,
    string? Node,
    string Status,
    DateTimeOffset Start,
    double UptimeSeconds,
    int Connections,
    int Subscriptions,
    int Patterns,
    long Published,
    long Delivered,
    long Dropped,
    IReadOnlyList<NodeInfoMember>? Nodes);

/// <summary>A member of the cluster as this node sees it.</summary>
internal sealed record NodeInfoMember(string Id, string Name, bool Self, DateTimeOffset LastSeen);

/// <summary><c>POST /api/v1/publish</c>, and each item of a batch: one publication.</summary>
internal sealed class PublishRequest
{
    public string? Topic { get; init; }

    /// <summary>The payload as UTF-8 text; exclusive with <see cref="DataBase64"/>.</summary>
    public string? Data { get; init; }

    /// <summary>The payload's bytes in base64.</summary>
    public string? DataBase64 { get; init; }

    /// <summary>Headers (spec §4.9), one value per key; keys under <c>Herald-</c> are the broker's (400).</summary>
    public Dictionary<string, string>? Headers { get; init; }

    /// <summary>A repeat of this key on the same topic within the idempotency window is not published again.</summary>
    public string? IdempotencyKey { get; init; }
}

/// <summary><c>POST /api/v1/broadcast</c>: one payload to many topics.</summary>
internal sealed class BroadcastRequest
{
    public List<string>? Topics { get; init; }

    public string? Data { get; init; }

    public string? DataBase64 { get; init; }

    public Dictionary<string, string>? Headers { get; init; }

    /// <summary>Claimed on each topic: a repeat is not published again on the topics that already have it.</summary>
    public string? IdempotencyKey { get; init; }
}

/// <summary><c>POST /api/v1/batch</c>: publications applied in order.</summary>
internal sealed class BatchRequest
{
    public List<PublishRequest>? Items { get; init; }
}

/// <summary>A publication's answer: <see cref="Duplicate"/> when its idempotency key was seen within the window (not published again).</summary>
internal sealed record PublishResult(bool Duplicate);

/// <summary>One item's answer in a batch or broadcast: its status (200, or the status a single request would have had) and, on failure, its problem's code and detail.</summary>
internal sealed record ItemResult(int Status, bool? Duplicate = null, string? Code = null, string? Detail = null);

/// <summary>A batch's or broadcast's answer: one result per item (per topic), in order.</summary>
internal sealed record ResultsBody(IReadOnlyList<ItemResult> Results);

/// <summary><c>GET /api/v1/history</c>: the topic's epoch and last offset, the entries after the position asked, and where the next page starts (null: none).</summary>
internal sealed record HistoryPage(string Topic, string Epoch, ulong Last, IReadOnlyList<HistoryEntry> Entries, ulong? Next);

/// <summary>A kept publication: its offset, payload and headers (the broker's position headers included).</summary>
internal sealed record HistoryEntry(ulong Offset, string DataBase64, Dictionary<string, string[]>? Headers);

/// <summary><c>GET /api/v1/presence</c>: the occupancy, a page of members by client id, and the cursor of the next page (null: none).</summary>
internal sealed record PresenceInfo(string Topic, long Members, long Identities, IReadOnlyList<PresenceMemberInfo> Entries, string? Next);

internal sealed record PresenceMemberInfo(string Client, string Identity, string? Info);

/// <summary>
/// <c>GET /api/v1/topics</c>: every node's subscribed patterns (reply inboxes left out) with their subscribers added up, by
/// pattern, where the next page starts, the nodes that answered (their totals) and the members that did not.
/// </summary>
internal sealed record TopicsPage(int Subscriptions, int Patterns, bool Truncated, IReadOnlyList<TopicInfo> Entries, string? Next, IReadOnlyList<TopicsNode> Nodes, IReadOnlyList<string> Silent);

/// <summary>One node's part of the topics listing: its cluster id (none on a single node) and its totals.</summary>
internal sealed record TopicsNode(string? Node, int Subscriptions, int Patterns, bool Truncated);

internal sealed record TopicInfo(string Pattern, int Subscribers);

/// <summary><c>POST /api/v1/clients/disconnect</c>: one client by its client id, or every client of an identity, told <see cref="Reason"/>.</summary>
internal sealed class DisconnectRequest
{
    public string? Client { get; init; }

    public string? Identity { get; init; }

    public string? Reason { get; init; }
}

/// <summary><c>POST /api/v1/revocations</c>: refuse <see cref="Identity"/> until <see cref="Until"/>, ending what it holds now.</summary>
internal sealed class RevokeRequest
{
    public string? Identity { get; init; }

    public DateTimeOffset? Until { get; init; }

    public string? Reason { get; init; }
}

/// <summary><c>POST /api/v1/clients/subscribe</c> and <c>/unsubscribe</c>: a connected client and a pattern.</summary>
internal sealed class ClientSubscriptionRequest
{
    public string? Client { get; init; }

    public string? Pattern { get; init; }

    /// <summary>Subscribe: not delivered what this client itself publishes.</summary>
    public bool? NoEcho { get; init; }

    /// <summary>Subscribe: the client is present on the topic (spec §15.1, SUBSCRIBE's join bit): one topic, presence granted, the identity allowed to join.</summary>
    public bool? Join { get; init; }

    /// <summary>Subscribe: the topic's join and leave events are delivered to the subscription (spec §15.2): one topic, the identity allowed to read presence.</summary>
    public bool? Presence { get; init; }

    /// <summary>Subscribe: made even where the client's own subscribe permissions refuse the pattern (limits, and the join and presence permissions, still hold).</summary>
    public bool? Force { get; init; }

    /// <summary>Unsubscribe: what the client is told.</summary>
    public string? Reason { get; init; }
}

/// <summary>What a disconnect or revoke reached: the clients ended, and the nodes that answered of those asked.</summary>
internal sealed record ClientActionResult(int Clients, int Nodes, int NodesAsked);

/// <summary>A server-made subscription's sid (subscribe), or the first ended (unsubscribe).</summary>
internal sealed record ClientSubscriptionResult(uint Sid);

/// <summary><c>GET /api/v1/revocations</c>: the revocations in force, earliest end first, and the table's bound.</summary>
internal sealed record RevocationsPage(int Max, IReadOnlyList<RevocationInfo> Entries);

internal sealed record RevocationInfo(string Identity, DateTimeOffset Until, string Reason);

/// <summary>Source-generated JSON of the server API (protocol-spec/server-api.yaml): snake_case as <c>/varz</c>, nulls left out.</summary>
[JsonSourceGenerationOptions(
    JsonSerializerDefaults.Web,
    PropertyNamingPolicy = JsonKnownNamingPolicy.SnakeCaseLower,
    DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(NodeInfo))]
[JsonSerializable(typeof(PublishRequest))]
[JsonSerializable(typeof(BroadcastRequest))]
[JsonSerializable(typeof(BatchRequest))]
[JsonSerializable(typeof(PublishResult))]
[JsonSerializable(typeof(ResultsBody))]
[JsonSerializable(typeof(HistoryPage))]
[JsonSerializable(typeof(PresenceInfo))]
[JsonSerializable(typeof(TopicsPage))]
[JsonSerializable(typeof(DisconnectRequest))]
[JsonSerializable(typeof(RevokeRequest))]
[JsonSerializable(typeof(ClientSubscriptionRequest))]
[JsonSerializable(typeof(ClientActionResult))]
[JsonSerializable(typeof(ClientSubscriptionResult))]
[JsonSerializable(typeof(RevocationsPage))]
internal sealed partial class ApiJsonContext : JsonSerializerContext;
