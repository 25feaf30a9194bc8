using Herald.Broker.Cluster;
using Herald.Broker.Engines;
using Herald.Broker.Engines.PollSharing;
using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Hosting;

/// <summary>The cluster engine, or none (single node): the container holds no null singleton.</summary>
internal sealed record ClusterSlot(ClusterEngine? Engine)
{
    /// <summary>
    /// The engines the sessions and monitoring reach: the cluster's (Redis) on a cluster node, the local ones otherwise;
    /// long-poll sessions are shared only when the cluster shares them (<c>Herald:Cluster:ShareLongPollSessions</c>).
    /// </summary>
    public BrokerEngines Engines { get; } = Engine is null
        ? BrokerEngines.Local
        : new BrokerEngines(Engine.Exchange, Engine.Interest, Engine.SharedHistory, Engine, Engine.Options.ShareLongPollSessions ? Engine.Sessions : LocalSessions.Instance) { Control = Engine.Control, Census = Engine.Control };
}

/// <summary>Starts and stops the cluster engine with the host, when there is one; nothing otherwise.</summary>
internal sealed class ClusterLifetime(ClusterEngine? engine) : IHostedService, IAsyncDisposable
{
    public Task StartAsync(CancellationToken cancellationToken) => engine?.StartAsync(cancellationToken) ?? Task.CompletedTask;

    public Task StopAsync(CancellationToken cancellationToken) => engine?.StopAsync(cancellationToken) ?? Task.CompletedTask;

    public ValueTask DisposeAsync() => engine?.DisposeAsync() ?? ValueTask.CompletedTask;
}
