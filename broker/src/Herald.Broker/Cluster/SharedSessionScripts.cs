namespace Herald.Broker.Cluster;

/// <summary>
/// The Lua scripts <see cref="ClusterSharedSessions"/> runs on Redis, each one atomic step on a session's keys (its hash,
/// stream and lease: see <see cref="ClusterSharedSessions"/>).
/// </summary>
internal static partial class SharedSessionScripts
{
    /// <summary>
    /// The appends of several sessions in one call (a node's pumps, batched: spec cluster.md §10), each frame written
    /// once. KEYS: the call's frame hash, then per session its hash, stream and lease. ARGV: node, lease ms, the frame
    /// hash's ttl ms, the number of frames F, then per frame its bytes, and the frame hash and field an earlier call of
    /// this node still in flight wrote it to ('' ''): a frame still there is referenced there, not written again; then per
    /// session its token, ttl ms, max pending messages, max pending bytes, disconnect (1/0), first sequence, message
    /// count, sids (a comma list, or <c>*&lt;sid&gt;</c> when all are one), frame numbers (a comma list numbered from 1, or
    /// <c>=&lt;first&gt;</c> when consecutive), tags ('' : unsigned), renew (1: set the lease's and the state's expiry; 0:
    /// the node did within a heartbeat, and its renewals do each heartbeat), the number of positions and that many pairs of sid
    /// and position (the last each sid's messages carry). Returns per session the messages dropped (DropOldest), -1
    /// (lease another node's, or the session ended) or -2 (ended as a slow consumer). An append renews the lease too (an
    /// owner busy delivering keeps its sessions; at most once a heartbeat a session, as the node asks), taking it again if
    /// it expired while no other node took it (after a Redis outage, say). A session's waiter is woken by a PUBLISH on its wake channel, unless it is the appending node's
    /// own (it wakes its polls itself once it has the reply, and so knows what it appended).
    /// <para>
    /// A batch of consecutive frames that fits the session's limits costs no walk over its messages: one range entry per
    /// run of frames in one hash (usually one). The stream is bounded in messages and in bytes, and a message is charged
    /// before it is written: one that would take it past either limit first drops the oldest (DropOldest: from the
    /// stream, then from the batch itself) or ends the session (Disconnect: the stream is deleted at once, its references
    /// given back, the batch never written). A session pins frames through its own messages, and through a range entry
    /// the rest of a hash its frames are at least half of: at most twice its own bytes, plus the part of one entry it has
    /// acknowledged. A range entry that is less but runs to the hash's last field (or from its first) holds that end with
    /// one reference, pinning only its own frames: in the fan-out case a batch's piece of an earlier call's hash is one. A stream such a writer took past the session's sequence is given up (-1), never written under.
    /// </para>
    public const string Append = Common + """
        local blob = KEYS[1]
        local nframes = tonumber(ARGV[4])
        local sizes, where, field, runs, prefix = {}, {}, {}, {}, {[0] = 0}
        for j = 1, nframes do
          local at = 2 + 3 * j
          sizes[j] = #ARGV[at]
          prefix[j] = prefix[j - 1] + sizes[j]
          if ARGV[at + 1] ~= '' and redis.call('HEXISTS', ARGV[at + 1], ARGV[at + 2]) == 1 then
            where[j], field[j] = ARGV[at + 1], tonumber(ARGV[at + 2])
          else
            where[j], field[j] = blob, j
          end
        end
        local held, span = {[blob] = 0}, {[blob] = {0, 0}}
        for j = nframes, 1, -1 do
          runs[j] = (j < nframes and where[j + 1] == where[j] and field[j + 1] == field[j] + 1) and runs[j + 1] or j
          if where[j] == blob then
            held[blob] = held[blob] + sizes[j]
            span[blob][1] = j
            if span[blob][2] == 0 then span[blob][2] = j end
          end
        end
        local function holds(h)
          if not held[h] then
            local v = redis.call('HMGET', h, 'b', 'e')
            local lo, hi = string.match(v[2] or '', '^(%d+),(%d+)$')
            held[h], span[h] = tonumber(v[1] or '-1'), {tonumber(lo or '0'), tonumber(hi or '0')}
          end
          return held[h]
        end
        local refs, whole, dec, gave, back, anchors, results = {}, {}, {}, {}, {}, {}, {}
        local a = 5 + 3 * nframes
        for s = 1, (#KEYS - 1) / 3 do
          local hash, stream, lease = KEYS[3 * s - 1], KEYS[3 * s], KEYS[3 * s + 1]
          local token, ttl, maxp, maxb, disconnect = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), ARGV[a + 4] == '1'
          local first, n, sidArg, idxArg, tags, renew, npos = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], ARGV[a + 10] == '1', tonumber(ARGV[a + 11])
          local uniform = string.sub(sidArg, 1, 1) == '*' and string.sub(sidArg, 2) or nil
          local sids = uniform and {} or split(sidArg)
          local start = string.sub(idxArg, 1, 1) == '=' and tonumber(string.sub(idxArg, 2)) or nil
          local idx = start and {} or split(idxArg)
          local function at(k) return start and (start + k - 1) or tonumber(idx[k]) end
          local p = a + 12
          a = p + 2 * npos
          local owner = redis.call('GET', lease)
          local h = redis.call('HMGET', hash, 'seq', 'ended', 'bin', 'bout', 'gone', 'ack', 'waiter')
          if (owner and owner ~= ARGV[1]) or not h[1] or h[2] then
            results[s] = -1
          else
            if renew or not owner then redis.call('SET', lease, ARGV[1], 'PX', ARGV[2]) end
            local top, bin, bout = tonumber(h[1]), tonumber(h[3] or '0'), tonumber(h[4] or '0')
            local stored = top
            local gone = tonumber(h[5] or h[6] or '0')
            local k = math.max(1, top - first + 2)
            local from = k
            local result = 0
            local batch = (start and k <= n) and (prefix[start + n - 1] - prefix[start + k - 2]) or nil
            if batch and top + n - k + 1 - gone <= maxp and bin - bout + batch <= maxb then
              bin = bin + batch
              top = first + n - 1
              k = n + 1
            end
            while k <= n do
              local size = sizes[at(k)]
              while (top - gone + 1 > maxp or bin - bout + size > maxb) and top - gone > 0 and not disconnect do
                if gone < stored then
                  gone, bout = release(stream, gone, gone + 1, bout, dec, gave, back)
                else
                  bout = bout + sizes[at(from)]
                  gone = first + from - 1
                  from = from + 1
                end
                result = result + 1
              end
              if top - gone + 1 > maxp or bin - bout + size > maxb then
                result = -2
                break
              end
              bin = bin + size
              top = first + k - 1
              k = k + 1
            end
            if result == -2 then
              gone, bout = release(stream, gone, stored, bout, dec, gave, back)
              redis.call('DEL', stream)
              redis.call('HSET', hash, 'ended', 'SlowConsumer', 'gone', gone, 'bout', bout)
            else
              local run = from
              while run < k and result ~= -1 do
                local j = at(run)
                local frames = where[j]
                local m = run + 1
                if start then
                  m = math.min(k, run + runs[j] - j + 1)
                else
                  while m < k and where[at(m)] == frames do m = m + 1 end
                end
                local e = {'n', m - run}
                if uniform then
                  e[3], e[4] = 'u', uniform
                else
                  e[3], e[4] = 's', table.concat(sids, ',', run, m - 1)
                end
                e[5], e[6] = 'f', frames
                local counted = start and 2 * (prefix[j + m - run - 1] - prefix[j - 1]) >= holds(frames) and holds(frames) >= 0
                local anchor
                if start and not counted and holds(frames) >= 0 then
                  local lo, hi, last = span[frames][1], span[frames][2], field[j] + m - run - 1
                  if hi > 0 and last == hi then
                    anchor = {'s', field[j], 's' .. field[j]}
                  elseif lo > 0 and field[j] == lo then
                    anchor = {'p', -last, 'p' .. last}
                  end
                end
                if start then
                  local eb = prefix[j + m - run - 1] - prefix[j - 1]
                  e[7], e[8], e[9], e[10], e[11], e[12] = 'a', field[j], 'b', eb, 'w', counted and 1 or (anchor and anchor[1]) or 0
                else
                  local ei, ez, eb = {}, {}, 0
                  for q = run, m - 1 do
                    local f = at(q)
                    ei[#ei + 1] = field[f]
                    ez[#ez + 1] = sizes[f]
                    eb = eb + sizes[f]
                  end
                  e[7], e[8], e[9], e[10], e[11], e[12] = 'i', table.concat(ei, ','), 'z', table.concat(ez, ','), 'b', eb
                end
                if tags ~= '' then
                  e[13], e[14] = 't', string.sub(tags, 16 * (run - 1) + 1, 16 * (m - 1))
                end
                local added = redis.pcall('XADD', stream, (first + run - 1) .. '-*', unpack(e))
                if type(added) == 'table' and added.err then
                  result = -1
                elseif counted then
                  whole[frames] = (whole[frames] or 0) + 1
                elseif anchor then
                  local t = anchors[frames] or {}
                  anchors[frames] = t
                  t[anchor[3]] = t[anchor[3]] or {anchor[2], 0}
                  t[anchor[3]][2] = t[anchor[3]][2] + 1
                else
                  for q = run, m - 1 do refs[at(q)] = (refs[at(q)] or 0) + 1 end
                end
                run = m
              end
              if result == -1 then
                redis.call('HSET', hash, 'gone', math.min(gone, stored), 'bout', bout)
              else
                for q = p, a - 1, 2 do redis.call('HSET', hash, 'pos:' .. ARGV[q], ARGV[q + 1]) end
                redis.call('HSET', hash, 'seq', top, 'bin', bin, 'bout', bout, 'gone', gone)
              end
            end
            if renew or result == -2 then
              redis.call('PEXPIRE', hash, ttl)
              redis.call('PEXPIRE', stream, ttl)
            end
            local waiter = h[7]
            if waiter then
              redis.call('HDEL', hash, 'waiter')
              if string.sub(waiter, -#ARGV[1] - 5) ~= '.lpw:' .. ARGV[1] then redis.call('PUBLISH', waiter, token) end
            end
            results[s] = result
          end
        end
        local fields, all, written, touched = {}, (whole[blob] or 0) > 0, 0, {}
        local from, upto = math.huge, -1
        for _, v in pairs(anchors[blob] or {}) do
          if v[1] > 0 then from = math.min(from, v[1]) else upto = math.max(upto, -v[1]) end
        end
        for j = 1, nframes do
          if where[j] == blob then
            if all or refs[j] or j >= from or j <= upto then
              fields[#fields + 1] = j
              fields[#fields + 1] = ARGV[2 + 3 * j]
              written = written + sizes[j]
              if refs[j] then
                fields[#fields + 1] = 'r' .. j
                fields[#fields + 1] = refs[j]
              end
              if #fields >= 400 then
                redis.call('HSET', blob, unpack(fields))
                fields = {}
              end
            end
          elseif refs[j] then
            redis.call('HINCRBY', where[j], 'r' .. field[j], refs[j])
            touched[where[j]] = true
          end
        end
        if written > 0 then
          fields[#fields + 1] = 'b'
          fields[#fields + 1] = written
          fields[#fields + 1] = 'e'
          fields[#fields + 1] = span[blob][1] .. ',' .. span[blob][2]
          if all then
            fields[#fields + 1] = 'r'
            fields[#fields + 1] = whole[blob]
          end
          redis.call('HSET', blob, unpack(fields))
          redis.call('PEXPIRE', blob, ARGV[3])
        end
        for h, t in pairs(anchors) do
          local add = {}
          for k, v in pairs(t) do
            if h == blob then redis.call('HSET', h, k, v[2]) else redis.call('HINCRBY', h, k, v[2]) end
            add[#add + 1] = v[1]
            add[#add + 1] = k
          end
          redis.call('ZADD', anchorKey(h), unpack(add))
          redis.call('PEXPIRE', anchorKey(h), ARGV[3])
          if h ~= blob then touched[h] = true end
        end
        for h, count in pairs(whole) do
          if h ~= blob then
            redis.call('HINCRBY', h, 'r', count)
            touched[h] = true
          end
        end
        for h, _ in pairs(touched) do
          redis.call('PEXPIRE', h, ARGV[3])
          redis.call('PEXPIRE', anchorKey(h), ARGV[3])
        end
        settle(dec, gave, back)
        return results
        """;

