using System.Buffers.Text;
using System.Collections.Concurrent;
using System.Net;
using System.Security.Cryptography;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.Engines.PollSharing;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// Long-poll sessions by token (longpoll §1): creation within the transport's capacity and its shared memory
/// budget, the owner's check on every request, where a session is (here, or another node's, in a cluster that
/// shares them), and ended tokens (bounded in number and time). Every session is also in the one
/// <see cref="SessionRegistry"/>, which sweeps it, counts it against the connection limits and closes it on
/// shutdown. The store's other jobs are its parts: <see cref="Admission"/>, <see cref="OneShots"/>,
/// <see cref="Takeover"/>, <see cref="Commands"/>, <see cref="SharedPolls"/> and the <see cref="LeaseRenewal"/>
/// its background loop runs.
/// </summary>
internal sealed class PollSessionStore : BackgroundService
{
    private readonly ConcurrentDictionary<string, PollSession> _sessions = new(StringComparer.Ordinal);
    private readonly EndedTokens _ended;
    private readonly BrokerCore _broker;
    private readonly SessionRegistry _registry;
    private readonly LongPollOptions _options;
    private readonly LeaseRenewal _leases;

    public PollSessionStore(BrokerCore broker, SessionRegistry registry, LongPollOptions options)
    {
        _broker = broker;
        _registry = registry;
        _options = options;
        Budget = new PendingBudget(options.MaxPendingBytesTotal);
        _ended = new EndedTokens(options.MaxEndedSessions, options.EndedSessionMemory);
        Admission = new PollAdmission(registry, options);
        OneShots = new OneShotPublishers(this, registry);
        Takeover = new SessionTakeover(this, registry);
        Commands = new SessionCommands(this, Takeover);
        SharedPolls = new SharedPolls(this, registry, Takeover);
        _leases = new LeaseRenewal(this);
        Shared.Serve(Commands.RunAsync, () => _sessions.Count);
    }

    /// <summary>Where every session's state lives, so any node serves it (spec cluster.md §10); a single node's shares nothing.</summary>
    public ISharedSessions Shared => _broker.SharedSessions;

    public LongPollOptions Options => _options;

    public BrokerCore Broker => _broker;

    /// <summary>The unacknowledged bytes of every session, together (<c>MaxPendingBytesTotal</c>).</summary>
    public PendingBudget Budget { get; }

    public int Count => _sessions.Count;

    /// <summary>Polls held now, over all sessions (monitoring).</summary>
    public int HeldPolls => Admission.HeldPolls;

    /// <summary>Admission of the requests that read a body, and of polls.</summary>
    public PollAdmission Admission { get; }

    /// <summary>The one-shot publishers of <c>POST /poll/publish</c>.</summary>
    public OneShotPublishers OneShots { get; }

    /// <summary>The takeover of a shared session whose owner is gone.</summary>
    public SessionTakeover Takeover { get; }

    /// <summary>Requests for shared sessions carried between nodes.</summary>
    public SessionCommands Commands { get; }

    /// <summary>Polls of shared sessions.</summary>
    public SharedPolls SharedPolls { get; }

    /// <summary>The sessions this node holds.</summary>
    public ICollection<PollSession> Sessions => _sessions.Values;

    /// <summary>Creates and opens a session for <paramref name="identity"/> with its client <paramref name="info"/> (checked); in a cluster, its state is made in Redis first.</summary>
    public async Task<PollSession> CreateAsync(Identity identity, string? clientName, Capabilities requested, EndPoint? remote, string? info = null)
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
        var session = new PollSession(_broker, this, _options, token, _registry.NextId(), remote, Budget, shared: Shared) { StateMade = !Shared.IsShared };
        session.Open(identity, clientName, requested);
        session.HelloInfo = info;
        Refusal refused = Hold(session); // counted at once: the limits above hold while Redis is asked
        if (!refused.IsNone)
        {
            if (!Shared.IsShared)
            {
                session.Close(refused.Code, refused.Message!);
            }
            else
            {
                session.Moved(); // nothing of it in Redis yet
            }

            throw HttpProblem.Unavailable(refused.Code.ToString(), refused.Message!, 5);
        }

        try
        {
            await Shared.CreateAsync(token, identity.Name, clientName, (int)requested, info, session.StateTimeToLive).ConfigureAwait(false);
        }
        catch (ClusterUnavailableException e)
        {
            session.Moved(); // its client never learns its token
            throw PollProblems.ClusterUnavailable(e);
        }

