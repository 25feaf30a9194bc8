namespace Herald.Broker.Cluster;

/// <summary>
/// The Lua scripts <see cref="ClusterSharedSessions"/> runs on Redis, each one atomic step on a session's keys (its hash,
/// stream and lease: see <see cref="ClusterSharedSessions"/>).
/// </summary>
internal static class SharedSessionScripts
{
    /// <summary>
    /// The appends of several sessions in one call (a node's pumps, batched: spec cluster.md §10). KEYS: per session its
    /// hash, stream and lease. ARGV: node, lease ms, then per session its token, ttl ms, max pending, disconnect (1/0),
    /// message count, and per message seq, sid, frame, position. Returns per session the messages dropped
    /// (DropOldest), -1 (lease another node's, or the session ended) or -2 (ended as a slow consumer). An append
    /// renews the lease too (an owner busy delivering keeps its sessions), taking it again if it expired while no
    /// other node took it (after a Redis outage, say).
    /// </summary>
    public const string Append = """
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
    public const string Poll = """
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
    public const string Renew = """
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
    public const string TakeOver = """
        local h = redis.call('HMGET', KEYS[1], 'seq', 'ended')
        if not h[1] or h[2] then return {0} end
        if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0} end
        return {1, redis.call('HGETALL', KEYS[1])}
        """;

    /// <summary>KEYS: hash, stream, lease. ARGV: reason, memory ms, node ('' : whoever owns it). Ends the session; its token is remembered as ended.</summary>
    public const string End = """
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


    /// <summary>KEYS: hash, lease. ARGV: node, sid, subscription ('' : ended), position it resumes after ('' : none). 0 if the lease is not the node's.</summary>
    public const string Subscription = """
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
}
