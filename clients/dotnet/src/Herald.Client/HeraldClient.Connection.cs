using System.Security.Cryptography;
using Herald.Client.Transports;
using Herald.Client.Transports.LongPoll;
using Herald.Client.Transports.Tcp;
using Herald.Client.Transports.WebSockets;
using Herald.Protocol;

namespace Herald.Client;

/// <summary>
/// The connection's life: the first connect, the supervisor that notices a lost connection and
/// reconnects with backoff, restoring subscriptions and sending what was buffered, and the close.
/// </summary>
/// <remarks>
/// <code>
///  Disconnected --ConnectAsync / first use--> Connecting --ok--> Connected --lost--> Reconnecting --ok--> Connected ...
///        ^                                        | failed                              | gave up / permanent error
///        +----------------------------------------+                                     v
///                                                         DisposeAsync (any state) --> Closed
/// </code>
/// Threading: <c>_gate</c> guards the state, <c>_current</c>, the offline buffer and each subscription's
/// <c>SentOn</c>/<c>Confirmed</c>. One task at a time owns the connection's life: the first connect, then
/// the supervisor. No await happens under the gate, and events are raised outside it, in order
/// (<see cref="Delivery.EventQueue"/>).
/// </remarks>
public sealed partial class HeraldClient
{
    private readonly Lock _gate = new();
    private readonly CancellationTokenSource _closing = new();
    private readonly PublishBuffer _offline;
    private BrokerConnection? _current;
    private ConnectionState _state = ConnectionState.Disconnected;
    private TaskCompletionSource _connected = NewSignal();
    private Task? _connecting;
    private Task? _supervisor;
    private Exception? _closedBecause;
    private HeraldServerInfo? _serverInfo;
    private int _maxTopic = int.MaxValue;
    private uint _lastSid;
    private bool _disposed;

    /// <summary>Where the client stands; <see cref="StateChanged"/> says when it changes.</summary>
    public ConnectionState State
    {
        get
        {
            lock (_gate)
            {
                return _state;
            }
        }
    }

    /// <summary>
    /// Flushes what is queued (bounded by <see cref="HeraldClientOptions.CloseTimeout"/>), closes the
    /// connection (a long-poll session is deleted), ends every subscription (enumerations finish) and fails
    /// pending requests. Publications still buffered for a reconnect are dropped.
    /// </summary>
    public async ValueTask DisposeAsync()
    {
        BrokerConnection? connection;
        Task? supervisor, connecting;
        bool connected;
        lock (_gate)
        {
            if (_disposed)
            {
                return;
            }

            _disposed = true;
            connection = _current;
            connected = _state == ConnectionState.Connected;
            supervisor = _supervisor;
            connecting = _connecting;
        }

        if (connection is not null && connected)
        {
            try
            {
                using var timeout = new CancellationTokenSource(_options.CloseTimeout);
                await connection.FlushAsync(timeout.Token).ConfigureAwait(false);
            }
            catch (Exception e) when (e is HeraldException or OperationCanceledException)
            {
                // Best effort: the broker is gone or slow.
            }
        }

        await _closing.CancelAsync().ConfigureAwait(false);
        var disposed = new ObjectDisposedException(nameof(HeraldClient), "The client was disposed.");
        lock (_gate)
        {
            connection = _current;
            _current = null;
            SetStateLocked(ConnectionState.Closed, error: null);
            _connected.TrySetException(disposed);
            _ = _connected.Task.Exception; // observed
        }

        if (connection is not null)
        {
            connection.Outbound.Close(disposed);
            await connection.DisposeAsync().ConfigureAwait(false);
        }

        await QuietlyAsync(supervisor).ConfigureAwait(false);
        await QuietlyAsync(connecting).ConfigureAwait(false);
        EndAll(error: null, requestsFail: disposed);
        _http?.Dispose();
    }

