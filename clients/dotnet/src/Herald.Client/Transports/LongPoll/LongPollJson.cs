using System.Text.Json.Serialization;

namespace Herald.Client.Transports.LongPoll;

/// <summary><c>POST /poll/sessions</c> body (longpoll §1.1).</summary>
internal sealed class CreateSessionRequest
{
    public string? Client { get; init; }

    public bool Zstd { get; init; }

    public bool Headers { get; init; }

    public bool NoResponders { get; init; }

    public bool History { get; init; }

    /// <summary>The session's client info (longpoll §1.1, spec §15.1): what others see beside its presence; omitted when null.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingNull)]
    public string? Info { get; init; }

    /// <summary>Be told of subscriptions the application's backend makes (longpoll §1.4, with headers); omitted when not asked.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingDefault)]
    public bool ServerSubscriptions { get; init; }

    /// <summary>Subscriptions may ask for deltas in binary answers (longpoll §1.1, spec §11.2); omitted when false.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingDefault)]
    public bool Deltas { get; init; }
}

/// <summary><c>201</c> answer to <c>POST /poll/sessions</c> (longpoll §1.1).</summary>
internal sealed class CreateSessionResponse
{
    public string? Session { get; init; }

    public long PollTimeoutMs { get; init; }

    public long InactivityTimeoutMs { get; init; }

    public long MaxMessagesPerPoll { get; init; }

    public long MaxBytesPerPoll { get; init; }

    public long MaxPendingMessages { get; init; }

    public long MaxTopicLength { get; init; }

    public long MaxBodyBytes { get; init; }

    public bool Zstd { get; init; }

    /// <summary>The session's inbox prefix (longpoll §1.1); absent from a broker before it.</summary>
    public string? InboxPrefix { get; init; }

    /// <summary>Headers granted (longpoll §1.1); absent (false) from a broker before them.</summary>
    public bool Headers { get; init; }

    /// <summary>The no-responders status granted (longpoll §1.1).</summary>
    public bool NoResponders { get; init; }

    public bool History { get; init; }

    /// <summary>A subscribe may name a queue group (longpoll §1.2, spec §14); absent (false) from a broker before them.</summary>
    public bool QueueGroups { get; init; }

    public long MaxHeaders { get; init; }

    public long MaxHeaderBytes { get; init; }

    /// <summary>Presence granted (longpoll §1.1, spec §15; with headers); absent (false) from a broker before it.</summary>
    public bool Presence { get; init; }

    /// <summary>Server-made subscriptions granted (longpoll §1.4); absent (false) when not asked, or from a broker before them.</summary>
    public bool ServerSubscriptions { get; init; }
}

/// <summary><c>POST .../subscriptions</c> body (longpoll §1.2).</summary>
internal sealed class SubscribeRequest
{
    public uint Sid { get; init; }

    public string? Pattern { get; init; }

    public bool NoEcho { get; init; }

    /// <summary>Resume the topic's history after this position (longpoll §1.2, spec §13); omitted when null.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingNull)]
    public SinceBody? Since { get; init; }

    /// <summary>The queue group the subscription joins (spec §14); omitted when null (a plain subscription).</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingNull)]
    public string? Queue { get; init; }

    /// <summary>Be present on the topic (longpoll §1.2, spec §15.1); omitted when false.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingDefault)]
    public bool Join { get; init; }

    /// <summary>Receive the topic's join and leave events (longpoll §1.2, spec §15.2); omitted when false.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingDefault)]
    public bool Presence { get; init; }

    /// <summary>Ask for deltas (longpoll §1.2, spec §11.2); omitted when false.</summary>
    [JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingDefault)]
    public bool Delta { get; init; }
}

/// <summary><c>GET /presence</c>'s answer (longpoll §6): PRESENCE_REPLY (spec §15.3) as JSON.</summary>
internal sealed class PresenceAnswer
{
    public ulong Members { get; init; }

    public ulong Identities { get; init; }

    public List<PresenceAnswerEntry>? Entries { get; init; }

    public string? Next { get; init; }
}

/// <summary>One member in <see cref="PresenceAnswer"/>.</summary>
internal sealed class PresenceAnswerEntry
{
    public string? Client { get; init; }

    public string? Identity { get; init; }

    public string? Info { get; init; }
}

/// <summary>A subscribe body's <c>since</c>.</summary>
internal sealed class SinceBody
{
    public ulong Offset { get; init; }

    public string Epoch { get; init; } = "";
}

/// <summary>An RFC 7807 problem with the broker's <c>code</c> (longpoll §3).</summary>
internal sealed class Problem
{
    public string? Code { get; init; }

    public string? Title { get; init; }

    public string? Detail { get; init; }

    /// <summary>Why a session ended (410 <c>SessionExpired</c>): the spec §8 code the fatal ERROR would carry on TCP.</summary>
    public string? Reason { get; init; }
}

/// <summary>Source-generated JSON for the long-poll bodies: no reflection.</summary>
[JsonSourceGenerationOptions(PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase)]
[JsonSerializable(typeof(CreateSessionRequest))]
[JsonSerializable(typeof(CreateSessionResponse))]
[JsonSerializable(typeof(SubscribeRequest))]
[JsonSerializable(typeof(Problem))]
[JsonSerializable(typeof(PresenceAnswer))]
internal sealed partial class LongPollJsonContext : JsonSerializerContext;
