using System.Collections.Concurrent;
using System.Globalization;
using System.Security.Cryptography;
using System.Text.Json;
using Herald.Broker.Delivery;
using Herald.Broker.Engines.PollSharing;
using Herald.Broker.Engines;
using Herald.Protocol;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// Long-poll sessions that every node can serve (spec cluster.md §10). A session's state lives in Redis:
/// <list type="bullet">
/// <item><c>P lp:&lt;token&gt;</c>, a hash: who it is (<c>identity</c>, <c>client</c>, <c>caps</c>), the last sequence
/// appended (<c>seq</c>) and acknowledged (<c>ack</c>), the highest sent (<c>sent</c>), the poll generation
/// (<c>polls</c>), the node holding a poll (<c>waiter</c>), the last request (<c>seen</c>, Redis's clock), each
/// subscription (<c>sub:&lt;sid&gt;</c>) and the last position it delivered on a history topic
/// (<c>pos:&lt;sid&gt;</c>), and why it ended (<c>ended</c>);</item>
/// <item><c>P lq:&lt;token&gt;</c>, a stream: the backlog, one entry per append (id <c>&lt;first seq&gt;-0</c>), naming its
/// messages' sids and their frames in the append call's frame hash <c>P lf:&lt;node&gt;:&lt;n&gt;</c>, which holds each frame
/// once, whatever the number of sessions it went to (<see cref="SharedSessionScripts"/>);</item>
/// <item><c>P lo:&lt;token&gt;</c>, the owner's lease: the id of the node whose router holds the session's
/// subscriptions, expiring after three heartbeats unless renewed.</item>
/// </list>
/// A session's keys are on the shard its token hashes to (<see cref="ClusterShards.For(string)"/>, spec §13); this node's
/// wake, command and reply channels are listened to on every shard, and a command and its reply go through the session's.
/// The owner appends what its router delivers; any node reads and trims on a poll; any other request is sent
/// to the owner on its command channel, or, when the lease has expired, the node takes the session over. A Redis
/// call that fails or times out raises <see cref="ClusterUnavailableException"/> (with Redis's message).
/// With a secret, entries, commands and replies carry its tag (<see cref="SessionSignatures"/>); a command carries
/// the sender's deadline and a nonce, and its owner refuses one past its deadline, one seen before, and any past
/// <see cref="ClusterOptions.MaxSessionCommands"/> being carried out at once (each counted).
/// </summary>
internal sealed class ClusterSharedSessions : ISharedSessions
{
    private readonly ClusterShards _shards;
    private readonly ClusterOptions _options;
    private readonly string _node;
    private readonly SharedSessionAppends _appends;
    private readonly ConcurrentDictionary<string, TaskCompletionSource> _waiters = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<long, TaskCompletionSource<SessionReply>> _pending = new();
    private readonly string? _secret;
    private readonly EnvelopeSigner? _signer;
    private readonly CommandMemory _memory = new();
    private long _nextCommand;
    private int _running;
    private long _forged;
    private long _replayed;
    private long _expired;
    private long _busy;
    private long _forgedEntries;

    public ClusterSharedSessions(ClusterShards shards)
    {
        _shards = shards;
        _options = shards.First.Options;
        _node = shards.NodeId.ToString("x16", CultureInfo.InvariantCulture);
        _secret = _options.Secret;
        _signer = _secret is null ? null : new EnvelopeSigner(_secret);
        Kept = new KeptFrames(_options.KeptFrameBytes);
        _appends = new SharedSessionAppends(shards, _node, Lease, _secret, Kept, Entries, Woken);
    }

    /// <summary>The frames of this node's latest append calls, which its polls take from memory rather than from Redis.</summary>
    public KeptFrames Kept { get; }

    /// <summary>What this node appended to the sessions it owns, which a poll on it answers from without reading the stream.</summary>
    public KeptEntries Entries { get; } = new();

    /// <summary>Commands and replies refused for their tag or shape (a writer that is not a node; monitoring).</summary>
    public long CommandsForged => Interlocked.Read(ref _forged);

    /// <summary>Commands refused because this node had carried out the same one before (a replay).</summary>
    public long CommandsReplayed => Interlocked.Read(ref _replayed);

