using Herald.Broker.Cluster;
using Herald.Broker.Hosting;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>A real Redis and N real Herald nodes on loopback, each its own broker with its own ports, all on that Redis.</summary>
public sealed class TestCluster : IAsyncDisposable
{
    private TestCluster(RedisServer redis, TestBroker[] nodes)
    {
        Redis = redis;
        Nodes = nodes;
    }

    public RedisServer Redis { get; }

    public TestBroker[] Nodes { get; }

    public TestBroker this[int node] => Nodes[node];

    public static async Task<TestCluster> StartAsync(int nodes = 3, Action<HeraldOptions>? configure = null)
    {
        RedisServer redis = await RedisServer.StartAsync();
        var started = new List<TestBroker>();
        try
        {
            for (int i = 0; i < nodes; i++)
            {
                started.Add(await TestBroker.StartAsync(o =>
                {
                    o.Cluster.Redis = redis.Configuration;
                    configure?.Invoke(o);
                }));
            }
        }
        catch
        {
            foreach (TestBroker node in started)
            {
                await node.DisposeAsync();
            }

            await redis.DisposeAsync();
            throw;
        }

        return new TestCluster(redis, [.. started]);
    }

    public async ValueTask DisposeAsync()
    {
        foreach (TestBroker node in Nodes)
        {
            await node.DisposeAsync();
        }

        await Redis.DisposeAsync();
    }
}

public static class ClusterNodeExtensions
{
    /// <summary>A node's cluster engine (the test's own node: its counters are this node's only).</summary>
    internal static ClusterEngine Engine(this TestBroker node) => node.Services.GetRequiredService<ClusterSlot>().Engine!;
}
