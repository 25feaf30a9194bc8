using System.Globalization;
using System.Text;
using Herald.Broker.History;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster's topic histories in Redis (spec cluster.md §9): per topic a hash <c>P h:&lt;topic&gt;</c> (<c>e</c> the
/// epoch, <c>o</c> the last offset) and a stream <c>P s:&lt;topic&gt;</c> whose entry ids are the offsets
/// (<c>&lt;offset&gt;-0</c>), each holding when it was kept (<c>t</c>, Redis's clock) and the publishing node's
/// envelope (<c>d</c>); the hash's <c>b</c> counts the stream's envelope bytes, which the rule's <c>MaxBytes</c> bounds
/// as <c>MaxMessages</c> bounds its length. One script gives a publication its offset, keeps it and publishes it, atomically, so every
/// node receives a topic's publications in offset order; another reads what a resume needs.
/// </summary>
internal static class ClusterHistory
{
    /// <summary>
    /// KEYS: hash, stream. ARGV: channel, envelope, a fresh epoch (used if the topic has none), max entries, time to live (ms),
    /// max bytes. Keeps the stream within both bounds, oldest first (the newest entry always stays): <c>b</c> in the hash
    /// counts its envelopes' bytes, recounted exactly whenever the stream is down to one entry.
    /// </summary>
    public const string PublishScript = """
        local epoch = redis.call('HGET', KEYS[1], 'e')
        if not epoch then
          epoch = ARGV[3]
          redis.call('HSET', KEYS[1], 'e', epoch)
          redis.call('DEL', KEYS[2])
        end
        local offset = redis.call('HINCRBY', KEYS[1], 'o', 1)
        local now = redis.call('TIME')
        redis.call('XADD', KEYS[2], offset .. '-0', 't', now[1] * 1000 + math.floor(now[2] / 1000), 'd', ARGV[2])
        local bytes = redis.call('HINCRBY', KEYS[1], 'b', #ARGV[2])
        local length = redis.call('XLEN', KEYS[2])
        local maxEntries = tonumber(ARGV[4])
        local maxBytes = tonumber(ARGV[6])
        while length > 1 and (length > maxEntries or bytes > maxBytes) do
          local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
          local fields = oldest[2]
          for i = 1, #fields, 2 do
            if fields[i] == 'd' then bytes = bytes - #fields[i + 1] end
          end
          redis.call('XDEL', KEYS[2], oldest[1])
          length = length - 1
        end
        if length <= 1 then bytes = #ARGV[2] end
        redis.call('HSET', KEYS[1], 'b', bytes)
        redis.call('PEXPIRE', KEYS[1], ARGV[5])
        redis.call('PEXPIRE', KEYS[2], ARGV[5])
        redis.call('PUBLISH', ARGV[1], 'H\3' .. offset .. ' ' .. epoch .. ' ' .. ARGV[2])
        return offset
        """;

    /// <summary>
    /// KEYS: hash, stream. ARGV: the offset to read after, max entries, a fresh epoch (used if the topic has none), time to
    /// live (ms), max bytes. Reads a few entries at a time and stops at max entries or after the entry that takes the
    /// envelopes past max bytes (then the fifth element is 1: cut), so Redis sends a resume what its connection may
    /// hold, never the whole stream.
    /// </summary>
    public const string ReadScript = """
        if redis.call('HSETNX', KEYS[1], 'e', ARGV[3]) == 1 then
          redis.call('DEL', KEYS[2])
          redis.call('PEXPIRE', KEYS[1], ARGV[4])
        end
        local meta = redis.call('HMGET', KEYS[1], 'e', 'o')
        local now = redis.call('TIME')
        local entries = {}
        local left = tonumber(ARGV[2])
        local budget = tonumber(ARGV[5])
        local bytes = 0
        local after = '(' .. ARGV[1] .. '-0'
        while left > 0 and bytes <= budget do
          local chunk = redis.call('XRANGE', KEYS[2], after, '+', 'COUNT', math.min(left, 8))
          if #chunk == 0 then break end
          for _, entry in ipairs(chunk) do
            if left == 0 or bytes > budget then break end
            local fields = entry[2]
            for i = 1, #fields, 2 do
              if fields[i] == 'd' then bytes = bytes + #fields[i + 1] end
            end
            entries[#entries + 1] = entry
            left = left - 1
            after = '(' .. entry[1]
          end
        end
        local cut = 0
        if left == 0 or bytes > budget then cut = 1 end
        return {meta[1], meta[2] or '0', now[1] * 1000 + math.floor(now[2] / 1000), entries, cut}
        """;

