using System.ComponentModel.DataAnnotations;
using Herald.Broker.Delivery;

namespace Herald.Broker.Hosting;

/// <summary>
/// The broker's configuration, bound from the <c>Herald</c> section (appsettings.json, environment
/// variables such as <c>Herald__Tcp__PortRangeStart</c>, or <c>--Herald:Tcp:PortRangeStart=</c>).
/// Every limit here is documented in the README's configuration table and in protocol-spec §9.
/// </summary>
public sealed class HeraldOptions
{
    public const string Section = "Herald";

    /// <summary>Name sent in WELCOME and shown in logs.</summary>
    [Required, StringLength(64, MinimumLength = 1)]
    public string ServerName { get; set; } = "herald";

    public TcpOptions Tcp { get; set; } = new();

    public HttpOptions Http { get; set; } = new();

    public LongPollOptions LongPoll { get; set; } = new();

    public PolicyOptions Policy { get; set; } = new();

    public LimitOptions Limits { get; set; } = new();

    /// <summary>Log format (levels stay in the standard <c>Logging</c> section).</summary>
    public LoggingOptions Logging { get; set; } = new();

    /// <summary>Metrics and traces: Prometheus scrape endpoint, OTLP export.</summary>
    public TelemetryOptions Telemetry { get; set; } = new();

    /// <summary>Health and JSON monitoring endpoints.</summary>
    public MonitoringOptions Monitoring { get; set; } = new();

    public Compression.CompressionOptions Compression { get; set; } = new();

    public Security.SecurityOptions Security { get; set; } = new();
}

public sealed class HttpOptions
{
    /// <summary>Address the HTTP listener binds (long-poll, policy files): an IP address, or <c>localhost</c>/<c>any</c>.</summary>
    [Required]
    public string Host { get; set; } = "0.0.0.0";

    /// <summary>HTTP port; 0 binds an ephemeral port (tests); -1 turns HTTP off.</summary>
    [Range(-1, 65535)]
    public int Port { get; set; } = 8080;

    /// <summary>Time a client has to send its request headers (Kestrel's limit; stops slowloris clients).</summary>
    public TimeSpan RequestHeadersTimeout { get; set; } = TimeSpan.FromSeconds(10);
}

/// <summary>The HTTP long-poll transport's knobs (protocol-spec/longpoll.md §3), after WCF's polling duplex.</summary>
public sealed class LongPollOptions
{
    /// <summary>How long a poll is held when no message is waiting (WCF serverPollTimeout).</summary>
    public TimeSpan PollTimeout { get; set; } = TimeSpan.FromSeconds(15);

    /// <summary>A session without any request (and no poll held) for this long ends, with its subscriptions.</summary>
    public TimeSpan InactivityTimeout { get; set; } = TimeSpan.FromSeconds(60);

    /// <summary>Most sessions alive at once.</summary>
    [Range(1, 10_000_000)]
    public int MaxSessions { get; set; } = 100_000;

    /// <summary>Most session creations in progress at once (WCF maxPendingSessions).</summary>
    [Range(1, 1_000_000)]
    public int MaxPendingSessions { get; set; } = 1_000;

    /// <summary>Unacknowledged messages a session may hold before its slow-consumer policy acts (WCF maxPendingMessagesPerSession).</summary>
    [Range(1, 10_000_000)]
    public int MaxPendingMessagesPerSession { get; set; } = 10_000;

    /// <summary><c>Disconnect</c> ends the session; <c>DropOldest</c> drops the oldest and reports the gap.</summary>
    public Delivery.SlowConsumerPolicy SlowConsumerPolicy { get; set; } = Delivery.SlowConsumerPolicy.Disconnect;

    /// <summary>Most messages in one poll response.</summary>
    [Range(1, 1_000_000)]
    public int MaxMessagesPerPoll { get; set; } = 1_000;

    /// <summary>Most bytes in one poll response (at least one message is always sent).</summary>
    [Range(1024, int.MaxValue)]
    public int MaxBytesPerPoll { get; set; } = 1024 * 1024;

    /// <summary>Most polls held at once, over all sessions.</summary>
    [Range(1, 10_000_000)]
    public int MaxConcurrentPolls { get; set; } = 100_000;

    /// <summary>Largest request body (publish payloads, JSON), bytes.</summary>
    [Range(64, 64 * 1024 * 1024)]
    public int MaxBodyBytes { get; set; } = 1024 * 1024;
}

/// <summary>The Silverlight/Flash socket policy (protocol-spec/longpoll.md §4).</summary>
public sealed class PolicyOptions
{
    /// <summary>TCP port of the policy responder. Below 1024 needs root or CAP_NET_BIND_SERVICE; 0 binds an ephemeral port (tests); -1 turns it off.</summary>
    [Range(-1, 65535)]
    public int Port { get; set; } = 943;

