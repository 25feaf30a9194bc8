using System.Collections.Concurrent;
using System.Globalization;
using System.Text.Json;
using System.Text.Json.Serialization;
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
/// <item><c>P lq:&lt;token&gt;</c>, a stream: the backlog, one entry per message (id <c>&lt;seq&gt;-0</c>, fields <c>s</c> the
/// sid and <c>m</c> the MESSAGE frame);</item>
/// <item><c>P lo:&lt;token&gt;</c>, the owner's lease: the id of the node whose router holds the session's
/// subscriptions, expiring after three heartbeats unless renewed.</item>
/// </list>
/// The owner appends what its router delivers; any node reads and trims on a poll; any other request is sent
/// to the owner on its command channel, or, when the lease has expired, the node takes the session over.
/// </summary>
internal sealed class SharedSessions
{
    /// <summary>
    /// The appends of several sessions in one call (a node's pumps, batched: spec cluster.md §10). KEYS: per session its
    /// hash, stream and lease. ARGV: node, lease ms, then per session its token, ttl ms, max pending, disconnect (1/0),
    /// message count, and per message seq, sid, frame, position. Returns per session the messages dropped
    /// (DropOldest), -1 (lease another node's, or the session ended) or -2 (ended as a slow consumer). An append
    /// renews the lease too (an owner busy delivering keeps its sessions), taking it again if it expired while no
    /// other node took it (after a Redis outage, say).
    /// </summary>
    private const string AppendScript = """
        local results = {}
        local a = 3
        for s = 1, #KEYS / 3 do
          local hash, stream, lease = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
          local token, ttl, maxp, disconnect, n = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4])
          local i = a + 5
          a = i + 4 * n
          local owner = redis.call('GET', lease)
          local top = redis.call('HGET', hash, 'seq')
          if (owner and owner ~= ARGV[1]) or not top or redis.call('HEXISTS', hash, 'ended') == 1 then
            results[s] = -1
          else
            redis.call('SET', lease, ARGV[1], 'PX', ARGV[2])
            top = tonumber(top)
            while i < a do
              local seq = tonumber(ARGV[i])
              if seq > top then
                redis.call('XADD', stream, ARGV[i] .. '-0', 's', ARGV[i + 1], 'm', ARGV[i + 2])
                if ARGV[i + 3] ~= '' then redis.call('HSET', hash, 'pos:' .. ARGV[i + 1], ARGV[i + 3]) end
                top = seq
              end
              i = i + 4
            end
            redis.call('HSET', hash, 'seq', top)
            local result = 0
            local over = redis.call('XLEN', stream) - tonumber(maxp)
            if over > 0 then
              if disconnect == '1' then
                redis.call('HSET', hash, 'ended', 'SlowConsumer')
                result = -2
              else
                redis.call('XTRIM', stream, 'MAXLEN', maxp)
                result = over
              end
            end
            redis.call('PEXPIRE', hash, ttl)
            redis.call('PEXPIRE', stream, ttl)
            local waiter = redis.call('HGET', hash, 'waiter')
            if waiter then
              redis.call('HDEL', hash, 'waiter')
              redis.call('PUBLISH', waiter, token)
            end
            results[s] = result
          end
        end
        return results
        """;

