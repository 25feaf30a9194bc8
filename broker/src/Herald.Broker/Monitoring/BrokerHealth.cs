using Herald.Broker.Transports;
using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Monitoring;

/// <summary>Where the broker is in its life: what <c>/readyz</c> answers.</summary>
internal enum Readiness
{
    /// <summary>The host has not finished starting: not every listener is bound yet.</summary>
    Starting,

    /// <summary>Every configured listener is bound and the broker takes clients.</summary>
    Ready,

    /// <summary>Shutdown has begun (SIGTERM, Ctrl+C): send no new clients; the ones connected are served, then drained.</summary>
    Draining,
}

/// <summary>
/// The broker's readiness, from the host's life cycle: ready once started (Kestrel binds every listener
/// before <c>ApplicationStarted</c>, and a failed bind stops the start), draining from the moment the stop
/// begins: <c>ApplicationStopping</c> (SIGTERM fires it first) or the host's first stopping step
/// (the shutdown sequence in Hosting), whichever comes first.
/// </summary>
internal sealed class BrokerHealth
{
    private int _state;

    public BrokerHealth(IHostApplicationLifetime lifetime, Listeners listeners)
    {
        Listeners = listeners;
        lifetime.ApplicationStarted.Register(() => Interlocked.CompareExchange(ref _state, (int)Readiness.Ready, (int)Readiness.Starting));
        lifetime.ApplicationStopping.Register(BeginDraining);
    }

    public Readiness State => (Readiness)Volatile.Read(ref _state);

    /// <summary>From now on <c>/readyz</c> answers 503. Idempotent.</summary>
    public void BeginDraining() => Volatile.Write(ref _state, (int)Readiness.Draining);

    public Listeners Listeners { get; }

    /// <summary>When the broker was built (for uptime).</summary>
    public DateTimeOffset StartedAt { get; } = DateTimeOffset.UtcNow;
}
