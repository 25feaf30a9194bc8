using System.Globalization;
using System.Text.Json.Serialization;
using Herald.Broker.Delivery;
using Herald.Broker.Engines.PollSharing;
using Herald.Protocol;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>A session's hash in Redis (<c>P lp:&lt;token&gt;</c>), read into the <see cref="SharedSession"/> the seam carries.</summary>
internal static class SharedSessionRecord
{
    /// <summary>The session named <paramref name="token"/> from its hash's fields, with the node holding its lease (<paramref name="owner"/>; null: none).</summary>
    public static SharedSession Read(string token, HashEntry[] hash, string? owner)
    {
        string identity = "", ended = "";
        string? client = null, info = null;
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
                case "info":
                    info = entry.Value!;
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
                        // "<options 0-7> <pattern>[ <queue>]" (Subscription): neither a pattern nor a queue name holds a space (spec §5, §4.3)
                        string[] parts = value[2..].Split(' ', 2);
                        var options = (SubscribeOptions)(value[0] is >= '0' and <= '7' ? value[0] - '0' : 0);
                        subscriptions[sid] = new SharedSubscription(sid, parts[0], (options & SubscribeOptions.NoEcho) != 0, null)
                        {
                            Queue = parts.Length > 1 ? parts[1] : null,
                            Presence = options & (SubscribeOptions.Join | SubscribeOptions.PresenceEvents),
                        };
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
            [.. subscriptions.Values.OrderBy(s => s.Sid).Select(s => positions.TryGetValue(s.Sid, out string? p) ? s with { Position = p } : s)])
        {
            Info = info,
        };
    }

    /// <summary>A subscription's field value: its SUBSCRIBE options as one digit (no-echo 1, join 2, presence events 4: spec §4.3), its pattern and its queue group.</summary>
    public static string Subscription(SubscribeOptions options, string pattern, string? queue) =>
        string.Create(CultureInfo.InvariantCulture, $"{(uint)(options & (SubscribeOptions.NoEcho | SubscribeOptions.Join | SubscribeOptions.PresenceEvents))} {pattern}{(queue is null ? "" : " " + queue)}");

    /// <summary>
    /// A poll's messages, from the entries <see cref="SharedSessionScripts.Poll"/> gave (per entry: first sequence, first
    /// and last position taken, message count, sids and tags as stored, the frames taken), expanded here rather than
    /// in Lua. A frame no longer there is left out (the poll reports the gap). With a <paramref name="secret"/>, a
    /// message whose tag is missing or not the one the secret gives for this session, sequence, sid and frame is left
    /// out and counted in <paramref name="forged"/>; so is one whose sid is not a number.
    /// </summary>
    public static List<(long Sequence, uint Sid, MessageBuffer Frame)> ReadEntries(string token, RedisResult[] raw, RedisValue[][] fetched, string? secret, out int forged)
    {
        forged = 0;
        var entries = new List<(long Sequence, uint Sid, MessageBuffer Frame)>();
        using EnvelopeSigner? signer = secret is null || raw.Length == 0 ? null : new EnvelopeSigner(secret);
        for (int e = 0; e < raw.Length; e++)
        {
            var entry = (RedisResult[])raw[e]!;
            long first = (long)entry[0];
            int from = (int)entry[1], to = (int)entry[2], count = (int)entry[3];
            string sids = (string?)entry[4] ?? "";
            byte[] tags = (byte[]?)entry[5] ?? [];
            RedisValue[] frames = fetched[e];
            bool tagged = tags.Length == SessionSignatures.TagSize * count;
            bool uniform = sids.StartsWith('*'); // one sid for every message of the entry
            int sidAt = uniform ? 1 : 0;
            for (int skip = 1; skip < from && !uniform; skip++)
            {
                NextItem(sids, ref sidAt);
            }

            for (int k = from; k <= to; k++)
            {
                ReadOnlySpan<char> text = uniform ? sids.AsSpan(1) : NextItem(sids, ref sidAt);
                RedisValue frameValue = k - from < frames.Length ? frames[k - from] : RedisValue.Null;
                if (frameValue.IsNull)
                {
                    continue;
                }

                long sequence = first + k - 1;
                uint sid = text.IsEmpty ? 0 : uint.TryParse(text, NumberStyles.None, CultureInfo.InvariantCulture, out uint s) ? s : uint.MaxValue;
                byte[] frame = (byte[]?)frameValue ?? [];
                if (sid == uint.MaxValue || (signer is not null && (!tagged || !SessionSignatures.VerifyEntry(signer, token, sequence, sid, frame, tags.AsSpan((k - 1) * SessionSignatures.TagSize, SessionSignatures.TagSize)))))
                {
                    forged++;
                    continue;
                }

                entries.Add((sequence, sid, MessageBuffer.Wrap(frame))); // not copied: what the node read is never written to
            }
        }

        return entries;
    }

    /// <summary>
    /// The frames of the entries a poll's script read (<see cref="SharedSessionScripts.Poll"/>: per entry its frame hash,
    /// its first field or its list of fields, and the positions taken), fetched by the node itself in one HMGET per entry,
    /// all sent at once: Redis copies each frame once into its reply, never into the script. A frame gone meanwhile (the
    /// session acknowledged it through a newer poll, or its owner dropped it) is null: the poll reports the gap. An entry
    /// that is not a node's carries its frame inline. An entry whose frames this node still keeps (<paramref name="kept"/>: it
    /// appended them lately) is answered from memory, with no call to Redis.
    /// </summary>
    public static async Task<RedisValue[][]> FetchFramesAsync(IDatabase db, RedisResult[] raw, KeptFrames kept)
    {
        var fetches = new Task<RedisValue[]>[raw.Length];
        for (int e = 0; e < raw.Length; e++)
        {
            var entry = (RedisResult[])raw[e]!;
            string frames = (string?)entry[6] ?? "";
            if (frames.Length == 0)
            {
                fetches[e] = Task.FromResult<RedisValue[]>([(RedisValue)entry[9]]);
                continue;
            }

            int from = (int)entry[1], to = (int)entry[2];
            var fields = new RedisValue[to - from + 1];
            if ((string?)entry[7] is { Length: > 0 } start)
            {
                long first = long.Parse(start, CultureInfo.InvariantCulture);
                for (int k = from; k <= to; k++)
                {
                    fields[k - from] = first + k - 1;
                }
            }
            else
            {
                string list = (string?)entry[8] ?? "";
                int at = 0;
                for (int k = 1; k <= to; k++)
                {
                    ReadOnlySpan<char> field = NextItem(list, ref at);
                    if (k >= from)
                    {
                        fields[k - from] = field.ToString();
                    }
                }
            }

            fetches[e] = kept.Find(frames, fields) is { } found ? Task.FromResult(found) : db.HashGetAsync(frames, fields);
        }

        return await Task.WhenAll(fetches).ConfigureAwait(false);
    }

    /// <summary>The next item of a comma list as Lua's split reads it (empty items skipped); empty past its end.</summary>
    private static ReadOnlySpan<char> NextItem(string list, ref int at)
    {
        while (at < list.Length && list[at] == ',')
        {
            at++;
        }

        int start = at;
        while (at < list.Length && list[at] != ',')
        {
            at++;
        }

        return list.AsSpan(start, at - start);
    }
}

