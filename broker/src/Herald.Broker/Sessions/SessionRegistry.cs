using System.Collections.Concurrent;
using System.Net;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Sessions;

/// <summary>
/// Every open session of every transport: gives each its id, admits it within the connection limits,
/// sweeps them all for liveness (one timer for all, not one per session), counts them, and drains them all
/// when the host stops (<see cref="DrainAsync"/>).
/// </summary>
internal sealed class SessionRegistry : BackgroundService
{
    private readonly ConcurrentDictionary<long, ProtocolSession> _sessions = new();
    private readonly ConcurrentDictionary<IPAddress, int> _perAddress = new();
    private readonly BrokerCore _broker;
    private long _nextId;
    private readonly TimeSpan _sweepPeriod;
    private volatile bool _stopping;
    private readonly TaskCompletionSource _emptied = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <param name="sweepPeriod">How often every session's liveness is checked: a fraction of the shortest timeout of any transport.</param>
    public SessionRegistry(BrokerCore broker, TimeSpan sweepPeriod)
    {
        _broker = broker;
        _sweepPeriod = sweepPeriod;
        broker.ClientControl.Serve(new ClientActions(broker, this).ApplyAsync); // the server API's actions that reach this node
    }

    /// <summary>The input gate of sessions the registry does not list (long-poll's one-shot publishers): <see cref="DrainAsync"/> closes it with the others.</summary>
    public InputGate UnlistedInput { get; } = new();

    /// <summary>Open sessions now, over every transport (monitoring).</summary>
    public int Count => _sessions.Count;

    /// <summary>Whether shutdown has begun draining the sessions: no new session is admitted.</summary>
    public bool IsStopping => _stopping;

    /// <summary>A moment's snapshot of the open sessions, for monitoring (<c>/connz</c>, the queue gauges). Never on the hot path.</summary>
    public ICollection<ProtocolSession> Sessions => _sessions.Values;

    /// <summary>The session with <paramref name="id"/>, while it is registered.</summary>
    public ProtocolSession? Find(long id) => _sessions.TryGetValue(id, out ProtocolSession? session) ? session : null;

    /// <summary>The id of the next session (one id space for every transport).</summary>
    public long NextId() => Interlocked.Increment(ref _nextId);

    /// <summary>
    /// Runs one framed connection (TCP, WebSocket) from accept until its socket is gone: it is counted (<c>/varz</c>,
    /// <c>/connz</c>, every connection limit) until then, not only while its session runs.
    /// </summary>
    /// <param name="closeAsync">
    /// The transport's close once the session has ended (WebSocket: its closing handshake, the socket aborted when
    /// that cannot be done within <see cref="LimitOptions.CloseTimeout"/>). Without one (Kestrel's TCP connection),
    /// a connection the client closed is aborted: nothing more goes to it, and a send it never takes would
    /// otherwise keep the socket and its buffers.
    /// </param>
    public async Task RunAsync(ConnectionContext connection, string transport, Func<Task>? closeAsync = null)
    {
        var session = new FrameSession(_broker, connection, NextId(), transport);
        Refusal refused = Add(session);
        if (!refused.IsNone)
        {
            session.Close(refused.Code, refused.Message!); // told why, then closed
        }

        try
        {
            await session.RunAsync().ConfigureAwait(false);
        }
        finally
        {
            try
            {
                if (closeAsync is not null)
                {
                    await closeAsync().ConfigureAwait(false);
                }
                else if (session.CloseCode == ErrorCode.None)
                {
                    connection.Abort(new ConnectionAbortedException("The client closed its connection."));
                }
            }
            finally
            {
                Remove(session);
            }
        }
    }