    /// <summary>
    /// KEYS: hash, stream. ARGV: ack, max messages, ttl ms, waiter channel ('' : do not hold), generation ('' : a new
    /// poll), token, max bytes, the polling node, the owner's plan ('' : none; below). Returns {code, generation, highest
    /// ack, highest sent before this poll, entries, gone (the highest sequence no longer in the stream), 1 if the plan was
    /// taken else 0} (code 0; per stream entry read, its lists as stored: {first sequence, first and last position taken (from
    /// 1), its message count, sids (<c>*&lt;sid&gt;</c>: one for all), tags, its frame hash, its first field ('' : a list),
    /// its list of fields}, or, for an entry that is not a node's, {first, 1, 1, 1, sid, tag, '', '', '', frame}; the node
    /// fetches the frames and expands them into messages) or {-1} unknown, {-2, reason} ended, {-3, seq} ack out of range,
    /// {-4} replaced by a newer poll. The ack gives back what it acknowledges (its entries deleted, their references
    /// returned: one per range entry holding its hash whole). With no messages, or only loss marks (sid 0), a holding
    /// poll's node is named the waiter (and when, <c>waited</c>): the next append wakes it. The request is recorded
    /// (<c>seen</c>, Redis's clock, and <c>seenby</c>, the node it came through). The ack's entries are read by
    /// <c>XRANGE</c> up to the acknowledged sequence (128 a call) and deleted in one <c>XDEL</c>, and the session hash
    /// written once (one <c>HSET</c>). Entries are read a few at a time (one more than the answer has room for, at most 32,
    /// in one <c>XRANGE</c>) and taken only while the answer has room (at most max messages, and max bytes of frames, at
    /// least one; an entry whose bytes <c>b</c> fit is taken whole without a walk over its messages; one taken in part is
    /// measured frame by frame, HSTRLEN), its frame hash's expiry renewed: the node then fetches just those frames (one
    /// HMGET per entry, outside the script, so no frame is copied into Lua), and Redis sends what the poll may answer,
    /// never the whole backlog. A frame no longer there (its hash expired) is left out: the poll reports the gap.
    /// <para>
    /// The owner's plan, <c>start,end,top,marks</c>: the owner holds in memory the messages it appended from
    /// <c>start</c> (to <c>end</c>, within the answer's room; <c>end</c> = <c>start - 1</c>: none) and appended up to
    /// <c>top</c>; <c>marks</c> 1 if they are only loss marks (or none) (<see cref="KeptEntries"/>). Taken when the stream,
    /// once the ack is applied, starts at <c>start</c> (the last sequence gone is <c>start - 1</c>) and holds nothing past
    /// <c>top</c> the owner does not know of (any more, when the plan answers messages, is for the next poll): then the
    /// stream is not read, <c>sent</c> is recorded from <c>end</c>, a holding poll with marks only is the waiter, and no
    /// entry is returned (the owner answers from memory). Otherwise the poll reads the stream as above.
    /// </para>
    /// </summary>
    public const string Poll = Common + """
        local h = redis.call('HMGET', KEYS[1], 'seq', 'ended', 'ack', 'sent', 'polls', 'waiter', 'gone', 'bout')
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
        local gone = tonumber(h[7] or h[3] or '0')
        local now = redis.call('TIME')
        local nowms = now[1] * 1000 + math.floor(now[2] / 1000)
        local set = {'seen', nowms, 'seenby', ARGV[8]}
        if ack > acked then
          acked = ack
          if ack > gone then
            local dec, whole, anchored = {}, {}, {}
            local bout
            gone, bout = release(KEYS[2], gone, ack, tonumber(h[8] or '0'), dec, whole, anchored)
            settle(dec, whole, anchored)
            set[5], set[6], set[7], set[8] = 'gone', gone, 'bout', bout
          end
          set[#set + 1] = 'ack'
          set[#set + 1] = acked
        end
        local sent = tonumber(h[4] or '0')
        local function answer(upto, marks, out, planned)
          if upto > tonumber(h[4] or '0') then
            set[#set + 1] = 'sent'
            set[#set + 1] = upto
          end
          if marks and ARGV[4] ~= '' then
            set[#set + 1] = 'waiter'
            set[#set + 1] = ARGV[4]
            set[#set + 1] = 'waited'
            set[#set + 1] = nowms
          end
          redis.call('HSET', KEYS[1], unpack(set))
          redis.call('PEXPIRE', KEYS[1], ARGV[3])
          redis.call('PEXPIRE', KEYS[2], ARGV[3])
          return {0, gen, acked, tonumber(h[4] or '0'), out, gone, planned}
        end
        if ARGV[9] and ARGV[9] ~= '' then
          local plan = split(ARGV[9])
          local start, last, top, only = tonumber(plan[1]), tonumber(plan[2]), tonumber(plan[3]), plan[4] == '1'
          if gone + 1 == start and (seq == top or (seq > top and not only)) then
            return answer(math.max(sent, last), only, {}, 1)
          end
        end
        local out, touched = {}, {}
        local marks, full = true, false
        local count, bytes, most, budget = 0, 0, tonumber(ARGV[2]), tonumber(ARGV[7])
        local from, chunk, batch, at = '-', 0, {}, 1
        while not full do
          if at > #batch then
            if #batch < chunk then break end
            chunk = math.min(32, math.max(1, most - count) + 1)
            batch, at = redis.call('XRANGE', KEYS[2], from, '+', 'COUNT', chunk), 1
            if #batch == 0 then break end
            from = '(' .. batch[#batch][1]
          end
          local raw = batch[at]
          at = at + 1
          local first = tonumber(string.match(raw[1], '^(%d+)'))
          local e = fieldsOf(raw[2])
          if e.n and e.f then
            local n = tonumber(e.n)
            local k0 = math.max(1, gone - first + 2)
            local k1 = k0 - 1
            local idx = e.a and nil or split(e.i)
            if k0 == 1 and e.b and (e.a or #idx >= n) and count + n <= most and bytes + tonumber(e.b) <= budget then
              k1 = n
              count = count + n
              bytes = bytes + tonumber(e.b)
            else
              local sz = e.a and nil or split(e.z)
              local a = tonumber(e.a or '0')
              for k = k0, n do
                local size = e.a and redis.call('HSTRLEN', e.f, a + k - 1) or tonumber(sz[k] or '0')
                if count >= most or (count > 0 and bytes + size > budget) or not (e.a or idx[k]) then
                  full = true
                  break
                end
                count = count + 1
                bytes = bytes + size
                k1 = k
              end
            end
            if k1 >= k0 then
              if not touched[e.f] then
                touched[e.f] = true
                redis.call('PEXPIRE', e.f, ARGV[3])
                redis.call('PEXPIRE', anchorKey(e.f), ARGV[3])
              end
              local sids = e.s or (e.u and ('*' .. e.u)) or ''
              out[#out + 1] = {first, k0, k1, n, sids, e.t or '', e.f, e.a or '', e.i or ''}
              if first + k1 - 1 > sent then sent = first + k1 - 1 end
              if marks and string.find(sids, '[1-9]') then
                local list = e.s and split(e.s)
                for k = k0, k1 do
                  if ((list and list[k]) or e.u or '0') ~= '0' then
                    marks = false
                    break
                  end
                end
              end
            end
          elseif first > gone then
            local size = #(e.m or '')
            if count >= most or (count > 0 and bytes + size > budget) then break end
            count = count + 1
            bytes = bytes + size
            out[#out + 1] = {first, 1, 1, 1, e.s or '0', e.t or '', '', '', '', e.m or ''}
            if first > sent then sent = first end
            if e.s ~= '0' then marks = false end
          end
        end
        return answer(sent, marks, out, 0)
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

    /// <summary>
    /// KEYS: hash, stream, lease. ARGV: reason, memory ms, node ('' : whoever owns it), token. Ends the session, its
    /// messages' frame references given back; its token is remembered as ended.
    /// </summary>
    public const string End = Common + """
        if ARGV[3] ~= '' then
          local owner = redis.call('GET', KEYS[3])
          if owner and owner ~= ARGV[3] then return 0 end
        end
        local h = redis.call('HMGET', KEYS[1], 'seq', 'waiter', 'gone', 'ack', 'bout')
        if not h[1] then return 0 end
        local dec, whole, anchored = {}, {}, {}
        release(KEYS[2], tonumber(h[3] or h[4] or '0'), tonumber(h[1]), tonumber(h[5] or '0'), dec, whole, anchored)
        settle(dec, whole, anchored)
        redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
        redis.call('HSET', KEYS[1], 'ended', ARGV[1])
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        if h[2] then redis.call('PUBLISH', h[2], ARGV[4]) end
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