    /// <summary>Domains granted access, in both the socket and the HTTP policies and CORS. <c>*</c> is everyone.</summary>
    public string[] AllowedDomains { get; set; } = ["*"];

    /// <summary>How long a policy client has to send its request.</summary>
    public TimeSpan Timeout { get; set; } = TimeSpan.FromSeconds(3);

    /// <summary>Most policy connections served at once; more are closed at once.</summary>
    [Range(1, 1_000_000)]
    public int MaxConcurrentRequests { get; set; } = 1_000;
}

public sealed class TcpOptions
{
    /// <summary>Address the TCP listeners bind: an IP address, or <c>localhost</c>/<c>any</c>.</summary>
    [Required]
    public string Host { get; set; } = "0.0.0.0";

    /// <summary>First port of the TCP range (inclusive). 0 with <see cref="PortRangeEnd"/> 0 binds one ephemeral port (tests).</summary>
    [Range(0, 65535)]
    public int PortRangeStart { get; set; } = 4502;

    /// <summary>Last port of the TCP range (inclusive).</summary>
    [Range(0, 65535)]
    public int PortRangeEnd { get; set; } = 4534;

    /// <summary>
    /// Run socket reads and writes inline on the I/O threads instead of hopping to the thread pool
    /// (Kestrel's UnsafePreferInlineScheduling). Cuts latency; safe because the broker never blocks in
    /// its read loop.
    /// </summary>
    public bool InlineScheduling { get; set; } = true;
}

public sealed class LimitOptions
{
    /// <summary>Largest frame body accepted, in bytes (spec §2).</summary>
    [Range(64, 64 * 1024 * 1024)]
    public int MaxFrameBytes { get; set; } = 1024 * 1024;

    /// <summary>Longest topic or pattern, in bytes (spec §5).</summary>
    [Range(1, 4096)]
    public int MaxTopicLength { get; set; } = 256;

    /// <summary>Most live subscriptions per connection.</summary>
    [Range(1, 1_000_000)]
    public int MaxSubscriptionsPerConnection { get; set; } = 10_000;

    /// <summary>Bytes queued for one connection before the slow-consumer policy acts (spec §6.3).</summary>
    [Range(1024, int.MaxValue)]
    public int MaxPendingBytes { get; set; } = 8 * 1024 * 1024;

    /// <summary>Frames queued for one connection before the slow-consumer policy acts (spec §6.3).</summary>
    [Range(1, 10_000_000)]
    public int MaxPendingMessages { get; set; } = 100_000;

    /// <summary>What to do with a connection over its pending limits.</summary>
    public SlowConsumerPolicy SlowConsumerPolicy { get; set; } = SlowConsumerPolicy.Disconnect;

    /// <summary>Time a new connection has to send HELLO.</summary>
    public TimeSpan HandshakeTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Idle time after which the broker PINGs a connection (spec §6.2).</summary>
    public TimeSpan PingInterval { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>PINGs without any answer before a connection is closed as stale.</summary>
    [Range(1, 100)]
    public int MaxPingsOutstanding { get; set; } = 2;

    /// <summary>How long shutdown waits for queued frames to be written before closing connections.</summary>
    public TimeSpan ShutdownDrainTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Most TCP connections at once; more are told <c>TooManyConnections</c> and closed. 0: no limit.</summary>
    [Range(0, 10_000_000)]
    public int MaxConnections { get; set; } = 100_000;

    /// <summary>Most TCP connections from one remote address at once. 0: no limit.</summary>
    [Range(0, 10_000_000)]
    public int MaxConnectionsPerAddress { get; set; }

    /// <summary>Publications per second one connection may sustain (token bucket); faster publishers are slowed down and told <c>RateLimited</c>, nothing is dropped. 0: no limit.</summary>
    [Range(0, 100_000_000)]
    public int PublishRatePerSecond { get; set; }

    /// <summary>Publications a connection may send in a burst above <see cref="PublishRatePerSecond"/>.</summary>
    [Range(1, 100_000_000)]
    public int PublishBurst { get; set; } = 1000;

    /// <summary>Most distinct subscription patterns in the broker; a SUBSCRIBE that would add one more gets <c>TooManyTopics</c>. 0: no limit.</summary>
    [Range(0, 100_000_000)]
    public int MaxTopics { get; set; } = 1_000_000;

    /// <summary>How long a connection closed for a protocol error or slow consumption gets to take its ERROR frame.</summary>
    public TimeSpan ErrorFlushTimeout { get; set; } = TimeSpan.FromSeconds(2);
}
