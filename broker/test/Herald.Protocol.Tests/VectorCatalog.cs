using System.Text.Json;
using Xunit;

namespace Herald.Protocol.Tests;

internal enum VectorKind
{
    Valid,
    Incomplete,
    Invalid,
}

/// <summary>One case of a <c>protocol-spec/vectors/*.json</c> file (spec §12).</summary>
/// <param name="Id">File, kind and name: what a theory gets as its argument and shows as the case name.</param>
/// <param name="Fields">The <c>fields</c> object of a valid case (undefined otherwise).</param>
/// <param name="Error">The expected error of an invalid case (<see cref="ErrorCode.None"/> otherwise).</param>
internal sealed record Vector(string Id, FrameType Frame, VectorKind Kind, string Name, byte[] Bytes, JsonElement Fields, bool Canonical, ErrorCode Error)
{
    public string Hex => Convert.ToHexStringLower(Bytes);
}

/// <summary>
/// Loads the shared vectors from the <c>vectors/</c> folder next to the test assembly (the project copies
/// <c>protocol-spec/vectors/*.json</c> there) and hands their ids to theories, one test case per vector.
/// </summary>
public static class VectorCatalog
{
    /// <summary>The files spec §12 requires: one per frame type of spec §3.</summary>
    internal static readonly IReadOnlyDictionary<string, FrameType> FrameFiles = new Dictionary<string, FrameType>
    {
        ["hello.json"] = FrameType.Hello,
        ["welcome.json"] = FrameType.Welcome,
        ["subscribe.json"] = FrameType.Subscribe,
        ["unsubscribe.json"] = FrameType.Unsubscribe,
        ["publish.json"] = FrameType.Publish,
        ["message.json"] = FrameType.Message,
        ["ping.json"] = FrameType.Ping,
        ["pong.json"] = FrameType.Pong,
        ["error.json"] = FrameType.Error,
        ["presence.json"] = FrameType.Presence,
        ["presence_reply.json"] = FrameType.PresenceReply,
        ["subscribed.json"] = FrameType.Subscribed,
    };

    private static readonly Lazy<Catalog> Loaded = new(Load);

    internal static string Folder => Path.Combine(AppContext.BaseDirectory, "vectors");

    /// <summary><c>max_frame</c> of <c>limits.json</c>: the limit every invalid vector is judged against.</summary>
    internal static int MaxFrame => Loaded.Value.MaxFrame;

    /// <summary><c>max_topic</c> of <c>limits.json</c>, for <c>topics.json</c>.</summary>
    internal static int MaxTopic => Loaded.Value.MaxTopic;

    internal static IReadOnlyList<Vector> All => Loaded.Value.Vectors;

    internal static JsonElement Topics => Loaded.Value.Topics;

    public static TheoryData<CaseName> AllIds => Ids(_ => true);

    public static TheoryData<CaseName> ValidIds => Ids(v => v.Kind == VectorKind.Valid);

    public static TheoryData<CaseName> CanonicalIds => Ids(v => v.Kind == VectorKind.Valid && v.Canonical);

    public static TheoryData<CaseName> NonCanonicalIds => Ids(v => v.Kind == VectorKind.Valid && !v.Canonical);

    public static TheoryData<CaseName> IncompleteIds => Ids(v => v.Kind == VectorKind.Incomplete);

    public static TheoryData<CaseName> InvalidIds => Ids(v => v.Kind == VectorKind.Invalid);

    public static TheoryData<CaseName> MessageIds => Ids(v => v.Kind == VectorKind.Valid && v.Frame == FrameType.Message);

    internal static Vector Get(CaseName id) => Loaded.Value.ById[id.Value];

    private static TheoryData<CaseName> Ids(Func<Vector, bool> filter)
    {
        var data = new TheoryData<CaseName>();
        foreach (Vector v in All.Where(filter))
        {
            data.Add(new CaseName(v.Id));
        }

        return data;
    }

    private static Catalog Load()
    {
        using JsonDocument limits = JsonDocument.Parse(File.ReadAllBytes(Path.Combine(Folder, "limits.json")));
        int maxFrame = limits.RootElement.GetProperty("max_frame").GetInt32();
        int maxTopic = limits.RootElement.GetProperty("max_topic").GetInt32();
        JsonElement topics = ParseFile("topics.json");

        var vectors = new List<Vector>();
        foreach ((string file, FrameType type) in FrameFiles)
        {
            JsonElement root = ParseFile(file);
            string frame = root.GetProperty("frame").GetString()!;
            if (!string.Equals(frame.Replace("_", "", StringComparison.Ordinal), type.ToString(), StringComparison.OrdinalIgnoreCase))
            {
                throw new InvalidDataException($"{file}: \"frame\" is {frame}, expected {type.ToString().ToUpperInvariant()}.");
            }

            foreach (VectorKind kind in Enum.GetValues<VectorKind>())
            {
                foreach (JsonElement item in root.GetProperty(kind.ToString().ToLowerInvariant()).EnumerateArray())
                {
                    vectors.Add(ReadVector(file, type, kind, item));
                }
            }
        }

        var byId = new Dictionary<string, Vector>(StringComparer.Ordinal);
        foreach (Vector v in vectors)
        {
            if (!byId.TryAdd(v.Id, v))
            {
                throw new InvalidDataException($"Two vectors are called {v.Id}.");
            }
        }

        return new Catalog(maxFrame, maxTopic, vectors, byId, topics);
    }

    private static Vector ReadVector(string file, FrameType type, VectorKind kind, JsonElement item)
    {
        string name = item.GetProperty("name").GetString()!;
        string id = $"{file} / {kind.ToString().ToLowerInvariant()} / {name}";
        byte[] bytes = Convert.FromHexString(item.GetProperty("hex").GetString()!);
        JsonElement fields = default;
        bool canonical = false;
        var error = ErrorCode.None;
        switch (kind)
        {
            case VectorKind.Valid:
                fields = item.GetProperty("fields");
                canonical = item.GetProperty("canonical").GetBoolean();
                break;
            case VectorKind.Invalid:
                string errorName = item.GetProperty("error").GetString()!;
                if (errorName == nameof(ErrorCode.None) || !Enum.GetNames<ErrorCode>().Contains(errorName))
                {
                    throw new InvalidDataException($"{id}: \"{errorName}\" is not an error name of spec §8.");
                }

                error = Enum.Parse<ErrorCode>(errorName);

                break;
        }

        return new Vector(id, type, kind, name, bytes, fields, canonical, error);
    }

    private static JsonElement ParseFile(string file)
    {
        using JsonDocument doc = JsonDocument.Parse(File.ReadAllBytes(Path.Combine(Folder, file)));
        return doc.RootElement.Clone();
    }

    private sealed record Catalog(int MaxFrame, int MaxTopic, IReadOnlyList<Vector> Vectors, IReadOnlyDictionary<string, Vector> ById, JsonElement Topics);
}