    /// <summary>First byte of a positioned publication on a channel (<c>'H'</c>, as every envelope), then its version.</summary>
    public const byte PositionedVersion = 3;

    public static RedisKey HashKey(string prefix, ReadOnlySpan<byte> topic) => Key(prefix, "h:", topic);

    public static RedisKey StreamKey(string prefix, ReadOnlySpan<byte> topic) => Key(prefix, "s:", topic);

    /// <summary>How long an idle topic's history lives in Redis: its rule's age, after which every entry is too old anyway.</summary>
    public static long TimeToLiveMs(HistoryRule rule) => Math.Max(1000, (long)rule.MaxAge.TotalMilliseconds);

    /// <summary>
    /// Reads a positioned publication (spec cluster.md §9): <c>'H' 3 &lt;offset&gt; ' ' &lt;epoch&gt; ' '</c> and the
    /// publishing node's envelope. False for anything else (a plain envelope, or bytes that are not one).
    /// </summary>
    public static bool TryReadPositioned(ReadOnlyMemory<byte> bytes, out ulong offset, out string epoch, out ReadOnlyMemory<byte> envelope)
    {
        offset = 0;
        epoch = "";
        envelope = default;
        ReadOnlySpan<byte> span = bytes.Span;
        if (span.Length < 6 || span[0] != ClusterEnvelope.Magic || span[1] != PositionedVersion)
        {
            return false;
        }

        int space = span[2..].IndexOf((byte)' ');
        if (space <= 0 || !ulong.TryParse(span.Slice(2, space), NumberStyles.None, CultureInfo.InvariantCulture, out offset) || offset == 0)
        {
            return false;
        }

        int epochStart = 2 + space + 1;
        int epochLength = span[epochStart..].IndexOf((byte)' ');
        if (epochLength <= 0 || epochLength > Protocol.StreamPosition.MaxEpochBytes)
        {
            return false;
        }

        epoch = Encoding.ASCII.GetString(span.Slice(epochStart, epochLength));
        envelope = bytes[(epochStart + epochLength + 1)..];
        return true;
    }

    /// <summary>Decodes what <see cref="ReadScript"/> returned.</summary>
    public static SharedRead Parse(RedisResult result)
    {
        var parts = (RedisResult[])result!;
        string epoch = (string)parts[0]!;
        ulong top = ulong.Parse((string)parts[1]!, CultureInfo.InvariantCulture);
        long now = (long)parts[2];
        var entries = new List<(ulong, long, byte[])>();
        foreach (RedisResult entry in (RedisResult[])parts[3]!)
        {
            var pair = (RedisResult[])entry!;
            string id = (string)pair[0]!;
            ulong offset = ulong.Parse(id.AsSpan(0, id.IndexOf('-', StringComparison.Ordinal)), CultureInfo.InvariantCulture);
            var fields = (RedisResult[])pair[1]!;
            long ms = 0;
            byte[]? envelope = null;
            for (int i = 0; i + 1 < fields.Length; i += 2)
            {
                switch ((string)fields[i]!)
                {
                    case "t":
                        ms = (long)fields[i + 1];
                        break;
                    case "d":
                        envelope = (byte[])fields[i + 1]!;
                        break;
                }
            }

            if (envelope is not null)
            {
                entries.Add((offset, ms, envelope));
            }
        }

        return new SharedRead(epoch, top, now, entries, Cut: parts.Length > 4 && (long)parts[4] == 1);
    }

    private static RedisKey Key(string prefix, string kind, ReadOnlySpan<byte> topic)
    {
        byte[] key = new byte[Encoding.ASCII.GetByteCount(prefix) + kind.Length + topic.Length];
        int written = Encoding.ASCII.GetBytes(prefix, key);
        written += Encoding.ASCII.GetBytes(kind, key.AsSpan(written));
        topic.CopyTo(key.AsSpan(written));
        return key;
    }
}
