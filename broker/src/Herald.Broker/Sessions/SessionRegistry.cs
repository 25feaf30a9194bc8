using System.Net;
using System.Collections.Concurrent;
using Herald.Broker.Hosting;
using Herald.Broker.Monitoring;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Sessions;

/// <summary>
/// Every open session: gives each its id, sweeps them for liveness (one timer for all connections, not
/// one per connection) and closes them all, gracefully, when the host stops.
/// </summary>
internal sealed class SessionRegistry : BackgroundService
{
    private readonly ConcurrentDictionary<long, ClientSession> _sessions = new();

    // Monitoring (/connz): each open session with its transport and start time, added and removed with _sessions.
    private readonly ConcurrentDictionary<long, OpenConnection> _open = new();
    private readonly ConcurrentDictionary<IPAddress, int> _perAddress = new();

    private readonly BrokerCore _broker;
    private readonly IHostApplicationLifetime _lifetime;
    private long _nextId;
    private volatile bool _stopping;

    public SessionRegistry(BrokerCore broker, IHostApplicationLifetime lifetime)
    {
        _broker = broker;
        _lifetime = lifetime;
        _lifetime.ApplicationStopping.Register(CloseAll);
    }

    /// <summary>Runs one connection from accept to close.</summary>
    public async Task RunAsync(ConnectionContext connection, string transport)
    {
        var session = new ClientSession(_broker, connection, Interlocked.Increment(ref _nextId), transport);
        _sessions[session.Id] = session;
        _open[session.Id] = new OpenConnection(session, transport, DateTimeOffset.UtcNow);
        _broker.Metrics.ConnectionOpened(transport);
        IPAddress? address = (connection.RemoteEndPoint as IPEndPoint)?.Address;
        int fromAddress = address is null ? 0 : _perAddress.AddOrUpdate(address, 1, static (_, n) => n + 1);
        try
        {
            LimitOptions limits = _broker.Options.Limits;
            if (_stopping)
            {
                session.RequestClose(ErrorCode.ShuttingDown, "The broker is shutting down.");
            }
            else if (limits.MaxConnections > 0 && _sessions.Count > limits.MaxConnections)
            {
                session.RequestClose(ErrorCode.TooManyConnections, $"The broker holds its maximum of {limits.MaxConnections} connections.");
            }
            else if (limits.MaxConnectionsPerAddress > 0 && fromAddress > limits.MaxConnectionsPerAddress)
            {
                session.RequestClose(ErrorCode.TooManyConnections, $"More than {limits.MaxConnectionsPerAddress} connections from {address}.");
            }

            await session.RunAsync().ConfigureAwait(false);
        }
        finally
        {
            _sessions.TryRemove(session.Id, out _);
            _open.TryRemove(session.Id, out _);
            if (address is not null && _perAddress.AddOrUpdate(address, 0, static (_, n) => n - 1) <= 0)
            {
                _perAddress.TryRemove(new KeyValuePair<IPAddress, int>(address, 0)); // only if still 0
            }
            _broker.Metrics.ConnectionClosed(transport);
        }
    }

    /// <summary>Open sessions now (monitoring).</summary>
    public int Count => _sessions.Count;

    /// <summary>A moment's snapshot of the open sessions, for monitoring (<c>/connz</c>, the queue gauges). Never on the hot path.</summary>
    public ICollection<OpenConnection> OpenConnections => _open.Values;

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        LimitOptions limits = _broker.Options.Limits;
        TimeSpan shortest = limits.HandshakeTimeout < limits.PingInterval ? limits.HandshakeTimeout : limits.PingInterval;
        TimeSpan period = TimeSpan.FromMilliseconds(Math.Clamp(shortest.TotalMilliseconds / 4, 5, 1000));
        using var timer = new PeriodicTimer(period);
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                long now = Environment.TickCount64;
                foreach (ClientSession session in _sessions.Values)
                {
                    session.CheckLiveness(now);
                }
            }
        }
        catch (OperationCanceledException)
        {
            // stopping
        }
    }

    private void CloseAll()
    {
        _stopping = true;
        _broker.Log.ShuttingDown(_sessions.Count, _broker.Options.Limits.ShutdownDrainTimeout);
        foreach (ClientSession session in _sessions.Values)
        {
            session.RequestClose(ErrorCode.ShuttingDown, "The broker is shutting down.");
        }
    }
}
