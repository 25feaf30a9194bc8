using Herald.Broker.Monitoring;
using Herald.Broker.Sessions;
using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Hosting;

/// <summary>
/// The broker's stop, in the order README's "Shutdown" timeline states, before the web server stops:
/// <list type="number">
/// <item><c>/readyz</c> turns 503 (on SIGTERM it did already, when <c>ApplicationStopping</c> fired);</item>
/// <item>for <see cref="MonitoringOptions.DrainDelay"/> the broker goes on as before, so load balancers move new clients first;</item>
/// <item>the sessions drain (<see cref="SessionRegistry.DrainAsync"/>): input stops, queued messages are delivered
/// within <see cref="LimitOptions.ShutdownDrainTimeout"/>, each client is told <c>ShuttingDown</c>;</item>
/// <item>only then the web server stops: every listener closes at once, the probes' included.</item>
/// </list>
/// The host runs <see cref="StoppingAsync"/> before any service's <c>StopAsync</c>, whether the stop came from
/// a signal or from code.
/// </summary>
internal sealed class ShutdownSequence : IHostedLifecycleService
{
    private readonly TimeSpan _drainDelay;
    private readonly BrokerHealth _health;
    private readonly SessionRegistry _sessions;

    public ShutdownSequence(TimeSpan drainDelay, BrokerHealth health, SessionRegistry sessions)
    {
        _drainDelay = drainDelay;
        _health = health;
        _sessions = sessions;
    }

    public async Task StoppingAsync(CancellationToken cancellationToken)
    {
        _health.BeginDraining();
        try
        {
            if (_drainDelay > TimeSpan.Zero)
            {
                await Task.Delay(_drainDelay, cancellationToken).ConfigureAwait(false);
            }

            await _sessions.DrainAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (OperationCanceledException)
        {
            // the host's shutdown timeout ran out: the web server's stop aborts what is left
        }
    }

    public Task StartingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StartedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StoppedAsync(CancellationToken cancellationToken) => Task.CompletedTask;
}
