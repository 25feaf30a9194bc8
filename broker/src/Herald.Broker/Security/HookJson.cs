using System.Text.Json.Serialization;

namespace Herald.Broker.Security;

// The JSON of the event hooks (protocol-spec/hooks.md): one request and one response shape per hook, camelCase,
// unknown members ignored, absent members null. The backend's answers are read with a bounded size.

/// <summary>Connect hook request (hooks.md §2).</summary>
internal sealed record ConnectHookRequest(string? Credential, string Transport, string? RemoteAddress, string? Client, string? Info);

/// <summary>Connect hook response (hooks.md §2).</summary>
internal sealed class ConnectHookResponse
{
    public string? Result { get; set; }

    public string? Identity { get; set; }

    public PermissionOptions? Permissions { get; set; }

    /// <summary>Unix seconds after which the connection must renew its credential (spec §4.1); null: never.</summary>
    public long? ExpiresAt { get; set; }

    public string? Info { get; set; }

    public string? Reason { get; set; }

    public int? CacheSeconds { get; set; }
}

/// <summary>Subscribe hook request (hooks.md §3).</summary>
internal sealed record SubscribeHookRequest(string Identity, string Topic, string Transport, string? Client);

/// <summary>Publish hook request (hooks.md §4): the payload only when the hook is configured to send it.</summary>
internal sealed record PublishHookRequest(string Identity, string Topic, string Transport, string? Client, int Size, Dictionary<string, string[]>? Headers, string? Payload, bool? PayloadOmitted);

/// <summary>Subscribe and publish hook response (hooks.md §3, §4).</summary>
internal sealed class DecisionHookResponse
{
    public string? Result { get; set; }

    public string? Reason { get; set; }

    public int? CacheSeconds { get; set; }
}

[JsonSourceGenerationOptions(PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase, DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(ConnectHookRequest))]
[JsonSerializable(typeof(ConnectHookResponse))]
[JsonSerializable(typeof(SubscribeHookRequest))]
[JsonSerializable(typeof(PublishHookRequest))]
[JsonSerializable(typeof(DecisionHookResponse))]
internal sealed partial class HookJsonContext : JsonSerializerContext;