    /// <summary>Commands refused because their sender's deadline had passed when they came (the sender has answered 503).</summary>
    public long CommandsExpired => Interlocked.Read(ref _expired);

    /// <summary>Commands refused because <see cref="ClusterOptions.MaxSessionCommands"/> were being carried out.</summary>
    public long CommandsBusy => Interlocked.Read(ref _busy);

    /// <summary>Backlog entries a poll skipped because their tag was missing or wrong.</summary>
    public long EntriesForged => Interlocked.Read(ref _forgedEntries);

    public bool IsShared => true;

    /// <summary>This node's id, as the lease names it.</summary>
    public string Node => _node;

    /// <summary>How long an owner's lease lasts unrenewed: three heartbeats, as a member's.</summary>
    public TimeSpan Lease => 3 * _options.HeartbeatInterval;

    /// <summary>Renew each lease this often.</summary>
    public TimeSpan RenewEvery => _options.HeartbeatInterval;

    /// <summary>Runs a command another node sent for a session this node owns (<see cref="Serve"/>).</summary>
    private Func<SessionCommand, Task<SessionReply>>? _handler;

    /// <summary>Sessions this node owns now (<see cref="Serve"/>; monitoring).</summary>
    private Func<int>? _owned;

    /// <summary>Sessions taken over from a node whose lease expired (monitoring).</summary>
    public long TakenOver => Interlocked.Read(ref _takenOver);

    /// <summary>Requests sent to another node's session, and received for this node's (monitoring).</summary>
    public long CommandsSent => Interlocked.Read(ref _commandsSent);

    /// <summary>Sessions this node owns now (monitoring).</summary>
    public int Owned => _owned?.Invoke() ?? 0;

    public void Serve(Func<SessionCommand, Task<SessionReply>> handler, Func<int> owned)
    {
        _handler = handler;
        _owned = owned;
    }

    private long _takenOver;
    private long _commandsSent;

    /// <summary>The shard holding the session <paramref name="token"/> names.</summary>
    private ClusterConnection ShardOf(string token) => _shards.For(token);

    private RedisChannel Wakes(ClusterConnection shard) => RedisChannel.Literal(shard.Prefix + ".lpw:" + _node);

    private RedisChannel Commands(ClusterConnection shard) => RedisChannel.Literal(shard.Prefix + ".lpc:" + _node);

    private RedisChannel Replies(ClusterConnection shard) => RedisChannel.Literal(shard.Prefix + ".lpr:" + _node);

    /// <summary>Listens on this node's wake, command and reply channels on each of <paramref name="shards"/> (at the cluster's start).</summary>
    public async Task StartAsync(IReadOnlyList<ClusterConnection> shards)
    {
        foreach (ClusterConnection shard in shards)
        {
            ISubscriber subscriber = shard.Subscriber;
            await subscriber.SubscribeAsync(Wakes(shard), (channel, token) => Woken(token!)).ConfigureAwait(false);
            await subscriber.SubscribeAsync(Commands(shard), (channel, body) => Received(shard, body)).ConfigureAwait(false);
            await subscriber.SubscribeAsync(Replies(shard), (channel, body) => Replied(body)).ConfigureAwait(false);
        }
    }

    /// <summary>Undoes a <see cref="StartAsync"/> that failed part way.</summary>
    public void StopListening(IReadOnlyList<ClusterConnection> shards)
    {
        foreach (ClusterConnection shard in shards)
        {
            foreach (RedisChannel channel in (RedisChannel[])[Wakes(shard), Commands(shard), Replies(shard)])
            {
                shard.Subscriber.Unsubscribe(channel, handler: null, CommandFlags.FireAndForget);
            }
        }
    }

    /// <summary>A call to Redis, whose failure or timeout is the seam's <see cref="ClusterUnavailableException"/>.</summary>
    private static async Task<T> Guard<T>(Task<T> call)
    {
        try
        {
            return await call.ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            throw Unavailable(e);
        }
    }

    /// <summary>A Redis failure as the seam raises it; its message is Redis's (clients see it in the 503's text).</summary>
    public static Exception Unavailable(Exception e) => e is RedisException or TimeoutException ? new ClusterUnavailableException(e.Message, e) : e;

