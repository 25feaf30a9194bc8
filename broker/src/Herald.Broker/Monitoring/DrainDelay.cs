using Herald.Broker.Hosting;
using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Monitoring;

/// <summary>
/// Holds the host's stop for <see cref="MonitoringOptions.DrainDelay"/> while the HTTP listener is still
/// open, so load balancers see <c>/readyz</c> turn 503 before the port closes. Registered after the web
/// server, so the host (which stops services in reverse order) stops this first.
/// </summary>
internal sealed class DrainDelay : IHostedService
{
    private readonly TimeSpan _delay;

    public DrainDelay(TimeSpan delay) => _delay = delay;

    public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public async Task StopAsync(CancellationToken cancellationToken)
    {
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
}
