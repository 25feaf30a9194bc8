using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using Herald.LoadTest.Client;
using Herald.Protocol;

namespace Herald.LoadTest.Targets;

/// <summary>
/// Herald's cluster mode (issue 14): <c>--nodes N</c> brokers (default 3) sharing one topic space over one
/// redis-server, all started by the tool as children. Redis first (<see cref="RedisTarget.StartServerAsync"/>,
/// on a port the system picks, persistence off), then each node as <see cref="HeraldTarget"/> starts its one
/// (<see cref="HeraldNode"/>) with <c>--Herald:Cluster:Redis=HOST:PORT</c> added.
/// <para>
/// Node k listens on its own ports: the TCP range <c>--ports</c> shifted by k times its length (defaults:
/// 4502-4534, 4535-4567, ...), HTTP <c>--http-port</c> + k, monitoring <c>--monitoring-port</c> + k.
/// Client i connects to node i % N, so clients of every scenario are spread over the nodes by index and
/// a publication reaches subscribers on other nodes through Redis. A subscription is live on every node
/// when the client is told so: the node answers the PING (long-poll: the subscribe) only once Redis has it.
/// </para>
/// <para>
/// <see cref="ServerProcess"/> is node 0; the server CPU and RSS a scenario reports are the sum over the
/// nodes (<see cref="ServerProcesses"/>), redis-server not included (its pid is in the description).
/// </para>
/// </summary>
internal sealed class ClusterTarget : ITarget
{
    public const int DefaultNodes = 3;

    /// <summary>Enough for any loopback run; the ports of node k are shifted by k (see the class remarks).</summary>
    public const int MaxNodes = 32;

    private readonly TargetOptions _options;
    private readonly BrokerChild _redis;
    private readonly HeraldNode[] _nodes;

    private ClusterTarget(TargetOptions options, BrokerChild redis, IPEndPoint redisEndPoint, string redisVersion, HeraldNode[] nodes)
    {
        _options = options;
        _redis = redis;
        RedisEndPoint = redisEndPoint;
        _nodes = nodes;
        ServerDescription = string.Create(CultureInfo.InvariantCulture,
            $"{nodes.Length} x {nodes[0].Description} over redis-server {redisVersion} (pid {redis.Id}); client i on node i % {nodes.Length}; server CPU and RSS: the sum over the {nodes.Length} nodes, redis-server not included");
    }

    public string Name => "cluster";

    public string Transport => _options.Transport;

    public string ServerDescription { get; }

    public string? ServerCommandLine =>
        string.Join(" ; ", [.. _nodes.Select((node, k) => $"node {k.ToString(CultureInfo.InvariantCulture)}: {node.Child?.CommandLine}"), $"redis: {_redis.CommandLine}"]);

    public Process? ServerProcess => _nodes[0].Child?.Process;

    public IReadOnlyList<Process> ServerProcesses => [.. _nodes.Select(node => node.Child?.Process).OfType<Process>()];

    public int MaxPayload => HeraldNode.MaxPayload;

    /// <summary>The nodes, node k serving clients k, k + N, k + 2N, ...</summary>
    public IReadOnlyList<HeraldNode> Nodes => _nodes;

    /// <summary>The redis-server between the nodes.</summary>
    public Process RedisProcess => _redis.Process;

    /// <summary>Where that redis-server listens (a port the system picked).</summary>
    public IPEndPoint RedisEndPoint { get; }

    /// <summary>Node <paramref name="node"/>'s options: its ports, the Redis it joins through, then the scenario's own broker arguments.</summary>
    public static TargetOptions NodeOptions(TargetOptions options, int node, IPEndPoint redis)
    {
        int span = options.LastPort - options.FirstPort + 1;
        return options with
        {
            Port = null,
            FirstPort = options.FirstPort + (node * span),
            LastPort = options.LastPort + (node * span),
            HttpPort = (options.HttpPort ?? HeraldNode.DefaultHttpPort) + node,
            MonitoringPort = (options.MonitoringPort ?? HeraldNode.DefaultMonitoringPort) + node,
            ServerArguments = [$"--Herald:Cluster:Redis={redis}", .. options.ServerArguments ?? []],
        };
    }

    /// <exception cref="TargetUnavailableException">redis-server missing, no broker build, a port taken, or a node did not answer.</exception>
    public static async Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        options = HeraldNode.WithPortAlone(options);
        int count = options.Nodes ?? DefaultNodes;
        BrokerEndpoints address = await BrokerEndpoints.ResolveAsync(options.Host, options.FirstPort, options.LastPort, cancellationToken);
        var redisEndPoint = new IPEndPoint(address.Address, FreePort(address.Address));
        (BrokerChild redis, string redisVersion) = await RedisTarget.StartServerAsync(options, redisEndPoint, cancellationToken);
        var nodes = new List<HeraldNode>(count);
        try
        {
            for (int k = 0; k < count; k++)
            {
                nodes.Add(await HeraldNode.StartAsync(NodeOptions(options, k, redisEndPoint), cancellationToken));
            }
        }
        catch
        {
            foreach (HeraldNode node in nodes)
            {
                await node.DisposeAsync();
            }

            await redis.DisposeAsync();
            throw;
        }

        return new ClusterTarget(options, redis, redisEndPoint, redisVersion, [.. nodes]);
    }

    /// <summary>Client <paramref name="index"/> on node index % N, the (index / N)-th of that node's clients.</summary>
    public Task<IPubSubClient> ConnectAsync(int index, CancellationToken cancellationToken) =>
        _nodes[index % _nodes.Length].ConnectAsync(index, index / _nodes.Length, _options.Token, cancellationToken);

    /// <summary>The MessagePack map of spec §4.9, the same bytes on TCP and long-poll, forwarded by the nodes unchanged.</summary>
    public byte[] EncodeHeaders(IReadOnlyList<KeyValuePair<string, string[]>> headers) => HeaderBlock.Encode(headers);

    public async ValueTask DisposeAsync()
    {
        foreach (HeraldNode node in _nodes)
        {
            await node.DisposeAsync();
        }

        await _redis.DisposeAsync();
    }

    /// <summary>A TCP port nobody listens on now on <paramref name="address"/>, picked by the system (for redis-server, which cannot pick its own).</summary>
    public static int FreePort(IPAddress address)
    {
        using var probe = new Socket(address.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        probe.Bind(new IPEndPoint(address, 0));
        return ((IPEndPoint)probe.LocalEndPoint!).Port;
    }
}
