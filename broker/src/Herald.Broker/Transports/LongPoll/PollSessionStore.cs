using System.Buffers.Text;
using System.Collections.Concurrent;
using System.Net;
using System.Security.Cryptography;
using Herald.Broker.Delivery;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// Long-poll sessions by token (longpoll §1): admission of the requests that read a body (per address and,
/// for creations, over all), creation within the transport's capacity and its shared memory budget, the
/// owner's check on every request, the one-shot publishers (one per identity, or per address without
/// authentication, so they share a rate bucket), ended tokens (bounded in number and time), and the count
/// of polls held. Every session is also in the one <see cref="SessionRegistry"/>, which sweeps it, counts it
/// against the connection limits and closes it on shutdown.
/// </summary>
internal sealed class PollSessionStore : BackgroundService
{
    private readonly ConcurrentDictionary<string, PollSession> _sessions = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<string, PollSession> _oneShots = new(StringComparer.Ordinal);
    private readonly EndedTokens _ended;
    private readonly AddressSlots _pendingByAddress;
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
        Budget = new PendingBudget(options.MaxPendingBytesTotal);
        _ended = new EndedTokens(options.MaxEndedSessions, options.EndedSessionMemory);
        _pendingByAddress = new AddressSlots(options.MaxPendingRequestsPerAddress);
    }

    public LongPollOptions Options => _options;

    public BrokerCore Broker => _broker;

    /// <summary>The unacknowledged bytes of every session, together (<c>MaxPendingBytesTotal</c>).</summary>
    public PendingBudget Budget { get; }

    public int Count => _sessions.Count;

    /// <summary>Polls held now, over all sessions (monitoring).</summary>
    public int HeldPolls => Volatile.Read(ref _polls);

    /// <summary>
    /// Admits a request that reads a body: at most <c>MaxPendingRequestsPerAddress</c> from one address at
    /// once and, for a creation, <c>MaxPendingSessions</c> over all (a client slow to send its body holds a
    /// slot, as WCF's maxPendingSessions counts channels not yet accepted). Over either: 503. Dispose the
    /// answer when the body is in.
    /// </summary>
    public Admission Admit(HttpContext context, bool creating)
    {
        ThrowIfStopping();
        if (!_pendingByAddress.TryTake(context.Connection.RemoteIpAddress, out AddressSlots.Slot slot))
        {
            throw HttpProblem.Unavailable("TooManyPendingRequests", $"More than {_options.MaxPendingRequestsPerAddress} requests from {context.Connection.RemoteIpAddress} are being read at once.", 1);
        }

        var admission = new Admission(this, slot, creating);
        if (creating && Interlocked.Increment(ref _creating) > _options.MaxPendingSessions)
        {
            admission.Dispose();
            throw HttpProblem.Unavailable("TooManyPendingSessions", $"More than {_options.MaxPendingSessions} sessions are being created at once.", 1);
        }

        return admission;
    }

    /// <summary>Creates and opens a session for <paramref name="identity"/> (within an <see cref="Admit"/>).</summary>
    public PollSession Create(Identity identity, string? clientName, Capabilities requested, EndPoint? remote)
    {
        if (_sessions.Count >= _options.MaxSessions)
        {
            throw HttpProblem.Unavailable("TooManySessions", $"The broker holds its maximum of {_options.MaxSessions} long-poll sessions.", 5);
        }

        if (!Budget.HasRoomFor(_broker.Limits.MaxPendingBytes))
        {
            throw HttpProblem.Unavailable("PendingBytesFull", $"Long-poll sessions hold their budget of {_options.MaxPendingBytesTotal} unacknowledged bytes.", 5);
        }

        string token = Base64Url.EncodeToString(RandomNumberGenerator.GetBytes(32)); // 256 random bits: unguessable
        var session = new PollSession(_broker, this, _options, token, _registry.NextId(), remote, Budget);
        session.Open(identity, clientName, requested);
        _sessions[token] = session;
        Budget.Join();
        Refusal refused = _registry.Add(session); // MaxConnections, MaxConnectionsPerAddress: counted with TCP's
        if (!refused.IsNone)
        {
            session.Close(refused.Code, refused.Message!);
            throw HttpProblem.Unavailable(refused.Code.ToString(), refused.Message!, 5);
        }

        return session;
    }

    /// <summary>
    /// The one-shot publisher of <c>POST /poll/publish</c> for this identity (authentication on) or address
    /// (off): never registered, subscribed or polled; kept while it is used, so its publish rate bucket
    /// binds every one-shot request of its owner. Callers take its <see cref="PollSession.Requests"/>.
    /// </summary>
    public PollSession OneShot(Identity identity, IPEndPoint? remote)
    {
        string key = _broker.Authenticator.Mode != AuthMode.None ? $"identity:{identity.Name}" : $"address:{remote?.Address}";
        if (_oneShots.TryGetValue(key, out PollSession? session))
        {
            return session;
        }

        if (_oneShots.Count >= _options.MaxSessions)
        {
            throw HttpProblem.Unavailable("TooManySessions", $"The broker holds its maximum of {_options.MaxSessions} one-shot publishers.", 5);
        }

        return _oneShots.GetOrAdd(key, _ => new PollSession(_broker, this, _options, token: "", 0, remote, budget: null));
    }

    /// <summary>
    /// The session named by <paramref name="token"/> (404 unknown, 410 ended); with authentication on, only
    /// for a request carrying its owner's credential (longpoll §1.1): the token alone does not act as it.
    /// </summary>
    public async Task<PollSession> OwnedAsync(HttpContext context, string token)
    {
        if (Find(token) is not { } session)
        {
            throw _ended.TryGet(token, out ErrorCode reason) ? Ended(reason) : new HttpProblem(StatusCodes.Status404NotFound, "SessionNotFound", "No such session.");
        }

        if (_broker.Authenticator.Mode != AuthMode.None
            && (await HttpExchange.AuthenticateAsync(context, _broker, PollSession.TransportName).ConfigureAwait(false)).Name != session.Identity.Name)
        {
            _broker.Metrics.ProtocolError(ErrorCode.AuthenticationFailed);
            throw new HttpProblem(StatusCodes.Status401Unauthorized, nameof(ErrorCode.AuthenticationFailed), "The credential is not the session owner's.");
        }

        session.Touch();
        return session;
    }

    /// <summary>The live session named by <paramref name="token"/>, if any (no owner's check: not for requests).</summary>
    public PollSession? Find(string token) => _sessions.GetValueOrDefault(token);

    /// <summary>Called once by a session that ends: its token is answered 410 for a while (bounded in number), then 404.</summary>
    public void Forget(PollSession session)
    {
        if (session.Token.Length == 0 || !_sessions.TryRemove(session.Token, out _))
        {
            return;
        }

        Budget.Leave();
        _registry.Remove(session);
        _ended.Add(session.Token, session.CloseCode);
    }

    /// <summary>Counts a poll as held; throws 503 over <see cref="LongPollOptions.MaxConcurrentPolls"/>. Pair with <see cref="EndPoll"/>.</summary>
    public void BeginPoll()
    {
        ThrowIfStopping();
        if (Interlocked.Increment(ref _polls) > _options.MaxConcurrentPolls)
        {
            Interlocked.Decrement(ref _polls);
            throw HttpProblem.Unavailable("TooManyPolls", $"More than {_options.MaxConcurrentPolls} polls are held at once.", 1);
        }
    }

    public void EndPoll() => Interlocked.Decrement(ref _polls);

    /// <summary>410 for a session that ended, saying why (longpoll §3: <c>reason</c> is the spec §8 code, e.g. SlowConsumer).</summary>
    public static HttpProblem Ended(ErrorCode reason) =>
        new(StatusCodes.Status410Gone, "SessionExpired", $"The session has ended ({(reason == ErrorCode.None ? "closed by the client" : reason.ToString())}); create a new one.")
        {
            Reason = reason == ErrorCode.None ? "ClientClose" : reason.ToString(),
        };

    /// <summary>Forgets ended tokens past <c>EndedSessionMemory</c> and idle one-shot publishers (the registry sweeps the sessions).</summary>
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(TimeSpan.FromSeconds(Math.Clamp(_options.EndedSessionMemory.TotalSeconds / 4, 0.05, 30)));
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                long now = Environment.TickCount64;
                _ended.Sweep(now);
                foreach ((string key, PollSession oneShot) in _oneShots)
                {
                    if (now - oneShot.LastActivity > (long)_options.InactivityTimeout.TotalMilliseconds && oneShot.Requests.CurrentCount == 1)
                    {
                        _oneShots.TryRemove(key, out _);
                    }
                }
            }
        }
        catch (OperationCanceledException)
        {
            // stopping
        }
    }

    private void ThrowIfStopping()
    {
        if (_registry.IsStopping)
        {
            throw HttpProblem.Unavailable("ShuttingDown", "The broker is shutting down.", 5);
        }
    }

    /// <summary>A request admitted by <see cref="Admit"/>; disposing it frees its slots.</summary>
    internal readonly struct Admission(PollSessionStore store, AddressSlots.Slot slot, bool creating) : IDisposable
    {
        public void Dispose()
        {
            slot.Dispose();
            if (creating)
            {
                Interlocked.Decrement(ref store._creating);
            }
        }
    }
}