    private RedisKey Hash(string token) => SharedSessionKeys.Hash(ShardOf(token), token);

    private RedisKey Stream(string token) => SharedSessionKeys.Stream(ShardOf(token), token);

    private RedisKey LeaseKey(string token) => SharedSessionKeys.Lease(ShardOf(token), token);

    /// <summary>A new session, owned by this node.</summary>
    public async Task CreateAsync(string token, string identity, string? client, int capabilities, string? info, TimeSpan ttl)
    {
        IDatabase db = ShardOf(token).Database;
        ITransaction create = db.CreateTransaction();
        HashEntry[] fields = [new("identity", identity), new("client", client ?? ""), new("caps", capabilities), new("seq", 0), new("ack", 0), new("sent", 0), new("polls", 0)];
        _ = create.HashSetAsync(Hash(token), info is null ? fields : [.. fields, new("info", info)]);
        _ = create.KeyExpireAsync(Hash(token), ttl);
        _ = create.StringSetAsync(LeaseKey(token), _node, Lease);
        await Guard(create.ExecuteAsync()).ConfigureAwait(false);
    }

    /// <summary>What a node not owning the session needs to serve a request for it; null: no such session.</summary>
    public async Task<SharedSession?> FindAsync(string token)
    {
        IDatabase db = ShardOf(token).Database;
        Task<HashEntry[]> fields = db.HashGetAllAsync(Hash(token));
        Task<RedisValue> owner = db.StringGetAsync(LeaseKey(token));
        HashEntry[] hash = await Guard(fields).ConfigureAwait(false);
        return hash.Length == 0 ? null : SharedSessionRecord.Read(token, hash, (string?)await Guard(owner).ConfigureAwait(false));
    }

    /// <summary>
    /// Appends what the owner's router delivered to a session, its stream bounded in messages and bytes
    /// (<see cref="SharedSessionScripts.Append"/>); returns messages dropped (DropOldest), -1 lease lost or session
    /// ended, -2 ended as a slow consumer. Gathered with the appends of this node's other sessions, each frame written once
    /// (<see cref="SharedSessionAppends"/>).
    /// </summary>
    public Task<long> AppendAsync(string token, IReadOnlyList<SharedEntry> entries, int maxPending, long maxPendingBytes, bool disconnect, TimeSpan ttl) =>
        _appends.AppendAsync(token, entries, maxPending, maxPendingBytes, disconnect, ttl);

    /// <summary>This node's appends handed in and not yet answered (tests: a barrier while Redis is paused).</summary>
    internal int AppendsUnanswered => _appends.Unanswered;

    /// <summary>
    /// One read of a poll (any node): acknowledges, then what is above the ack, read in Redis one entry at a time while
    /// the answer has room (<paramref name="maxMessages"/>, <paramref name="maxBytes"/>); <paramref name="hold"/>:
    /// register this node to be woken if nothing is.
    /// </summary>
    public async Task<SharedPoll> PollAsync(string token, long ack, int maxMessages, int maxBytes, TimeSpan ttl, bool hold, string? generation)
    {
        IDatabase db = ShardOf(token).Database;
        KeptEntries.Plan? plan = Entries.PlanOf(token, ack, maxMessages, maxBytes, ttl / 2); // a call older than that: its hash is renewed by reading it
        RedisResult result = await Guard(db.ScriptEvaluateAsync(
            SharedSessionScripts.Poll,
            [Hash(token), Stream(token)],
            [ack, maxMessages, (long)ttl.TotalMilliseconds, hold ? Wakes(ShardOf(token)).ToString() : "", generation ?? "", token, maxBytes, _node, plan?.Argument ?? ""])).ConfigureAwait(false);
        var items = (RedisResult[])result!;
        long code = (long)items[0];
        switch (code)
        {
            case -1:
                return new SharedPoll(SharedPollStatus.Unknown);
            case -2:
                return new SharedPoll(SharedPollStatus.Ended) { Reason = (string?)items[1] };
            case -3:
                return new SharedPoll(SharedPollStatus.AckOutOfRange) { LastSequence = (long)items[1] };
            case -4:
                return new SharedPoll(SharedPollStatus.Replaced);
        }

        Entries.Learned(token, (long)items[5]);
        if ((long)items[6] == 1)
        {
            Kept.Took(plan!.Messages.Count); // this node's own appends, from its memory: no tag to check
            return new SharedPoll(SharedPollStatus.Ok)
            {
                Generation = (string)items[1]!,
                HighestAck = (long)items[2],
                HighestSent = (long)items[3],
                Entries = Entries.Answer(plan),
            };
        }

        var read = (RedisResult[])items[4]!;
        RedisValue[][] frames = await Guard(SharedSessionRecord.FetchFramesAsync(db, read, Kept)).ConfigureAwait(false);
        List<(long Sequence, uint Sid, MessageBuffer Frame)> entries = SharedSessionRecord.ReadEntries(token, read, frames, _secret, out int forged);
        Interlocked.Add(ref _forgedEntries, forged); // not a node's: never delivered (the gap one leaves, if any, is reported as one)
        return new SharedPoll(SharedPollStatus.Ok)
        {
            Generation = (string)items[1]!,
            HighestAck = (long)items[2],
            HighestSent = (long)items[3],
            Entries = entries,
        };
    }

