namespace Herald.Broker.Cluster;

/// <summary>
/// The Lua scripts <see cref="ClusterSharedSessions"/> runs on Redis, each one atomic step on a session's keys (its hash,
/// stream and lease: see <see cref="ClusterSharedSessions"/>).
/// </summary>
internal static class SharedSessionScripts
{
    /// <summary>
    /// The appends of several sessions in one call (a node's pumps, batched: spec cluster.md §10). KEYS: per session its
    /// hash, stream and lease. ARGV: node, lease ms, then per session its token, ttl ms, max pending messages, max
    /// pending bytes, disconnect (1/0), message count, and per message seq, sid, frame, position, tag ('' : unsigned).
    /// Returns per session the messages dropped (DropOldest), -1 (lease another node's, or the session ended) or -2
    /// (ended as a slow consumer). An append renews the lease too (an owner busy delivering keeps its sessions), taking
    /// it again if it expired while no other node took it (after a Redis outage, say).
    /// <para>
    /// The stream is bounded in messages and in bytes, and an entry is charged before it is written: the hash counts
    /// the bytes of frames ever appended (<c>bin</c>) and those of the entries already gone (<c>bout</c>, from the
    /// running total <c>c</c> each entry carries), so <c>bin - bout</c> is what the stream holds. An entry that would
    /// take it past either limit first drops the oldest (DropOldest) or ends the session (Disconnect: the stream is
    /// deleted at once and the entry never written). An entry's id is <c>&lt;seq&gt;-*</c>: <c>&lt;seq&gt;-0</c> unless
    /// something else wrote that id first (only a writer that is not a node can), which a poll then skips as unsigned;
    /// a stream such a writer took past the session's sequence is given up (-1), never written under.
    /// </para>
    /// </summary>
    public const string Append = """
        local function total(fields)
          for f = 1, #fields - 1, 2 do
            if fields[f] == 'c' then return tonumber(fields[f + 1]) end
          end
          return nil
        end
        local results = {}
        local a = 3
        for s = 1, #KEYS / 3 do
          local hash, stream, lease = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
          local token, ttl, maxp, maxb, disconnect, n = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), ARGV[a + 4], tonumber(ARGV[a + 5])
          local i = a + 6
          a = i + 5 * n
          local owner = redis.call('GET', lease)
          local h = redis.call('HMGET', hash, 'seq', 'ended', 'bin', 'bout')
          if (owner and owner ~= ARGV[1]) or not h[1] or h[2] then
            results[s] = -1
          else
            redis.call('SET', lease, ARGV[1], 'PX', ARGV[2])
            local top, bin, bout = tonumber(h[1]), tonumber(h[3] or '0'), tonumber(h[4] or '0')
            local held = redis.call('XLEN', stream)
            local result = 0
            while i < a do
              local seq = tonumber(ARGV[i])
              if seq > top then
                local size = #ARGV[i + 2]
                while (held + 1 > maxp or bin - bout + size > maxb) and held > 0 and disconnect ~= '1' do
                  local oldest = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
                  redis.call('XDEL', stream, oldest[1])
                  bout = total(oldest[2]) or bout
                  held = held - 1
                  result = result + 1
                end
                if held + 1 > maxp or bin - bout + size > maxb then
                  result = -2
                  break
                end
                local added
                if ARGV[i + 4] == '' then
                  added = redis.pcall('XADD', stream, ARGV[i] .. '-*', 's', ARGV[i + 1], 'c', bin + size, 'm', ARGV[i + 2])
                else
                  added = redis.pcall('XADD', stream, ARGV[i] .. '-*', 's', ARGV[i + 1], 'c', bin + size, 'm', ARGV[i + 2], 't', ARGV[i + 4])
                end
                if type(added) == 'table' and added.err then
                  result = -1
                  break
                end
                bin = bin + size
                if ARGV[i + 3] ~= '' then redis.call('HSET', hash, 'pos:' .. ARGV[i + 1], ARGV[i + 3]) end
                held = held + 1
                top = seq
              end
              i = i + 5
            end
            redis.call('HSET', hash, 'seq', top, 'bin', bin, 'bout', bout)
            if result == -2 then
              redis.call('HSET', hash, 'ended', 'SlowConsumer')
              redis.call('DEL', stream)
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
    /// KEYS: hash, stream. ARGV: ack, max messages, ttl ms, waiter channel ('' : do not hold), generation ('' : a new poll),
    /// token, max bytes, the polling node. Returns {code, generation, highest ack, highest sent, entries} (code 0) or {-1} unknown,
    /// {-2, reason} ended, {-3, seq} ack out of range, {-4} replaced by a newer poll. With no entries, or only loss
    /// marks (sid 0), a holding poll's node is named the waiter (and when, <c>waited</c>): the next append wakes it. The
    /// request is recorded (<c>seen</c>, Redis's clock, and <c>seenby</c>, the node it came through). The entries are read one at a
    /// time and only while the answer has room (at most max messages, and max bytes of frames, at least one): Redis
    /// sends what the poll may answer, never the whole backlog.
    /// </summary>
    public const string Poll = """
        local function field(fields, name)
          for f = 1, #fields - 1, 2 do
            if fields[f] == name then return fields[f + 1] end
          end
          return nil
        end
        local h = redis.call('HMGET', KEYS[1], 'seq', 'ended', 'ack', 'sent', 'polls', 'waiter', 'bin')
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
        local trimmed = ack > acked
        if trimmed then
          redis.call('XTRIM', KEYS[2], 'MINID', (ack + 1) .. '-0')
          acked = ack
          redis.call('HSET', KEYS[1], 'ack', acked)
        end
        local now = redis.call('TIME')
        local nowms = now[1] * 1000 + math.floor(now[2] / 1000)
        redis.call('HSET', KEYS[1], 'seen', nowms, 'seenby', ARGV[8])
        local entries = {}
        local marks = true
        local bytes, most, budget = 0, tonumber(ARGV[2]), tonumber(ARGV[7])
        local from = (ack + 1) .. '-0'
        while #entries < most do
          local entry = redis.call('XRANGE', KEYS[2], from, '+', 'COUNT', 1)[1]
          if not entry then break end
          local size = #(field(entry[2], 'm') or '')
          if #entries > 0 and bytes + size > budget then break end
          if #entries == 0 and trimmed then
            local c = tonumber(field(entry[2], 'c') or '')
            if c then redis.call('HSET', KEYS[1], 'bout', c - size) end
          end
          entries[#entries + 1] = entry
          if field(entry[2], 's') ~= '0' then marks = false end
          bytes = bytes + size
          from = '(' .. entry[1]
        end
        local sent = tonumber(h[4] or '0')
        if #entries > 0 then
          local last = tonumber(string.match(entries[#entries][1], '^(%d+)'))
          if last > sent then redis.call('HSET', KEYS[1], 'sent', last) end
        else
          if trimmed then redis.call('HSET', KEYS[1], 'bout', h[7] or '0') end
        end
        if marks and ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'waiter', ARGV[4], 'waited', nowms) end
        redis.call('PEXPIRE', KEYS[1], ARGV[3])
        redis.call('PEXPIRE', KEYS[2], ARGV[3])
        return {0, gen, acked, sent, entries}
        """;

    /// <summary>
    /// KEYS: hash, lease, stream. ARGV: node, lease ms, state ttl ms. Keeps the lease (taken again if it expired and no
    /// other node took it: nobody else holds the session's subscriptions) and the state (while its owner
    /// keeps a session, the session decides its own inactivity). Returns {lease kept (1/0), ms since the last poll on
    /// any node, a poll held (1/0), ended reason or '', the <c>seen</c> of that poll if it came through another node
    /// (else 0)}. A waiter that has not polled again within a lease (its node died holding it) holds no poll. A poll or
    /// waiter written without <c>seenby</c> or <c>waited</c> (by a node of an earlier version, during a rolling upgrade)
    /// counts as another node's, and as held.
    /// </summary>
    public const string Renew = """
        local owner = redis.call('GET', KEYS[2])
        if owner and owner ~= ARGV[1] then return {0, 0, 0, '', 0} end
        local h = redis.call('HMGET', KEYS[1], 'seen', 'waiter', 'ended', 'seq', 'seenby', 'waited')
        if h[3] then return {1, 0, 0, h[3], 0} end
        if not h[4] then return {0, 0, 0, '', 0} end
        redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
        redis.call('PEXPIRE', KEYS[1], ARGV[3])
        redis.call('PEXPIRE', KEYS[3], ARGV[3])
        local now = redis.call('TIME')
        local nowms = now[1] * 1000 + math.floor(now[2] / 1000)
        local seen = tonumber(h[1] or '0')
        local held = h[2] and (not h[6] or nowms - tonumber(h[6]) <= tonumber(ARGV[2]))
        return {1, nowms - seen, held and 1 or 0, '', (h[5] ~= ARGV[1]) and seen or 0}
        """;

    /// <summary>KEYS: hash. ARGV: waiter channel, generation. A held poll answered empty is no longer held: its node stops being the waiter, unless a newer poll is.</summary>
    public const string Unhold = """
        if redis.call('HGET', KEYS[1], 'waiter') == ARGV[1] and redis.call('HGET', KEYS[1], 'polls') == ARGV[2] then
          redis.call('HDEL', KEYS[1], 'waiter', 'waited')
        end
        return 0
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
