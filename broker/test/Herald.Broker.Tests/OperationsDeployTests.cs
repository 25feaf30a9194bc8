using System.Buffers;
using System.Net;
using System.Net.Http.Json;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;
using System.Text.RegularExpressions;
using Herald.Broker.Delivery;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// The files in <c>deploy/</c> against the real broker: every metric the Grafana dashboard and the alert
/// rules query must be in a real <c>/metrics</c> scrape after real traffic, so a renamed instrument breaks
/// this test, not a production dashboard. The broker is a cluster node on a real <c>redis-server</c> (the
/// cluster's series exist on cluster nodes only). Isolated, as <see cref="OperationsMetricsTests"/>.
/// The manifests themselves are checked by <see cref="OperationsDeployManifestTests"/>.
/// </summary>
[Collection(nameof(Isolated))]
public sealed partial class OperationsDeployTests
{
    /// <summary>Series Prometheus makes itself for every target; never in a scrape.</summary>
    private static readonly HashSet<string> PrometheusSeries = ["up", "scrape_duration_seconds", "scrape_samples_scraped"];

    private static readonly HashSet<string> PromQlWords =
        ["and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "atan2"];

    [Fact]
    public void The_deploy_files_query_the_metrics_expected()
    {
        // A guard for the extraction itself: it finds names in both files, and only names.
        Dictionary<string, string> queried = QueriedMetrics();
        Assert.Contains("herald_fanout_duration_seconds_bucket", queried.Keys);
        Assert.Contains("herald_slow_consumers_total", queried.Keys);
        Assert.Contains("herald_compression_output_bytes_total", queried.Keys);
        Assert.Contains("herald_cluster_redis_connected", queried.Keys);
        Assert.Contains("herald_cluster_forward_dropped_total", queried.Keys);
        Assert.Contains("up", queried.Keys);
        Assert.DoesNotContain("instance", queried.Keys);
        Assert.DoesNotContain("le", queried.Keys);
        Assert.DoesNotContain("rate", queried.Keys);
        Assert.Empty(MetricNames("sum by (herald_transport) (rate(x_total{a=\"b c\", d=~\"$instance\"}[$__rate_interval])) > bool 1.5e9").Except(["x_total"]));
    }

    [Fact]
    public async Task Every_metric_the_dashboard_and_alert_rules_query_is_in_a_real_scrape()
    {
        await using RedisServer redis = await RedisServer.StartAsync();
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Cluster.Redis = redis.Configuration;
            o.Limits.MaxPendingMessages = 1; // a burst read in one batch overflows at once: no stalled socket needed
            o.Limits.SlowConsumerPolicy = SlowConsumerPolicy.DropOldest;
            o.LongPoll.MaxPendingMessagesPerSession = 2;
            o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(100);
        });
        await DriveEveryKindOfTrafficAsync(broker);
        await LoseRedisAndReconnectAsync(broker, redis);
        GC.Collect(); // the runtime's GC metrics appear after a collection
        PrometheusScrape scrape = await PrometheusScrape.GetAsync(broker.Monitoring);

