using System.Globalization;
using System.Text.Json.Serialization;
using Herald.Broker.Engines.PollSharing;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>A session's hash in Redis (<c>P lp:&lt;token&gt;</c>), read into the <see cref="SharedSession"/> the seam carries.</summary>
internal static class SharedSessionRecord
{
    /// <summary>The session named <paramref name="token"/> from its hash's fields, with the node holding its lease (<paramref name="owner"/>; null: none).</summary>
    public static SharedSession Read(string token, HashEntry[] hash, string? owner)
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

/// <summary>How a <see cref="SessionCommand"/> and its <see cref="SessionReply"/> travel between nodes (on the command and reply channels).</summary>
[JsonSerializable(typeof(SessionCommand))]
[JsonSerializable(typeof(SessionReply))]
[JsonSourceGenerationOptions(DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
internal sealed partial class SharedSessionsJson : JsonSerializerContext;