        session.StateMade = true;
        return session;
    }

    /// <summary>
    /// The session named by <paramref name="token"/> (404 unknown, 410 ended); with authentication on, only
    /// for a request carrying its owner's credential (longpoll §1.1): the token alone does not act as it.
    /// </summary>
    public async Task<PollSession> OwnedAsync(HttpContext context, string token)
    {
        if (Find(token) is not { } session)
        {
            throw _ended.TryGet(token, out ErrorCode reason, out string? told) ? PollProblems.Ended(reason, told) : PollProblems.SessionNotFound();
        }

        if (_broker.Authenticator.Mode != AuthMode.None
            && (await HttpExchange.AuthenticateAsync(context, _broker, PollSession.TransportName).ConfigureAwait(false)).Name != session.Identity.Name)
        {
            _broker.Metrics.ProtocolError(ErrorCode.AuthenticationFailed);
            throw PollProblems.NotTheOwner();
        }

        session.Touch();
        return session;
    }

    /// <summary>The live session named by <paramref name="token"/>, if any (no owner's check: not for requests).</summary>
    public PollSession? Find(string token) => _sessions.GetValueOrDefault(token);

    /// <summary>
    /// Holds a new or taken-over session by its token, within the shared budget, and in the registry, which may refuse
    /// it (<c>MaxConnections</c>, <c>MaxConnectionsPerAddress</c>: counted with TCP's; or stopping).
    /// </summary>
    public Refusal Hold(PollSession session)
    {
        _sessions[session.Token] = session;
        Budget.Join();
        return _registry.Add(session);
    }

    /// <summary>Called once by a session that ends: its token is answered 410 for a while (bounded in number), then 404.</summary>
    /// <param name="remember">False for a shared session that moved to another node: Redis answers for its token now.</param>
    public void Forget(PollSession session, bool remember = true)
    {
        if (session.Token.Length == 0 || !_sessions.TryRemove(new KeyValuePair<string, PollSession>(session.Token, session)))
        {
            return;
        }

        Budget.Leave();
        _registry.Remove(session);
        if (remember)
        {
            _ended.Add(session.Token, session.CloseCode, session.CloseReason);
        }
    }

    /// <summary>
    /// The session named by <paramref name="token"/>, for a request carrying its owner's credential: this node's own
    /// (<see cref="Located.Local"/>) or, in a cluster, one another node owns (<see cref="Located.Remote"/>, read from
    /// Redis). 404 unknown, 410 ended, 401 another identity's credential.
    /// </summary>
    public async Task<Located> LocateAsync(HttpContext context, string token)
    {
        if (Find(token) is not null || Shared is not { IsShared: true } shared)
        {
            PollSession local = await OwnedAsync(context, token).ConfigureAwait(false);
            return new Located(local, null, local.Identity);
        }

        SharedSession? record = await PollProblems.OrUnavailable(shared.FindAsync(token)).ConfigureAwait(false);
        if (record is null)
        {
            throw _ended.TryGet(token, out ErrorCode reason, out string? told) ? PollProblems.Ended(reason, told) : PollProblems.SessionNotFound();
        }

        if (record.Ended is { } ended)
        {
            throw PollProblems.Ended(ended);
        }

        Identity identity = await HttpExchange.AuthenticateAsync(context, _broker, PollSession.TransportName).ConfigureAwait(false);
        if (_broker.Authenticator.Mode != AuthMode.None && identity.Name != record.Identity)
        {
            _broker.Metrics.ProtocolError(ErrorCode.AuthenticationFailed);
            throw PollProblems.NotTheOwner();
        }

        if (record.Owner is null && await Takeover.RunAsync(record, identity, HttpExchange.RemoteOf(context)).ConfigureAwait(false) is { } taken)
        {
            return new Located(taken, null, identity); // its owner is gone: this node serves it from now on
        }

        return new Located(Find(token), record, identity);
    }

    /// <summary>A session found for a request: this node's (<see cref="Local"/>), or another node's, read from Redis (<see cref="Remote"/>) with the request's <see cref="Identity"/>.</summary>
    internal readonly record struct Located(PollSession? Local, SharedSession? Remote, Identity? Identity);

    /// <summary>Forgets ended tokens past <c>EndedSessionMemory</c> and idle one-shot publishers (the registry sweeps the sessions).</summary>
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        Task renewing = Shared.IsShared ? _leases.RunAsync(Shared, stoppingToken) : Task.CompletedTask;
        using var timer = new PeriodicTimer(TimeSpan.FromSeconds(Math.Clamp(_options.EndedSessionMemory.TotalSeconds / 4, 0.05, 30)));
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                long now = Environment.TickCount64;
                _ended.Sweep(now);
                OneShots.Sweep();
            }
        }
        catch (OperationCanceledException)
        {
            // stopping
        }

        await renewing.ConfigureAwait(false);
    }
}
