using System.Globalization;
using System.Text;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster's presence in Redis (spec cluster.md §12): its keys, the Lua scripts that change and read them, and the
/// event a script publishes on the topic's channel. Every key starts with the channel prefix, whose hash tag puts them
/// in the channels' slot on Redis Cluster, so each script runs on the server the node publishes through, in order with
/// its publications.
/// </summary>
/// <remarks>
/// Keys (<c>P</c> the prefix, <c>T</c> a topic, <c>N</c> a node id in hex):
/// <code>
///  P pm:T   sorted set   the topic's members: client ids, score 0 (ZRANGEBYLEX pages them bytewise)
///  P pe:T   hash         client id -> "&lt;identity bytes&gt;:&lt;identity&gt;" then "-" or "+&lt;info&gt;"; field "" while events are suppressed
///  P pi:T   hash         identity -> its members on the topic (HLEN: the distinct identities)
///  P pn:N   hash         topic -> the node's members on it (the topics a dead node's members are removed from)
///  P pnodes sorted set   node id -> when it last wrote (Redis's clock, ms): a node silent for three heartbeats is dead
/// </code>
/// A client id starts with its node's id (<see cref="RedisPresence.ClientPrefix"/>), so one node's members of a topic are
/// one ZRANGEBYLEX range. An event (published, and returned to the node that changed the table):
/// <code>
///  'H' 6 state reason members ' ' origin ' ' len ':' topic len ':' client len ':' identity ('-' | '+' info)
/// </code>
/// state: <c>j</c> join, <c>l</c> leave, <c>s</c> suppressed (a join took the topic past the events bound), <c>r</c>
/// resumed, <c>q</c> a join or leave not sent (suppressed); reason: <c>-</c>, or a leave's <c>u d e r n</c>; lengths in
/// bytes, decimal.
/// </remarks>
internal static class PresenceScripts
{
    /// <summary>Second byte of a presence event on a topic's channel (the first is <c>'H'</c>, as every envelope's).</summary>
    public const byte EventVersion = 6;

    /// <summary>The leave both the leave script and the sweep use: removes one member, publishes its event (unless quiet), returns it.</summary>
    private const string LeaveFunction = """
        local function leave(prefix, topic, pm, pe, pi, client, reason, maxEvents, origin, quiet)
          local entry = redis.call('HGET', pe, client)
          if not entry then return false end
          redis.call('ZREM', pm, client)
          redis.call('HDEL', pe, client)
          local colon = string.find(entry, ':', 1, true)
          local identityPart = string.sub(entry, 1, colon + tonumber(string.sub(entry, 1, colon - 1)))
          local identity = string.sub(identityPart, colon + 1)
          if redis.call('HINCRBY', pi, identity, -1) <= 0 then redis.call('HDEL', pi, identity) end
          local n = redis.call('ZCARD', pm)
          local state = 'l'
          if redis.call('HEXISTS', pe, '') == 1 then
            if n > math.floor(tonumber(maxEvents) / 2) then state = 'q' else state = 'r'; redis.call('HDEL', pe, '') end
          end
          if n == 0 then redis.call('DEL', pm, pe, pi) end
          if quiet then return '' end
          local event = 'H\6' .. state .. reason .. n .. ' ' .. origin .. ' ' .. #topic .. ':' .. topic .. #client .. ':' .. client .. identityPart .. '-'
          redis.call('PUBLISH', prefix .. topic, event)
          return event
        end

        """;

