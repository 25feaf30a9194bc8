using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Text;
using Herald.LoadTest.Client;
using Herald.LoadTest.Peers.Nats;

namespace Herald.LoadTest.Targets;

/// <summary>
/// nats-server (Debian package <c>nats-server</c>), started by the tool as a child with only its address and
/// port set (<c>-a HOST -p PORT</c>, everything else at its defaults), pinned to <c>--server-cpus</c>, or
/// found running (<c>--server external</c>). Clients are <see cref="NatsPubSubClient"/>: the tool's own
/// minimal text-protocol client, because NATS.Net cannot be restored from the registry here.
/// </summary>
internal sealed class NatsTarget : ITarget
{
    public const string Executable = "nats-server";
    private const string InstallHint = "apt-get install -y nats-server";
    private const string ClientNote = "client: the load tool's own NATS text-protocol client, not nats.net (NATS.Client.Core cannot be restored from the registry here)";

    private readonly IPEndPoint _endPoint;
    private readonly BrokerChild? _child;
    private readonly Process? _external;
    private readonly bool _headers;
    private readonly TlsTrust? _tls;

    private NatsTarget(IPEndPoint endPoint, BrokerChild? child, Process? external, string description, int maxPayload, bool headers, TlsTrust? tls)
    {
        _endPoint = endPoint;
        _headers = headers;
        _tls = tls;
        _child = child;
        _external = external;
        ServerDescription = description;
        MaxPayload = maxPayload;
    }

    public string Name => "nats";

    public string Transport => _tls is null ? "tcp" : "tls";

    public string ServerDescription { get; }

    public string? ServerCommandLine => _child?.CommandLine;

    public Process? ServerProcess => _child?.Process ?? _external;

    public int MaxPayload { get; }

    /// <summary>
    /// The arguments the tool starts nats-server with: the listening address and port, and with
    /// <c>--transport tls</c> the tool's <see cref="LoopbackCertificate"/> (<c>--tls</c>: every client must
    /// speak TLS); nothing else.
    /// </summary>
    public static List<string> Arguments(TargetOptions options) =>
    [
        "-a", options.Host, "-p", options.PortOr(4222).ToString(CultureInfo.InvariantCulture),
        .. options.Transport == "tls" ? new[] { "--tls", "--tlscert", LoopbackCertificate.Instance.CertificatePath, "--tlskey", LoopbackCertificate.Instance.KeyPath } : [],
    ];

    public static async Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        int port = options.PortOr(4222);
        IPEndPoint endPoint = (await BrokerEndpoints.ResolveAsync(options.Host, port, port, cancellationToken)).At(port);
        TlsTrust? tls = options.Transport == "tls" ? new TlsTrust(options.Host, options.StartServer ? LoopbackCertificate.Instance.Thumbprint : null) : null;
        BrokerChild? child = null;
        string version = "nats-server (external)";
        if (options.StartServer)
        {
            version = await PeerServer.ReadVersionAsync(Executable, "--version", InstallHint, cancellationToken); // "nats-server: v2.9.10"
            version = version.Replace(": v", " ", StringComparison.Ordinal);
            if (await BrokerChild.IsListeningAsync(endPoint, cancellationToken))
            {
                throw new TargetUnavailableException($"something already listens on {options.Host}:{port}: stop it, or use it with --server external.");
            }

            child = PeerServer.Start(Executable, Arguments(options), options.ServerCpus, InstallHint);
            if (await child.WaitUntilListeningAsync(endPoint, TimeSpan.FromSeconds(options.SetupTimeoutSeconds), cancellationToken) is { } notListening)
            {
                await child.DisposeAsync();
                throw new TargetUnavailableException($"nats-server: {notListening}");
            }
        }

        try
        {
            // One probe connection: it is NATS, and its INFO gives the version (external) and max_payload.
            using var probeTimeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            probeTimeout.CancelAfter(TimeSpan.FromSeconds(options.SetupTimeoutSeconds));
            using NatsConnection probe = await NatsConnection.ConnectAsync(endPoint, "loadtest-probe", probeTimeout.Token, tls: tls);
            if (child is null)
            {
                version = $"{probe.ServerName} (external)";
            }

            int maxPayload = probe.MaxPayload is > 0 and <= int.MaxValue ? (int)probe.MaxPayload : 1024 * 1024;
            return new NatsTarget(endPoint, child, HeraldTarget.FindProcess(child is null ? options.ServerPid : null), $"{version}; {ClientNote}", maxPayload, options.Headers, tls);
        }
        catch (Exception e) when (e is IOException or System.Net.Sockets.SocketException or System.Security.Authentication.AuthenticationException or OperationCanceledException && !cancellationToken.IsCancellationRequested)
        {
            if (child is not null)
            {
                await child.DisposeAsync();
            }

            throw new TargetUnavailableException($"no NATS server answers at {options.Host}:{port}: {e.Message}", e);
        }
    }

    public async Task<IPubSubClient> ConnectAsync(int index, CancellationToken cancellationToken) =>
        await NatsPubSubClient.ConnectAsync(_endPoint, $"loadtest-{index.ToString(CultureInfo.InvariantCulture)}", cancellationToken, _headers, _tls);

    /// <summary>
    /// The <c>NATS/1.0</c> block HPUB and HMSG carry: the version line, one <c>Key: Value</c> line per value,
    /// an empty line. nats-server forwards it unchanged.
    /// </summary>
    public byte[] EncodeHeaders(IReadOnlyList<KeyValuePair<string, string[]>> headers)
    {
        var block = new StringBuilder("NATS/1.0\r\n");
        foreach ((string key, string[] values) in headers)
        {
            foreach (string value in values)
            {
                block.Append(key).Append(": ").Append(value).Append("\r\n");
            }
        }

        return Encoding.UTF8.GetBytes(block.Append("\r\n").ToString());
    }

    public async ValueTask DisposeAsync()
    {
        if (_child is not null)
        {
            await _child.DisposeAsync();
        }

        _external?.Dispose();
    }
}