    /// <summary>
    /// KEYS: hash, stream. ARGV: ack, max messages, ttl ms, waiter channel ('' : do not hold), generation ('' : a new poll).
    /// Returns {code, generation, highest ack, highest sent, entries} (code 0) or {-1} unknown, {-2, reason} ended,
    /// {-3, seq} ack out of range, {-4} replaced by a newer poll.
    /// </summary>
    private const string PollScript = """
        local h = redis.call('HMGET', KEYS[1], 'seq', 'ended', 'ack', 'sent', 'polls', 'waiter')
        if not h[1] then
          if h[2] then return {-2, h[2]} end
          return {-1}
        end
        if h[2] then return {-2, h[2]} end
        local gen = h[5] or '0'
        if ARGV[5] == '' then
          gen = tostring(redis.call('HINCRBY', KEYS[1], 'polls', 1))
          if h[6] then
            redis.call('HDEL', KEYS[1], 'waiter')
            redis.call('PUBLISH', h[6], ARGV[6])
          end
        elseif ARGV[5] ~= gen then
          return {-4}
        end
        local seq = tonumber(h[1])
        local ack = tonumber(ARGV[1])
        if ack > seq or ack < 0 then return {-3, seq} end
        local acked = tonumber(h[3] or '0')
        if ack > acked then
          redis.call('XTRIM', KEYS[2], 'MINID', (ack + 1) .. '-0')
          acked = ack
          redis.call('HSET', KEYS[1], 'ack', acked)
        end
        local now = redis.call('TIME')
        redis.call('HSET', KEYS[1], 'seen', now[1] * 1000 + math.floor(now[2] / 1000))
        local entries = redis.call('XRANGE', KEYS[2], (ack + 1) .. '-0', '+', 'COUNT', ARGV[2])
        local sent = tonumber(h[4] or '0')
        if #entries > 0 then
          local last = tonumber(string.match(entries[#entries][1], '^(%d+)'))
          if last > sent then redis.call('HSET', KEYS[1], 'sent', last) end
        elseif ARGV[4] ~= '' then
          redis.call('HSET', KEYS[1], 'waiter', ARGV[4])
        end
        redis.call('PEXPIRE', KEYS[1], ARGV[3])
        redis.call('PEXPIRE', KEYS[2], ARGV[3])
        return {0, gen, acked, sent, entries}
        """;

    /// <summary>
    /// KEYS: hash, lease, stream. ARGV: node, lease ms, state ttl ms. Keeps the lease (taken again if it expired and no
    /// other node took it: nobody else holds the session's subscriptions) and the state (while its owner
    /// keeps a session, the session decides its own inactivity). Returns {lease kept (1/0), ms since the last poll on
    /// any node, a poll held (1/0), ended reason or ''}.
    /// </summary>
    private const string RenewScript = """
        local owner = redis.call('GET', KEYS[2])
        if owner and owner ~= ARGV[1] then return {0, 0, 0, ''} end
        local h = redis.call('HMGET', KEYS[1], 'seen', 'waiter', 'ended', 'seq')
        if h[3] then return {1, 0, 0, h[3]} end
        if not h[4] then return {0, 0, 0, ''} end
        redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
        redis.call('PEXPIRE', KEYS[1], ARGV[3])
        redis.call('PEXPIRE', KEYS[3], ARGV[3])
        local now = redis.call('TIME')
        local idle = now[1] * 1000 + math.floor(now[2] / 1000) - tonumber(h[1] or '0')
        return {1, idle, h[2] and 1 or 0, ''}
        """;

    /// <summary>KEYS: hash, lease. ARGV: node, lease ms. Takes the lease if it is free: {1, fields...}; else {0}.</summary>
    private const string TakeOverScript = """
        local h = redis.call('HMGET', KEYS[1], 'seq', 'ended')
        if not h[1] or h[2] then return {0} end
        if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0} end
        return {1, redis.call('HGETALL', KEYS[1])}
        """;

    /// <summary>KEYS: hash, stream, lease. ARGV: reason, memory ms, node ('' : whoever owns it). Ends the session; its token is remembered as ended.</summary>
    private const string EndScript = """
        if ARGV[3] ~= '' then
          local owner = redis.call('GET', KEYS[3])
          if owner and owner ~= ARGV[3] then return 0 end
        end
        if not redis.call('HGET', KEYS[1], 'seq') then return 0 end
        local waiter = redis.call('HGET', KEYS[1], 'waiter')
        redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
        redis.call('HSET', KEYS[1], 'ended', ARGV[1])
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        if waiter then redis.call('PUBLISH', waiter, ARGV[4]) end
        return 1
        """;

    private readonly ClusterConnection _engine;
    private readonly string _prefix;
    private readonly string _node;
    private readonly RedisChannel _wakes;
    private readonly RedisChannel _commands;
    private readonly RedisChannel _replies;
    private readonly ConcurrentDictionary<string, TaskCompletionSource> _waiters = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<long, TaskCompletionSource<SessionReply>> _pending = new();
    private long _nextCommand;

