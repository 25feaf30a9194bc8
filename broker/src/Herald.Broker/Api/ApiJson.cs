using System.Text.Json;
using System.Text.Json.Serialization;

namespace Herald.Broker.Api;

/// <summary><c>GET /api/v1/info</c>: the node answering (its cluster id and the members it knows on a cluster node), its clients and traffic.</summary>
internal sealed record NodeInfo(
    string ServerName,
    string Version,
    string? Node,
    string Status,
    DateTimeOffset Start,
    double UptimeSeconds,
    int Connections,
    int Subscriptions,
    int Patterns,
    long Published,
    long Delivered,
    long Dropped,
    IReadOnlyList<NodeInfoMember>? Nodes);

/// <summary>A member of the cluster as this node sees it.</summary>
internal sealed record NodeInfoMember(string Id, string Name, bool Self, DateTimeOffset LastSeen);

/// <summary>Source-generated JSON of the server API (protocol-spec/server-api.yaml): snake_case as <c>/varz</c>, nulls left out.</summary>
[JsonSourceGenerationOptions(
    JsonSerializerDefaults.Web,
    PropertyNamingPolicy = JsonKnownNamingPolicy.SnakeCaseLower,
    DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(NodeInfo))]
internal sealed partial class ApiJsonContext : JsonSerializerContext;