    /// <summary>
    /// KEYS: pm, pe, pi, pn (this node's), pnodes. ARGV: prefix, topic, client, entry, max members, time to live (ms), max
    /// events members, this node's id, quiet (1: a restore, no limit and no event). Returns {1, event} when present (the
    /// event empty if it already was, or quiet), {0, members} when the topic is full.
    /// </summary>
    public const string Join = """
        local pm, pe, pi, pn = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
        local topic, client, entry = ARGV[2], ARGV[3], ARGV[4]
        local t = redis.call('TIME')
        redis.call('ZADD', KEYS[5], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[8])
        if redis.call('ZSCORE', pm, client) then return {1, ''} end
        local n = redis.call('ZCARD', pm)
        if ARGV[9] == '0' and n >= tonumber(ARGV[5]) then return {0, n} end
        redis.call('ZADD', pm, 0, client)
        redis.call('HSET', pe, client, entry)
        local colon = string.find(entry, ':', 1, true)
        redis.call('HINCRBY', pi, string.sub(entry, colon + 1, colon + tonumber(string.sub(entry, 1, colon - 1))), 1)
        redis.call('HINCRBY', pn, topic, 1)
        local ttl = tonumber(ARGV[6])
        redis.call('PEXPIRE', pm, ttl)
        redis.call('PEXPIRE', pe, ttl)
        redis.call('PEXPIRE', pi, ttl)
        redis.call('PEXPIRE', pn, ttl * 2)
        redis.call('PEXPIRE', KEYS[5], ttl * 2)
        if ARGV[9] == '1' then return {1, ''} end
        n = n + 1
        local state = 'j'
        if redis.call('HEXISTS', pe, '') == 1 then state = 'q'
        elseif n > tonumber(ARGV[7]) then state = 's'; redis.call('HSET', pe, '', '1') end
        local event = 'H\6' .. state .. '-' .. n .. ' ' .. ARGV[8] .. ' ' .. #topic .. ':' .. topic .. #client .. ':' .. client .. entry
        redis.call('PUBLISH', ARGV[1] .. topic, event)
        return {1, event}
        """;

    /// <summary>KEYS: pm, pe, pi, pn (this node's). ARGV: prefix, topic, client, reason, max events members, this node's id. Returns the event, or "" when the client was not present.</summary>
    public const string Leave = LeaveFunction + """
        local event = leave(ARGV[1], ARGV[2], KEYS[1], KEYS[2], KEYS[3], ARGV[3], ARGV[4], ARGV[5], ARGV[6], false)
        if not event then return '' end
        if redis.call('HINCRBY', KEYS[4], ARGV[2], -1) <= 0 then redis.call('HDEL', KEYS[4], ARGV[2]) end
        return event
        """;

    /// <summary>
    /// KEYS: pm, pe, pi. ARGV: the lower bound (<c>-</c>, or <c>(</c> and the cursor), the limit. Returns {members,
    /// identities, clients, entries, more}: one round trip for the occupancy and a page.
    /// </summary>
    public const string Read = """
        local members = redis.call('ZCARD', KEYS[1])
        local identities = redis.call('HLEN', KEYS[3])
        local limit = tonumber(ARGV[2])
        if limit == 0 or members == 0 then return {members, identities, {}, {}, 0} end
        local clients = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], '+', 'LIMIT', 0, limit + 1)
        local more = 0
        if #clients > limit then table.remove(clients); more = 1 end
        local entries = {}
        if #clients > 0 then entries = redis.call('HMGET', KEYS[2], unpack(clients)) end
        return {members, identities, clients, entries, more}
        """;

    /// <summary>
    /// A heartbeat. KEYS: pnodes, pn (this node's). ARGV: prefix, this node's id, time to live (ms), this node's members.
    /// Marks the node alive and renews the keys of every topic it has members on; returns 1 when Redis lost its table
    /// (restarted, or a sweep took the node for dead) while it has members: the node writes them again.
    /// </summary>
    public const string Beat = """
        local t = redis.call('TIME')
        local lost = 0
        if tonumber(ARGV[4]) > 0 and redis.call('EXISTS', KEYS[2]) == 0 then lost = 1 end
        redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[2])
        local ttl = tonumber(ARGV[3])
        redis.call('PEXPIRE', KEYS[1], ttl * 2)
        for _, topic in ipairs(redis.call('HKEYS', KEYS[2])) do
          redis.call('PEXPIRE', ARGV[1] .. 'pm:' .. topic, ttl)
          redis.call('PEXPIRE', ARGV[1] .. 'pe:' .. topic, ttl)
          redis.call('PEXPIRE', ARGV[1] .. 'pi:' .. topic, ttl)
        end
        redis.call('PEXPIRE', KEYS[2], ttl * 2)
        return lost
        """;