    public SharedSessions(ClusterConnection engine)
    {
        _engine = engine;
        _prefix = engine.Options.ChannelPrefix;
        _node = engine.NodeId.ToString("x16", CultureInfo.InvariantCulture);
        _wakes = RedisChannel.Literal(_prefix + ".lpw:" + _node);
        _commands = RedisChannel.Literal(_prefix + ".lpc:" + _node);
        _replies = RedisChannel.Literal(_prefix + ".lpr:" + _node);
    }

    /// <summary>This node's id, as the lease names it.</summary>
    public string Node => _node;

    /// <summary>How long an owner's lease lasts unrenewed: three heartbeats, as a member's.</summary>
    public TimeSpan Lease => 3 * _engine.Options.HeartbeatInterval;

    /// <summary>Renew each lease this often.</summary>
    public TimeSpan RenewEvery => _engine.Options.HeartbeatInterval;

    /// <summary>Runs a command another node sent for a session this node owns. Set by the long-poll transport.</summary>
    public Func<SessionCommand, Task<SessionReply>>? Handler { get; set; }

    /// <summary>Sessions taken over from a node whose lease expired (monitoring).</summary>
    public long TakenOver => Interlocked.Read(ref _takenOver);

    /// <summary>Requests sent to another node's session, and received for this node's (monitoring).</summary>
    public long CommandsSent => Interlocked.Read(ref _commandsSent);

    /// <summary>Sessions this node owns now (set by the long-poll transport; monitoring).</summary>
    public Func<int>? OwnedCount { get; set; }

    public int Owned => OwnedCount?.Invoke() ?? 0;

    private long _takenOver;
    private long _commandsSent;

    private IDatabase Db => _engine.Database;

    /// <summary>Listens on this node's wake, command and reply channels (at the cluster's start).</summary>
    public async Task StartAsync(ISubscriber subscriber)
    {
        await subscriber.SubscribeAsync(_wakes, (channel, token) => Woken(token!)).ConfigureAwait(false);
        await subscriber.SubscribeAsync(_commands, (channel, body) => { _ = RunCommandAsync(subscriber, body); }).ConfigureAwait(false);
        await subscriber.SubscribeAsync(_replies, (channel, body) => Replied(body)).ConfigureAwait(false);
    }

    /// <summary>Undoes a <see cref="StartAsync"/> that failed part way.</summary>
    public void StopListening(ISubscriber subscriber)
    {
        foreach (RedisChannel channel in (RedisChannel[])[_wakes, _commands, _replies])
        {
            subscriber.Unsubscribe(channel, handler: null, CommandFlags.FireAndForget);
        }
    }

    private RedisKey Hash(string token) => _prefix + "lp:" + token;

    private RedisKey Stream(string token) => _prefix + "lq:" + token;

    private RedisKey LeaseKey(string token) => _prefix + "lo:" + token;

    /// <summary>A new session, owned by this node.</summary>
    public async Task CreateAsync(string token, string identity, string? client, int capabilities, TimeSpan ttl)
    {
        IDatabase db = Db;
        ITransaction create = db.CreateTransaction();
        _ = create.HashSetAsync(Hash(token), [new("identity", identity), new("client", client ?? ""), new("caps", capabilities), new("seq", 0), new("ack", 0), new("sent", 0), new("polls", 0)]);
        _ = create.KeyExpireAsync(Hash(token), ttl);
        _ = create.StringSetAsync(LeaseKey(token), _node, Lease);
        await create.ExecuteAsync().ConfigureAwait(false);
    }

    /// <summary>What a node not owning the session needs to serve a request for it; null: no such session.</summary>
    public async Task<SharedSession?> FindAsync(string token)
    {
        IDatabase db = Db;
        Task<HashEntry[]> fields = db.HashGetAllAsync(Hash(token));
        Task<RedisValue> owner = db.StringGetAsync(LeaseKey(token));
        HashEntry[] hash = await fields.ConfigureAwait(false);
        return hash.Length == 0 ? null : SharedSession.From(token, hash, (string?)await owner.ConfigureAwait(false));
    }

