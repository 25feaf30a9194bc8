using System.Diagnostics;
using Herald.LoadTest.Client;
using Herald.Protocol;

namespace Herald.LoadTest.Targets;

/// <summary>
/// Herald, started by the tool from the Release build (<c>--broker-dll</c>) with its embedded defaults
/// (only the listening addresses and ports are set), or found running (<c>--server external</c>).
/// TCP (and TLS) clients are spread over the port range; long-poll and WebSocket clients use the HTTP port. With <c>--token</c>
/// every client presents that credential (HELLO's auth, or <c>Authorization: Bearer</c>). The broker is one
/// <see cref="HeraldNode"/>, started and reached the way each node of a <see cref="ClusterTarget"/> is.
/// </summary>
internal sealed class HeraldTarget : ITarget
{
    private readonly TargetOptions _options;
    private readonly HeraldNode _node;
    private readonly Process? _external;

    private HeraldTarget(TargetOptions options, HeraldNode node, Process? external)
    {
        _options = options;
        _node = node;
        _external = external;
    }

    public string Name => "herald";

    public string Transport => _options.Transport;

    public string ServerDescription => _node.Description;

    public string? ServerCommandLine => _node.Child?.CommandLine;

    public Process? ServerProcess => _node.Child?.Process ?? _external;

    public int MaxPayload => HeraldNode.MaxPayload;

    /// <summary>The ports and address clients connect to: the TCP range, or the HTTP port for WebSocket.</summary>
    public BrokerEndpoints Endpoints => _node.Endpoints;

    /// <summary>The local addresses TCP and WebSocket clients are bound to (none unless the file limit allows more
    /// connections than one address has source ports for).</summary>
    public SourceAddresses Sources => _node.Sources;

    /// <summary>The HTTP (long-poll) port.</summary>
    public int HttpPort => _node.HttpPort;

    /// <summary>The monitoring listener's port (<c>/varz</c>).</summary>
    public int MonitoringPort => _node.MonitoringPort;

    public static async Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        options = HeraldNode.WithPortAlone(options);
        HeraldNode node = await HeraldNode.StartAsync(options, cancellationToken);
        return new HeraldTarget(options, node, node.Child is null ? FindProcess(options.ServerPid) : null);
    }

    public Task<IPubSubClient> ConnectAsync(int index, CancellationToken cancellationToken) => ConnectAsync(index, _options.Token, cancellationToken);

    /// <summary>As <see cref="ConnectAsync(int, CancellationToken)"/>, presenting <paramref name="credential"/> instead of <c>--token</c>.</summary>
    public Task<IPubSubClient> ConnectAsync(int index, string? credential, CancellationToken cancellationToken) =>
        _node.ConnectAsync(index, index, credential, cancellationToken);

    /// <summary>The MessagePack map of spec §4.9, the same bytes on TCP and long-poll.</summary>
    public byte[] EncodeHeaders(IReadOnlyList<KeyValuePair<string, string[]>> headers) => HeaderBlock.Encode(headers);

    public async ValueTask DisposeAsync()
    {
        await _node.DisposeAsync();
        _external?.Dispose();
    }

    internal static Process? FindProcess(int? pid)
    {
        if (pid is not { } id)
        {
            return null;
        }

        try
        {
            return Process.GetProcessById(id);
        }
        catch (ArgumentException)
        {
            Console.Error.WriteLine($"warning: no process with id {id}; server CPU and RSS will not be reported.");
            return null;
        }
    }
}
