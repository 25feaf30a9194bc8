using System.Diagnostics;
using System.Globalization;
using Herald.LoadTest.Client;
using Herald.Protocol;

namespace Herald.LoadTest.Targets;

/// <summary>
/// One Herald broker: started by the tool from the Release build (<c>--broker-dll</c>) with its embedded
/// defaults and the listeners of its <see cref="Options"/>, or found running (<c>--server external</c>); and
/// the way clients reach it. <see cref="HeraldTarget"/> is one node, <see cref="ClusterTarget"/> N of them
/// over one Redis: both start and connect through this, so the two cannot drift.
/// </summary>
internal sealed class HeraldNode : IAsyncDisposable
{
    /// <summary>Spec §9's default max frame, less the envelope.</summary>
    public const int MaxPayload = 1024 * 1024 - 1024;

    public const int DefaultHttpPort = 8080;

    public const int DefaultMonitoringPort = 8222;

    private HeraldNode(TargetOptions options, BrokerEndpoints endpoints, BrokerChild? child, string description)
    {
        Options = options;
        Endpoints = endpoints;
        Child = child;
        Description = description;

        // As many connections as this process may open (its file limit), each a socket: beyond
        // SourceAddresses.ConnectionsPerPair per (source, port) pair, bind to several 127.0.0.x addresses.
        Sources = SourceAddresses.Plan(endpoints.Address, ProcessLimits.OpenFileLimit() ?? 0, endpoints.PortCount, requested: null);
    }

    /// <summary>This node's settings: its TCP port range, HTTP and monitoring ports, the extra broker arguments.</summary>
    public TargetOptions Options { get; }

    /// <summary>The ports and address clients connect to: the TCP range, or the HTTP port for WebSocket.</summary>
    public BrokerEndpoints Endpoints { get; }

    /// <summary>The local addresses TCP clients are bound to (none unless the file limit allows more
    /// connections than one address has source ports for).</summary>
    public SourceAddresses Sources { get; }

    /// <summary>The broker process when the tool started it, else null.</summary>
    public BrokerChild? Child { get; }

    /// <summary>The broker's version and build, e.g. <c>Herald 0.1.0 (Herald.Broker.dll, .NET 10.0.12)</c>.</summary>
    public string Description { get; }

    /// <summary>The HTTP (long-poll) port.</summary>
    public int HttpPort => Options.HttpPort ?? DefaultHttpPort;

    /// <summary>The monitoring listener's port (<c>/varz</c>).</summary>
    public int MonitoringPort => Options.MonitoringPort ?? DefaultMonitoringPort;

    /// <summary>
    /// The receive buffer each TCP (or WebSocket) client starts with (it grows for a larger frame), for the calls made in
    /// this async flow; null: <see cref="HeraldConnection.DefaultReceiveBufferSize"/>. A scenario that holds
    /// many idle connections sets it smaller so the tool's own memory does not bound the count; being
    /// async-local, it does not leak into the next scenario run in the same process (<c>compare</c>).
    /// </summary>
    public static AsyncLocal<int?> TcpReceiveBufferSize { get; } = new();

