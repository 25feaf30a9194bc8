using System.Buffers.Text;
using System.Collections.Concurrent;
using System.Security.Cryptography;
using Herald.Broker.Hosting;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// Every long-poll session, by token: creation within the configured capacity, lookup (404 unknown,
/// 410 ended), the inactivity sweep, and the count of polls held.
/// </summary>
internal sealed class PollSessionStore : BackgroundService
{
    public const string Transport = "longpoll";

    private static readonly TimeSpan ExpiredMemory = TimeSpan.FromMinutes(10);

    private readonly ConcurrentDictionary<string, PollSession> _sessions = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<string, long> _expired = new(StringComparer.Ordinal);
    private readonly BrokerCore _broker;
    private readonly LongPollOptions _options;
    private long _nextId;
    private int _creating;
    private int _polls;
    private volatile bool _stopping;

    public PollSessionStore(BrokerCore broker, IHostApplicationLifetime lifetime)
    {
        _broker = broker;
        _options = broker.Options.LongPoll;
        lifetime.ApplicationStopping.Register(EndAll);
    }

    public int Count => _sessions.Count;

    public bool IsStopping => _stopping;

    /// <summary>Polls held now, over all sessions (monitoring).</summary>
    public int HeldPolls => Volatile.Read(ref _polls);

    /// <summary>A moment's snapshot of the live sessions, for monitoring (<c>/connz</c>, the queue gauges). Never on the hot path.</summary>
    public ICollection<PollSession> Sessions => _sessions.Values;

    /// <summary>
    /// Counts a session creation as pending from the moment its request arrives (a client slow to send
    /// its body holds a slot, as WCF's maxPendingSessions counts channels not yet accepted). Throws 503
    /// over <see cref="LongPollOptions.MaxPendingSessions"/>. Pair with <see cref="EndCreate"/>.
    /// </summary>
    public void BeginCreate()
    {
        ThrowIfStopping();
        if (Interlocked.Increment(ref _creating) > _options.MaxPendingSessions)
        {
            Interlocked.Decrement(ref _creating);
            throw new LongPollException(StatusCodes.Status503ServiceUnavailable, "TooManyPendingSessions", $"More than {_options.MaxPendingSessions} sessions are being created at once.") { RetryAfter = TimeSpan.FromSeconds(1) };
        }
    }

    public void EndCreate() => Interlocked.Decrement(ref _creating);

    /// <summary>Creates a session (between <see cref="BeginCreate"/> and <see cref="EndCreate"/>).</summary>
    public PollSession Create(bool zstd, string? clientName, Identity identity)
    {
        if (_sessions.Count >= _options.MaxSessions)
        {
            throw new LongPollException(StatusCodes.Status503ServiceUnavailable, "TooManySessions", $"The broker holds its maximum of {_options.MaxSessions} long-poll sessions.") { RetryAfter = TimeSpan.FromSeconds(5) };
        }

        // 256 random bits: unguessable, so the token alone is the session's credential.
        string token = Base64Url.EncodeToString(RandomNumberGenerator.GetBytes(32));
        var session = new PollSession(token, Interlocked.Increment(ref _nextId), _options, _broker.Metrics, OnSlowConsumer)
        {
            AcceptsZstd = zstd && _broker.Encoder.Enabled,
            Identity = identity,
            ClientName = clientName is { Length: > ProtocolConstants.MaxClientNameBytes } ? clientName[..ProtocolConstants.MaxClientNameBytes] : clientName,
        };
        _sessions[token] = session;
        _broker.Metrics.ConnectionOpened(Transport);
        return session;
    }

    public PollSession Get(string token)
    {
        if (_sessions.TryGetValue(token, out PollSession? session))
        {
            session.Touch();
            return session;
        }

        if (_expired.ContainsKey(token))
        {
            throw new LongPollException(StatusCodes.Status410Gone, "SessionExpired", "The session has ended (inactivity, slow consumer or closed); create a new one.");
        }

        throw new LongPollException(StatusCodes.Status404NotFound, "SessionNotFound", "No such session.");
    }

    public void End(PollSession session, DisconnectReason why, PollWake reason = PollWake.Ended)
    {
        if (_sessions.TryRemove(session.Token, out _))
        {
            _expired[session.Token] = Environment.TickCount64;
            _broker.Metrics.ConnectionClosed(Transport);
            _broker.Metrics.Disconnected(Transport, why);
        }

        session.End(_broker.Router, reason);
    }

    /// <summary>Counts a poll as held; throws 503 over <see cref="LongPollOptions.MaxConcurrentPolls"/>. Pair with <see cref="EndPoll"/>.</summary>
    public void BeginPoll()
    {
        ThrowIfStopping();
        if (Interlocked.Increment(ref _polls) > _options.MaxConcurrentPolls)
        {
            Interlocked.Decrement(ref _polls);
            throw new LongPollException(StatusCodes.Status503ServiceUnavailable, "TooManyPolls", $"More than {_options.MaxConcurrentPolls} polls are held at once.") { RetryAfter = TimeSpan.FromSeconds(1) };
        }
    }

    public void EndPoll() => Interlocked.Decrement(ref _polls);

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        TimeSpan period = TimeSpan.FromMilliseconds(Math.Clamp(_options.InactivityTimeout.TotalMilliseconds / 4, 5, 1000));
        using var timer = new PeriodicTimer(period);
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                Sweep(Environment.TickCount64);
            }
        }
        catch (OperationCanceledException)
        {
            // stopping
        }
    }

    private void Sweep(long now)
    {
        long inactivity = (long)_options.InactivityTimeout.TotalMilliseconds;
        foreach (PollSession session in _sessions.Values)
        {
            if (session.Identity.ExpiresAt is { } expires && DateTimeOffset.UtcNow >= expires)
            {
                End(session, DisconnectReason.Timeout);
            }
            else if (now - session.LastActivity > inactivity && !session.IsPolling)
            {
                _broker.Log.SessionExpired(session.Id, _options.InactivityTimeout);
                End(session, DisconnectReason.Timeout);
            }
        }

        long forget = (long)ExpiredMemory.TotalMilliseconds;
        foreach (KeyValuePair<string, long> expired in _expired)
        {
            if (now - expired.Value > forget)
            {
                _expired.TryRemove(expired.Key, out _);
            }
        }
    }

    private void OnSlowConsumer(PollSession session)
    {
        _broker.Metrics.SlowConsumer(nameof(Delivery.SlowConsumerPolicy.Disconnect));
        _broker.Log.SessionSlowConsumer(session.Id, _options.MaxPendingMessagesPerSession);
        End(session, DisconnectReason.SlowConsumer);
    }

    private void EndAll()
    {
        _stopping = true;
        foreach (PollSession session in _sessions.Values)
        {
            End(session, DisconnectReason.Shutdown, PollWake.ShuttingDown);
        }
    }

    private void ThrowIfStopping()
    {
        if (_stopping)
        {
            throw new LongPollException(StatusCodes.Status503ServiceUnavailable, "ShuttingDown", "The broker is shutting down.") { RetryAfter = TimeSpan.FromSeconds(5) };
        }
    }
}
