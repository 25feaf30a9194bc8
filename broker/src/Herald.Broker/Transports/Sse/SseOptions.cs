using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Transports.Sse;

/// <summary>
/// The Server-Sent Events transport's knobs (protocol-spec/sse.md). Its backlog limits and slow-consumer
/// policy are the connection limits of <c>Herald:Limits</c>, as TCP's and WebSocket's are.
/// </summary>
public sealed class SseOptions
{
    /// <summary>Whether <c>GET /sse</c> is served on the HTTP port.</summary>
    public bool Enabled { get; set; } = true;

    /// <summary>Most <c>topic</c> parameters one stream may name (each is one subscription, also counted against <c>Herald:Limits</c>).</summary>
    [Range(1, 1_000)]
    public int MaxTopics { get; set; } = 32;

    /// <summary>How often an idle stream gets a comment line, so proxies keep it open and a client that is gone is noticed.</summary>
    public TimeSpan HeartbeatInterval { get; set; } = TimeSpan.FromSeconds(15);
}