    /// <summary>
    /// Arms this node's wake for the session before a poll reads (so an append between the read and the wait is
    /// not missed): the owner's next append, a newer poll, or the session's end completes it. Dispose it after.
    /// </summary>
    public ISessionWake Arm(string token)
    {
        var woken = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        TaskCompletionSource? replaced = null;
        _waiters.AddOrUpdate(token, woken, (_, earlier) =>
        {
            replaced = earlier;
            return woken;
        });
        replaced?.TrySetResult(); // an older poll on this node: it finds it was replaced
        return new Wake(this, token, woken);
    }

    /// <summary>A poll's armed wake (<see cref="Arm"/>).</summary>
    private sealed class Wake(ClusterSharedSessions owner, string token, TaskCompletionSource woken) : ISessionWake
    {
        /// <summary>True if woken within <paramref name="timeout"/>.</summary>
        public async Task<bool> WaitAsync(TimeSpan timeout, CancellationToken cancellation)
        {
            try
            {
                await woken.Task.WaitAsync(timeout, cancellation).ConfigureAwait(false);
                return true;
            }
            catch (Exception e) when (e is TimeoutException or OperationCanceledException)
            {
                return false;
            }
        }

        public void Dispose() => owner._waiters.TryRemove(new KeyValuePair<string, TaskCompletionSource>(token, woken));
    }

    private void Woken(string token)
    {
        if (_waiters.TryGetValue(token, out TaskCompletionSource? waiter))
        {
            waiter.TrySetResult();
        }
    }

    /// <summary>The owner keeps its lease; returns how things stand.</summary>
    public async Task<LeaseState> RenewAsync(string token, TimeSpan ttl)
    {
        var items = (RedisResult[])(await Guard(ShardOf(token).Database.ScriptEvaluateAsync(SharedSessionScripts.Renew, [Hash(token), LeaseKey(token), Stream(token)], [_node, (long)Lease.TotalMilliseconds, (long)ttl.TotalMilliseconds])).ConfigureAwait(false))!;
        if ((long)items[0] != 1 || (string?)items[3] is { Length: > 0 })
        {
            Entries.Forget(token); // no longer this node's to append to
        }

        return new LeaseState((long)items[0] == 1, TimeSpan.FromMilliseconds(Math.Max(0, (long)items[1])), (long)items[2] == 1, (string?)items[3] is { Length: > 0 } ended ? ended : null, (long)items[4]);
    }

    public Task UnholdAsync(string token, string generation) =>
        Guard(ShardOf(token).Database.ScriptEvaluateAsync(SharedSessionScripts.Unhold, [Hash(token)], [Wakes(ShardOf(token)).ToString(), generation]));

