using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Text.RegularExpressions;
using StackExchange.Redis;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// What the attacks and <c>shards</c> read from a redis-server the tool started: its counters (<see cref="RedisInfo"/>)
/// and what it holds, through one StackExchange.Redis connection with admin commands on; and Redis's PUBLISH rate from
/// <c>redis-benchmark</c>.
/// </summary>
internal sealed partial class RedisProbe : IAsyncDisposable
{
    private readonly ConnectionMultiplexer _redis;
    private readonly IServer _server;

    private RedisProbe(ConnectionMultiplexer redis, IPEndPoint endPoint)
    {
        _redis = redis;
        _server = redis.GetServer(endPoint);
        EndPoint = endPoint;
    }

    public IPEndPoint EndPoint { get; }

    public IDatabase Db => _redis.GetDatabase();

    public ISubscriber Subscriber => _redis.GetSubscriber();

    public static async Task<RedisProbe> ConnectAsync(IPEndPoint endPoint) =>
        new(await ConnectionMultiplexer.ConnectAsync($"{endPoint},allowAdmin=true,syncTimeout=60000,asyncTimeout=60000"), endPoint);

    /// <summary><c>INFO stats</c> total_net_output_bytes: every byte Redis sent to its clients so far.</summary>
    public async Task<long> OutputBytesAsync() => long.Parse(RedisInfo.Field(await InfoAsync("stats"), "total_net_output_bytes"), CultureInfo.InvariantCulture);

    /// <summary>How many times Redis ran <paramref name="command"/> (<c>INFO commandstats</c>), 0 when never.</summary>
    public async Task<long> CallsAsync(string command) => RedisInfo.Calls(await InfoAsync("commandstats"), command);

    /// <summary>The CPU seconds redis-server has used so far (<c>INFO cpu</c>, <see cref="RedisInfo.CpuSeconds"/>).</summary>
    public async Task<double> CpuSecondsAsync() => RedisInfo.CpuSeconds(await InfoAsync("cpu"));

    public async Task<long> PatternsAsync() => await _server.SubscriptionPatternCountAsync();

    /// <summary><c>MEMORY USAGE key SAMPLES 0</c> (every element counted), 0 when there is no such key.</summary>
    public async Task<long> MemoryUsageAsync(RedisKey key) => (long?)await Db.ExecuteAsync("MEMORY", "USAGE", key, "SAMPLES", "0") ?? 0;

    /// <summary>The keys matching <paramref name="pattern"/> (SCAN) and the <c>MEMORY USAGE</c> of them all.</summary>
    public async Task<(int Keys, long Bytes)> KeysAsync(string pattern)
    {
        int keys = 0;
        long bytes = 0;
        await foreach (RedisKey key in _server.KeysAsync(pattern: pattern, pageSize: 1000))
        {
            keys++;
            bytes += await MemoryUsageAsync(key);
        }

        return (keys, bytes);
    }

    /// <summary>
    /// Redis's PUBLISH rate now: <c>redis-benchmark -n <paramref name="requests"/> -c 50 PUBLISH {herald}:orders.1 x</c>,
    /// in requests per second (what every node's publications wait behind).
    /// </summary>
    public async Task<double> PublishRateAsync(int requests, CancellationToken cancellationToken)
    {
        var start = new ProcessStartInfo("redis-benchmark") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (string argument in (string[])["-h", EndPoint.Address.ToString(), "-p", EndPoint.Port.ToString(CultureInfo.InvariantCulture), "-n", requests.ToString(CultureInfo.InvariantCulture), "-c", "50", "-q", "PUBLISH", "{herald}:orders.1", "x"])
        {
            start.ArgumentList.Add(argument);
        }

        using Process benchmark = Process.Start(start) ?? throw new InvalidOperationException("redis-benchmark did not start (apt-get install -y redis-tools)");
        Task<string> output = benchmark.StandardOutput.ReadToEndAsync(cancellationToken);
        _ = benchmark.StandardError.ReadToEndAsync(cancellationToken);
        await benchmark.WaitForExitAsync(cancellationToken);
        string text = await output;
        Match rate = RatePattern().Match(text);
        return rate.Success ? double.Parse(rate.Groups[1].Value, CultureInfo.InvariantCulture) : throw new InvalidOperationException($"redis-benchmark said: {text.Trim()}");
    }

    public async ValueTask DisposeAsync() => await _redis.DisposeAsync();

    /// <summary>Redis's <c>INFO</c> text of <paramref name="section"/> (<see cref="RedisInfo"/> reads its fields).</summary>
    public async Task<string> InfoAsync(string section) => (string)(await Db.ExecuteAsync("INFO", section))!;

    [GeneratedRegex(@"([\d.]+) requests per second")]
    private static partial Regex RatePattern();
}

/// <summary>Fields of Redis's <c>INFO</c> text (<c>name:value</c> lines under <c># Section</c> headings), read without a connection.</summary>
internal static partial class RedisInfo
{
    /// <summary>The value of field <paramref name="name"/>, empty when INFO has no such field.</summary>
    public static string Field(string info, string name) =>
        info.Split('\n').Select(line => line.Trim()).FirstOrDefault(line => line.StartsWith(name + ":", StringComparison.Ordinal))?[(name.Length + 1)..] ?? "";

    /// <summary>
    /// <c>INFO cpu</c>: the CPU seconds the server process has used, its system and user time together
    /// (<c>used_cpu_sys</c> + <c>used_cpu_user</c>; its children, a fork for a save, are not counted).
    /// </summary>
    /// <exception cref="FormatException">INFO has neither field.</exception>
    public static double CpuSeconds(string info) => Seconds(info, "used_cpu_sys") + Seconds(info, "used_cpu_user");

    /// <summary><c>INFO commandstats</c>: how many times the server ran <paramref name="command"/> (lower case), 0 when never.</summary>
    public static long Calls(string info, string command)
    {
        Match calls = CallsPattern().Match(Field(info, "cmdstat_" + command));
        return calls.Success ? long.Parse(calls.Groups[1].Value, CultureInfo.InvariantCulture) : 0;
    }

    private static double Seconds(string info, string name) =>
        double.TryParse(Field(info, name), NumberStyles.Float, CultureInfo.InvariantCulture, out double seconds)
            ? seconds
            : throw new FormatException($"INFO has no {name}");

    [GeneratedRegex(@"calls=(\d+)")]
    private static partial Regex CallsPattern();
}
