using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using Herald.LoadTest.Client;
using Herald.Protocol;

namespace Herald.LoadTest.Targets;

/// <summary>
/// Herald's cluster mode (issue 14): <c>--nodes N</c> brokers (default 3) sharing one topic space over
/// <c>--shards S</c> redis-servers (default 1; cluster.md §13 places each topic on one of them), all started by
/// the tool as children. The shards first (<see cref="RedisTarget.StartServerAsync"/>, each on a port the system
/// picks, persistence off), then each node as <see cref="HeraldTarget"/> starts its one (<see cref="HeraldNode"/>)
/// with the shards added (<see cref="ShardArguments"/>).
/// <para>
/// Node k listens on its own ports: the TCP range <c>--ports</c> shifted by k times its length (defaults:
/// 4502-4534, 4535-4567, ...), HTTP <c>--http-port</c> + k, monitoring <c>--monitoring-port</c> + k.
/// Client i connects to node i % N, so clients of every scenario are spread over the nodes by index and
/// a publication reaches subscribers on other nodes through Redis. A subscription is live on every node
/// when the client is told so: the node answers the PING (long-poll: the subscribe) only once Redis has it.
/// </para>
/// <para>
/// <see cref="ServerProcess"/> is node 0; the server CPU and RSS a scenario reports are the sum over the
/// nodes (<see cref="ServerProcesses"/>), the redis-servers not included (their pids are in the description;
/// <c>shards</c> reads their CPU from Redis itself).
/// </para>
/// </summary>
internal sealed class ClusterTarget : ITarget
{
    public const int DefaultNodes = 3;

    /// <summary>Enough for any loopback run; the ports of node k are shifted by k (see the class remarks).</summary>
    public const int MaxNodes = 32;

    /// <summary>One Redis, given to the nodes as <c>Herald:Cluster:Redis</c>.</summary>
    public const int DefaultShards = 1;

    /// <summary>Enough to show how the cost splits; each shard is one more redis-server on the machine.</summary>
    public const int MaxShards = 16;

    private readonly TargetOptions _options;
    private readonly BrokerChild[] _shards;
    private readonly HeraldNode[] _nodes;

    private ClusterTarget(TargetOptions options, BrokerChild[] shards, IPEndPoint[] shardEndPoints, string redisVersion, HeraldNode[] nodes)
    {
        _options = options;
        _shards = shards;
        ShardEndPoints = shardEndPoints;
        _nodes = nodes;
        string redis = shards.Length == 1
            ? $"redis-server {redisVersion} (pid {shards[0].Id})"
            : $"{shards.Length} x redis-server {redisVersion} (pids {string.Join(", ", shards.Select(s => s.Id))})";
        ServerDescription = string.Create(CultureInfo.InvariantCulture,
            $"{nodes.Length} x {nodes[0].Description} over {redis}; client i on node i % {nodes.Length}; server CPU and RSS: the sum over the {nodes.Length} nodes, redis-server not included");
    }

    public string Name => "cluster";

    public string Transport => _options.Transport;

    public string ServerDescription { get; }

    public string? ServerCommandLine =>
        string.Join(" ; ", [
            .. _nodes.Select((node, k) => $"node {k.ToString(CultureInfo.InvariantCulture)}: {node.Child?.CommandLine}"),
            .. _shards.Select((shard, i) => $"{(_shards.Length == 1 ? "redis" : $"redis shard {i.ToString(CultureInfo.InvariantCulture)}")}: {shard.CommandLine}")]);

    public Process? ServerProcess => _nodes[0].Child?.Process;

    public IReadOnlyList<Process> ServerProcesses => [.. _nodes.Select(node => node.Child?.Process).OfType<Process>()];

    public int MaxPayload => HeraldNode.MaxPayload;

    /// <summary>The nodes, node k serving clients k, k + N, k + 2N, ...</summary>
    public IReadOnlyList<HeraldNode> Nodes => _nodes;

