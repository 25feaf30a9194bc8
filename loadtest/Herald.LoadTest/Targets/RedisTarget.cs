using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Reflection;
using Herald.LoadTest.Client;
using StackExchange.Redis;

namespace Herald.LoadTest.Targets;

/// <summary>
/// redis-server (Debian package <c>redis-server</c>) as a pub/sub broker, started by the tool as a child
/// with its address and port set and persistence off (<c>--save "" --appendonly no</c>: nothing is written
/// to disk), everything else at its defaults, pinned to <c>--server-cpus</c>; or found running
/// (<c>--server external</c>). Clients are <see cref="RedisPubSubClient"/> (StackExchange.Redis).
/// </summary>
internal sealed class RedisTarget : ITarget
{
    public const string Executable = "redis-server";
    private const string InstallHint = "apt-get install -y redis-server";

    /// <summary>
    /// A single message larger than the default <c>client-output-buffer-limit pubsub</c> hard limit (32 MiB)
    /// disconnects its subscriber at once; the payload must leave room for the reply envelope and RESP framing.
    /// </summary>
    private const int HardOutputLimit = 32 * 1024 * 1024;

    private readonly IPEndPoint _endPoint;
    private readonly BrokerChild? _child;
    private readonly Process? _external;
    private readonly TimeSpan _setupTimeout;

    private RedisTarget(IPEndPoint endPoint, BrokerChild? child, Process? external, string description, TimeSpan setupTimeout)
    {
        _endPoint = endPoint;
        _child = child;
        _external = external;
        _setupTimeout = setupTimeout;
        ServerDescription = description;
    }

    public string Name => "redis";

    public string Transport => "tcp";

    public string ServerDescription { get; }

    public string? ServerCommandLine => _child?.CommandLine;

    public Process? ServerProcess => _child?.Process ?? _external;

    public int MaxPayload => HardOutputLimit - (64 * 1024);

    /// <summary>The arguments the tool starts redis-server with: address, port, no persistence; nothing else.</summary>
    public static List<string> Arguments(TargetOptions options) =>
    [
        "--port", options.PortOr(6379).ToString(CultureInfo.InvariantCulture),
        "--bind", options.Host,
        "--save", "",
        "--appendonly", "no",
        "--maxclients", "100000", // Redis's default is 10,000 connections; each client here holds two (see RedisPubSubClient)
    ];

    public static async Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        int port = options.PortOr(6379);
        IPEndPoint endPoint = (await BrokerEndpoints.ResolveAsync(options.Host, port, port, cancellationToken)).At(port);
        var setupTimeout = TimeSpan.FromSeconds(options.SetupTimeoutSeconds);
        BrokerChild? child = null;
        string version = "";
        if (options.StartServer)
        {
            (child, version) = await StartServerAsync(options, endPoint, cancellationToken);
        }

        try
        {
            // One probe client: it is Redis, and (external) which version.
            await using RedisPubSubClient probe = await RedisPubSubClient.ConnectAsync(endPoint, "loadtest-probe", setupTimeout, cancellationToken);
            if (child is null)
            {
                version = $"{await probe.ServerVersionAsync()} (external)";
            }
        }
        catch (Exception e) when (e is RedisException or TimeoutException or OperationCanceledException && !cancellationToken.IsCancellationRequested)
        {
            if (child is not null)
            {
                await child.DisposeAsync();
            }

            throw new TargetUnavailableException($"no Redis server answers at {options.Host}:{port}: {e.Message}", e);
        }

        string description = $"redis-server {version}; client: StackExchange.Redis {ClientVersion()} (reply-to carried in an envelope the adapter adds)";
        return new RedisTarget(endPoint, child, HeraldTarget.FindProcess(child is null ? options.ServerPid : null), description, setupTimeout);
    }

    /// <summary>
    /// Starts redis-server on <paramref name="endPoint"/> with <see cref="Arguments"/> (<c>--port</c> is
    /// <paramref name="endPoint"/>'s), pinned to <c>--server-cpus</c>, and waits until it accepts connections:
    /// this target's server, and the Redis between a <see cref="ClusterTarget"/>'s nodes. Returns it with its version.
    /// </summary>
    /// <exception cref="TargetUnavailableException">Not installed, the port taken, or it did not start listening.</exception>
    public static async Task<(BrokerChild Child, string Version)> StartServerAsync(TargetOptions options, IPEndPoint endPoint, CancellationToken cancellationToken)
    {
        // "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=..."
        string banner = await PeerServer.ReadVersionAsync(Executable, "--version", InstallHint, cancellationToken);
        string version = banner.Split(' ').FirstOrDefault(part => part.StartsWith("v=", StringComparison.Ordinal)) is { } v ? v[2..] : banner;
        if (await BrokerChild.IsListeningAsync(endPoint, cancellationToken))
        {
            throw new TargetUnavailableException($"something already listens on {options.Host}:{endPoint.Port} (the redis-server service? 'service redis-server stop'): stop it, or use it with --server external.");
        }

        BrokerChild child = PeerServer.Start(Executable, Arguments(options with { Port = endPoint.Port }), options.ServerCpus, InstallHint);
        if (await child.WaitUntilListeningAsync(endPoint, TimeSpan.FromSeconds(options.SetupTimeoutSeconds), cancellationToken) is { } notListening)
        {
            await child.DisposeAsync();
            throw new TargetUnavailableException($"redis-server: {notListening}");
        }

        return (child, version);
    }

    private static string ClientVersion() =>
        typeof(ConnectionMultiplexer).Assembly.GetCustomAttribute<AssemblyInformationalVersionAttribute>()?.InformationalVersion.Split('+')[0] ?? "?";

    public async Task<IPubSubClient> ConnectAsync(int index, CancellationToken cancellationToken) =>
        await RedisPubSubClient.ConnectAsync(_endPoint, $"loadtest-{index.ToString(CultureInfo.InvariantCulture)}", _setupTimeout, cancellationToken);

    public async ValueTask DisposeAsync()
    {
        if (_child is not null)
        {
            await _child.DisposeAsync();
        }

        _external?.Dispose();
    }
}
