using System.Buffers;
using System.Globalization;
using System.Text;
using System.Text.Json;
using System.Text.RegularExpressions;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>
/// Loads <c>protocol-spec/vectors/longpoll.json</c>, the HTTP long-poll bodies (longpoll.md), from the
/// <c>vectors/</c> folder next to the test assembly. It is not a frame-vector file of spec §12, so
/// <see cref="VectorCatalog"/> (which reads only the files it names) never sees it.
/// </summary>
internal static class LongPollVectors
{
    /// <summary>The sections of the file that hold cases, each a JSON array of objects with a unique <c>name</c>.</summary>
    public const string PollBinary = "pollBinary";
    public const string PollJson = "pollJson";
    public const string PollRefused = "pollRefused";
    public const string Requests = "requests";
    public const string FramesValid = "framesBody.valid";
    public const string FramesInvalid = "framesBody.invalid";

    /// <summary>The media type of a binary poll response and of a frames publish body (longpoll §1.3, §2.1).</summary>
    public const string FramesMediaType = "application/vnd.herald.frames";

    /// <summary>Problem <c>code</c> values and their HTTP status (longpoll §3).</summary>
    public static readonly IReadOnlyDictionary<string, int> ProblemStatus = new Dictionary<string, int>(StringComparer.Ordinal)
    {
        ["MalformedRequest"] = 400,
        ["InvalidTopic"] = 400,
        ["TopicTooLong"] = 400,
        ["ReservedTopic"] = 400,
        ["DuplicateSubscription"] = 400,
        ["TooManySubscriptions"] = 400,
        ["SessionNotFound"] = 404,
        ["UnknownSubscription"] = 404,
        ["PollReplaced"] = 409,
        ["SessionExpired"] = 410,
        ["BodyTooLarge"] = 413,
        ["TooManySessions"] = 503,
        ["TooManyPendingSessions"] = 503,
        ["TooManyPolls"] = 503,
    };

    private static readonly Lazy<JsonElement> Loaded = new(() =>
    {
        using JsonDocument doc = JsonDocument.Parse(File.ReadAllBytes(Path.Combine(VectorCatalog.Folder, "longpoll.json")));
        return doc.RootElement.Clone();
    });

    public static JsonElement Root => Loaded.Value;

    /// <summary>The <c>max_topic</c> the broker under test runs with: limits.json's, as for every vector file.</summary>
    public static int MaxTopicLength => VectorCatalog.MaxTopic;

    public static TheoryData<CaseName> PollBinaryIds => Ids(PollBinary);

    public static TheoryData<CaseName> PollJsonIds => Ids(PollJson);

    public static TheoryData<CaseName> PollRefusedIds => Ids(PollRefused);

    public static TheoryData<CaseName> RequestIds => Ids(Requests);

    public static TheoryData<CaseName> FramesValidIds => Ids(FramesValid);

    public static TheoryData<CaseName> FramesInvalidIds => Ids(FramesInvalid);

    /// <summary>The cases of one section, in file order.</summary>
    public static IReadOnlyList<JsonElement> Cases(string section)
    {
        JsonElement node = Root;
        foreach (string part in section.Split('.'))
        {
            node = node.GetProperty(part);
        }

        return [.. node.EnumerateArray()];
    }

    /// <summary>The case a theory argument names (<c>section / name</c>).</summary>
    public static JsonElement Get(CaseName id)
    {
        int at = id.Value.IndexOf(" / ", StringComparison.Ordinal);
        return Find(id.Value[..at], id.Value[(at + 3)..]);
    }

    public static JsonElement Find(string section, string name) =>
        Cases(section).Single(c => c.GetProperty("name").GetString() == name);

    /// <summary>
    /// A <c>Herald-Gaps</c> value as longpoll §2.1 defines it (and openapi's pattern): sids 1 to 4294967295 in decimal,
    /// no sign or leading zero, separated by a comma and nothing else; <c>null</c> for any other value.
    /// </summary>
    public static uint[]? Gaps(string value)
    {
        if (!Regex.IsMatch(value, "^[1-9][0-9]*(,[1-9][0-9]*)*\\z", RegexOptions.CultureInvariant))
        {
            return null;
        }

        string[] parts = value.Split(',');
        var sids = new uint[parts.Length];
        for (int i = 0; i < parts.Length; i++)
        {
            if (!uint.TryParse(parts[i], NumberStyles.None, CultureInfo.InvariantCulture, out sids[i]))
            {
                return null;
            }
        }

        return sids;
    }

    /// <summary>A <c>Herald-First-Sequence</c>, <c>Herald-Count</c> or <c>Herald-Dropped</c> value as longpoll §2.1 defines it: decimal digits.</summary>
    public static bool IsNumber(string value) =>
        Regex.IsMatch(value, "^[0-9]+\\z", RegexOptions.CultureInvariant) && long.TryParse(value, NumberStyles.None, CultureInfo.InvariantCulture, out _);

    public static byte[] Hex(JsonElement item, string property = "hex") => Convert.FromHexString(item.GetProperty(property).GetString()!);

    /// <summary>
    /// The frame a <c>messages</c> entry (always MESSAGE) or a <c>frames</c> entry (its <c>type</c>) of the file describes.
    /// </summary>
    public static DecodedFrame Frame(JsonElement f)
    {
        FrameType type = f.TryGetProperty("type", out JsonElement t) ? Enum.Parse<FrameType>(t.GetString()!, ignoreCase: true) : FrameType.Message;
        object frame = type switch
        {
            FrameType.Publish or FrameType.Message => new PublishFrame(
                type == FrameType.Message ? f.GetProperty("sid").GetUInt32() : 0,
                Utf8(f.GetProperty("topic").GetString()!),
                f.GetProperty("replyTo").ValueKind == JsonValueKind.Null ? null : Utf8(f.GetProperty("replyTo").GetString()!),
                (PayloadFlags)f.GetProperty("flags").GetUInt32(),
                new ReadOnlySequence<byte>(Hex(f, "payload")),
                default)
            {
                Headers = f.TryGetProperty("headers", out JsonElement headers) ? new ReadOnlySequence<byte>(HeaderBlock.Encode(FrameModel.HeadersOf(headers))) : default,
            },
            FrameType.Subscribe => new SubscribeFrame(
                f.GetProperty("sid").GetUInt32(),
                Utf8(f.GetProperty("pattern").GetString()!),
                (SubscribeOptions)f.GetProperty("options").GetUInt32()),
            _ => throw new InvalidDataException($"longpoll.json describes no {type} frames."),
        };
        return new DecodedFrame(type, frame);
    }

    private static ReadOnlySequence<byte> Utf8(string value) => new(Encoding.UTF8.GetBytes(value));

    private static TheoryData<CaseName> Ids(string section)
    {
        var data = new TheoryData<CaseName>();
        foreach (JsonElement c in Cases(section))
        {
            data.Add(new CaseName($"{section} / {c.GetProperty("name").GetString()}"));
        }

        return data;
    }
}