    /// <summary>
    /// The broker arguments the tool starts Herald with: listeners on loopback, then the scenario's own
    /// settings (<see cref="TargetOptions.ServerArguments"/>, e.g. <c>stalled</c>'s queue limit and policy,
    /// a cluster node's Redis).
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
            $"--Herald:Http:Port={(options.HttpPort ?? DefaultHttpPort).ToString(c)}",
            $"--Herald:Monitoring:Host={options.Host}",
            $"--Herald:Monitoring:Port={(options.MonitoringPort ?? DefaultMonitoringPort).ToString(c)}",
            "--Herald:Policy:Port=-1",
            .. TlsArguments(options),
            .. options.ServerArguments ?? [],
        ];
    }

    /// <summary>With <c>--transport tls</c>: every TCP port speaks TLS, with the tool's <see cref="LoopbackCertificate"/>.</summary>
    private static string[] TlsArguments(TargetOptions options) => options.Transport != "tls"
        ? []
        : ["--Herald:Security:Tls:TcpPorts=all", $"--Herald:Security:Tls:CertificatePath={LoopbackCertificate.Instance.CertificatePath}", $"--Herald:Security:Tls:KeyPath={LoopbackCertificate.Instance.KeyPath}"];

    /// <summary>The options with <c>--port N</c> alone read as the one TCP port N (instead of the default range).</summary>
    public static TargetOptions WithPortAlone(TargetOptions options) =>
        options.Port is { } port && options.FirstPort == 4502 && options.LastPort == 4534
            ? options with { FirstPort = port, LastPort = port }
            : options;

    /// <summary>Starts the broker <paramref name="options"/> describe (or finds it, <c>--server external</c>) and waits for a HELLO/WELCOME.</summary>
    /// <exception cref="TargetUnavailableException">No broker build, its port taken, or it did not answer.</exception>
    public static async Task<HeraldNode> StartAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        BrokerEndpoints endpoints = await ResolveAsync(options, cancellationToken);
        if (!options.StartServer)
        {
            return new HeraldNode(options, endpoints, null, "Herald (external)");
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

        string version = FileVersionInfo.GetVersionInfo(dll).ProductVersion is { Length: > 0 } product ? $"Herald {product.Split('+')[0]}" : "Herald";
        BrokerChild child = BrokerChild.Start(dll, Arguments(options), options.ServerCpus);
        if (await child.WaitUntilReadyAsync(endpoints.At(endpoints.FirstPort), TimeSpan.FromSeconds(options.SetupTimeoutSeconds), cancellationToken, options.Token, endpoints) is { } notReady)
        {
            await child.DisposeAsync();
            throw new TargetUnavailableException(notReady);
        }

        return new HeraldNode(options, endpoints, child, $"{version} ({Path.GetFileName(dll)}, .NET {Environment.Version})");
    }

    /// <summary>
    /// Where clients connect and how (<see cref="TargetOptions.Transport"/>): the TCP port range, over TLS with
    /// <c>tls</c>; the HTTP port's <c>/ws</c> with <c>websocket</c> (the same frames, one port).
    /// </summary>
    private static async Task<BrokerEndpoints> ResolveAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        if (options.Transport == "websocket")
        {
            int http = options.HttpPort ?? DefaultHttpPort;
            BrokerEndpoints web = await BrokerEndpoints.ResolveAsync(options.Host, http, http, cancellationToken);
            web.WebSocket = true;
            return web;
        }

        BrokerEndpoints endpoints = await BrokerEndpoints.ResolveAsync(options.Host, options.FirstPort, options.LastPort, cancellationToken);
        if (options.Transport == "tls")
        {
            endpoints.Tls = true;
            endpoints.TlsThumbprint = options.StartServer ? LoopbackCertificate.Instance.Thumbprint : null; // external: the system's CAs
        }

        return endpoints;
    }

    /// <summary>
    /// Opens a client on this node over <see cref="TargetOptions.Transport"/>, presenting <paramref name="credential"/>.
    /// <paramref name="slot"/> is the client's place among this node's clients: connection s goes to port
    /// s % ports and, when bound, from address (s / ports) % sources, so every port sees every source address,
    /// whatever the two counts (the broadcast scenario's rule). <paramref name="index"/> names it.
    /// </summary>
    public async Task<IPubSubClient> ConnectAsync(int index, int slot, string? credential, CancellationToken cancellationToken)
    {
        if (Options.Transport == "longpoll")
        {
            return await HeraldLongPollClient.ConnectAsync(Endpoints.Address, HttpPort, slot, cancellationToken, credential, Options.Headers);
        }

        return await HeraldTcpClient.ConnectAsync(
            Endpoints.For(slot),
            $"loadtest-{index.ToString(CultureInfo.InvariantCulture)}",
            cancellationToken,
            TcpReceiveBufferSize.Value ?? HeraldConnection.DefaultReceiveBufferSize,
            Sources.For(slot / Endpoints.PortCount),
            credential,
            // Queue groups asked, so a queue subscription may be made; presence with headers (it is granted only with them)
            // for the presence scenario, a capability bit that changes nothing for a client that never joins.
            (Options.Headers ? Capabilities.Headers | Capabilities.Presence : Capabilities.None) | Capabilities.QueueGroups,
            Endpoints);
    }

    public async ValueTask DisposeAsync()
    {
        if (Child is not null)
        {
            await Child.DisposeAsync();
        }
    }
}
