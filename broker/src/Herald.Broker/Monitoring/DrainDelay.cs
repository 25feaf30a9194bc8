using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Monitoring;

/// <summary>
/// Holds the host's stop for <see cref="MonitoringOptions.DrainDelay"/> while every listener is still
/// open, so load balancers see <c>/readyz</c> turn 503 before the ports close. The host calls
/// <see cref="StoppingAsync"/> before any service's <c>StopAsync</c>, the web server's included. On SIGTERM
/// <c>ApplicationStopping</c> has fired already (clients have been told the broker is shutting down); on a
/// stop from code it fires after this delay; readiness turns "draining" here either way.
/// </summary>
internal sealed class DrainDelay : IHostedLifecycleService
{
    private readonly TimeSpan _delay;
    private readonly BrokerHealth _health;

    public DrainDelay(TimeSpan delay, BrokerHealth health)
    {
        _delay = delay;
        _health = health;
    }

    public async Task StoppingAsync(CancellationToken cancellationToken)
    {
        _health.BeginDraining();
        if (_delay <= TimeSpan.Zero)
        {
            return;
        }

        try
        {
            await Task.Delay(_delay, cancellationToken).ConfigureAwait(false);
        }
        catch (OperationCanceledException)
        {
            // the host's shutdown timeout ran out: stop now
        }
    }

    public Task StartingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StartedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StoppedAsync(CancellationToken cancellationToken) => Task.CompletedTask;
}