    /// <summary>Takes over a session whose owner's lease expired; null if it is gone or another node was first.</summary>
    public async Task<SharedSession?> TakeOverAsync(string token)
    {
        var items = (RedisResult[])(await Guard(ShardOf(token).Database.ScriptEvaluateAsync(SharedSessionScripts.TakeOver, [Hash(token), LeaseKey(token)], [_node, (long)Lease.TotalMilliseconds])).ConfigureAwait(false))!;
        if ((long)items[0] != 1)
        {
            return null;
        }

        var flat = (RedisResult[])items[1]!;
        var hash = new HashEntry[flat.Length / 2];
        for (int i = 0; i < hash.Length; i++)
        {
            hash[i] = new HashEntry((string)flat[2 * i]!, (RedisValue)flat[(2 * i) + 1]);
        }

        Interlocked.Increment(ref _takenOver);
        Entries.Forget(token); // what it kept of the session when it last owned it, if it did: another node appended since
        return SharedSessionRecord.Read(token, hash, _node);
    }

    /// <summary>Gives the lease up (a graceful stop): the next request, on any node, takes the session over at once.</summary>
    public Task ReleaseAsync(string token)
    {
        Entries.Forget(token);
        return Guard(ShardOf(token).Database.ScriptEvaluateAsync("if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end return 0", [LeaseKey(token)], [_node]));
    }


    /// <summary>
    /// Records a subscription the owner made (or, with <paramref name="pattern"/> null, ended), with the position a
    /// resume asked for (a takeover resumes after it until a message of the subscription is appended). False if
    /// this node no longer holds the session's lease: another node took it over, and the change must be made there.
    /// </summary>
    public async Task<bool> SubscriptionAsync(string token, uint sid, string? pattern, SubscribeOptions options, string? since = null, string? queue = null) =>
        (long)await Guard(ShardOf(token).Database.ScriptEvaluateAsync(
            SharedSessionScripts.Subscription,
            [Hash(token), LeaseKey(token)],
            [_node, sid, pattern is null ? "" : SharedSessionRecord.Subscription(options, pattern, queue), since ?? ""])).ConfigureAwait(false) == 1;

    /// <summary>Ends the session (as its owner: <paramref name="asOwner"/>; or for a node that found its owner gone); its token is answered as ended for <paramref name="memory"/>.</summary>
    public Task EndAsync(string token, string reason, TimeSpan memory, bool asOwner)
    {
        Entries.Forget(token);
        return Guard(ShardOf(token).Database.ScriptEvaluateAsync(SharedSessionScripts.End, [Hash(token), Stream(token), LeaseKey(token)], [reason, Math.Max(1, (long)memory.TotalMilliseconds), asOwner ? _node : "", token]));
    }

    /// <summary>Sends a request to the session's owner and waits for its answer; null if none came within <paramref name="timeout"/> (it may have been carried out).</summary>
    public async Task<SessionReply?> SendAsync(string owner, SessionCommand command, TimeSpan timeout, CancellationToken cancellation)
    {
        long id = Interlocked.Increment(ref _nextCommand);
        var reply = new TaskCompletionSource<SessionReply>(TaskCreationOptions.RunContinuationsAsynchronously);
        _pending[id] = reply;
        try
        {
            command.Id = id;
            command.From = _node;
            command.Nonce = Convert.ToHexString(RandomNumberGenerator.GetBytes(16));
            command.Deadline = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds() + (long)(timeout - DeadlineMargin(timeout)).TotalMilliseconds;
            Interlocked.Increment(ref _commandsSent);
            ClusterConnection shard = ShardOf(command.Token);
            string channel = shard.Prefix + ".lpc:" + owner;
            byte[] body = SessionSignatures.Seal(_signer, "lpc:" + owner, JsonSerializer.SerializeToUtf8Bytes(command, SharedSessionsJson.Default.SessionCommand));
            // PUBLISH's receiver count is no answer (on Redis Cluster it counts one shard's subscribers): only a reply is.
            try
            {
                await shard.Subscriber.PublishAsync(RedisChannel.Literal(channel), body).ConfigureAwait(false);
            }
            catch (RedisException e)
            {
                throw Unavailable(e); // a timeout is no answer (below)
            }

            return await reply.Task.WaitAsync(timeout, cancellation).ConfigureAwait(false);
        }
        catch (TimeoutException)
        {
            return null;
        }
        finally
        {
            _pending.TryRemove(id, out _);
        }
    }

