namespace Herald.Broker.Cluster;

/// <summary>The Lua the scripts that move a session's messages share: reading entries, giving back their references.</summary>
internal static partial class SharedSessionScripts
{
    /// <summary>
    /// What the scripts that move a session's messages share (spec cluster.md §10). An entry of a session's stream is
    /// one append of one batch: id <c>&lt;first seq&gt;-*</c>, fields <c>n</c> (its messages, of consecutive sequences),
    /// their sids (<c>u</c> the one sid of them all, else <c>s</c> a comma list), the frame hash <c>f</c> holding their
    /// frames and <c>b</c> their bytes, and either a <b>range</b>, <c>a</c> the field of the first frame (the others follow
    /// it: <c>a</c>, <c>a+1</c>, ...), or a <b>list</b>, <c>i</c> their fields and <c>z</c> their sizes (comma lists); with a
    /// secret <c>t</c> their tags (16 bytes each, in order). The frame hash holds each frame once (field
    /// <c>&lt;i&gt;</c>), whatever the number of sessions it went to, <c>b</c> the bytes it was given, and the references
    /// left to it: a range entry whose frames are at least half of the hash's bytes (<c>w</c> 1) counts once in <c>r</c>
    /// and keeps the whole hash, given back once the entry is gone whole (no walk over its messages); else a range entry
    /// running to the hash's last field (<c>e</c> = <c>lo,hi</c>) holds its end from its first field <c>a</c>
    /// (<c>w</c> s, counted in <c>s&lt;a&gt;</c>), one starting at its first field holds its start to its last field
    /// <c>z</c> (<c>w</c> p, in <c>p&lt;z&gt;</c>): one reference too, given back once, and it keeps only its own frames;
    /// the ends held are also in a sorted set (<c>le:</c> for <c>lf:</c>, <c>s&lt;a&gt;</c> scored <c>a</c>,
    /// <c>p&lt;z&gt;</c> scored <c>-z</c>), so the lowest <c>a</c> and highest <c>z</c> are one read each. Any other entry
    /// counts each message's frame in <c>r&lt;i&gt;</c>, given back message by message. A frame goes when nothing holds it
    /// (the last <c>r</c> sweeps the frames nothing else holds; the last <c>s&lt;a&gt;</c> or <c>p&lt;z&gt;</c> deletes
    /// those of its span nothing else holds). An entry without <c>n</c> is not a node's: one
    /// message, its frame inline (<c>m</c>), never charged. The hash's <c>gone</c> is the highest sequence that left the
    /// stream (acknowledged or dropped), <c>bin</c>/<c>bout</c> the bytes of frames appended and gone.
    /// </summary>
    private const string Common = """
        local function split(s)
          local out = {}
          if s then for v in string.gmatch(s, '[^,]+') do out[#out + 1] = v end end
          return out
        end
        local function fieldsOf(raw)
          local t = {}
          for f = 1, #raw - 1, 2 do t[raw[f]] = raw[f + 1] end
          return t
        end
        local function span(e, first, from, to)
          if e.b and from == first and to == first + tonumber(e.n) - 1 then return tonumber(e.b) end
          local total = 0
          if e.a then
            local a, mean = tonumber(e.a), math.floor(tonumber(e.b or '0') / tonumber(e.n))
            for q = from - first, to - first do
              local size = redis.call('HSTRLEN', e.f, a + q)
              total = total + (size > 0 and size or mean)
            end
          else
            local sz = split(e.z)
            for k = from - first + 1, to - first + 1 do total = total + tonumber(sz[k] or '0') end
          end
          return total
        end
        local function release(stream, gone, upto, bout, dec, whole, anchored)
          local cursor, ids = '-', {}
          while gone < upto do
            local batch = redis.call('XRANGE', stream, cursor, upto, 'COUNT', 128)
            for _, raw in ipairs(batch) do
              if gone >= upto then break end
              local first = tonumber(string.match(raw[1], '^(%d+)'))
              local e = fieldsOf(raw[2])
              local last = first + tonumber(e.n or '1') - 1
              local from, to = math.max(first, gone + 1), math.min(last, upto)
              if e.n and e.f and to >= from then
                if e.w == '1' then
                  if to == last then whole[e.f] = (whole[e.f] or 0) + 1 end
                elseif e.w == 's' or e.w == 'p' then
                  if to == last then
                    local t = anchored[e.f] or {}
                    anchored[e.f] = t
                    local k = e.w .. (e.w == 's' and e.a or tostring(tonumber(e.a) + tonumber(e.n) - 1))
                    t[k] = (t[k] or 0) + 1
                  end
                else
                  local counts = dec[e.f] or {}
                  dec[e.f] = counts
                  if e.a then
                    local a = tonumber(e.a)
                    for q = from - first, to - first do
                      local j = tostring(a + q)
                      counts[j] = (counts[j] or 0) + 1
                    end
                  else
                    local idx = split(e.i)
                    for k = from - first + 1, to - first + 1 do
                      if idx[k] then counts[idx[k]] = (counts[idx[k]] or 0) + 1 end
                    end
                  end
                end
                bout = bout + span(e, first, from, to)
              end
              if last > upto then
                gone = upto
                break
              end
              ids[#ids + 1] = raw[1]
              if last > gone then gone = last end
            end
            if #batch < 128 then
              if gone < upto then gone = upto end
            else
              cursor = '(' .. batch[#batch][1]
            end
          end
          for c = 1, #ids, 500 do redis.call('XDEL', stream, unpack(ids, c, math.min(c + 499, #ids))) end
          return gone, bout
        end
        local function anchorKey(blob) return (string.gsub(blob, 'lf:([^{}]*)$', 'le:%1')) end
        local function ends(blob)
          local z = anchorKey(blob)
          local s = redis.call('ZRANGEBYSCORE', z, 0, '+inf', 'LIMIT', 0, 1)
          local p = redis.call('ZRANGEBYSCORE', z, '-inf', '(0', 'LIMIT', 0, 1)
          return s[1] and tonumber(string.sub(s[1], 2)) or math.huge, p[1] and tonumber(string.sub(p[1], 2)) or -1
        end
        local function sweep(blob)
          local fields = redis.call('HKEYS', blob)
          local has, del, kept = {}, {}, 0
          local from, upto = ends(blob)
          for _, f in ipairs(fields) do has[f] = true end
          for _, f in ipairs(fields) do
            if string.match(f, '^%d+$') then
              local i = tonumber(f)
              if has['r' .. f] or i >= from or i <= upto then kept = kept + 1 else del[#del + 1] = f end
            end
          end
          if kept == 0 then
            redis.call('DEL', blob, anchorKey(blob))
            return
          end
          del[#del + 1] = 'r'
          for c = 1, #del, 500 do redis.call('HDEL', blob, unpack(del, c, math.min(c + 499, #del))) end
        end
        local function empty(blob)
          if redis.call('HLEN', blob) <= 1 + redis.call('HEXISTS', blob, 'e') then redis.call('DEL', blob, anchorKey(blob)) end
        end
        local function settle(dec, whole, anchored)
          for blob, counts in pairs(anchored or {}) do
            local spans = {}
            local range = redis.call('HGET', blob, 'e') or ''
            local lo, hi = string.match(range, '^(%d+),(%d+)$')
            for k, count in pairs(counts) do
              if redis.call('HINCRBY', blob, k, -count) <= 0 then
                redis.call('HDEL', blob, k)
                redis.call('ZREM', anchorKey(blob), k)
                local v = tonumber(string.sub(k, 2))
                if string.sub(k, 1, 1) == 's' then spans[#spans + 1] = {v, tonumber(hi or v)} else spans[#spans + 1] = {tonumber(lo or v), v} end
              end
            end
            local pinned = tonumber(redis.call('HGET', blob, 'r') or '0') > 0 or (whole[blob] or 0) > 0
            if #spans > 0 and not pinned then
              local from, upto = ends(blob)
              local names, order = {}, {}
              for _, sp in ipairs(spans) do
                for i = math.max(sp[1], upto + 1), math.min(sp[2], from - 1) do
                  names[#names + 1] = 'r' .. i
                  order[#order + 1] = i
                end
              end
              for c = 1, #names, 500 do
                local last = math.min(c + 499, #names)
                local refs = redis.call('HMGET', blob, unpack(names, c, last))
                local del = {}
                for j = c, last do
                  if not refs[j - c + 1] then del[#del + 1] = order[j] end
                end
                if #del > 0 then redis.call('HDEL', blob, unpack(del)) end
              end
              empty(blob)
            end
          end
          for blob, counts in pairs(dec) do
            local names, order = {}, {}
            for idx, _ in pairs(counts) do
              names[#names + 1] = 'r' .. idx
              order[#order + 1] = idx
            end
            local pinned = tonumber(redis.call('HGET', blob, 'r') or '0') > 0 or (whole[blob] or 0) > 0
            local from, upto = ends(blob)
            for c = 1, #names, 500 do
              local last = math.min(c + 499, #names)
              local refs = redis.call('HMGET', blob, unpack(names, c, last))
              local set, del = {}, {}
              for j = c, last do
                local r = tonumber(refs[j - c + 1] or '0') - counts[order[j]]
                if r > 0 then
                  set[#set + 1] = names[j]
                  set[#set + 1] = r
                else
                  local i = tonumber(order[j])
                  if not pinned and i < from and i > upto then del[#del + 1] = order[j] end
                  del[#del + 1] = names[j]
                end
              end
              if #set > 0 then redis.call('HSET', blob, unpack(set)) end
              if #del > 0 then redis.call('HDEL', blob, unpack(del)) end
            end
            if not pinned then empty(blob) end
          end
          for blob, count in pairs(whole) do
            if redis.call('HINCRBY', blob, 'r', -count) <= 0 then sweep(blob) end
          end
        end

        """;
}