    /// <summary>
    /// Appends what the owner's router delivered to a session; returns messages dropped (DropOldest), -1 lease lost or
    /// session ended, -2 ended as a slow consumer. The appends of all this node's sessions waiting at the moment go to
    /// Redis together, in one script (at most <see cref="MaxAppendsInFlight"/> calls in flight): one call per batch
    /// of sessions, not per session. A session's pump has one append in flight at a time, so its order holds.
    /// </summary>
    public Task<long> AppendAsync(string token, IReadOnlyList<SharedEntry> entries, int maxPending, bool disconnect, TimeSpan ttl)
    {
        var append = new PendingAppend(token, entries, maxPending, disconnect, (long)ttl.TotalMilliseconds);
        _appends.Enqueue(append);
        SendAppends();
        return append.Done.Task;
    }

    /// <summary>Calls to Redis with appends in flight at once, at most: while they are out, the next appends gather into one.</summary>
    private const int MaxAppendsInFlight = 4;

    /// <summary>Sessions in one append call, at most; and about this many bytes of frames.</summary>
    private const int MaxSessionsPerAppend = 256;

    private const long MaxBytesPerAppend = 4 * 1024 * 1024;

    private readonly ConcurrentQueue<PendingAppend> _appends = new();
    private int _appendsInFlight;

    /// <summary>Sends what waits, while there is room in flight. Called after every enqueue and every completion, so nothing waits with room free.</summary>
    private void SendAppends()
    {
        while (!_appends.IsEmpty)
        {
            int inFlight = Volatile.Read(ref _appendsInFlight);
            if (inFlight >= MaxAppendsInFlight)
            {
                return; // a completion sends it
            }

            if (Interlocked.CompareExchange(ref _appendsInFlight, inFlight + 1, inFlight) != inFlight)
            {
                continue;
            }

            var batch = new List<PendingAppend>();
            long bytes = 0;
            while (batch.Count < MaxSessionsPerAppend && bytes < MaxBytesPerAppend && _appends.TryDequeue(out PendingAppend? next))
            {
                batch.Add(next);
                bytes += next.Entries.Sum(e => (long)e.Frame.Length);
            }

            if (batch.Count == 0)
            {
                Interlocked.Decrement(ref _appendsInFlight);
                continue;
            }

            _ = SendAsync(batch);
        }
    }

    private async Task SendAsync(List<PendingAppend> batch)
    {
        try
        {
            var keys = new RedisKey[3 * batch.Count];
            var args = new List<RedisValue>(2 + batch.Sum(a => 5 + (4 * a.Entries.Count))) { _node, (long)Lease.TotalMilliseconds };
            for (int s = 0; s < batch.Count; s++)
            {
                PendingAppend append = batch[s];
                keys[3 * s] = Hash(append.Token);
                keys[(3 * s) + 1] = Stream(append.Token);
                keys[(3 * s) + 2] = LeaseKey(append.Token);
                args.Add(append.Token);
                args.Add(append.TtlMs);
                args.Add(append.MaxPending);
                args.Add(append.Disconnect ? 1 : 0);
                args.Add(append.Entries.Count);
                foreach (SharedEntry entry in append.Entries)
                {
                    args.Add(entry.Sequence);
                    args.Add(entry.Sid);
                    args.Add(entry.Frame);
                    args.Add(entry.Position ?? "");
                }
            }

            var results = (RedisResult[])(await Db.ScriptEvaluateAsync(AppendScript, keys, [.. args]).ConfigureAwait(false))!;
            for (int s = 0; s < batch.Count; s++)
            {
                batch[s].Done.TrySetResult((long)results[s]);
            }
        }
        catch (Exception e)
        {
            foreach (PendingAppend append in batch)
            {
                append.Done.TrySetException(e);
            }
        }
        finally
        {
            Interlocked.Decrement(ref _appendsInFlight);
            SendAppends();
        }
    }

