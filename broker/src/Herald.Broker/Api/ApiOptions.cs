using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Api;

/// <summary>
/// <c>Herald:Api</c>: the server API (protocol-spec/server-api.yaml), the HTTP interface an application's backend
/// drives the broker through. It has its own listener (loopback by default, never the client HTTP port, never under
/// the client CORS policy) and starts only when at least one key is configured, so a broker with the embedded
/// defaults exposes nothing. Every request carries one of <see cref="Keys"/> as a bearer.
/// </summary>
public sealed class ApiOptions
{
    /// <summary>Address of the API listener: an IP address, or <c>localhost</c>/<c>any</c>. Beyond loopback, put TLS in front of it.</summary>
    [Required]
    public string Host { get; set; } = "127.0.0.1";

    /// <summary>Port of the API listener; 0 binds an ephemeral port (tests); -1 turns the API off even with keys.</summary>
    [Range(-1, 65535)]
    public int Port { get; set; } = 8224;

    /// <summary>The API keys; none (the default): no API listener.</summary>
    public List<ApiKeyOptions> Keys { get; set; } = [];

    /// <summary>Requests per second each key may make (a token bucket per key); 0: unlimited.</summary>
    [Range(0, 1_000_000)]
    public int RequestsPerSecond { get; set; } = 200;

    /// <summary>Requests a key may make at once above its rate before it is answered 429 (the bucket's size).</summary>
    [Range(1, 1_000_000)]
    public int RequestBurst { get; set; } = 400;

    /// <summary>Largest request body, in bytes (Kestrel's <c>MaxRequestBodySize</c> on this listener); over it: 413.</summary>
    [Range(1024, 64 * 1024 * 1024)]
    public int MaxBodyBytes { get; set; } = 1024 * 1024;

    /// <summary>Most publications in one batch request; over it: 400 before any is published.</summary>
    [Range(1, 100_000)]
    public int MaxBatchItems { get; set; } = 1000;

    /// <summary>Most topics one broadcast names; over it: 400 before any is published.</summary>
    [Range(1, 100_000)]
    public int MaxBroadcastTopics { get; set; } = 1000;

    /// <summary>How long a publication's idempotency key is remembered: a repeat within it is accepted and not delivered again.</summary>
    public TimeSpan IdempotencyWindow { get; set; } = TimeSpan.FromMinutes(2);

    /// <summary>Most idempotency keys remembered at once (this node's table; in a cluster, Redis keys per shard are bounded by the window and the API's rate instead).</summary>
    [Range(1, 10_000_000)]
    public int MaxIdempotencyKeys { get; set; } = 100_000;

    /// <summary>Longest idempotency key, in UTF-8 bytes; longer: 400.</summary>
    [Range(1, 1024)]
    public int MaxIdempotencyKeyBytes { get; set; } = 128;

    /// <summary>Most topics a <c>GET /api/v1/topics</c> page lists.</summary>
    [Range(1, 100_000)]
    public int MaxTopicsPage { get; set; } = 1000;

    /// <summary>Whether the listener is started: keys are configured and the port is not -1.</summary>
    public bool Enabled => Keys.Count > 0 && Port >= 0;
}

/// <summary>One API key: a name (what logs show, never the key), the SHA-256 of the key, and its scope.</summary>
public sealed class ApiKeyOptions
{
    /// <summary>The key's name, shown in logs and metrics instead of the key.</summary>
    public string Name { get; set; } = "";

    /// <summary>The SHA-256 of the key, 64 hexadecimal digits (<c>herald api hash-key</c>, or <c>printf %s "$KEY" | sha256sum</c>).</summary>
    public string Hash { get; set; } = "";

    /// <summary>What the key may do: <c>publish</c>, <c>read</c>, <c>admin</c> (all of it), or several joined by commas.</summary>
    public string Scope { get; set; } = "publish";

    /// <summary>This key's own requests per second instead of <see cref="ApiOptions.RequestsPerSecond"/>; null: that one.</summary>
    public int? RequestsPerSecond { get; set; }
}
