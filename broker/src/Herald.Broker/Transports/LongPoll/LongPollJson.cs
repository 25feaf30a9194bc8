using System.Text.Json.Serialization;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>Request bodies of the long-poll endpoints (longpoll §1).</summary>
/// <param name="Info">The session's client info (longpoll §1.1, spec §15.1): what other clients see beside its presence.</param>
/// <param name="ServerSubscriptions">Be told of subscriptions the application's backend makes (longpoll.md §1.4; with headers).</param>
/// <param name="Deltas">Subscriptions may ask for deltas in binary poll answers (longpoll §1.1, spec §11.2).</param>
internal sealed record CreateSessionRequest(string? Client, bool? Zstd, bool? Headers, bool? NoResponders, bool? History = null, string? Info = null, bool? ServerSubscriptions = null, bool? Deltas = null);

/// <param name="Join">Be present on the topic (spec §15.1; SUBSCRIBE's join bit).</param>
/// <param name="Presence">Receive the topic's join and leave events (spec §15.2; SUBSCRIBE's presence-events bit).</param>
/// <param name="Delta">Ask for deltas (spec §11.2; SUBSCRIBE's delta bit), honoured on a session granted them.</param>
internal sealed record SubscribeRequest(long? Sid, string? Pattern, bool? NoEcho, SinceRequest? Since = null, string? Queue = null, bool? Join = null, bool? Presence = null, bool? Delta = null);

/// <summary>A subscribe's <c>since</c> (longpoll §1.2, README §13): the position to resume after.</summary>
internal sealed record SinceRequest(ulong? Offset, string? Epoch);

internal sealed record CreateSessionResponse(
    string Session,
    long PollTimeoutMs,
    long InactivityTimeoutMs,
    int MaxMessagesPerPoll,
    int MaxBytesPerPoll,
    int MaxPendingMessages,
    int MaxTopicLength,
    int MaxBodyBytes,
    bool Zstd,
    string InboxPrefix,
    bool Headers,
    bool NoResponders,
    int MaxHeaders,
    int MaxHeaderBytes,
    bool History,
    bool QueueGroups,
    bool Presence,
    int MaxPresenceInfo,
    string? Client = null,
    [property: System.Text.Json.Serialization.JsonIgnore(Condition = System.Text.Json.Serialization.JsonIgnoreCondition.WhenWritingNull)] bool? ServerSubscriptions = null,
    [property: JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingNull)] bool? Deltas = null);

/// <summary>A page of a topic's presence (<c>GET /presence</c>, longpoll §6; spec §15.3's PRESENCE_REPLY as JSON).</summary>
internal sealed record PresenceResponse(long Members, long Identities, IReadOnlyList<PresenceEntryJson> Entries, string? Next);

/// <summary>One member: its client id, identity and info (spec §15.1).</summary>
internal sealed record PresenceEntryJson(string Client, string Identity, string? Info);

/// <summary>Source-generated JSON for the long-poll bodies: no reflection on the request path.</summary>
[JsonSourceGenerationOptions(PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase, UnmappedMemberHandling = JsonUnmappedMemberHandling.Skip)]
[JsonSerializable(typeof(CreateSessionRequest))]
[JsonSerializable(typeof(SubscribeRequest))]
[JsonSerializable(typeof(SinceRequest))]
[JsonSerializable(typeof(CreateSessionResponse))]
[JsonSerializable(typeof(PresenceResponse))]
internal sealed partial class LongPollJsonContext : JsonSerializerContext;