    private sealed record PendingAppend(string Token, IReadOnlyList<SharedEntry> Entries, int MaxPending, bool Disconnect, long TtlMs)
    {
        public TaskCompletionSource<long> Done { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
    }

    /// <summary>One read of a poll (any node): acknowledges, then what is above the ack; <paramref name="hold"/>: register this node to be woken if nothing is.</summary>
    public async Task<SharedPoll> PollAsync(string token, long ack, int maxMessages, TimeSpan ttl, bool hold, string? generation)
    {
        RedisResult result = await Db.ScriptEvaluateAsync(
            PollScript,
            [Hash(token), Stream(token)],
            [ack, maxMessages, (long)ttl.TotalMilliseconds, hold ? _wakes.ToString() : "", generation ?? "", token]).ConfigureAwait(false);
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

        var raw = (RedisResult[])items[4]!;
        var entries = new List<(long Sequence, uint Sid, byte[] Frame)>(raw.Length);
        foreach (RedisResult item in raw)
        {
            var entry = (RedisResult[])item!;
            string id = (string)entry[0]!;
            var fields = (RedisResult[])entry[1]!;
            uint sid = 0;
            byte[] frame = [];
            for (int f = 0; f + 1 < fields.Length; f += 2)
            {
                switch ((string?)fields[f])
                {
                    case "s":
                        sid = (uint)(long)fields[f + 1];
                        break;
                    case "m":
                        frame = (byte[])fields[f + 1]!;
                        break;
                }
            }

            entries.Add((long.Parse(id.AsSpan(0, id.IndexOf('-')), CultureInfo.InvariantCulture), sid, frame));
        }

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
    public Wake Arm(string token)
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
    internal sealed class Wake(SharedSessions owner, string token, TaskCompletionSource woken) : IDisposable
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
        var items = (RedisResult[])(await Db.ScriptEvaluateAsync(RenewScript, [Hash(token), LeaseKey(token), Stream(token)], [_node, (long)Lease.TotalMilliseconds, (long)ttl.TotalMilliseconds]).ConfigureAwait(false))!;
        return new LeaseState((long)items[0] == 1, TimeSpan.FromMilliseconds(Math.Max(0, (long)items[1])), (long)items[2] == 1, (string?)items[3] is { Length: > 0 } ended ? ended : null);
    }

    /// <summary>Takes over a session whose owner's lease expired; null if it is gone or another node was first.</summary>
    public async Task<SharedSession?> TakeOverAsync(string token)
    {
        var items = (RedisResult[])(await Db.ScriptEvaluateAsync(TakeOverScript, [Hash(token), LeaseKey(token)], [_node, (long)Lease.TotalMilliseconds]).ConfigureAwait(false))!;
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
        return SharedSession.From(token, hash, _node);
    }

    /// <summary>Gives the lease up (a graceful stop): the next request, on any node, takes the session over at once.</summary>
    public Task ReleaseAsync(string token) =>
        Db.ScriptEvaluateAsync("if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end return 0", [LeaseKey(token)], [_node]);

    /// <summary>KEYS: hash, lease. ARGV: node, sid, subscription ('' : ended), position it resumes after ('' : none). 0 if the lease is not the node's.</summary>
    private const string SubscriptionScript = """
        local owner = redis.call('GET', KEYS[2])
        if (owner and owner ~= ARGV[1]) or not redis.call('HGET', KEYS[1], 'seq') then return 0 end
        if ARGV[3] == '' then
          redis.call('HDEL', KEYS[1], 'sub:' .. ARGV[2], 'pos:' .. ARGV[2])
        else
          redis.call('HSET', KEYS[1], 'sub:' .. ARGV[2], ARGV[3])
          if ARGV[4] ~= '' then redis.call('HSETNX', KEYS[1], 'pos:' .. ARGV[2], ARGV[4]) end
        end
        return 1
        """;