    /// <summary>The redis-servers between the nodes, shard i at index i.</summary>
    public IReadOnlyList<Process> RedisProcesses => [.. _shards.Select(shard => shard.Process)];

    /// <summary>Where each shard's redis-server listens (ports the system picked), shard i at index i.</summary>
    public IReadOnlyList<IPEndPoint> ShardEndPoints { get; }

    /// <summary>Shard 0's redis-server: the one Redis of a cluster of one shard (the attacks run on one).</summary>
    public IPEndPoint RedisEndPoint => ShardEndPoints[0];

    /// <summary>
    /// How a node names its Redis: one shard as <c>Herald:Cluster:Redis</c> (the form a cluster had before shards),
    /// several as the list <c>Herald:Cluster:Shards:i:Redis</c>, in the same order on every node (cluster.md §13).
    /// </summary>
    public static string[] ShardArguments(IReadOnlyList<IPEndPoint> shards) =>
        shards.Count == 1
            ? [$"--Herald:Cluster:Redis={shards[0]}"]
            : [.. shards.Select((shard, i) => $"--Herald:Cluster:Shards:{i.ToString(CultureInfo.InvariantCulture)}:Redis={shard}")];

    /// <summary>Node <paramref name="node"/>'s options: its ports, the shards it joins through, then the scenario's own broker arguments.</summary>
    public static TargetOptions NodeOptions(TargetOptions options, int node, IReadOnlyList<IPEndPoint> shards)
    {
        int span = options.LastPort - options.FirstPort + 1;
        return options with
        {
            Port = null,
            FirstPort = options.FirstPort + (node * span),
            LastPort = options.LastPort + (node * span),
            HttpPort = (options.HttpPort ?? HeraldNode.DefaultHttpPort) + node,
            MonitoringPort = (options.MonitoringPort ?? HeraldNode.DefaultMonitoringPort) + node,
            ServerArguments = [.. ShardArguments(shards), .. options.ServerArguments ?? []],
        };
    }

    /// <exception cref="TargetUnavailableException">redis-server missing, no broker build, a port taken, or a node did not answer.</exception>
    public static async Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        options = HeraldNode.WithPortAlone(options);
        int count = options.Nodes ?? DefaultNodes;
        BrokerEndpoints address = await BrokerEndpoints.ResolveAsync(options.Host, options.FirstPort, options.LastPort, cancellationToken);
        var shards = new List<BrokerChild>(options.Shards);
        var nodes = new List<HeraldNode>(count);
        var endPoints = new IPEndPoint[options.Shards];
        string redisVersion = "";
        try
        {
            for (int i = 0; i < endPoints.Length; i++)
            {
                endPoints[i] = new IPEndPoint(address.Address, FreePort(address.Address));
                (BrokerChild shard, redisVersion) = await RedisTarget.StartServerAsync(options, endPoints[i], cancellationToken);
                shards.Add(shard);
            }

            for (int k = 0; k < count; k++)
            {
                nodes.Add(await HeraldNode.StartAsync(NodeOptions(options, k, endPoints), cancellationToken));
            }
        }
        catch
        {
            foreach (HeraldNode node in nodes)
            {
                await node.DisposeAsync();
            }

            foreach (BrokerChild shard in shards)
            {
                await shard.DisposeAsync();
            }

            throw;
        }

        return new ClusterTarget(options, [.. shards], endPoints, redisVersion, [.. nodes]);
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

        foreach (BrokerChild shard in _shards)
        {
            await shard.DisposeAsync();
        }
    }

    /// <summary>A TCP port nobody listens on now on <paramref name="address"/>, picked by the system (for redis-server, which cannot pick its own).</summary>
    public static int FreePort(IPAddress address)
    {
        using var probe = new Socket(address.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        probe.Bind(new IPEndPoint(address, 0));
        return ((IPEndPoint)probe.LocalEndPoint!).Port;
    }
}
