using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Security;

/// <summary>What a hook's failure (no answer within its timeout, over its cap, an error status, an answer it cannot read) decides.</summary>
public enum HookFailurePolicy
{
    /// <summary>The operation is refused with <c>HookUnavailable</c> (spec §8): the client can tell it from a refusal and retry.</summary>
    Refuse,

    /// <summary>
    /// The operation goes on as if the hook were not configured: a subscription or publication is allowed (the identity's
    /// own permissions still apply); a connection is authenticated by <c>Herald:Security:Auth</c>.
    /// </summary>
    Allow,
}

/// <summary>
/// The event hooks to the application's backend (<c>Herald:Hooks</c>, protocol-spec/hooks.md): each optional, each an HTTP
/// POST of JSON to the backend, bounded by its timeout and concurrency cap, its answers cached as long as the backend says.
/// </summary>
public sealed class HooksOptions
{
    /// <summary>A connecting client's credential becomes an identity, its permissions and client info (hooks.md §2).</summary>
    public HookOptions Connect { get; set; } = new();

    /// <summary>Each SUBSCRIBE to a pattern the hook's <see cref="TopicHookOptions.Patterns"/> reach is allowed or refused (hooks.md §3).</summary>
    public TopicHookOptions Subscribe { get; set; } = new();

    /// <summary>Each PUBLISH to a topic the hook's <see cref="TopicHookOptions.Patterns"/> match is allowed or refused (hooks.md §4).</summary>
    public PublishHookOptions Publish { get; set; } = new();
}

/// <summary>One hook (<c>Herald:Hooks:Connect</c>, <c>:Subscribe</c>, <c>:Publish</c>): off unless <see cref="Url"/> is set.</summary>
public class HookOptions
{
    /// <summary>The backend's endpoint, <c>http://</c> or <c>https://</c>; empty: the hook is off.</summary>
    public string? Url { get; set; }

    /// <summary>How long one decision may take, the wait for a free call included; past it, <see cref="FailurePolicy"/>.</summary>
    public TimeSpan Timeout { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>Calls to the backend in flight at once; one more waits for a free one, at most <see cref="Timeout"/>.</summary>
    [Range(1, 100_000)]
    public int MaxConcurrent { get; set; } = 64;

    public HookFailurePolicy FailurePolicy { get; set; } = HookFailurePolicy.Refuse;

    /// <summary>Answers kept (for the <c>cacheSeconds</c> the backend gave each); 0 keeps none.</summary>
    [Range(0, 10_000_000)]
    public int CacheMaxEntries { get; set; } = 10_000;

    public bool Enabled => !string.IsNullOrWhiteSpace(Url);
}

/// <summary>A hook that decides topics (subscribe, publish): on the ones its <see cref="Patterns"/> reach.</summary>
public class TopicHookOptions : HookOptions
{
    /// <summary>
    /// Topic patterns the hook decides: a subscription whose pattern could receive a topic one of these matches, a
    /// publication to a topic one matches. Empty: every topic.
    /// </summary>
    public List<string> Patterns { get; set; } = [];
}

/// <summary>The publish hook: the payload is not sent unless asked for, and then only up to <see cref="MaxPayloadBytes"/>.</summary>
public sealed class PublishHookOptions : TopicHookOptions
{
    /// <summary>Send the payload (base64) with the question; off by default: the backend decides on topic, size and headers.</summary>
    public bool IncludePayload { get; set; }

    /// <summary>The largest payload sent with the question; a larger one is asked about without it (<c>payloadOmitted</c>).</summary>
    [Range(0, 16 * 1024 * 1024)]
    public int MaxPayloadBytes { get; set; } = 64 * 1024;
}