    /// <summary>
    /// The members of a dead node leave (reason <c>n</c>, their events published with the dead node as origin), at most
    /// budget of them per call. KEYS: pnodes. ARGV: prefix, silence that makes a node dead (ms), max events members,
    /// budget, the node ("": the first node silent that long), quiet (1: no event; a node clearing its own table before it
    /// writes it again). Returns {members removed, 1 when that node is done (or none is dead)}. Idempotent: the first node
    /// to run it removes and publishes; the others find nothing.
    /// </summary>
    public const string Sweep = LeaveFunction + """
        local prefix = ARGV[1]
        local node = ARGV[5]
        if node == '' then
          local t = redis.call('TIME')
          local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
          local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, 1)
          if #dead == 0 then return {0, 1} end
          node = dead[1]
        end
        local pn = prefix .. 'pn:' .. node
        local budget = tonumber(ARGV[4])
        local removed = 0
        for _, topic in ipairs(redis.call('HKEYS', pn)) do
          local pm, pe, pi = prefix .. 'pm:' .. topic, prefix .. 'pe:' .. topic, prefix .. 'pi:' .. topic
          local clients = redis.call('ZRANGEBYLEX', pm, '[' .. node, '(' .. node .. '\255', 'LIMIT', 0, budget - removed)
          for _, client in ipairs(clients) do
            leave(prefix, topic, pm, pe, pi, client, 'n', ARGV[3], node, ARGV[6] == '1')
            removed = removed + 1
          end
          if removed >= budget then return {removed, 0} end
          redis.call('HDEL', pn, topic)
        end
        redis.call('DEL', pn)
        if ARGV[5] == '' then redis.call('ZREM', KEYS[1], node) end
        return {removed, 1}
        """;

    /// <summary>
    /// A node writes its table again, in one script (no reader sees it half-written). KEYS: pnodes, pn (the node's). ARGV:
    /// prefix, the node's id, time to live (ms), max events members, then per member: topic, client, entry. What Redis
    /// holds of the node and it no longer has goes quietly; every member it has is there afterwards (no limit, no event).
    /// </summary>
    public const string Restore = LeaveFunction + """
        local prefix, node, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
        local keep = {}
        for i = 5, #ARGV, 3 do keep[ARGV[i] .. '\0' .. ARGV[i + 1]] = true end
        for _, topic in ipairs(redis.call('HKEYS', KEYS[2])) do
          local pm, pe, pi = prefix .. 'pm:' .. topic, prefix .. 'pe:' .. topic, prefix .. 'pi:' .. topic
          for _, client in ipairs(redis.call('ZRANGEBYLEX', pm, '[' .. node, '(' .. node .. '\255')) do
            if not keep[topic .. '\0' .. client] then leave(prefix, topic, pm, pe, pi, client, 'd', ARGV[4], node, true) end
          end
        end
        redis.call('DEL', KEYS[2])
        for i = 5, #ARGV, 3 do
          local topic, client, entry = ARGV[i], ARGV[i + 1], ARGV[i + 2]
          local pm, pe, pi = prefix .. 'pm:' .. topic, prefix .. 'pe:' .. topic, prefix .. 'pi:' .. topic
          if not redis.call('ZSCORE', pm, client) then
            redis.call('ZADD', pm, 0, client)
            redis.call('HSET', pe, client, entry)
            local colon = string.find(entry, ':', 1, true)
            redis.call('HINCRBY', pi, string.sub(entry, colon + 1, colon + tonumber(string.sub(entry, 1, colon - 1))), 1)
          end
          redis.call('HINCRBY', KEYS[2], topic, 1)
          redis.call('PEXPIRE', pm, ttl)
          redis.call('PEXPIRE', pe, ttl)
          redis.call('PEXPIRE', pi, ttl)
        end
        redis.call('PEXPIRE', KEYS[2], ttl * 2)
        local t = redis.call('TIME')
        redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), node)
        return 1
        """;