    /// <summary>
    /// Registers a new session; it is counted and swept from now on, whatever the answer. A refusal
    /// (shutting down, <c>MaxConnections</c>, <c>MaxConnectionsPerAddress</c>, <c>MaxConnectionsPerIdentity</c>) says why the transport must
    /// close it at once. Pair with <see cref="Remove"/>.
    /// </summary>
    public Refusal Add(ProtocolSession session)
    {
        _sessions[session.Id] = session;
        _broker.Metrics.ConnectionOpened(session.Transport);
        IPAddress? address = (session.RemoteEndPoint as IPEndPoint)?.Address;
        int fromAddress = address is null ? 0 : _perAddress.AddOrUpdate(address, 1, static (_, n) => n + 1);
        LimitOptions limits = _broker.Limits;
        if (_stopping)
        {
            return new Refusal(ErrorCode.ShuttingDown, "The broker is shutting down.");
        }

        if (limits.MaxConnections > 0 && _sessions.Count > limits.MaxConnections)
        {
            return new Refusal(ErrorCode.TooManyConnections, $"The broker holds its maximum of {limits.MaxConnections} connections.");
        }

        if (limits.MaxConnectionsPerAddress > 0 && fromAddress > limits.MaxConnectionsPerAddress)
        {
            return new Refusal(ErrorCode.TooManyConnections, $"More than {limits.MaxConnectionsPerAddress} connections from {address}.");
        }

        // A session opened before it is registered (long-poll) claims its identity's quota now; a TCP
        // connection claims it at HELLO, when its identity is known.
        return session.IsOpen ? session.ClaimQuota() : default;
    }

    /// <summary>Forgets a session that has ended, counting why (its <see cref="ProtocolSession.CloseCode"/>). Once per session.</summary>
    public void Remove(ProtocolSession session)
    {
        if (!_sessions.TryRemove(session.Id, out _))
        {
            return;
        }

        if (_stopping && _sessions.IsEmpty)
        {
            _emptied.TrySetResult();
        }

        if ((session.RemoteEndPoint as IPEndPoint)?.Address is { } address && _perAddress.AddOrUpdate(address, 0, static (_, n) => n - 1) <= 0)
        {
            _perAddress.TryRemove(new KeyValuePair<IPAddress, int>(address, 0)); // only if still 0
        }

        session.ReleaseQuota(); // the identity's connection slot, held as long as the connection is counted
        _broker.Metrics.ConnectionClosed(session.Transport);
        _broker.Metrics.Disconnected(session.Transport, session.CloseCode);
    }

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(_sweepPeriod);
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                long now = Environment.TickCount64;
                foreach (ProtocolSession session in _sessions.Values)
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

    /// <summary>
    /// Shutdown's second step, after the drain delay (spec §6.4): admits no new session; stops every session's
    /// input and waits for what each had in hand, so that every publication the broker took is queued to
    /// every matching subscriber before any is closed; then closes them all with <c>ShuttingDown</c>. Each
    /// delivers what it had queued, within <see cref="LimitOptions.ShutdownDrainTimeout"/> of this close, and
    /// ends. Returns when every session has ended, or a moment after that timeout.
    /// </summary>
    public async Task DrainAsync(CancellationToken cancellationToken)
    {
        _stopping = true;
        Interlocked.MemoryBarrier(); // against Add: a session it lets in after this is refused, one before is listed below
        var inputs = new List<Task>(_sessions.Count + 1) { UnlistedInput.CloseAsync() };
        foreach (ProtocolSession session in _sessions.Values)
        {
            inputs.Add(session.Input.CloseAsync());
        }

        await Task.WhenAll(inputs).WaitAsync(cancellationToken).ConfigureAwait(false); // each waits out at most one read batch or publish request

        TimeSpan timeout = _broker.Limits.ShutdownDrainTimeout;
        _broker.Log.ShuttingDown(_sessions.Count, timeout);
        foreach (ProtocolSession session in _sessions.Values)
        {
            session.Close(ErrorCode.ShuttingDown, "The broker is shutting down.");
        }

        if (_sessions.IsEmpty)
        {
            return;
        }

        try
        {
            // Every session ends by itself within the timeout (its drain, or its timer); the margin lets the last ones unwind.
            await _emptied.Task.WaitAsync(timeout + TimeSpan.FromSeconds(1), cancellationToken).ConfigureAwait(false);
        }
        catch (TimeoutException)
        {
            // the web server's stop aborts what is left
        }
    }
}
