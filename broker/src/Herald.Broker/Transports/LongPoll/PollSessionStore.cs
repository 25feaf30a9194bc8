using System.Buffers.Text;
using System.Collections.Concurrent;
using System.Net;
using System.Security.Cryptography;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// Long-poll sessions by token (longpoll §1): creation within the transport's capacity, lookup (404
/// unknown, 410 ended), and the count of polls held. Every session is also in the one
/// <see cref="SessionRegistry"/>, which sweeps it, counts it and closes it on shutdown.
/// </summary>
internal sealed class PollSessionStore : BackgroundService
{
    private static readonly TimeSpan ExpiredMemory = TimeSpan.FromMinutes(10);

    private readonly ConcurrentDictionary<string, PollSession> _sessions = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<string, (long At, ErrorCode Reason)> _expired = new(StringComparer.Ordinal);
    private readonly BrokerCore _broker;
    private readonly SessionRegistry _registry;
    private readonly LongPollOptions _options;
    private int _creating;
    private int _polls;

    public PollSessionStore(BrokerCore broker, SessionRegistry registry, LongPollOptions options)
    {
        _broker = broker;
        _registry = registry;
        _options = options;
    }

    public LongPollOptions Options => _options;

    public BrokerCore Broker => _broker;

    public int Count => _sessions.Count;

    /// <summary>Polls held now, over all sessions (monitoring).</summary>
    public int HeldPolls => Volatile.Read(ref _polls);

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

    /// <summary>Creates and opens a session for <paramref name="identity"/> (between <see cref="BeginCreate"/> and <see cref="EndCreate"/>).</summary>
    public PollSession Create(Identity identity, string? clientName, bool zstd, EndPoint? remote)
    {
        if (_sessions.Count >= _options.MaxSessions)
        {
            throw new LongPollException(StatusCodes.Status503ServiceUnavailable, "TooManySessions", $"The broker holds its maximum of {_options.MaxSessions} long-poll sessions.") { RetryAfter = TimeSpan.FromSeconds(5) };
        }

        // 256 random bits: unguessable, so the token alone is the session's credential.
        string token = Base64Url.EncodeToString(RandomNumberGenerator.GetBytes(32));
        var session = new PollSession(_broker, this, _options, token, _registry.NextId(), remote);
        session.Open(identity, clientName, zstd ? Capabilities.Zstd : Capabilities.None);
        _sessions[token] = session;
        Refusal refused = _registry.Add(session);
        if (!refused.IsNone)
        {
            session.Close(refused.Code, refused.Message!);
            throw new LongPollException(StatusCodes.Status503ServiceUnavailable, refused.Code.ToString(), refused.Message!) { RetryAfter = TimeSpan.FromSeconds(5) };
        }

        return session;
    }

    /// <summary>A one-shot session for <c>POST /poll/publish</c>: never registered, subscribed or polled; it only publishes.</summary>
    public PollSession OneShot(Identity identity, EndPoint? remote)
    {
        var session = new PollSession(_broker, this, _options, token: "", 0, remote);
        session.Open(identity, clientName: null, Capabilities.None);
        return session;
    }

    public PollSession Get(string token)
    {
        if (_sessions.TryGetValue(token, out PollSession? session))
        {
            session.Touch();
            return session;
        }

        if (_expired.TryGetValue(token, out (long At, ErrorCode Reason) ended))
        {
            throw Ended(ended.Reason);
        }

        throw new LongPollException(StatusCodes.Status404NotFound, "SessionNotFound", "No such session.");
    }

    /// <summary>Called once by a session that ends: its token is answered 410 for a while, then 404.</summary>
    public void Forget(PollSession session)
    {
        if (_sessions.TryRemove(session.Token, out _))
        {
            _expired[session.Token] = (Environment.TickCount64, session.CloseCode);
            _registry.Remove(session);
        }
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

    /// <summary>Forgets ended tokens after a while (the registry sweeps the live sessions).</summary>
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(TimeSpan.FromSeconds(30));
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                long now = Environment.TickCount64;
                foreach (KeyValuePair<string, (long At, ErrorCode Reason)> expired in _expired)
                {
                    if (now - expired.Value.At > (long)ExpiredMemory.TotalMilliseconds)
                    {
                        _expired.TryRemove(expired.Key, out _);
                    }
                }
            }
        }
        catch (OperationCanceledException)
        {
            // stopping
        }
    }

    /// <summary>410 for a session that ended, saying why (longpoll §3: <c>reason</c> is the spec §8 code, e.g. SlowConsumer).</summary>
    public static LongPollException Ended(ErrorCode reason) =>
        new(StatusCodes.Status410Gone, "SessionExpired", $"The session has ended ({(reason == ErrorCode.None ? "closed by the client" : reason.ToString())}); create a new one.")
        {
            Reason = reason == ErrorCode.None ? "ClientClose" : reason.ToString(),
        };

    private void ThrowIfStopping()
    {
        if (_registry.IsStopping)
        {
            throw new LongPollException(StatusCodes.Status503ServiceUnavailable, "ShuttingDown", "The broker is shutting down.") { RetryAfter = TimeSpan.FromSeconds(5) };
        }
    }
}
