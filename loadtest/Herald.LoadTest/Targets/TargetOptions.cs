using System.Globalization;
using Herald.LoadTest.Client;

namespace Herald.LoadTest.Targets;

/// <summary>
/// Which broker a scenario runs against, and whether the tool starts it (the default) or finds it running
/// (<c>--server external</c>). Every scenario reads these the same way. <see cref="Headers"/> is set by a
/// scenario, not read from the command line: its clients then ask for message headers when connecting
/// (Herald: HELLO's capability bit, a long-poll session's <c>"headers": true</c>; NATS: CONNECT's <c>headers</c>).
/// </summary>
internal sealed record TargetOptions(
    string Target,
    string Transport,
    bool StartServer,
    string Host,
    int? Port,
    int FirstPort,
    int LastPort,
    int? HttpPort,
    string? ServerCpus,
    string? ClientCpus,
    int? ServerPid,
    string BrokerDll,
    double SetupTimeoutSeconds,
    int? MonitoringPort = null,
    IReadOnlyList<string>? ServerArguments = null,
    string? Token = null,
    bool Headers = false,
    int? Nodes = null)
{
    public static readonly string[] Targets = ["herald", "nats", "redis", "signalr", "cluster"];

    public const string DefaultBrokerDll = "broker/src/Herald.Broker/bin/Release/net10.0/Herald.Broker.dll";

    public const string Usage = """
          --target T             herald | nats | redis | signalr | cluster             (default herald)
                                 cluster: N Herald nodes over one redis-server, all started by the tool;
                                 client i on node i % N (loadtest/docs/cluster.md)
          --transport X          tcp | tls | websocket | longpoll: Herald (and cluster) TCP or HTTP long-poll; SignalR
                                 WebSockets (tcp) or long polling (longpoll); NATS and Redis: tcp. tls: Herald or
                                 NATS over TLS, the started server given a self-signed certificate the clients
                                 trust by thumbprint (Herald:Security:Tls:TcpPorts=all; nats-server --tls).
                                 websocket: Herald (and cluster) over WebSocket at ws://HOST:HTTP-PORT/ws, the TCP
                                 frames in binary messages, the same client code as tcp (default tcp)
          --nodes N              cluster: how many Herald nodes, 1 to 32; node k on the --ports range shifted
                                 by k lengths, --http-port + k, --monitoring-port + k  (default 3)
          --server start|external  start the server for this run and stop it after (default), or use one
                                 that is already running at --host/--port
          --host HOST            server address                                        (default 127.0.0.1)
          --port N               the server's (first) port. Defaults: herald 4502, nats 4222, redis 6379,
                                 signalr 5080; herald long-poll uses --http-port (default 8080)
          --ports A-B            herald: spread TCP clients over ports A..B            (default 4502-4534)
          --http-port N          herald long-poll / WebSocket / HTTP port              (default 8080)
          --monitoring-port N    herald monitoring listener (/varz), on --host         (default 8222)
          --server-cpus LIST     pin a started server to these CPUs (taskset -c LIST), the same for every target
          --client-cpus LIST     pin this tool to these CPUs
          --server-pid PID       with --server external: the server's process, for its CPU and RSS
          --broker-dll PATH      the Herald broker to start (default broker/src/Herald.Broker/bin/Release/net10.0/Herald.Broker.dll)
          --setup-timeout S      give up starting, connecting and subscribing after S s (default 60)
          --token TOKEN          herald: the credential every client presents (TCP: HELLO's auth; long-poll:
                                 Authorization: Bearer on every request), for a broker with Auth:Mode=Token or Jwt
          --history PATTERN      herald, cluster: the started broker(s) keep a history of the topics PATTERN
                                 matches (Herald:History:Topics:0:Pattern, 1,000 messages; loadtest/docs/history.md)
        """;

    public static TargetOptions Read(CommandLine options)
    {
        string target = options.String("target", "herald");
        if (Array.IndexOf(Targets, target) < 0)
        {
            throw new UsageException($"--target must be one of {string.Join(", ", Targets)}, got '{target}'.");
        }

        string transport = options.String("transport", "tcp");
        if (transport is not ("tcp" or "tls" or "websocket" or "longpoll"))
        {
            throw new UsageException($"--transport must be tcp, tls, websocket or longpoll, got '{transport}'.");
        }

        if (transport == "websocket" && target is not ("herald" or "cluster"))
        {
            throw new UsageException($"--transport websocket goes with herald or cluster, not {target}{(target == "signalr" ? " (SignalR's WebSockets are --transport tcp)" : "")}.");
        }

        if (transport == "tls" && target is not ("herald" or "nats"))
        {
            throw new UsageException($"--transport tls goes with herald or nats, not {target}.");
        }

        if (transport == "longpoll" && target is "nats" or "redis")
        {
            throw new UsageException($"{target} has no long-poll transport; use --transport tcp.");
        }

        string server = options.String("server", "start");
        if (server is not ("start" or "external"))
        {
            throw new UsageException($"--server must be start or external, got '{server}'.");
        }

        int first = 4502, last = 4534;
        if (options.OptionalString("ports") is { } range && !BrokerEndpoints.TryParsePortRange(range, out first, out last))
        {
            throw new UsageException($"--ports must look like 4502-4534, got '{range}'.");
        }

        int? port = options.Has("port") ? options.Int("port", 0, 1, 65535) : null;
        int? httpPort = options.Has("http-port") ? options.Int("http-port", 0, 1, 65535) : null;
        int? monitoringPort = options.Has("monitoring-port") ? options.Int("monitoring-port", 0, 1, 65535) : null;
        int? pid = options.Has("server-pid") ? options.Int("server-pid", 0, 1) : null;
        int? nodes = ReadNodes(options, target, server, first, last);
        string[]? history = null;
        if (options.OptionalString("history") is { } pattern)
        {
            if (target is not ("herald" or "cluster") || server != "start")
            {
                throw new UsageException("--history goes with a Herald the tool starts (--target herald or cluster, --server start).");
            }

            history = [HistoryArgument + pattern, "--Herald:History:Topics:0:MaxMessages=1000"];
        }

        return new TargetOptions(
            target,
            transport,
            server == "start",
            options.String("host", "127.0.0.1"),
            port,
            first,
            last,
            httpPort,
            options.OptionalString("server-cpus"),
            options.OptionalString("client-cpus"),
            pid,
            options.String("broker-dll", DefaultBrokerDll),
            options.Seconds("setup-timeout", 60, 1),
            monitoringPort,
            ServerArguments: history,
            Token: options.OptionalString("token"),
            Nodes: nodes);
    }

    /// <summary><c>--nodes</c> for the cluster target (default <see cref="ClusterTarget.DefaultNodes"/>), null for every other.</summary>
    /// <exception cref="UsageException"><c>--nodes</c> with another target, out of range, ports past 65535, or a cluster the tool would not start.</exception>
    private static int? ReadNodes(CommandLine options, string target, string server, int firstPort, int lastPort)
    {
        if (target != "cluster")
        {
            if (options.Has("nodes"))
            {
                throw new UsageException($"--nodes goes with --target cluster, not {target}.");
            }

            return null;
        }

        if (server == "external")
        {
            throw new UsageException("cluster: the tool starts every node and the Redis between them; --server external is not supported.");
        }

        int nodes = options.Int("nodes", ClusterTarget.DefaultNodes, 1, ClusterTarget.MaxNodes);
        int span = lastPort - firstPort + 1;
        if (firstPort + (nodes * span) - 1 > 65535)
        {
            throw new UsageException($"--nodes {nodes}: {nodes} nodes of {span} TCP ports from {firstPort} pass port 65535; use fewer --ports.");
        }

        return nodes;
    }

    /// <summary>The port to use for <paramref name="target"/>: <c>--port</c>, else its usual one.</summary>
    public int PortOr(int usual) => Port ?? usual;

    public string Describe() => string.Create(CultureInfo.InvariantCulture, $"{Target}/{Transport} ({(StartServer ? "started by the tool" : "external")}{(ServerCpus is null ? "" : $", server on CPUs {ServerCpus}")}{(ClientCpus is null ? "" : $", tool on CPUs {ClientCpus}")}{(Token is null ? "" : ", with a token")}{(Nodes is { } n ? $", {n} nodes" : "")}{(ServerArguments?.FirstOrDefault(a => a.StartsWith(HistoryArgument, StringComparison.Ordinal)) is { } h ? $", history on {h[HistoryArgument.Length..]}" : "")})");

    private const string HistoryArgument = "--Herald:History:Topics:0:Pattern=";
}
