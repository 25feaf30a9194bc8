using System.Diagnostics;
using System.Globalization;
using System.Net;
using Herald.LoadTest.Client;
using Herald.Protocol;

namespace Herald.LoadTest.Targets;

/// <summary>
/// Herald, started by the tool from the Release build (<c>--broker-dll</c>) with its embedded defaults
/// (only the listening addresses and ports are set), or found running (<c>--server external</c>).
/// TCP clients are spread over the port range; long-poll clients use the HTTP port. With <c>--token</c>
/// every client presents that credential (HELLO's auth, or <c>Authorization: Bearer</c>).
/// </summary>
internal sealed class HeraldTarget : ITarget
{
    private readonly TargetOptions _options;
    private readonly BrokerEndpoints _endpoints;
    private readonly BrokerChild? _child;
    private readonly Process? _external;
    private readonly SourceAddresses _sources;

    private HeraldTarget(TargetOptions options, BrokerEndpoints endpoints, BrokerChild? child, Process? external, string description)
    {
        _options = options;
        _endpoints = endpoints;
        _child = child;
        _external = external;
        ServerDescription = description;

        // As many connections as this process may open (its file limit), each a socket: beyond
        // SourceAddresses.ConnectionsPerPair per (source, port) pair, bind to several 127.0.0.x addresses.
        _sources = SourceAddresses.Plan(endpoints.Address, ProcessLimits.OpenFileLimit() ?? 0, endpoints.PortCount, requested: null);
    }

    public string Name => "herald";

    public string Transport => _options.Transport;

    public string ServerDescription { get; }

    public string? ServerCommandLine => _child?.CommandLine;

    public Process? ServerProcess => _child?.Process ?? _external;

    public int MaxPayload => 1024 * 1024 - 1024; // spec §9 default max frame, less the envelope

    /// <summary>The TCP ports and address clients connect to.</summary>
    public BrokerEndpoints Endpoints => _endpoints;

    /// <summary>The local addresses TCP clients are bound to (none unless the file limit allows more
    /// connections than one address has source ports for).</summary>
    public SourceAddresses Sources => _sources;

    /// <summary>
    /// The receive buffer each TCP client starts with (it grows for a larger frame), for the calls made in
    /// this async flow; null: <see cref="HeraldConnection.DefaultReceiveBufferSize"/>. A scenario that holds
    /// many idle connections sets it smaller so the tool's own memory does not bound the count; being
    /// async-local, it does not leak into the next scenario run in the same process (<c>compare</c>).
    /// </summary>
    public static AsyncLocal<int?> TcpReceiveBufferSize { get; } = new();

    /// <summary>The HTTP (long-poll) port.</summary>
    public int HttpPort => _options.HttpPort ?? 8080;

    /// <summary>The monitoring listener's port (<c>/varz</c>).</summary>
    public int MonitoringPort => _options.MonitoringPort ?? 8222;

    /// <summary>
    /// The broker arguments the tool starts Herald with: listeners on loopback, then the scenario's own
    /// settings (<see cref="TargetOptions.ServerArguments"/>, e.g. <c>stalled</c>'s queue limit and policy).
    /// </summary>
    public static List<string> Arguments(TargetOptions options)
    {
        CultureInfo c = CultureInfo.InvariantCulture;
        return
        [
            $"--Herald:Tcp:Host={options.Host}",
            $"--Herald:Tcp:PortRangeStart={options.FirstPort.ToString(c)}",
            $"--Herald:Tcp:PortRangeEnd={options.LastPort.ToString(c)}",
            $"--Herald:Http:Host={options.Host}",
            $"--Herald:Http:Port={(options.HttpPort ?? 8080).ToString(c)}",
            $"--Herald:Monitoring:Host={options.Host}",
            $"--Herald:Monitoring:Port={(options.MonitoringPort ?? 8222).ToString(c)}",
            "--Herald:Policy:Port=-1",
            .. options.ServerArguments ?? [],
        ];
    }

    public static async Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        if (options.Port is { } port && options.FirstPort == 4502 && options.LastPort == 4534)
        {
            options = options with { FirstPort = port, LastPort = port }; // --port alone: one port
        }

        BrokerEndpoints endpoints = await BrokerEndpoints.ResolveAsync(options.Host, options.FirstPort, options.LastPort, cancellationToken);
        string version = "Herald";
        if (!options.StartServer)
        {
            return new HeraldTarget(options, endpoints, null, FindProcess(options.ServerPid), "Herald (external)");
        }

        string dll = Path.GetFullPath(options.BrokerDll);
        if (!File.Exists(dll))
        {
            throw new TargetUnavailableException($"no broker at '{dll}': build it first (dotnet build -c Release broker/src/Herald.Broker) or pass --broker-dll.");
        }

        if (await BrokerChild.IsListeningAsync(endpoints.At(options.FirstPort), cancellationToken))
        {
            throw new TargetUnavailableException($"something already listens on {options.Host}:{options.FirstPort}: stop it, or use it with --server external.");
        }

        if (FileVersionInfo.GetVersionInfo(dll).ProductVersion is { Length: > 0 } product)
        {
            version = $"Herald {product.Split('+')[0]}";
        }

        BrokerChild child = BrokerChild.Start(dll, Arguments(options), options.ServerCpus);
        if (await child.WaitUntilReadyAsync(endpoints.At(options.FirstPort), TimeSpan.FromSeconds(options.SetupTimeoutSeconds), cancellationToken, options.Token) is { } notReady)
        {
            await child.DisposeAsync();
            throw new TargetUnavailableException(notReady);
        }

        return new HeraldTarget(options, endpoints, child, null, $"{version} ({Path.GetFileName(dll)}, .NET {Environment.Version})");
    }

    public Task<IPubSubClient> ConnectAsync(int index, CancellationToken cancellationToken) => ConnectAsync(index, _options.Token, cancellationToken);

    /// <summary>As <see cref="ConnectAsync(int, CancellationToken)"/>, presenting <paramref name="credential"/> instead of <c>--token</c>.</summary>
    public async Task<IPubSubClient> ConnectAsync(int index, string? credential, CancellationToken cancellationToken)
    {
        if (_options.Transport == "longpoll")
        {
            return await HeraldLongPollClient.ConnectAsync(_endpoints.Address, HttpPort, index, cancellationToken, credential, _options.Headers);
        }

        // Connection i goes to port i % ports and, when bound, from address (i / ports) % sources: every port
        // sees every source address, whatever the two counts (the broadcast scenario's rule).
        return await HeraldTcpClient.ConnectAsync(
            _endpoints.For(index),
            $"loadtest-{index.ToString(CultureInfo.InvariantCulture)}",
            cancellationToken,
            TcpReceiveBufferSize.Value ?? HeraldConnection.DefaultReceiveBufferSize,
            _sources.For(index / _endpoints.PortCount),
            credential,
            _options.Headers ? Capabilities.Headers : Capabilities.None);
    }

    /// <summary>The MessagePack map of spec §4.9, the same bytes on TCP and long-poll.</summary>
    public byte[] EncodeHeaders(IReadOnlyList<KeyValuePair<string, string[]>> headers) => HeaderBlock.Encode(headers);

    public async ValueTask DisposeAsync()
    {
        if (_child is not null)
        {
            await _child.DisposeAsync();
        }

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