    /// <summary>
    /// How much sooner than the sender stops waiting its command's deadline is: the time the owner has to carry it out
    /// and answer, and what the nodes' clocks may differ by (a second, or a quarter of a short wait).
    /// </summary>
    private static TimeSpan DeadlineMargin(TimeSpan timeout) => TimeSpan.FromTicks(Math.Min(TimeSpan.TicksPerSecond, timeout.Ticks / 4));

    /// <summary>
    /// A command on this node's channel: run only if its tag is the secret's (with one), its deadline has not passed,
    /// it was not run before, and fewer than <see cref="ClusterOptions.MaxSessionCommands"/> are running; each refusal
    /// is counted, and one past its deadline or over the bound is answered 503 (a real sender may still wait).
    /// </summary>
    private void Received(ClusterConnection shard, RedisValue body)
    {
        SessionCommand? command = null;
        if (SessionSignatures.TryOpen(_signer, "lpc:" + _node, (byte[])body!, out ReadOnlyMemory<byte> json))
        {
            try
            {
                command = JsonSerializer.Deserialize(json.Span, SharedSessionsJson.Default.SessionCommand);
            }
            catch (JsonException)
            {
                command = null;
            }
        }

        if (command is not { Nonce.Length: > 0 })
        {
            Interlocked.Increment(ref _forged);
            return;
        }

        if (_handler is not { } handler)
        {
            return; // not serving sessions yet: the sender times out and answers 503
        }

        long now = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds();
        if (now > command.Deadline)
        {
            Interlocked.Increment(ref _expired);
            _ = ReplyAsync(shard, command, new SessionReply { Status = 503, Code = "OwnerUnavailable", Message = "The request reached the session's node after its deadline and was not carried out; try again.", RetryAfter = 1 });
            return;
        }

        if (!_memory.Admit(command.Nonce, command.Deadline, now))
        {
            Interlocked.Increment(ref _replayed);
            return;
        }

        if (Interlocked.Increment(ref _running) > _options.MaxSessionCommands)
        {
            Interlocked.Decrement(ref _running);
            Interlocked.Increment(ref _busy);
            _ = ReplyAsync(shard, command, new SessionReply { Status = 503, Code = "OwnerUnavailable", Message = $"The session's node is busy: it is carrying out {_options.MaxSessionCommands} requests from other nodes; try again.", RetryAfter = 1 });
            return;
        }

        _ = RunCommandAsync(shard, command, handler);
    }

    private async Task RunCommandAsync(ClusterConnection shard, SessionCommand command, Func<SessionCommand, Task<SessionReply>> handler)
    {
        SessionReply reply;
        try
        {
            reply = await handler(command).ConfigureAwait(false);
        }
        catch (Exception e)
        {
            reply = new SessionReply { Status = 503, Code = "OwnerFailed", Message = e.Message };
        }
        finally
        {
            Interlocked.Decrement(ref _running);
        }

        await ReplyAsync(shard, command, reply).ConfigureAwait(false);
    }

    private async Task ReplyAsync(ClusterConnection shard, SessionCommand command, SessionReply reply)
    {
        reply.Id = command.Id;
        string channel = shard.Prefix + ".lpr:" + command.From;
        try
        {
            await shard.Subscriber.PublishAsync(RedisChannel.Literal(channel), SessionSignatures.Seal(_signer, "lpr:" + command.From, JsonSerializer.SerializeToUtf8Bytes(reply, SharedSessionsJson.Default.SessionReply))).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Redis unreachable: the sender times out and answers 503.
        }
    }

    private void Replied(RedisValue body)
    {
        if (!SessionSignatures.TryOpen(_signer, "lpr:" + _node, (byte[])body!, out ReadOnlyMemory<byte> json))
        {
            Interlocked.Increment(ref _forged);
            return;
        }

        try
        {
            if (JsonSerializer.Deserialize(json.Span, SharedSessionsJson.Default.SessionReply) is { } reply && _pending.TryRemove(reply.Id, out TaskCompletionSource<SessionReply>? waiter))
            {
                waiter.TrySetResult(reply);
            }
        }
        catch (JsonException)
        {
            Interlocked.Increment(ref _forged);
        }
    }
}
