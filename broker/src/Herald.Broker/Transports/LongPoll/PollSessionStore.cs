using System.Buffers.Text;
using System.Collections.Concurrent;
using System.Net;
using System.Security.Cryptography;
using Herald.Broker.Cluster;
using Herald.Broker.Delivery;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
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
        if (Shared is { } shared)
        {
            shared.Handler = RunCommandAsync;
            shared.OwnedCount = () => _sessions.Count;
        }
    }

    /// <summary>In a cluster: where every session's state lives, so any node serves it (spec cluster.md §10); null on a single node.</summary>
    public SharedSessions? Shared => _broker.SharedSessions;

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

    /// <summary>Creates and opens a session for <paramref name="identity"/> (within an <see cref="Admit"/>); in a cluster, its state is made in Redis first.</summary>
    public async Task<PollSession> CreateAsync(Identity identity, string? clientName, Capabilities requested, EndPoint? remote)
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
        var session = new PollSession(_broker, this, _options, token, _registry.NextId(), remote, Budget, shared: Shared);
        session.Open(identity, clientName, requested);
        _sessions[token] = session; // counted at once: the limits above hold while Redis is asked
        Budget.Join();
        Refusal refused = _registry.Add(session); // MaxConnections, MaxConnectionsPerAddress: counted with TCP's
        if (!refused.IsNone)
        {
            if (Shared is null)
            {
                session.Close(refused.Code, refused.Message!);
            }
            else
            {
                session.Moved(); // nothing of it in Redis yet
            }

            throw HttpProblem.Unavailable(refused.Code.ToString(), refused.Message!, 5);
        }

        if (Shared is { } shared)
        {
            try
            {
                await shared.CreateAsync(token, identity.Name, clientName, (int)requested, session.StateTimeToLive).ConfigureAwait(false);
            }
            catch (Exception e) when (e is StackExchange.Redis.RedisException or TimeoutException)
            {
                session.Moved(); // its client never learns its token
                throw ClusterUnavailable(e);
            }
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

        return _oneShots.GetOrAdd(key, _ => new PollSession(_broker, this, _options, token: "", 0, remote, budget: null, _registry.UnlistedInput));
    }

    /// <summary>
    /// The session named by <paramref name="token"/> (404 unknown, 410 ended); with authentication on, only
    /// for a request carrying its owner's credential (longpoll §1.1): the token alone does not act as it.
    /// </summary>
    public async Task<PollSession> OwnedAsync(HttpContext context, string token)
    {
        if (Find(token) is not { } session)
        {
            throw _ended.TryGet(token, out ErrorCode reason) ? Ended(reason) : SessionNotFound();
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
            _ended.Add(session.Token, session.CloseCode);
        }
    }

    /// <summary>
    /// The session named by <paramref name="token"/>, for a request carrying its owner's credential: this node's own
    /// (<see cref="Located.Local"/>) or, in a cluster, one another node owns (<see cref="Located.Remote"/>, read from
    /// Redis). 404 unknown, 410 ended, 401 another identity's credential.
    /// </summary>
    public async Task<Located> LocateAsync(HttpContext context, string token)
    {
        if (Find(token) is not null || Shared is not { } shared)
        {
            PollSession local = await OwnedAsync(context, token).ConfigureAwait(false);
            return new Located(local, null, local.Identity);
        }

        SharedSession? record = await OrUnavailable(shared.FindAsync(token)).ConfigureAwait(false);
        if (record is null)
        {
            throw _ended.TryGet(token, out ErrorCode reason) ? Ended(reason) : SessionNotFound();
        }

        if (record.Ended is { } ended)
        {
            throw Ended(ended);
        }

        Identity identity = await HttpExchange.AuthenticateAsync(context, _broker, PollSession.TransportName).ConfigureAwait(false);
        if (_broker.Authenticator.Mode != AuthMode.None && identity.Name != record.Identity)
        {
            _broker.Metrics.ProtocolError(ErrorCode.AuthenticationFailed);
            throw new HttpProblem(StatusCodes.Status401Unauthorized, nameof(ErrorCode.AuthenticationFailed), "The credential is not the session owner's.");
        }

        if (record.Owner is null && await TakeOverAsync(record, identity, HttpExchange.RemoteOf(context)).ConfigureAwait(false) is { } taken)
        {
            return new Located(taken, null, identity); // its owner is gone: this node serves it from now on
        }

        return new Located(Find(token), record, identity);
    }

    /// <summary>
    /// Takes over a shared session whose owner's lease expired (spec cluster.md §10): opened here as its identity,
    /// its subscriptions made again, each on a history topic resumed after the last position it delivered, and its
    /// sequence continued. Null if another node was first (or it ended meanwhile).
    /// </summary>
    public async Task<PollSession?> TakeOverAsync(SharedSession record, Identity identity, EndPoint? remote)
    {
        SharedSessions shared = Shared!;
        if (_registry.IsStopping)
        {
            return null; // a node on its way out takes nothing over: its polls read Redis, the next node takes it
        }

        SharedSession? taken = await OrUnavailable(shared.TakeOverAsync(record.Token)).ConfigureAwait(false);
        if (taken is null)
        {
            return Find(record.Token);
        }

        var session = new PollSession(_broker, this, _options, taken.Token, _registry.NextId(), remote, Budget, shared: shared, baseSequence: taken.Sequence);
        session.Open(identity, taken.Client, (Capabilities)taken.Capabilities);
        _sessions[taken.Token] = session;
        Budget.Join();
        Refusal refused = _registry.Add(session);
        if (!refused.IsNone)
        {
            // This node cannot hold it (its connection limits, or it began stopping): let go, for another node to take.
            session.Moved();
            await shared.ReleaseAsync(taken.Token).ConfigureAwait(false);
            throw HttpProblem.Unavailable(refused.Code == ErrorCode.ShuttingDown ? "OwnerUnavailable" : refused.Code.ToString(), refused.Message!, 1);
        }

        await session.Requests.WaitAsync().ConfigureAwait(false);
        try
        {
            foreach (SharedSubscription subscription in taken.Subscriptions)
            {
                StreamPosition? since = session.Backlog.AcceptsHeaders && subscription.Position is { } position && position.IndexOf(' ', StringComparison.Ordinal) is > 0 and var space
                    && ulong.TryParse(position.AsSpan(0, space), System.Globalization.CultureInfo.InvariantCulture, out ulong offset)
                    ? new StreamPosition(offset, position[(space + 1)..])
                    : null;
                Refusal answer;
                try
                {
                    answer = session.Subscribe(subscription.Sid, new System.Buffers.ReadOnlySequence<byte>(System.Text.Encoding.UTF8.GetBytes(subscription.Pattern)), subscription.NoEcho, since, subscription.Queue);
                }
                catch (ProtocolException e)
                {
                    answer = new Refusal(e.Code, e.Message);
                }

                if (!answer.IsNone && answer.Code != ErrorCode.RateLimited)
                {
                    _ = await shared.SubscriptionAsync(taken.Token, subscription.Sid, null, false).ConfigureAwait(false); // no longer allowed: gone
                }
            }

            session.FlushTouched();
            if (session.AwaitsInterest)
            {
                await session.InterestSettledAsync().WaitAsync(_options.PollTimeout).ConfigureAwait(false); // what is published after this answer reaches it
            }
        }
        catch (TimeoutException)
        {
            // Redis slow to confirm: served anyway; the subscriptions become live when it does.
        }
        finally
        {
            session.Requests.Release();
        }

        _broker.Log.SessionTakenOver(session.Id, taken.Subscriptions.Count);
        return session;
    }

    /// <summary>A request another node received for a session this node owns: run as if it came here.</summary>
    private async Task<SessionReply> RunCommandAsync(SessionCommand command)
    {
        if (Find(command.Token) is not { } session)
        {
            return new SessionReply { Status = 0 }; // not here (any more): the sender looks again
        }

        try
        {
            return await LongPollEndpoints.RunAsync(session, this, command, CancellationToken.None).ConfigureAwait(false);
        }
        catch (HttpProblem e)
        {
            return new SessionReply { Status = e.Status, Code = e.Code, Message = e.Message, Reason = e.Reason, RetryAfter = e.RetryAfter is { } after ? (int)after.TotalSeconds : null };
        }
        catch (ProtocolException e)
        {
            HttpProblem problem = HttpExchange.ProblemOf(e);
            return new SessionReply { Status = problem.Status, Code = problem.Code, Message = problem.Message };
        }
    }

    /// <summary>
    /// Sends a request for another node's session to that node and returns its answer (spec cluster.md §10). If
    /// the owner is gone (it does not answer and its lease expired), this node takes the session over and carries
    /// the request out itself; an owner that holds its lease but does not answer is 503.
    /// </summary>
    public async Task<SessionReply> ForwardAsync(Located at, SessionCommand command, HttpContext context)
    {
        SharedSessions shared = Shared!;
        SharedSession? record = at.Remote;
        for (int attempt = 0; attempt < 3; attempt++)
        {
            if (record?.Owner is { } owner && owner != shared.Node)
            {
                SessionReply? reply;
                try
                {
                    reply = await shared.SendAsync(owner, command, shared.Lease + TimeSpan.FromSeconds(1), context.RequestAborted).ConfigureAwait(false);
                }
                catch (Exception e) when (e is StackExchange.Redis.RedisException)
                {
                    throw ClusterUnavailable(e);
                }

                if (reply is null)
                {
                    // No answer: the owner may have carried it out and died, or be slow. Never sent twice; the
                    // client tries again, and by then a dead owner's lease has expired and its session is taken over.
                    throw HttpProblem.Unavailable("OwnerUnavailable", "The node that owns this session did not answer; try again.", 1);
                }

                if (reply.Status > 0)
                {
                    return reply;
                }
            }

            if (Find(command.Token) is { } local)
            {
                return await LongPollEndpoints.RunAsync(local, this, command, context.RequestAborted).ConfigureAwait(false);
            }

            record = await OrUnavailable(shared.FindAsync(command.Token)).ConfigureAwait(false);
            if (record is null || record.Ended is not null)
            {
                throw record?.Ended is { } ended ? Ended(ended) : SessionNotFound();
            }

            if (record.Owner is null && await TakeOverAsync(record, at.Identity!, HttpExchange.RemoteOf(context)).ConfigureAwait(false) is { } taken)
            {
                return await LongPollEndpoints.RunAsync(taken, this, command, context.RequestAborted).ConfigureAwait(false);
            }
        }

        throw HttpProblem.Unavailable("OwnerUnavailable", "The node that owns this session did not answer; try again.", 1);
    }

    /// <summary>
    /// A poll of a shared session (spec cluster.md §10), on any node: acknowledges and reads the session's stream
    /// in Redis; with nothing there, holds until the owner appends (it wakes this node), a newer poll replaces this
    /// one (409), the session ends (410) or the poll timeout passes (an empty take). A poll held on a node that is
    /// not the owner looks at the owner's lease every heartbeat, and takes the session over once it has expired.
    /// </summary>
    public async Task<WindowTake> PollSharedAsync(Located at, string token, long ack, CancellationToken cancellation)
    {
        SharedSessions shared = Shared!;
        long deadline = Environment.TickCount64 + (long)_options.PollTimeout.TotalMilliseconds;
        string? generation = null;
        while (true)
        {
            using SharedSessions.Wake wake = shared.Arm(token);
            SharedPoll read = await OrUnavailable(shared.PollAsync(token, ack, _options.MaxMessagesPerPoll, PollSession.StateTimeToLiveOf(_options, shared), hold: true, generation)).ConfigureAwait(false);

            switch (read.Status)
            {
                case SharedPollStatus.Unknown:
                    throw SessionNotFound();
                case SharedPollStatus.Ended:
                    _broker.Metrics.Poll("ended");
                    throw Ended(read.Reason ?? "");
                case SharedPollStatus.AckOutOfRange:
                    throw HttpProblem.Malformed($"ack {ack} is not between 0 and the last sequence assigned, {read.LastSequence}.");
                case SharedPollStatus.Replaced:
                    _broker.Metrics.Poll("replaced");
                    throw new HttpProblem(StatusCodes.Status409Conflict, "PollReplaced", "A newer poll on this session took over.");
            }

            generation = read.Generation;
            if (read.Entries.Count > 0)
            {
                _broker.Metrics.Poll("messages");
                return TakeOf(read, ack);
            }

            long remaining = deadline - Environment.TickCount64;
            if (remaining <= 0 || cancellation.IsCancellationRequested || _registry.IsStopping)
            {
                _broker.Metrics.Poll("empty");
                return WindowTake.Empty(ack);
            }

            bool woken = await wake.WaitAsync(TimeSpan.FromMilliseconds(Math.Min(remaining, (long)shared.RenewEvery.TotalMilliseconds)), cancellation).ConfigureAwait(false);
            if (!woken && !cancellation.IsCancellationRequested && Find(token) is null)
            {
                SharedSession? record = await OrUnavailable(shared.FindAsync(token)).ConfigureAwait(false);
                if (record is { Owner: null, Ended: null })
                {
                    await TakeOverAsync(record, at.Identity!, null).ConfigureAwait(false); // the owner is gone: messages flow again from here
                }
            }
        }
    }

    /// <summary>The consecutive messages read, within <c>MaxBytesPerPoll</c> (at least one); a gap (dropped by the owner's backlog) ends the take, and the next poll reports it.</summary>
    private WindowTake TakeOf(SharedPoll read, long ack)
    {
        var frames = new List<QueuedFrame>(read.Entries.Count);
        long bytes = 0;
        long first = read.Entries[0].Sequence;
        foreach ((long sequence, uint sid, byte[] frame) in read.Entries)
        {
            if (sequence != first + frames.Count || (frames.Count > 0 && bytes + frame.Length > _options.MaxBytesPerPoll))
            {
                break;
            }

            frames.Add(new QueuedFrame(MessageBuffer.Copy(frame), sid));
            bytes += frame.Length;
        }

        long dropped = Math.Max(0, first - 1 - Math.Max(read.HighestAck, ack));
        bool redelivery = first <= read.HighestSent;
        if (redelivery)
        {
            _broker.Metrics.Redelivered();
        }

        return new WindowTake(first, [.. frames], bytes, dropped, redelivery);
    }

    /// <summary>Keeps the leases of the shared sessions this node owns, every heartbeat (a member's interval).</summary>
    private async Task RenewLeasesAsync(SharedSessions shared, CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(shared.RenewEvery);
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                await Task.WhenAll(_sessions.Values.Where(s => s.Shared is not null).Select(s => s.RenewAsync())).ConfigureAwait(false);
            }
        }
        catch (OperationCanceledException)
        {
            // stopping
        }
    }

    /// <summary>A call to Redis about a shared session; Redis not answering is 503 <c>ClusterUnavailable</c>.</summary>
    private static async Task<T> OrUnavailable<T>(Task<T> call)
    {
        try
        {
            return await call.ConfigureAwait(false);
        }
        catch (Exception e) when (e is StackExchange.Redis.RedisException or TimeoutException)
        {
            throw ClusterUnavailable(e);
        }
    }

    private static HttpProblem SessionNotFound() => new(StatusCodes.Status404NotFound, "SessionNotFound", "No such session.");

    /// <summary>503 when Redis does not answer a request about a shared session.</summary>
    public static HttpProblem ClusterUnavailable(Exception e) => HttpProblem.Unavailable("ClusterUnavailable", $"The cluster's Redis did not answer: {e.Message}", 1);

    /// <summary>A session found for a request: this node's (<see cref="Local"/>), or another node's, read from Redis (<see cref="Remote"/>) with the request's <see cref="Identity"/>.</summary>
    internal readonly record struct Located(PollSession? Local, SharedSession? Remote, Identity? Identity);

    /// <summary>Counts a poll as held (also while the broker drains: polls take what is queued); throws 503 over <see cref="LongPollOptions.MaxConcurrentPolls"/>. Pair with <see cref="EndPoll"/>.</summary>
    public void BeginPoll()
    {
        if (Interlocked.Increment(ref _polls) > _options.MaxConcurrentPolls)
        {
            Interlocked.Decrement(ref _polls);
            throw HttpProblem.Unavailable("TooManyPolls", $"More than {_options.MaxConcurrentPolls} polls are held at once.", 1);
        }
    }

    public void EndPoll() => Interlocked.Decrement(ref _polls);

    /// <summary>410 for a session that ended, saying why (longpoll §3: <c>reason</c> is the spec §8 code, e.g. SlowConsumer).</summary>
    public static HttpProblem Ended(string reason) => Enum.TryParse(reason, out ErrorCode code) ? Ended(code) : Ended(ErrorCode.None);

    public static HttpProblem Ended(ErrorCode reason) =>
        new(StatusCodes.Status410Gone, "SessionExpired", $"The session has ended ({(reason == ErrorCode.None ? "closed by the client" : reason.ToString())}); create a new one.")
        {
            Reason = reason == ErrorCode.None ? "ClientClose" : reason.ToString(),
        };

    /// <summary>Forgets ended tokens past <c>EndedSessionMemory</c> and idle one-shot publishers (the registry sweeps the sessions).</summary>
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        Task renewing = Shared is { } shared ? RenewLeasesAsync(shared, stoppingToken) : Task.CompletedTask;
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

        await renewing.ConfigureAwait(false);
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
