using System.CommandLine;
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
    int? Nodes = null,
    int Shards = 1)
{
    public static readonly string[] Targets = ["herald", "nats", "redis", "signalr", "cluster"];

    public const string DefaultBrokerDll = "broker/src/Herald.Broker/bin/Release/net10.0/Herald.Broker.dll";

    /// <summary>The target options of a parsed command line (<see cref="TargetCommandOptions"/>), checked together.</summary>
    /// <exception cref="UsageException">Options that do not go together.</exception>
    public static TargetOptions Read(ParseResult options)
    {
        ArgumentNullException.ThrowIfNull(options);
        string target = options.GetRequiredValue(TargetCommandOptions.Target);
        string transport = options.GetRequiredValue(TargetCommandOptions.Transport);

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

        string server = options.GetRequiredValue(TargetCommandOptions.Server);
        (int first, int last) = TargetCommandOptions.PortRange(options);
        int? nodes = ReadNodes(options, target, server, first, last);
        string[]? history = null;
        if (options.GetValue(TargetCommandOptions.History) is { } pattern)
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
            options.GetRequiredValue(TargetCommandOptions.Host),
            options.GetValue(TargetCommandOptions.Port),
            first,
            last,
            options.GetValue(TargetCommandOptions.HttpPort),
            options.GetValue(TargetCommandOptions.ServerCpus),
            options.GetValue(TargetCommandOptions.ClientCpus),
            options.GetValue(TargetCommandOptions.ServerPid),
            options.GetRequiredValue(TargetCommandOptions.BrokerDll),
            options.GetValue(TargetCommandOptions.SetupTimeout),
            options.GetValue(TargetCommandOptions.MonitoringPort),
            ServerArguments: history,
            Token: options.GetValue(TargetCommandOptions.Token),
            Nodes: nodes,
            Shards: nodes is null ? 1 : options.GetValue(TargetCommandOptions.Shards));
    }

    /// <summary><c>--nodes</c> for the cluster target (default <see cref="ClusterTarget.DefaultNodes"/>), null for every other.</summary>
    /// <exception cref="UsageException"><c>--nodes</c> or <c>--shards</c> with another target, out of range, ports past 65535, or a cluster the tool would not start.</exception>
    private static int? ReadNodes(ParseResult options, string target, string server, int firstPort, int lastPort)
    {
        if (target != "cluster")
        {
            if (options.Given(TargetCommandOptions.Nodes) || options.Given(TargetCommandOptions.Shards))
            {
                throw new UsageException($"--{(options.Given(TargetCommandOptions.Nodes) ? "nodes" : "shards")} goes with --target cluster, not {target}.");
            }

            return null;
        }

        if (server == "external")
        {
            throw new UsageException("cluster: the tool starts every node and the Redis between them; --server external is not supported.");
        }

        int nodes = options.GetValue(TargetCommandOptions.Nodes);
        int span = lastPort - firstPort + 1;
        if (firstPort + (nodes * span) - 1 > 65535)
        {
            throw new UsageException($"--nodes {nodes}: {nodes} nodes of {span} TCP ports from {firstPort} pass port 65535; use fewer --ports.");
        }

        return nodes;
    }

    /// <summary>The port to use for <paramref name="target"/>: <c>--port</c>, else its usual one.</summary>
    public int PortOr(int usual) => Port ?? usual;

    public string Describe() => string.Create(CultureInfo.InvariantCulture, $"{Target}/{Transport} ({(StartServer ? "started by the tool" : "external")}{(ServerCpus is null ? "" : $", server on CPUs {ServerCpus}")}{(ClientCpus is null ? "" : $", tool on CPUs {ClientCpus}")}{(Token is null ? "" : ", with a token")}{(Nodes is { } n ? $", {n} nodes" : "")}{(Shards > 1 ? $", {Shards} shards" : "")}{(ServerArguments?.FirstOrDefault(a => a.StartsWith(HistoryArgument, StringComparison.Ordinal)) is { } h ? $", history on {h[HistoryArgument.Length..]}" : "")})");

    private const string HistoryArgument = "--Herald:History:Topics:0:Pattern=";
}
