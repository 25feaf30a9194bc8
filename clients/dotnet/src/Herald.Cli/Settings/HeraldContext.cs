using System.Text.Json.Serialization;

namespace Herald.Cli.Settings;

/// <summary>
/// A named connection context, as <c>nats context</c> keeps them: one JSON file per context under
/// <c>$XDG_CONFIG_HOME/herald/context/NAME.json</c> (<see cref="ContextStore"/>). Every field is optional.
/// </summary>
internal sealed record HeraldContext
{
    public string? Description { get; init; }

    /// <summary>The broker's address, as <c>Herald.Client</c> takes it: <c>tcp://</c>, <c>tls://</c>, <c>ws://</c>, <c>wss://</c>, <c>http://</c>.</summary>
    public string? Server { get; init; }

    /// <summary>The broker credential (a static token or a JWT). A file holding one is written 0600.</summary>
    public string? Token { get; init; }

    /// <summary>A PEM file of the CA (or the self-signed certificate) to trust for <c>tls://</c>, <c>wss://</c>, <c>https://</c>.</summary>
    public string? TlsCa { get; init; }

    /// <summary>The broker's monitoring listener, <c>http://host:8222</c>.</summary>
    public string? Monitor { get; init; }

    /// <summary>The monitoring token (<c>Herald:Monitoring:Token</c>), sent as a bearer token.</summary>
    public string? MonitorToken { get; init; }
}

[JsonSourceGenerationOptions(
    PropertyNamingPolicy = JsonKnownNamingPolicy.SnakeCaseLower,
    WriteIndented = true,
    DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
    ReadCommentHandling = System.Text.Json.JsonCommentHandling.Skip,
    AllowTrailingCommas = true,
    UnmappedMemberHandling = JsonUnmappedMemberHandling.Disallow)]
[JsonSerializable(typeof(HeraldContext))]
internal sealed partial class ContextJson : JsonSerializerContext;