    /// <summary>Waits for a connection: connects if there is none yet, waits through a reconnect.</summary>
    private async Task<BrokerConnection> ConnectedAsync(CancellationToken cancellationToken)
    {
        while (true)
        {
            Task wait;
            lock (_gate)
            {
                ThrowIfClosed();
                if (_state == ConnectionState.Connected && _current is { } connection)
                {
                    return connection;
                }

                wait = StartLocked() ?? _connected.Task;
            }

            await wait.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>The lazy connect: starts the first connection if there is none and waits for it; does not wait through a reconnect.</summary>
    private Task StartAsync(CancellationToken cancellationToken)
    {
        Task? connecting;
        lock (_gate)
        {
            ThrowIfClosed();
            connecting = StartLocked();
        }

        return connecting is null ? Task.CompletedTask : connecting.WaitAsync(cancellationToken);
    }

    /// <summary>Starts the first connection when disconnected; returns the attempt in progress, if any. Caller holds <c>_gate</c>.</summary>
    private Task? StartLocked()
    {
        if (_state == ConnectionState.Disconnected)
        {
            SetStateLocked(ConnectionState.Connecting, error: null);
            _connecting = Task.Run(ConnectFirstAsync, CancellationToken.None);
            _connecting.ContinueWith(static t => _ = t.Exception, CancellationToken.None, TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default); // observed even if every waiter gave up
        }

        return _state == ConnectionState.Connecting ? _connecting : null;
    }

    /// <summary>The first connection. A failure is thrown to every waiter and leaves the client disconnected: the next call tries again.</summary>
    private async Task ConnectFirstAsync()
    {
        BrokerConnection connection;
        try
        {
            connection = await OpenAsync().ConfigureAwait(false);
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Exception reason = _closing.IsCancellationRequested ? new ObjectDisposedException(nameof(HeraldClient), "The client was disposed while connecting.") : e;
            lock (_gate)
            {
                _connecting = null;
                SetStateLocked(ConnectionState.Disconnected, reason);
            }

            throw reason;
        }

        lock (_gate)
        {
            _connecting = null;
            if (_disposed)
            {
                return; // DisposeAsync closes the connection
            }

            SetStateLocked(ConnectionState.Connected, error: null);
            _supervisor = Task.Run(() => SuperviseAsync(connection));
        }
    }

    /// <summary>Owns the connection's life once connected: waits for it to be lost, then reconnects, until closed.</summary>
    private async Task SuperviseAsync(BrokerConnection connection)
    {
        while (true)
        {
            Exception reason = await connection.Lost.ConfigureAwait(false);
            Detach(connection, reason);
            await connection.DisposeAsync().ConfigureAwait(false);

            // An expired credential closes a live connection: a provider can give a fresh one, a fixed credential cannot.
            bool permanent = IsPermanent(reason) && !(_options.CredentialProvider is not null && reason is HeraldException { ErrorCode: ErrorCode.AuthenticationFailed });
            lock (_gate)
            {
                if (_disposed)
                {
                    return;
                }

                SetStateLocked(permanent ? ConnectionState.Closed : ConnectionState.Reconnecting, reason);
            }

            ReportError(reason as HeraldException ?? new HeraldConnectionException($"The connection was lost: {reason.Message}", reason));
            if (permanent)
            {
                GiveUp(reason);
                return;
            }

            BrokerConnection? next = await ReconnectAsync(reason).ConfigureAwait(false);
            if (next is null)
            {
                return;
            }

            connection = next;
            lock (_gate)
            {
                if (_disposed)
                {
                    return;
                }

                SetStateLocked(ConnectionState.Connected, error: null);
            }
        }
    }

    /// <summary>Attempts connections with exponential backoff and jitter; <c>null</c> when closed or given up.</summary>
    private async Task<BrokerConnection?> ReconnectAsync(Exception lastError)
    {
        for (int attempt = 0; ; attempt++)
        {
            if (_options.MaxReconnectAttempts >= 0 && attempt >= _options.MaxReconnectAttempts)
            {
                GiveUp(new HeraldConnectionException($"Gave up reconnecting to {_address} after {attempt} attempts: {lastError.Message}", lastError));
                return null;
            }

            try
            {
                await Task.Delay(Backoff(attempt, _options.ReconnectDelay, _options.MaxReconnectDelay), _closing.Token).ConfigureAwait(false);
                return await OpenAsync().ConfigureAwait(false);
            }
            catch (Exception) when (_closing.IsCancellationRequested)
            {
                return null;
            }
            catch (Exception e) when (e is not OutOfMemoryException)
            {
                lastError = e;
                if (IsPermanent(e))
                {
                    GiveUp(e);
                    return null;
                }
            }
        }
    }

    /// <summary>
    /// One connection attempt: the transport's handshake, then every subscription made again, then the
    /// connection installed (publications go to it from then on, the buffered ones first), then a flush,
    /// after which the broker has every subscription. Bounded by <see cref="HeraldClientOptions.ConnectTimeout"/>.
    /// </summary>
    private async Task<BrokerConnection> OpenAsync()
    {
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(_closing.Token);
        timeout.CancelAfter(_options.ConnectTimeout);
        CancellationToken token = timeout.Token;
        BrokerConnection connection = _address.Transport switch
        {
            HeraldTransport.Tcp => new FrameConnection(this, _options, t => TcpLink.OpenAsync(_address, _options, t)),
            HeraldTransport.WebSocket => new FrameConnection(this, _options, t => WebSocketLink.OpenAsync(_address, _options, t)),
            _ => new LongPollConnection(this, _options, _address, _http!),
        };
        bool installed = false;
        var confirmations = new List<(HeraldSubscription Subscription, Task Confirmed)>();
        try
        {
            await connection.OpenAsync(await CredentialAsync(token).ConfigureAwait(false), token).ConfigureAwait(false);
            while (!installed)
            {
                List<HeraldSubscription> missing = [];
                List<(HeraldSubscription Subscription, HeraldException Refusal)>? unsupported = null;
                lock (_gate)
                {
                    ObjectDisposedException.ThrowIf(_disposed, this);
                    foreach (HeraldSubscription subscription in _subscriptions.Values)
                    {
                        if (!ReferenceEquals(subscription.SentOn, connection) && connection.Refusal(subscription) is { } refusal)
                        {
                            // A queue group member where the broker does not route groups (never made a plain subscription), or a
                            // join or presence events where it does not grant presence (it would close the connection): ended.
                            Remove(subscription);
                            (unsupported ??= []).Add((subscription, refusal));
                        }
                        else if (!ReferenceEquals(subscription.SentOn, connection))
                        {
                            subscription.SentOn = connection; // Confirmed stays: it means "accepted by a broker once"
                            missing.Add(subscription);
                            if (connection.SubscribesInline)
                            {
                                confirmations.Add((subscription, connection.EnqueueSubscribe(subscription)));
                            }
                        }
                    }

                    if (missing.Count == 0 || connection.SubscribesInline)
                    {
                        _current = connection;
                        installed = true;
                        Volatile.Write(ref _serverInfo, connection.Info);
                        Volatile.Write(ref _maxTopic, connection.MaxTopic);
                        _offline.MoveTo(connection, _options.MaxIncomingFrameBytes, ReportError);
                    }
                }

                unsupported?.ForEach(u => Refuse(u.Subscription, u.Refusal));

                if (!installed)
                {
                    foreach (HeraldSubscription subscription in missing)
                    {
                        await RestoreAsync(connection, subscription, token).ConfigureAwait(false);
                    }
                }
            }

            await connection.FlushAsync(token).ConfigureAwait(false);

            // Every subscription's PONG came before the flush's: each is accepted, or refused without closing the connection.
            foreach ((HeraldSubscription subscription, Task confirmed) in confirmations)
            {
                if (confirmed.Exception?.InnerException is HeraldException refused)
                {
                    Refuse(subscription, refused);
                }
            }

            lock (_gate)
            {
                foreach (HeraldSubscription subscription in _subscriptions.Values)
                {
                    if (ReferenceEquals(subscription.SentOn, connection))
                    {
                        subscription.Confirmed = true;
                    }
                }
            }

            return connection;
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Exception reason = e switch
            {
                HeraldException or ObjectDisposedException => e,
                OperationCanceledException when _closing.IsCancellationRequested => e,
                OperationCanceledException => new HeraldConnectionException($"Connecting to {_address} took longer than {_options.ConnectTimeout.TotalSeconds:0.###} s (HeraldClientOptions.ConnectTimeout).", e),
                _ => new HeraldConnectionException($"Connecting to {_address} failed: {e.Message}", e),
            };
            connection.Fail(reason);
            Detach(connection, reason);
            await connection.DisposeAsync().ConfigureAwait(false);
            confirmations.ForEach(static c => _ = c.Confirmed.Exception); // observed
            if (ReferenceEquals(reason, e))
            {
                throw;
            }

            throw reason;
        }
    }

    /// <summary>Long-poll: makes one subscription again; a refusal (the new broker's limits) ends that subscription instead of failing the reconnect.</summary>
    private async Task RestoreAsync(BrokerConnection connection, HeraldSubscription subscription, CancellationToken cancellationToken)
    {
        try
        {
            await connection.SubscribeAsync(subscription, cancellationToken).ConfigureAwait(false);
        }
        catch (HeraldException e) when (e is not HeraldConnectionException)
        {
            Refuse(subscription, e);
        }
    }

    /// <summary>A subscription the broker refused on a reconnect (its permissions or limits changed): it ends with the refusal, reported through <see cref="Error"/>.</summary>
    private void Refuse(HeraldSubscription subscription, HeraldException refusal)
    {
        Remove(subscription);
        subscription.End(refusal);
        ReportError(refusal);
    }

    /// <summary>The credential for the next connection or refresh.</summary>
    private ValueTask<string?> CredentialAsync(CancellationToken cancellationToken) =>
        _options.CredentialProvider is { } provider ? provider(cancellationToken) : ValueTask.FromResult(_options.Credential);

    /// <summary>
    /// Takes a lost connection out of service: its unwritten publications go back to the buffer, and if
    /// the broker closed it over a subscription (a refused pattern, too many), the subscriptions it had not
    /// confirmed end with that error rather than being made again at every reconnect.
    /// </summary>
    private void Detach(BrokerConnection connection, Exception reason)
    {
        List<HeraldSubscription>? refused = null;
        lock (_gate)
        {
            byte[] unsent = connection.Outbound.Close(reason);
            if (ReferenceEquals(_current, connection))
            {
                _current = null;
                _offline.ReturnUnsent(unsent);
            }

            foreach (HeraldSubscription subscription in _subscriptions.Values)
            {
                if (subscription.MadeByServer && ReferenceEquals(subscription.SentOn, connection))
                {
                    Remove(subscription); // the broker made it for that connection only: the backend decides again (spec §4.10)
                    (refused ??= []).Add(subscription);
                }
            }

            if (reason is HeraldException { IsFatal: true } error && IsSubscriptionError(error.ErrorCode))
            {
                foreach (HeraldSubscription subscription in _subscriptions.Values)
                {
                    if (ReferenceEquals(subscription.SentOn, connection) && !subscription.Confirmed)
                    {
                        Remove(subscription);
                        (refused ??= []).Add(subscription);
                    }
                }
            }
        }

        refused?.ForEach(s => s.End(reason));
    }

    /// <summary>Closes for good (reconnecting given up, or an error no reconnect can fix).</summary>
    private void GiveUp(Exception reason)
    {
        lock (_gate)
        {
            _closedBecause = reason;
            SetStateLocked(ConnectionState.Closed, reason);
            _connected.TrySetException(reason);
            _ = _connected.Task.Exception; // observed
        }

        EndAll(reason, reason);
    }

    private void EndAll(Exception? error, Exception requestsFail)
    {
        foreach (HeraldSubscription subscription in _subscriptions.Values)
        {
            Remove(subscription);
            subscription.End(error);
        }

        foreach (string token in _requests.Keys)
        {
            if (_requests.TryRemove(token, out TaskCompletionSource<HeraldMessage>? waiting))
            {
                waiting.TrySetException(requestsFail);
            }
        }
    }

    /// <summary>Caller holds <c>_gate</c>. Raises <see cref="StateChanged"/> (later, in order, on the thread pool).</summary>
    private void SetStateLocked(ConnectionState next, Exception? error)
    {
        ConnectionState previous = _state;
        if (previous == next || previous == ConnectionState.Closed)
        {
            return;
        }

        _state = next;
        if (next == ConnectionState.Connected)
        {
            _connected.TrySetResult();
        }
        else if (previous == ConnectionState.Connected)
        {
            _connected = NewSignal();
        }

        var args = new ConnectionStateChangedEventArgs(previous, next, error);
        _events.Post(() => StateChanged?.Invoke(this, args));
    }

    /// <summary>Caller holds <c>_gate</c>.</summary>
    private void ThrowIfClosed()
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        if (_state == ConnectionState.Closed)
        {
            throw new HeraldConnectionException($"The client is closed: {_closedBecause?.Message}", _closedBecause!);
        }
    }

    /// <summary>
    /// Errors that no reconnect can fix: the same HELLO would be refused again, or the application's backend ended the
    /// client (<see cref="ErrorCode.Disconnected"/>, <see cref="ErrorCode.Revoked"/>, spec §8): reconnecting would undo its
    /// decision, so the client closes and the application, told the reason, decides what comes next.
    /// </summary>
    private static bool IsPermanent(Exception e) =>
        e is HeraldException { ErrorCode: ErrorCode.UnsupportedVersion or ErrorCode.AuthenticationFailed or ErrorCode.Disconnected or ErrorCode.Revoked } or HeraldException { RefusedHello: true };

    /// <summary>
    /// Exponential backoff with "equal jitter": the ceiling doubles per attempt up to the maximum, and the
    /// delay is between half of it and all of it, so clients cut off together do not come back together.
    /// </summary>
    internal static TimeSpan Backoff(int attempt, TimeSpan initial, TimeSpan max)
    {
        double ceiling = Math.Min(max.TotalMilliseconds, initial.TotalMilliseconds * Math.Pow(2, Math.Min(attempt, 30)));
        double half = ceiling / 2;
        return TimeSpan.FromMilliseconds(half + (half * RandomNumberGenerator.GetInt32(1001) / 1000.0));
    }

    private static TaskCompletionSource NewSignal() => new(TaskCreationOptions.RunContinuationsAsynchronously);

    private static async Task QuietlyAsync(Task? task)
    {
        if (task is null)
        {
            return;
        }

        try
        {
            await task.ConfigureAwait(false);
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            // Already reported where it happened.
        }
    }
}
