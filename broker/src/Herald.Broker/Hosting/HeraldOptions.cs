using System.ComponentModel.DataAnnotations;
using Herald.Broker.Monitoring;
using Herald.Broker.Policy;
using Herald.Broker.Sessions;
using Herald.Broker.Transports.LongPoll;
using Herald.Broker.Transports.Tcp;

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

    /// <summary>Server-Sent Events at <c>/sse</c> (protocol-spec/sse.md).</summary>
    public Transports.Sse.SseOptions Sse { get; set; } = new();

    public PolicyOptions Policy { get; set; } = new();

    public LimitOptions Limits { get; set; } = new();

    /// <summary>Log format (levels stay in the standard <c>Logging</c> section).</summary>
    public LoggingOptions Logging { get; set; } = new();

    /// <summary>Metrics and traces: Prometheus scrape endpoint, OTLP export.</summary>
    public TelemetryOptions Telemetry { get; set; } = new();

    /// <summary>The server API an application's backend drives the broker through (off unless <c>Herald:Api:Keys</c> names a key).</summary>
    public Api.ApiOptions Api { get; set; } = new();

    /// <summary>Health and JSON monitoring endpoints.</summary>
    public MonitoringOptions Monitoring { get; set; } = new();

    public Compression.CompressionOptions Compression { get; set; } = new();

    public Security.SecurityOptions Security { get; set; } = new();

    /// <summary>Event hooks to the application's backend: connect, subscribe, publish (protocol-spec/hooks.md); each off unless its Url is set.</summary>
    public Security.HooksOptions Hooks { get; set; } = new();

    /// <summary>Many nodes, one topic space, over Redis (off unless <c>Herald:Cluster:Redis</c> is set).</summary>
    public Cluster.ClusterOptions Cluster { get; set; } = new();

    /// <summary>Topics that keep their recent messages, so clients resume after a disconnect (off unless <c>Herald:History:Topics</c> names a pattern).</summary>
    public History.HistoryOptions History { get; set; } = new();

    /// <summary>Who is on a topic, join and leave events, occupancy (spec §15); on by default, not granted by a cluster node yet.</summary>
    public Engines.PresenceOptions Presence { get; set; } = new();

    /// <summary>
    /// A key under <c>Herald:</c> that no setting binds (a typo) stops the start instead of a warning. Off by
    /// default: the broker warns at start, naming the key and the closest known one.
    /// </summary>
    public bool StrictConfiguration { get; set; }
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