    public static RedisKey Members(string prefix, string topic) => prefix + "pm:" + topic;

    public static RedisKey Entries(string prefix, string topic) => prefix + "pe:" + topic;

    public static RedisKey Identities(string prefix, string topic) => prefix + "pi:" + topic;

    public static RedisKey NodeTopics(string prefix, string node) => prefix + "pn:" + node;

    public static RedisKey Nodes(string prefix) => prefix + "pnodes";

    /// <summary>A member's value in <c>pe:T</c>: its identity, length-prefixed in bytes, then its info or none.</summary>
    public static string Entry(string identity, string? info) =>
        string.Create(CultureInfo.InvariantCulture, $"{Encoding.UTF8.GetByteCount(identity)}:{identity}{(info is null ? "-" : "+" + info)}");

    /// <summary>What an event's origin part is made of before the script adds the rest: the node, the topic and the client.</summary>
    public static string Origin(string node, string topic, string client) =>
        string.Create(CultureInfo.InvariantCulture, $"{node} {Encoding.UTF8.GetByteCount(topic)}:{topic}{Encoding.UTF8.GetByteCount(client)}:{client}");

    /// <summary>A leave's reason as its one byte in an event.</summary>
    public static string ReasonCode(Engines.PresenceReason reason) => reason switch
    {
        Engines.PresenceReason.Unsubscribe => "u",
        Engines.PresenceReason.Disconnect => "d",
        Engines.PresenceReason.Expired => "e",
        Engines.PresenceReason.Revoked => "r",
        _ => "n",
    };

    /// <summary>Reads an event (layout above); false for anything malformed (counted as invalid by the caller).</summary>
    public static bool TryRead(ReadOnlySpan<byte> span, out PresenceEvent read)
    {
        read = default;
        if (span.Length < 8 || span[0] != ClusterEnvelope.Magic || span[1] != EventVersion)
        {
            return false;
        }

        byte state = span[2];
        byte reason = span[3];
        ReadOnlySpan<byte> rest = span[4..];
        int space = rest.IndexOf((byte)' ');
        if (space <= 0 || !long.TryParse(rest[..space], NumberStyles.None, CultureInfo.InvariantCulture, out long members))
        {
            return false;
        }

        rest = rest[(space + 1)..];
        space = rest.IndexOf((byte)' ');
        if (space <= 0)
        {
            return false;
        }

        string origin = Encoding.ASCII.GetString(rest[..space]);
        rest = rest[(space + 1)..];
        if (!TakeCounted(ref rest, out string topic) || !TakeCounted(ref rest, out string client) || !TakeCounted(ref rest, out string identity) || rest.IsEmpty)
        {
            return false;
        }

        string? info = rest[0] == (byte)'+' ? Encoding.UTF8.GetString(rest[1..]) : null;
        read = new PresenceEvent((char)state, (char)reason, members, origin, topic, client, identity, info);
        return "jlsrq".Contains((char)state, StringComparison.Ordinal);
    }

    private static bool TakeCounted(ref ReadOnlySpan<byte> rest, out string value)
    {
        value = "";
        int colon = rest.IndexOf((byte)':');
        if (colon <= 0 || !int.TryParse(rest[..colon], NumberStyles.None, CultureInfo.InvariantCulture, out int length) || rest.Length < colon + 1 + length)
        {
            return false;
        }

        value = Encoding.UTF8.GetString(rest.Slice(colon + 1, length));
        rest = rest[(colon + 1 + length)..];
        return true;
    }
}

/// <summary>A presence event as a script published it (<see cref="PresenceScripts"/>).</summary>
internal readonly record struct PresenceEvent(char State, char Reason, long Members, string Origin, string Topic, string Client, string Identity, string? Info);