/// <summary>
/// Where a shared session's keys are (spec cluster.md §10, §13): on the shard its token hashes to, under that shard's
/// prefix; and the frame hash of one append call, on the shard the call went to.
/// </summary>
internal static class SharedSessionKeys
{
    public static RedisKey Hash(ClusterConnection shard, string token) => shard.Prefix + "lp:" + token;

    public static RedisKey Stream(ClusterConnection shard, string token) => shard.Prefix + "lq:" + token;

    public static RedisKey Lease(ClusterConnection shard, string token) => shard.Prefix + "lo:" + token;

    /// <summary>The frames of <paramref name="node"/>'s append call number <paramref name="call"/> (<c>P lf:&lt;node&gt;:&lt;call&gt;</c>).</summary>
    public static RedisKey Frames(ClusterConnection shard, string node, long call) => shard.Prefix + "lf:" + node + ":" + call.ToString(CultureInfo.InvariantCulture);
}

/// <summary>How a <see cref="SessionCommand"/> and its <see cref="SessionReply"/> travel between nodes (on the command and reply channels).</summary>
[JsonSerializable(typeof(SessionCommand))]
[JsonSerializable(typeof(SessionReply))]
[JsonSourceGenerationOptions(DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
internal sealed partial class SharedSessionsJson : JsonSerializerContext;
