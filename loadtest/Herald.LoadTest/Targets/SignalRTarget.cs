using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Reflection;
using Herald.LoadTest.Client;
using Herald.LoadTest.Peers.SignalR;
using Microsoft.AspNetCore.Http.Connections;
using Microsoft.AspNetCore.SignalR;

namespace Herald.LoadTest.Targets;

/// <summary>
/// An ASP.NET Core SignalR hub (<see cref="PubSubHub"/>) as a pub/sub peer: this tool started again as a child
/// with the hidden <c>signalr-server</c> subcommand (so the hub runs on the same ASP.NET Core runtime as the
/// tool, pinned with <c>--server-cpus</c> like every other server), or found running (<c>--server external</c>).
/// <c>--transport tcp</c> means SignalR over WebSockets, <c>--transport longpoll</c> SignalR long polling;
/// both use the MessagePack hub protocol.
/// </summary>
internal sealed class SignalRTarget : ITarget
{
    /// <summary>The largest payload the tool publishes here; the server accepts messages up to <see cref="SignalRServer.MaximumReceiveMessageSize"/>.</summary>
    public const int MaxPayloadBytes = 1024 * 1024;

    private readonly Uri _hubUrl;
    private readonly HttpTransportType _transport;
    private readonly BrokerChild? _child;
    private readonly Process? _external;

    private SignalRTarget(Uri hubUrl, HttpTransportType transport, BrokerChild? child, Process? external, string description)
    {
        _hubUrl = hubUrl;
        _transport = transport;
        _child = child;
        _external = external;
        ServerDescription = description;
    }

    public string Name => "signalr";

    public string Transport => _transport == HttpTransportType.WebSockets ? "websockets" : "longpolling";

    public string ServerDescription { get; }

    public string? ServerCommandLine => _child?.CommandLine;

    public Process? ServerProcess => _child?.Process ?? _external;

    public int MaxPayload => MaxPayloadBytes;

    /// <summary>The ASP.NET Core SignalR version this tool carries (and so the started hub runs), e.g. <c>10.0.12</c>.</summary>
    public static string Version =>
        typeof(Hub).Assembly.GetCustomAttribute<AssemblyInformationalVersionAttribute>()?.InformationalVersion.Split('+')[0]
        ?? typeof(Hub).Assembly.GetName().Version?.ToString() ?? "?";

    public static async Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        int port = options.PortOr(5080);
        HttpTransportType transport = options.Transport == "longpoll" ? HttpTransportType.LongPolling : HttpTransportType.WebSockets;
        var hubUrl = new Uri(string.Create(CultureInfo.InvariantCulture, $"http://{FormatHost(options.Host)}:{port}{SignalRServer.Path}"));
        if (!options.StartServer)
        {
            return new SignalRTarget(hubUrl, transport, null, HeraldTarget.FindProcess(options.ServerPid), "ASP.NET Core SignalR (external, MessagePack protocol)");
        }

        if (!IPAddress.TryParse(options.Host, out IPAddress? address))
        {
            throw new TargetUnavailableException($"--host must be an IP address to start the SignalR hub, got '{options.Host}'.");
        }

        var endPoint = new IPEndPoint(address, port);
        if (await BrokerChild.IsListeningAsync(endPoint, cancellationToken))
        {
            throw new TargetUnavailableException($"something already listens on {options.Host}:{port}: stop it, or use it with --server external.");
        }

        string tool = typeof(Program).Assembly.Location;
        string runtimeConfig = Path.ChangeExtension(tool, ".runtimeconfig.json");
        if (!File.Exists(runtimeConfig))
        {
            throw new TargetUnavailableException($"cannot start the SignalR hub: '{runtimeConfig}' is missing beside the tool.");
        }

        string[] arguments = [SignalRServer.Subcommand, "--host", options.Host, "--port", port.ToString(CultureInfo.InvariantCulture)];
        BrokerChild child = BrokerChild.Start(tool, arguments, options.ServerCpus);
        if (await child.WaitUntilListeningAsync(endPoint, TimeSpan.FromSeconds(options.SetupTimeoutSeconds), cancellationToken) is { } notListening)
        {
            await child.DisposeAsync();
            throw new TargetUnavailableException(notListening);
        }

        return new SignalRTarget(hubUrl, transport, child, null, $"ASP.NET Core SignalR {Version} (hub hosted by the load tool, MessagePack protocol)");
    }

    public async Task<IPubSubClient> ConnectAsync(int index, CancellationToken cancellationToken) =>
        await SignalRPubSubClient.ConnectAsync(_hubUrl, _transport, cancellationToken);

    public async ValueTask DisposeAsync()
    {
        if (_child is not null)
        {
            await _child.DisposeAsync();
        }

        _external?.Dispose();
    }

    private static string FormatHost(string host) =>
        IPAddress.TryParse(host, out IPAddress? ip) && ip.AddressFamily == System.Net.Sockets.AddressFamily.InterNetworkV6 ? $"[{host}]" : host;
}