    /// <summary>
    /// Records a subscription the owner made (or, with <paramref name="pattern"/> null, ended), with the position a
    /// resume asked for (a takeover resumes after it until a message of the subscription is appended). False if
    /// this node no longer holds the session's lease: another node took it over, and the change must be made there.
    /// </summary>
    public async Task<bool> SubscriptionAsync(string token, uint sid, string? pattern, bool noEcho, string? since = null, string? queue = null) =>
        (long)await Db.ScriptEvaluateAsync(
            SubscriptionScript,
            [Hash(token), LeaseKey(token)],
            [_node, sid, pattern is null ? "" : (noEcho ? "1 " : "0 ") + pattern + (queue is null ? "" : " " + queue), since ?? ""]).ConfigureAwait(false) == 1;

    /// <summary>Ends the session (as its owner: <paramref name="asOwner"/>; or for a node that found its owner gone); its token is answered as ended for <paramref name="memory"/>.</summary>
    public Task EndAsync(string token, string reason, TimeSpan memory, bool asOwner) =>
        Db.ScriptEvaluateAsync(EndScript, [Hash(token), Stream(token), LeaseKey(token)], [reason, Math.Max(1, (long)memory.TotalMilliseconds), asOwner ? _node : "", token]);

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
            Interlocked.Increment(ref _commandsSent);
            byte[] body = JsonSerializer.SerializeToUtf8Bytes(command, SharedSessionsJson.Default.SessionCommand);
            // PUBLISH's receiver count is no answer (on Redis Cluster it counts one shard's subscribers): only a reply is.
            await _engine.Subscriber.PublishAsync(RedisChannel.Literal(_prefix + ".lpc:" + owner), body).ConfigureAwait(false);
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

    private async Task RunCommandAsync(ISubscriber subscriber, RedisValue body)
    {
        SessionCommand? command;
        try
        {
            command = JsonSerializer.Deserialize((byte[])body!, SharedSessionsJson.Default.SessionCommand);
        }
        catch (JsonException)
        {
            return; // not a command (counted nowhere: only nodes write here)
        }

        if (command is null || Handler is not { } handler)
        {
            return;
        }

        SessionReply reply;
        try
        {
            reply = await handler(command).ConfigureAwait(false);
        }
        catch (Exception e)
        {
            reply = new SessionReply { Status = 503, Code = "OwnerFailed", Message = e.Message };
        }

        reply.Id = command.Id;
        try
        {
            await subscriber.PublishAsync(RedisChannel.Literal(_prefix + ".lpr:" + command.From), JsonSerializer.SerializeToUtf8Bytes(reply, SharedSessionsJson.Default.SessionReply)).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Redis unreachable: the sender times out and answers 503.
        }
    }

