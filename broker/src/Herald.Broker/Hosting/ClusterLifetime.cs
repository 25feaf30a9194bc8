using Herald.Broker.Cluster;
using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Hosting;

/// <summary>The cluster engine, or none (single node): the container holds no null singleton.</summary>
internal sealed record ClusterSlot(ClusterEngine? Engine);

/// <summary>Starts and stops the cluster engine with the host, when there is one; nothing otherwise.</summary>
internal sealed class ClusterLifetime(ClusterEngine? engine) : IHostedService, IAsyncDisposable
{
    public Task StartAsync(CancellationToken cancellationToken) => engine?.StartAsync(cancellationToken) ?? Task.CompletedTask;

    public Task StopAsync(CancellationToken cancellationToken) => engine?.StopAsync(cancellationToken) ?? Task.CompletedTask;

    public ValueTask DisposeAsync() => engine?.DisposeAsync() ?? ValueTask.CompletedTask;
}
