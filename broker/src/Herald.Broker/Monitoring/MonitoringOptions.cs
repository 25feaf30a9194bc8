using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Monitoring;

/// <summary><c>Herald:Monitoring</c>: health and the JSON monitoring endpoints on the HTTP port.</summary>
public sealed class MonitoringOptions
{
    /// <summary>
    /// Serve <c>/varz</c>, <c>/connz</c> and <c>/subsz</c>. They show client addresses and subscribed
    /// patterns: keep the HTTP port private (or these off) where it faces the internet.
    /// <c>/healthz</c>, <c>/readyz</c> and <c>/metrics</c> do not depend on this.
    /// </summary>
    public bool Enabled { get; set; } = true;

    /// <summary>
    /// On shutdown <c>/readyz</c> answers 503 at once; the broker keeps its HTTP listener open this much
    /// longer before stopping, so a load balancer sees the 503 and stops sending new clients first
    /// (Kubernetes: a few seconds, under the pod's termination grace period).
    /// </summary>
    public TimeSpan DrainDelay { get; set; } = TimeSpan.Zero;

    /// <summary>Most entries in one page of <c>/connz</c> or <c>/subsz</c> (<c>?limit=</c> is capped to it).</summary>
    [Range(1, 1_000_000)]
    public int MaxPageSize { get; set; } = 10_000;
}
