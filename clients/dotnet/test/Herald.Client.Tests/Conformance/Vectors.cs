using System.Text.Json;
using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Conformance;

/// <summary>One case of a <c>protocol-spec/vectors/*.json</c> frame file (spec §12).</summary>
public sealed record FrameVector(string Id, string File, FrameType Frame, string Kind, string Name, byte[] Bytes, JsonElement Fields, bool Canonical, ErrorCode Error);

/// <summary>
/// The shared vectors, copied next to the test assembly by the project file. A client decodes what the
/// broker sends (WELCOME, MESSAGE, ERROR, PING, PONG, PRESENCE_REPLY) and encodes what it sends (HELLO,
/// SUBSCRIBE, UNSUBSCRIBE, PUBLISH, PRESENCE): those are the two sets run here, every case of each.
/// </summary>
public static class Vectors
{
    public static readonly IReadOnlyDictionary<string, FrameType> ServerFiles = new Dictionary<string, FrameType>
    {
        ["welcome.json"] = FrameType.Welcome,
        ["message.json"] = FrameType.Message,
        ["error.json"] = FrameType.Error,
        ["ping.json"] = FrameType.Ping,
        ["pong.json"] = FrameType.Pong,
        ["presence_reply.json"] = FrameType.PresenceReply,
        ["subscribed.json"] = FrameType.Subscribed,
    };

    public static readonly IReadOnlyDictionary<string, FrameType> ClientFiles = new Dictionary<string, FrameType>
    {
        ["hello.json"] = FrameType.Hello,
        ["subscribe.json"] = FrameType.Subscribe,
        ["unsubscribe.json"] = FrameType.Unsubscribe,
        ["publish.json"] = FrameType.Publish,
        ["ping.json"] = FrameType.Ping, // both directions (spec §4.7): the client encodes them too
        ["pong.json"] = FrameType.Pong,
        ["presence.json"] = FrameType.Presence,
    };

    /// <summary>
    /// The other files of the folder, and why: <c>limits.json</c> and <c>topics.json</c> are read here too;
    /// <c>longpoll.json</c> by the long-poll tests; <c>cluster.json</c> is between broker nodes (cluster.md), never
    /// a client's: the broker's <c>ClusterVectorTests</c> run it; <c>sse.json</c> is the broker's Server-Sent Events
    /// (sse.md), read by <c>EventSource</c>, not by an SDK: the broker's <c>SseVectorTests</c> run it; <c>delta.json</c>
    /// holds Fossil deltas, not frames (spec §11), for the delta codec the client shares with the broker (Herald.Protocol).
    /// </summary>
    public static readonly string[] OtherFiles = ["limits.json", "topics.json", "longpoll.json", "cluster.json", "sse.json", "delta.json"];

    private static readonly Lazy<Dictionary<string, FrameVector>> All = new(Load);

    public static string Folder => Path.Combine(AppContext.BaseDirectory, "vectors");

    /// <summary><c>max_frame</c> of <c>limits.json</c>: invalid vectors are judged against it.</summary>
    public static int MaxFrame => Limits().GetProperty("max_frame").GetInt32();

    /// <summary><c>max_topic</c> of <c>limits.json</c>, for <c>topics.json</c>.</summary>
    public static int MaxTopic => Limits().GetProperty("max_topic").GetInt32();

    public static TheoryData<CaseName> ServerValid => Ids(v => ServerFiles.ContainsKey(v.File) && v.Kind == "valid");

    public static TheoryData<CaseName> ServerIncomplete => Ids(v => ServerFiles.ContainsKey(v.File) && v.Kind == "incomplete");

    public static TheoryData<CaseName> ServerInvalid => Ids(v => ServerFiles.ContainsKey(v.File) && v.Kind == "invalid");

    public static TheoryData<CaseName> ServerAll => Ids(v => ServerFiles.ContainsKey(v.File));

    public static TheoryData<CaseName> ServerMessages => Ids(v => v.File == "message.json" && v.Kind == "valid");

    public static TheoryData<CaseName> SubscribeValid => Ids(v => v.File == "subscribe.json" && v.Kind == "valid");

    /// <summary>The valid SUBSCRIBE vectors that name a queue group (a non-nil <c>queue</c>).</summary>
    public static TheoryData<CaseName> SubscribeValidWithQueue =>
        Ids(v => v.File == "subscribe.json" && v.Kind == "valid" && v.Fields.TryGetProperty("queue", out JsonElement queue) && queue.ValueKind == JsonValueKind.String);

    public static TheoryData<CaseName> ClientCanonical => Ids(v => ClientFiles.ContainsKey(v.File) && v.Kind == "valid" && v.Canonical);

    public static IEnumerable<FrameVector> Cases => All.Value.Values;

    public static FrameVector Get(CaseName id) => All.Value[id.Value];

    public static JsonElement File(string name)
    {
        using JsonDocument doc = JsonDocument.Parse(System.IO.File.ReadAllBytes(Path.Combine(Folder, name)));
        return doc.RootElement.Clone();
    }

    private static JsonElement Limits() => File("limits.json");

    private static TheoryData<CaseName> Ids(Func<FrameVector, bool> filter)
    {
        var data = new TheoryData<CaseName>();
        foreach (FrameVector v in All.Value.Values.Where(filter))
        {
            data.Add(new CaseName(v.Id));
        }

        return data;
    }

    private static Dictionary<string, FrameVector> Load()
    {
        var vectors = new Dictionary<string, FrameVector>(StringComparer.Ordinal);
        foreach ((string file, FrameType type) in ServerFiles.Concat(ClientFiles).DistinctBy(f => f.Key))
        {
            JsonElement root = File(file);
            foreach (string kind in (string[])["valid", "incomplete", "invalid"])
            {
                foreach (JsonElement item in root.GetProperty(kind).EnumerateArray())
                {
                    string name = item.GetProperty("name").GetString()!;
                    string id = $"{file} / {kind} / {name}";
                    var v = new FrameVector(
                        id,
                        file,
                        type,
                        kind,
                        name,
                        Convert.FromHexString(item.GetProperty("hex").GetString()!),
                        kind == "valid" ? item.GetProperty("fields") : default,
                        kind == "valid" && item.GetProperty("canonical").GetBoolean(),
                        kind == "invalid" ? Enum.Parse<ErrorCode>(item.GetProperty("error").GetString()!) : ErrorCode.None);
                    vectors.Add(id, v);
                }
            }
        }

        return vectors;
    }
}