    private void Replied(RedisValue body)
    {
        try
        {
            if (JsonSerializer.Deserialize((byte[])body!, SharedSessionsJson.Default.SessionReply) is { } reply && _pending.TryRemove(reply.Id, out TaskCompletionSource<SessionReply>? waiter))
            {
                waiter.TrySetResult(reply);
            }
        }
        catch (JsonException)
        {
            // not a reply
        }
    }
}

/// <summary>A session's record in Redis, as a node that does not own it reads it.</summary>
internal sealed record SharedSession(string Token, string Identity, string? Client, int Capabilities, long Sequence, string? Owner, string? Ended, IReadOnlyList<SharedSubscription> Subscriptions)
{
    public static SharedSession From(string token, HashEntry[] hash, string? owner)
    {
        string identity = "", ended = "";
        string? client = null;
        int caps = 0;
        long seq = 0;
        var subscriptions = new Dictionary<uint, SharedSubscription>();
        var positions = new Dictionary<uint, string>();
        foreach (HashEntry entry in hash)
        {
            string name = entry.Name!;
            switch (name)
            {
                case "identity":
                    identity = entry.Value!;
                    break;
                case "client":
                    client = entry.Value is { IsNullOrEmpty: false } c ? (string?)c : null;
                    break;
                case "caps":
                    caps = (int)entry.Value;
                    break;
                case "seq":
                    seq = (long)entry.Value;
                    break;
                case "ended":
                    ended = entry.Value!;
                    break;
                default:
                    if (name.StartsWith("sub:", StringComparison.Ordinal) && uint.TryParse(name.AsSpan(4), CultureInfo.InvariantCulture, out uint sid))
                    {
                        string value = entry.Value!;
                        // "<no-echo 0|1> <pattern>[ <queue>]": neither a pattern nor a queue name holds a space (spec §5, §4.3)
                        string[] parts = value[2..].Split(' ', 2);
                        subscriptions[sid] = new SharedSubscription(sid, parts[0], value[0] == '1', null) { Queue = parts.Length > 1 ? parts[1] : null };
                    }
                    else if (name.StartsWith("pos:", StringComparison.Ordinal) && uint.TryParse(name.AsSpan(4), CultureInfo.InvariantCulture, out uint at))
                    {
                        positions[at] = entry.Value!;
                    }

                    break;
            }
        }

        return new SharedSession(
            token,
            identity,
            client,
            caps,
            seq,
            owner,
            ended.Length > 0 ? ended : null,
            [.. subscriptions.Values.OrderBy(s => s.Sid).Select(s => positions.TryGetValue(s.Sid, out string? p) ? s with { Position = p } : s)]);
    }
}

/// <summary>A subscription of a shared session; <see cref="Position"/>: "&lt;offset&gt; &lt;epoch&gt;" last delivered on a history topic.</summary>
internal sealed record SharedSubscription(uint Sid, string Pattern, bool NoEcho, string? Position)
{
    /// <summary>The queue group the subscription is in (spec §14), or null.</summary>
    public string? Queue { get; init; }
}

/// <summary>One message the owner appends: its session sequence, sid, the MESSAGE frame, and its stream position ("offset epoch") if it has one.</summary>
internal readonly record struct SharedEntry(long Sequence, uint Sid, byte[] Frame, string? Position);

internal enum SharedPollStatus
{
    Ok,
    Unknown,
    Ended,
    AckOutOfRange,
    Replaced,
}

/// <summary>A poll's read of the shared backlog.</summary>
internal sealed record SharedPoll(SharedPollStatus Status)
{
    public string? Reason { get; init; }

    public long LastSequence { get; init; }

    public string? Generation { get; init; }

    public long HighestAck { get; init; }

    public long HighestSent { get; init; }

    public IReadOnlyList<(long Sequence, uint Sid, byte[] Frame)> Entries { get; init; } = [];
}

/// <summary>The owner's lease renewed: whether it is still this node's, how long since the client's last request (on any node), whether a poll is held, and why it ended if it did.</summary>
internal readonly record struct LeaseState(bool Kept, TimeSpan Idle, bool PollHeld, string? Ended);

/// <summary>A request for a session, sent to its owner (spec cluster.md §10).</summary>
internal sealed class SessionCommand
{
    public long Id { get; set; }

    public string From { get; set; } = "";

    public string Token { get; set; } = "";

    /// <summary>subscribe, unsubscribe, publish, end.</summary>
    public string Op { get; set; } = "";

    public uint Sid { get; set; }

    public string? Pattern { get; set; }

    public bool NoEcho { get; set; }

    public ulong? SinceOffset { get; set; }

    public string? SinceEpoch { get; set; }

    /// <summary>Subscribe: the queue group to join (spec §14), or null.</summary>
    public string? Queue { get; set; }

    /// <summary>publish: the PUBLISH frames.</summary>
    public byte[]? Frames { get; set; }
}

/// <summary>The owner's answer: the HTTP status, and for a problem its code, message and reason; or a notice.</summary>
internal sealed class SessionReply
{
    public long Id { get; set; }

    public int Status { get; set; }

    public string? Code { get; set; }

    public string? Message { get; set; }

    public string? Reason { get; set; }

    public int? RetryAfter { get; set; }

    public string? Notice { get; set; }
}

[JsonSerializable(typeof(SessionCommand))]
[JsonSerializable(typeof(SessionReply))]
[JsonSourceGenerationOptions(DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
internal sealed partial class SharedSessionsJson : JsonSerializerContext;
