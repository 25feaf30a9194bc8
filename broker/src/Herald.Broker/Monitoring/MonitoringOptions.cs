using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Monitoring;

/// <summary>
/// <c>Herald:Monitoring</c>: the monitoring listener and what it serves. The probes (<c>/healthz</c>,
/// <c>/readyz</c>), <c>/metrics</c>, the JSON endpoints (<c>/varz</c>, <c>/connz</c>, <c>/subsz</c>,
/// <c>/statusz</c>) and the status page (<c>/</c>) are served on their own listener, on loopback unless told otherwise (as NATS's monitoring port), never on
/// the client-facing HTTP port under its CORS policy. The client port serves them only when asked: the
/// probes with <see cref="ProbesOnHttpPort"/>, the rest behind <see cref="Token"/>.
/// </summary>
public sealed class MonitoringOptions
{
    /// <summary>Address of the monitoring listener: an IP address, or <c>localhost</c>/<c>any</c>. Beyond loopback, set <see cref="Token"/>.</summary>
    [Required]
    public string Host { get; set; } = "127.0.0.1";

    /// <summary>Port of the monitoring listener; 0 binds an ephemeral port (tests); -1 turns it off.</summary>
    [Range(-1, 65535)]
    public int Port { get; set; } = 8222;

    /// <summary>
    /// A bearer token for <c>/metrics</c>, <c>/varz</c>, <c>/connz</c>, <c>/subsz</c> and <c>/statusz</c>. When set, every
    /// request for them must carry <c>Authorization: Bearer &lt;token&gt;</c>, on the monitoring listener as on
    /// the HTTP port, where they are then served too (without CORS). The status page (monitoring listener
    /// only) asks for it in a login form and keeps a session cookie instead (<see cref="MonitoringLogin"/>).
    /// Empty: monitoring listener only, open.
    /// </summary>
    [MinLength(16)]
    public string? Token { get; set; }

    /// <summary>
    /// Host names the monitoring listener answers to besides <c>localhost</c> and IP addresses (the <c>Host</c>
    /// header's name, without its port; case-insensitive): any other name gets 421, unless the request carries the
    /// monitoring token as a bearer. A page on another site that rebinds its own name to this listener's address
    /// (DNS rebinding) thus reads nothing from an operator's browser. List the names Prometheus or a proxy uses
    /// (<c>herald</c> in docker-compose). The probes (<c>/healthz</c>, <c>/readyz</c>) answer any name.
    /// </summary>
    public string[] AllowedHosts { get; set; } = [];

    /// <summary>
    /// How long a source address waits before its next try after a wrong monitoring token (a bearer or the login
    /// form): each failure puts that address's next check this much later, asynchronously, so a guesser gets one try
    /// per delay while other addresses are answered at once.
    /// </summary>
    public TimeSpan FailureDelay { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>Also answer <c>/healthz</c> and <c>/readyz</c> on the client HTTP port (for a load balancer that checks it); they show only status and ports.</summary>
    public bool ProbesOnHttpPort { get; set; }

    /// <summary>
    /// Serve <c>/varz</c>, <c>/connz</c>, <c>/subsz</c>, <c>/statusz</c> and the status page, and count
    /// publications per topic for it (<c>Telemetry/TopicTraffic</c>). They show client names and addresses and every
    /// subscribed pattern (inboxes included). <c>/healthz</c>, <c>/readyz</c> and <c>/metrics</c> do not depend on this.
    /// </summary>
    public bool Enabled { get; set; } = true;

    /// <summary>
    /// On shutdown <c>/readyz</c> answers 503 at once; the broker goes on serving every client (new ones
    /// included) this much longer before it drains them, so a load balancer sees the 503 and stops sending
    /// new clients first (Kubernetes: a few seconds, under the pod's termination grace period).
    /// </summary>
    public TimeSpan DrainDelay { get; set; } = TimeSpan.Zero;

    /// <summary>Most entries in one page of <c>/connz</c> or <c>/subsz</c> (<c>?limit=</c> is capped to it).</summary>
    [Range(1, 1_000_000)]
    public int MaxPageSize { get; set; } = 10_000;
}