        Dictionary<string, string> queried = QueriedMetrics();
        var missing = queried.Keys
            .Where(name => !scrape.Has(name) && !PrometheusSeries.Contains(name))
            .Select(name => $"{name} (in {queried[name]})")
            .ToList();
        Assert.True(missing.Count == 0, "Queried by deploy/ but not in a real scrape:\n  " + string.Join("\n  ", missing));
    }

    /// <summary>Exercises every path a deploy/ query reads: TCP and long-poll pub/sub, drops, slow consumers, errors, policy, compression.</summary>
    private static async Task DriveEveryKindOfTrafficAsync(TestBroker broker)
    {
        // TCP pub/sub.
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, "sub");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "pub");
        await subscriber.SubscribeAsync(1, "deploy.>");
        await subscriber.PingPongAsync();
        await publisher.PublishAsync("deploy.tcp", "hello");
        await subscriber.ReadMessageAsync();

        // Long-poll: messages, a re-delivery of a lost response, an empty poll after the poll timeout.
        LongPollClient poller = await LongPollClient.CreateAsync(broker.Http);
        await poller.SubscribeAsync(1, "deploy.>");
        using (await LongPollClient.PublishOneShotAsync(broker.Http, "deploy.http", "hello"))
        {
        }

        Assert.Equal(1, (await poller.PollAsync(0)).Count);
        Assert.Equal(1, (await poller.PollAsync(0)).Count); // same ack: the response was "lost"
        Assert.Equal(0, (await poller.PollAsync(1)).Count);

        // A long-poll slow consumer (more than 2 unacknowledged).
        LongPollClient laggard = await LongPollClient.CreateAsync(broker.Http);
        await laggard.SubscribeAsync(1, "lag");
        for (int i = 0; i < 3; i++)
        {
            using HttpResponseMessage r = await LongPollClient.PublishOneShotAsync(broker.Http, "lag", "x");
        }

        // A burst past a subscriber's queue limit (one message, here) under DropOldest: the oldest are dropped and counted.
        await using (var flooded = await ProtocolClient.OpenAsync(broker.Port, "flooded"))
        {
            await flooded.SubscribeAsync(1, "flood");
            await flooded.PingPongAsync();
            await publisher.SendAsync(w =>
            {
                for (int i = 0; i < 200; i++)
                {
                    FrameWriter.WritePublish(w, "flood"u8, default, PayloadFlags.None, "burst"u8);
                }
            });
            await publisher.PingPongAsync();
            bool droppedNotice = false;
            await flooded.SendAsync(FrameWriter.WritePing);
            while (await flooded.ReadAsync() is { Type: not FrameType.Pong } frame)
            {
                droppedNotice |= frame.Error?.Code == ErrorCode.MessagesDropped;
            }

            Assert.True(droppedNotice, "the flooded subscriber should have lost messages");
        }

        // A protocol error, and a socket-policy request.
        using (var offender = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp))
        {
            await offender.ConnectAsync(new IPEndPoint(IPAddress.Loopback, broker.Port));
            var subscribe = new ArrayBufferWriter<byte>();
            FrameWriter.WriteSubscribe(subscribe, 1, "too.early"u8);
            await offender.SendAsync(subscribe.WrittenMemory); // before HELLO
            while (await offender.ReceiveAsync(new byte[1024]) > 0)
            {
            }
        }

        using (var policy = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp))
        {
            await policy.ConnectAsync(new IPEndPoint(IPAddress.Loopback, broker.PolicyPort));
            await policy.SendAsync(Encoding.ASCII.GetBytes("<policy-file-request/>"));
            while (await policy.ReceiveAsync(new byte[4096]) > 0)
            {
            }
        }

        // Compression: a Zstd-capable long-poll session and a compressible payload above the size floor.
        using (HttpResponseMessage created = await broker.Http.PostAsJsonAsync("/poll/sessions", new { zstd = true }))
        {
            Assert.Equal(HttpStatusCode.Created, created.StatusCode);
            string session = (await created.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("session").GetString()!;
            using (HttpResponseMessage subscribed = await broker.Http.PostAsJsonAsync($"/poll/sessions/{session}/subscriptions", new { sid = 1, pattern = "zip" }))
            {
                Assert.Equal(HttpStatusCode.NoContent, subscribed.StatusCode);
            }

            string compressible = string.Concat(Enumerable.Repeat("price=101.25 currency=EUR venue=XPAR; ", 400));
            for (int i = 0; i < 3; i++)
            {
                await publisher.PublishAsync("zip", compressible);
            }

            await publisher.PingPongAsync();
        }
    }

    /// <summary>
    /// The cluster's failure path: Redis killed (a publication meanwhile stays local and is counted as not
    /// forwarded), started again, and the node's reconnect counted.
    /// </summary>
    private static async Task LoseRedisAndReconnectAsync(TestBroker broker, RedisServer redis)
    {
        Assert.True(broker.Engine().IsConnected, "the node should be on Redis before it is killed");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "cluster-pub");
        await publisher.PublishAsync("deploy.cluster", "before");
        await publisher.PingPongAsync();

        redis.Kill();
        await Until.True(() => !broker.Engine().IsConnected, "the node sees Redis gone");
        await publisher.PublishAsync("deploy.cluster", "during");
        await publisher.PingPongAsync();
        await Until.True(() => broker.Engine().Metrics!.Dropped > 0, "the publication it could not forward is counted");

        await redis.RestartAsync();
        await Until.True(() => broker.Engine().IsConnected, "the node is back on Redis");
        await Until.True(
            async () => (await PrometheusScrape.GetAsync(broker.Monitoring)).Has("herald_cluster_reconnects_total"),
            "the reconnect is counted");
    }

    /// <summary>Every metric name queried by the Grafana dashboards and the alert rules, with the file that queries it.</summary>
    private static Dictionary<string, string> QueriedMetrics()
    {
        string deploy = Path.Combine(RepositoryRoot(), "deploy");
        var names = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (string file in Directory.GetFiles(Path.Combine(deploy, "grafana", "dashboards"), "*.json"))
        {
            using JsonDocument dashboard = JsonDocument.Parse(File.ReadAllText(file));
            foreach (string expression in Expressions(dashboard.RootElement))
            {
                Add(expression, file);
            }
        }

        string rules = Path.Combine(deploy, "prometheus", "alerts.yml");
        int expressions = 0;
        foreach (string line in File.ReadAllLines(rules))
        {
            Match expr = ExprLine().Match(line);
            if (expr.Success)
            {
                Assert.False(expr.Groups[1].Value is "|" or ">" or "|-" or ">-", $"{rules}: keep each expr on one line, this test reads them so");
                Add(expr.Groups[1].Value, rules);
                expressions++;
            }
        }

        Assert.True(expressions > 0, $"no expr in {rules}");
        return names;

        void Add(string expression, string file)
        {
            foreach (string name in MetricNames(expression))
            {
                names.TryAdd(name, Path.GetRelativePath(deploy, file));
            }
        }
    }

    /// <summary>Every <c>expr</c> of a dashboard's panels, and the metric of a <c>label_values()</c> variable query.</summary>
    private static IEnumerable<string> Expressions(JsonElement element)
    {
        if (element.ValueKind == JsonValueKind.Object)
        {
            foreach (JsonProperty property in element.EnumerateObject())
            {
                if (property.Name is "expr" or "query" or "definition" && property.Value.ValueKind == JsonValueKind.String
                    && (property.Name == "expr" || property.Value.GetString()!.Contains("label_values(", StringComparison.Ordinal)))
                {
                    yield return property.Value.GetString()!;
                }
                else
                {
                    foreach (string nested in Expressions(property.Value))
                    {
                        yield return nested;
                    }
                }
            }
        }
        else if (element.ValueKind == JsonValueKind.Array)
        {
            foreach (JsonElement item in element.EnumerateArray())
            {
                foreach (string nested in Expressions(item))
                {
                    yield return nested;
                }
            }
        }
    }

    /// <summary>The metric names of a PromQL expression: identifiers left once strings, label matchers, ranges, grouping clauses and function calls are set aside.</summary>
    private static IEnumerable<string> MetricNames(string expression)
    {
        string e = QuotedString().Replace(expression, "\"\"");
        e = LabelValues().Replace(e, " $1 ");
        e = Braces().Replace(e, " ");
        e = Brackets().Replace(e, " ");
        e = Grouping().Replace(e, " ");
        foreach (Match m in Identifier().Matches(e))
        {
            if (!PromQlWords.Contains(m.Value))
            {
                yield return m.Value;
            }
        }
    }

    internal static string RepositoryRoot()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            if (File.Exists(Path.Combine(dir.FullName, "broker.sln")))
            {
                return dir.FullName;
            }
        }

        throw new InvalidOperationException("broker.sln not found above " + AppContext.BaseDirectory);
    }

    [GeneratedRegex(@"^\s*(?:-\s+)?expr:\s*(.+?)\s*$")]
    private static partial Regex ExprLine();

    [GeneratedRegex("\"(?:[^\"\\\\]|\\\\.)*\"")]
    private static partial Regex QuotedString();

    [GeneratedRegex(@"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,[^)]*\)")]
    private static partial Regex LabelValues();

    [GeneratedRegex(@"\{[^}]*\}")]
    private static partial Regex Braces();

    [GeneratedRegex(@"\[[^\]]*\]")]
    private static partial Regex Brackets();

    [GeneratedRegex(@"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")]
    private static partial Regex Grouping();

    [GeneratedRegex(@"(?<![\w.$:])[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*\()")]
    private static partial Regex Identifier();
}
