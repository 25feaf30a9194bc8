using System.Diagnostics;
using StackExchange.Redis;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>
/// A real Redis Cluster on loopback: three <c>redis-server --cluster-enabled yes</c> masters (no replicas),
/// joined by <c>redis-cli --cluster create</c>, each with its nodes file in a temporary directory that goes
/// with it. <see cref="Configuration"/> names all three, as a StackExchange.Redis configuration string.
/// </summary>
public sealed class RedisClusterServers : IAsyncDisposable
{
    private readonly string _directory;

    private RedisClusterServers(string directory, RedisServer[] masters)
    {
        _directory = directory;
        Masters = masters;
    }

    public RedisServer[] Masters { get; }

    public string Configuration => string.Join(',', Masters.Select(m => m.Configuration));

    public static async Task<RedisClusterServers> StartAsync(int masters = 3)
    {
        string directory = Directory.CreateTempSubdirectory("herald-redis-cluster-").FullName;
        var started = new List<RedisServer>();
        try
        {
            for (int i = 0; i < masters; i++)
            {
                string own = Directory.CreateDirectory(Path.Combine(directory, i.ToString(System.Globalization.CultureInfo.InvariantCulture))).FullName;
                started.Add(await RedisServer.StartAsync(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"], own));
            }

            var cluster = new RedisClusterServers(directory, [.. started]);
            await cluster.CreateAsync();
            return cluster;
        }
        catch
        {
            foreach (RedisServer server in started)
            {
                await server.DisposeAsync();
            }

            Directory.Delete(directory, recursive: true);
            throw;
        }
    }

    /// <summary><c>redis-cli --cluster create</c>, then waits until every master says <c>cluster_state:ok</c>.</summary>
    private async Task CreateAsync()
    {
        var start = new ProcessStartInfo("redis-cli") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        start.ArgumentList.Add("--cluster");
        start.ArgumentList.Add("create");
        foreach (RedisServer master in Masters)
        {
            start.ArgumentList.Add(master.Configuration);
        }

        start.ArgumentList.Add("--cluster-replicas");
        start.ArgumentList.Add("0");
        start.ArgumentList.Add("--cluster-yes");
        using Process create = Process.Start(start) ?? throw new InvalidOperationException("redis-cli did not start.");
        Task<string> output = create.StandardOutput.ReadToEndAsync();
        Task<string> errors = create.StandardError.ReadToEndAsync();
        await create.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(60));
        Assert.True(create.ExitCode == 0, $"redis-cli --cluster create failed ({create.ExitCode}):\n{await output}\n{await errors}");

        await Until.True(
            async () =>
            {
                bool ok = true;
                foreach (RedisServer master in Masters)
                {
                    await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync($"{master.Configuration},allowAdmin=true");
                    string info = (string?)await redis.GetDatabase().ExecuteAsync("CLUSTER", "INFO") ?? "";
                    ok &= info.Contains("cluster_state:ok", StringComparison.Ordinal);
                }

                return ok;
            },
            "every master of the Redis Cluster reports cluster_state:ok",
            TimeSpan.FromSeconds(60));
    }

    public async ValueTask DisposeAsync()
    {
        foreach (RedisServer master in Masters)
        {
            await master.DisposeAsync();
        }

        Directory.Delete(_directory, recursive: true);
    }
}
