using System.CommandLine;
using Herald.LoadTest.Client;

namespace Herald.LoadTest.Targets;

/// <summary>
/// The options that say which broker a scenario runs against and how it is reached, declared once and added to
/// every command that runs against a target (<see cref="All"/>); <see cref="TargetOptions.Read"/> reads them.
/// </summary>
internal static class TargetCommandOptions
{
    public static readonly Option<string> Target = OptionKinds.Choice("target", "herald", TargetOptions.Targets,
        "cluster: N Herald nodes over one redis-server (or --shards S), all started by the tool; client i on node i % N (loadtest/docs/cluster.md)");

    public static readonly Option<string> Transport = OptionKinds.Choice("transport", "tcp", ["tcp", "tls", "websocket", "longpoll"],
        "Herald (and cluster) TCP or HTTP long-poll; SignalR WebSockets (tcp) or long polling (longpoll); NATS and Redis: tcp. "
        + "tls: Herald or NATS over TLS, the started server given a self-signed certificate the clients trust by thumbprint "
        + "(Herald:Security:Tls:TcpPorts=all; nats-server --tls). websocket: Herald (and cluster) over WebSocket at "
        + "ws://HOST:HTTP-PORT/ws, the TCP frames in binary messages, the same client code as tcp");

    public static readonly Option<int> Nodes = OptionKinds.Integer("nodes", ClusterTarget.DefaultNodes, 1, ClusterTarget.MaxNodes,
        "cluster: how many Herald nodes; node k on the --ports range shifted by k lengths, --http-port + k, --monitoring-port + k");

    public static readonly Option<int> Shards = OptionKinds.Integer("shards", ClusterTarget.DefaultShards, 1, ClusterTarget.MaxShards,
        "cluster: how many redis-servers the topics are spread over (Herald:Cluster:Shards:i:Redis; 1: Herald:Cluster:Redis)");

    public static readonly Option<string> Server = OptionKinds.Choice("server", "start", ["start", "external"],
        "start the server for this run and stop it after, or use one that is already running at --host/--port");

    public static readonly Option<string> Host = OptionKinds.Text("host", "127.0.0.1", "HOST", "server address");

    public static readonly Option<int?> Port = OptionKinds.OptionalInteger("port", 1, 65535,
        "the server's (first) port. Defaults: herald 4502, nats 4222, redis 6379, signalr 5080; herald long-poll uses --http-port");

    public static readonly Option<string> Ports = CreatePorts();

    public static readonly Option<int?> HttpPort = OptionKinds.OptionalInteger("http-port", 1, 65535, "herald long-poll / WebSocket / HTTP port (default 8080)");

    public static readonly Option<int?> MonitoringPort = OptionKinds.OptionalInteger("monitoring-port", 1, 65535, "herald monitoring listener (/varz), on --host (default 8222)");

    public static readonly Option<string?> ServerCpus = OptionKinds.OptionalText("server-cpus", "LIST", "pin a started server to these CPUs (taskset -c LIST), the same for every target");

    public static readonly Option<string?> ClientCpus = OptionKinds.OptionalText("client-cpus", "LIST", "pin this tool to these CPUs");

    public static readonly Option<int?> ServerPid = OptionKinds.OptionalInteger("server-pid", 1, int.MaxValue, "with --server external: the server's process, for its CPU and RSS");

    public static readonly Option<string> BrokerDll = OptionKinds.Text("broker-dll", TargetOptions.DefaultBrokerDll, "PATH", "the Herald broker to start");

    public static readonly Option<double> SetupTimeout = OptionKinds.Seconds("setup-timeout", 60, 1, 24 * 3600, "give up starting, connecting and subscribing after S s");

    public static readonly Option<string?> Token = OptionKinds.OptionalText("token", "TOKEN",
        "herald: the credential every client presents (TCP: HELLO's auth; long-poll: Authorization: Bearer on every request), for a broker with Auth:Mode=Token or Jwt");

    public static readonly Option<string?> History = OptionKinds.OptionalText("history", "PATTERN",
        "herald, cluster: the started broker(s) keep a history of the topics PATTERN matches (Herald:History:Topics:0:Pattern, 1,000 messages; loadtest/docs/history.md)");

    /// <summary>The first and last port of <see cref="Ports"/>, which its validator has checked.</summary>
    public static (int First, int Last) PortRange(ParseResult parsed)
    {
        ArgumentNullException.ThrowIfNull(parsed);
        _ = BrokerEndpoints.TryParsePortRange(parsed.GetRequiredValue(Ports), out int first, out int last);
        return (first, last);
    }

    private static Option<string> CreatePorts()
    {
        Option<string> ports = OptionKinds.Text("ports", "4502-4534", "A-B", "herald: spread TCP clients over ports A..B");
        ports.Validators.Add(result =>
        {
            if (result.Tokens is [.., { Value: var text }] && !BrokerEndpoints.TryParsePortRange(text, out _, out _))
            {
                result.AddError($"--ports must look like 4502-4534, got '{text}'.");
            }
        });
        return ports;
    }

    /// <summary>Every target option, in the order help lists them.</summary>
    public static readonly Option[] All = [Target, Transport, Nodes, Shards, Server, Host, Port, Ports, HttpPort, MonitoringPort, ServerCpus, ClientCpus, ServerPid, BrokerDll, SetupTimeout, Token, History];
}
