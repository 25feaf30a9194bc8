using System.Text.Json.Serialization;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>Request bodies of the long-poll endpoints (longpoll §1).</summary>
internal sealed record CreateSessionRequest(string? Client, bool? Zstd, bool? Headers, bool? NoResponders, bool? History = null);

internal sealed record SubscribeRequest(long? Sid, string? Pattern, bool? NoEcho, SinceRequest? Since = null, string? Queue = null);

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
    bool QueueGroups);

/// <summary>Source-generated JSON for the long-poll bodies: no reflection on the request path.</summary>
[JsonSourceGenerationOptions(PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase, UnmappedMemberHandling = JsonUnmappedMemberHandling.Skip)]
[JsonSerializable(typeof(CreateSessionRequest))]
[JsonSerializable(typeof(SubscribeRequest))]
[JsonSerializable(typeof(SinceRequest))]
[JsonSerializable(typeof(CreateSessionResponse))]
internal sealed partial class LongPollJsonContext : JsonSerializerContext;
