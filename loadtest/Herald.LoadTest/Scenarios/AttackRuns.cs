using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Text;
using System.Text.Json;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using Herald.Protocol;
using StackExchange.Redis;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// The attacks <see cref="AttacksCommand"/> runs, one method each, at the sizes loadtest/docs/attacks.md gives
/// (times <c>--scale</c>). Each starts what it attacks (<see cref="ClusterTarget"/> over a redis-server on a free
/// port, or one <see cref="HeraldTarget"/>), prints one line of figures, and stops it. Every wait is bounded.
/// </summary>
internal sealed class AttackRuns(TargetOptions target, double scale)
{
    public static readonly string[] Names = ["1", "2", "3", "4", "5", "6", "7", "rate"];

    private const int Megabyte = 1_000_000;
    private static readonly CultureInfo C = CultureInfo.InvariantCulture;

    public Task RunAsync(string attack, CancellationToken cancellationToken) => attack switch
    {
        "1" => InboxGlobsAsync(cancellationToken),
        "2" => FailFastRequestsAsync(cancellationToken),
        "3" => SharedSessionBacklogAsync(cancellationToken),
        "4" => HistoryResumeAsync(cancellationToken),
        "5" => RefusedHistoriesAsync(cancellationToken),
        "6" => ClosedWebSocketsAsync(cancellationToken),
        "7" => GroupTogglesAsync(cancellationToken),
        _ => PublishRateAsync(cancellationToken),
    };

    private int Count(int size) => Math.Max(1, (int)Math.Round(size * scale));

    /// <summary>1. mallory subscribes 5,000 globs under her own inbox on one node: what Redis holds and its PUBLISH rate.</summary>
    private async Task InboxGlobsAsync(CancellationToken cancellationToken)
    {
        int globs = Count(5000);
        await using ClusterTarget cluster = await ClusterAsync(1, [], cancellationToken);
        HeraldNode node = cluster.Nodes[0];
        await using RedisProbe redis = await RedisProbe.ConnectAsync(cluster.RedisEndPoint);
        await using HeraldConnection mallory = await ConnectAsync(node, "mallory", AttacksCommand.MalloryToken, cancellationToken);
        string inbox = mallory.Welcome.InboxPrefix!;
        (string rss, long output, long patterns) = (BrokerRss.Mb(node), await redis.OutputBytesAsync(), await redis.PatternsAsync());
        double rateBefore = await redis.PublishRateAsync(20_000, cancellationToken);

        int refused = await PipelinedAsync(mallory, globs, (frames, i) => FrameWriter.WriteSubscribe(frames, (uint)(i + 1), Topic.EncodePattern($"{inbox}.p{i}.*")), cancellationToken);
        long held = await SettledAsync(redis.PatternsAsync, cancellationToken);
        double rateAfter = await redis.PublishRateAsync(held > 1000 ? 5_000 : 20_000, cancellationToken);
        Console.WriteLine(Line(1, $"{globs} globs '{inbox}.pN.*' from mallory ({refused} refused): PUBSUB NUMPAT {patterns} -> {held}; Redis sent {await redis.OutputBytesAsync() - output:N0} B; broker RSS {rss} -> {BrokerRss.Mb(node)} MB; Redis PUBLISH rate {rateBefore:N0} -> {rateAfter:N0} /s (redis-benchmark -c 50 PUBLISH)"));
    }

    /// <summary>1, the rate alone: one redis-server holding 5,000 inbox globs, then 16, alternated three times.</summary>
    private async Task PublishRateAsync(CancellationToken cancellationToken)
    {
        IPAddress address = (await BrokerEndpoints.ResolveAsync(target.Host, target.FirstPort, target.FirstPort, cancellationToken)).Address;
        var endPoint = new IPEndPoint(address, ClusterTarget.FreePort(address));
        (BrokerChild server, _) = await RedisTarget.StartServerAsync(target, endPoint, cancellationToken);
        await using (server)
        {
            await using RedisProbe redis = await RedisProbe.ConnectAsync(endPoint);
            string inbox = ProtocolConstants.InboxPrefix + new string('a', 24);
            RedisChannel[] globs = [.. Enumerable.Range(0, 5000).Select(i => RedisChannel.Pattern($"{{herald}}:{inbox}.p{i}.*"))];
            var rates = new List<(long Patterns, double Rate)>();
            for (int pair = 0; pair < 3; pair++)
            {
                await Task.WhenAll(globs.Skip(16).Select(g => redis.Subscriber.SubscribeAsync(g, (_, _) => { })));
                if (pair == 0)
                {
                    await Task.WhenAll(globs.Take(16).Select(g => redis.Subscriber.SubscribeAsync(g, (_, _) => { })));
                }

                rates.Add((await redis.PatternsAsync(), await redis.PublishRateAsync(5_000, cancellationToken)));
                await Task.WhenAll(globs.Skip(16).Select(g => redis.Subscriber.UnsubscribeAsync(g)));
                rates.Add((await redis.PatternsAsync(), await redis.PublishRateAsync(50_000, cancellationToken)));
            }

            double many = rates.Where(r => r.Patterns > 16).Average(r => r.Rate), few = rates.Where(r => r.Patterns <= 16).Average(r => r.Rate);
            Console.WriteLine(Line(1, $"Redis PUBLISH rate, alternated: {string.Join("; ", rates.Select(r => $"{r.Patterns} globs {r.Rate:N0}/s"))}; mean {many:N0}/s with 5,000 against {few:N0}/s with 16: {few / many:F1}x; load average {AttacksCommand.LoadAverage()}"));
        }
    }

    /// <summary>2. alice's 1,200 long topics on node 1 make the covers large; mallory's requests to nobody on node 0.</summary>
    private async Task FailFastRequestsAsync(CancellationToken cancellationToken)
    {
        int requests = Count(300);
        await using ClusterTarget cluster = await ClusterAsync(2, [], cancellationToken);
        await using RedisProbe redis = await RedisProbe.ConnectAsync(cluster.RedisEndPoint);
        await using HeraldConnection alice = await ConnectAsync(cluster.Nodes[1], "alice", AttacksCommand.AliceToken, cancellationToken);
        string padding = new('x', 150);
        await PipelinedAsync(alice, 1200, (frames, i) => FrameWriter.WriteSubscribe(frames, (uint)(i + 1), Topic.EncodePattern($"orders.{padding}.{i}")), cancellationToken);
        long covers = await SettledAsync(() => redis.MemoryUsageAsync("{herald}:covers"), cancellationToken);

        await using HeraldConnection mallory = await ConnectAsync(cluster.Nodes[0], "mallory", AttacksCommand.MalloryToken, cancellationToken, Capabilities.Headers | Capabilities.NoResponders);
        string inbox = mallory.Welcome.InboxPrefix!;
        await mallory.SubscribeAsync(1, inbox + ".r.>", cancellationToken);
        (string rss, long output) = (BrokerRss.Mb(cluster.Nodes[0]), await redis.OutputBytesAsync());
        int answered = 0;
        await PipelinedAsync(mallory, requests, (frames, i) => FrameWriter.WritePublish(frames, Topic.EncodeName($"{inbox}.nobody"), Topic.EncodeName($"{inbox}.r.{i}"), PayloadFlags.None, "x"u8), cancellationToken, type => answered += type == FrameType.Message ? 1 : 0);
        for (int wait = 0; answered < requests && wait < 600; wait++)
        {
            await mallory.UntilPongAsync(default, cancellationToken, "waiting for the no-responders answers", type => answered += type == FrameType.Message ? 1 : 0);
            await Task.Delay(100, cancellationToken);
        }

        long sent = await redis.OutputBytesAsync() - output;
        Console.WriteLine(Line(2, $"{requests} one-byte requests to nobody from mallory ({answered} answered 503), covers hash {covers:N0} B: Redis sent {sent:N0} B ({sent / requests:N0} B a request); node 0 RSS {rss} -> {BrokerRss.Mb(cluster.Nodes[0])} MB"));
    }

    /// <summary>3. 1 MB publications to mallory's shared long-poll session (owned by node 0, driven through node 1), then three polls that acknowledge nothing.</summary>
    private async Task SharedSessionBacklogAsync(CancellationToken cancellationToken)
    {
        int publications = Count(100);
        await using ClusterTarget cluster = await ClusterAsync(2, [], cancellationToken);
        await using RedisProbe redis = await RedisProbe.ConnectAsync(cluster.RedisEndPoint);
        using LongPollClient owner = LongPoll(cluster.Nodes[0]), other = LongPoll(cluster.Nodes[1]);
        LongPollSessionInfo session = await owner.CreateSessionAsync(cancellationToken);
        await using HeraldConnection publisher = await ConnectAsync(cluster.Nodes[1], "mallory-publisher", AttacksCommand.MalloryToken, cancellationToken);
        string topic = publisher.Welcome.InboxPrefix! + ".lp";
        await other.SubscribeAsync(session.Token, 1, topic, cancellationToken);
        RedisKey stream = "{herald}:lq:" + session.Token;
        string[] rss = [BrokerRss.Mb(cluster.Nodes[0]), BrokerRss.Mb(cluster.Nodes[1])];
        byte[] payload = new byte[Megabyte];
        int published = 0;
        for (; published < publications && !await redis.Db.HashExistsAsync("{herald}:lp:" + session.Token, "ended"); published++)
        {
            // One at a time, each waited for in the stream (or the session's end): the owner's own backlog then never
            // holds more than one, so only what bounds the stream in Redis can stop the flood.
            var frames = new ArrayBufferWriter<byte>(Megabyte + 256);
            FrameWriter.WritePublish(frames, Topic.EncodeName(topic), default, PayloadFlags.None, payload);
            await publisher.UntilPongAsync(frames.WrittenMemory, cancellationToken, "publishing");
            for (int wait = 0; wait < 300 && await redis.Db.StreamLengthAsync(stream) <= published && !await redis.Db.HashExistsAsync("{herald}:lp:" + session.Token, "ended"); wait++)
            {
                await Task.Delay(100, cancellationToken);
            }
        }

        long length = await SettledAsync(() => redis.Db.StreamLengthAsync(stream), cancellationToken);
        long memory = await redis.MemoryUsageAsync(stream);
        var polls = new List<string>();
        for (int p = 0; p < 3; p++)
        {
            long output = await redis.OutputBytesAsync();
            using var bounded = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            bounded.CancelAfter(TimeSpan.FromMinutes(2));
            PollResult poll = await other.PollAsync(session.Token, 0, bounded.Token);
            poll.Release();
            polls.Add($"poll {p + 1}: {poll.Status} {(poll.Status == 200 ? $"{poll.Count} messages, {poll.Length:N0} B" : poll.Problem?.Split('\n')[0])}, Redis sent {await redis.OutputBytesAsync() - output:N0} B, RSS {BrokerRss.Mb(cluster.Nodes[0])}/{BrokerRss.Mb(cluster.Nodes[1])} MB");
        }

        Console.WriteLine(Line(3, $"{published} x 1 MB to mallory's shared session (of {publications}; the session ended: {(string?)await redis.Db.HashGetAsync("{herald}:lp:" + session.Token, "ended") ?? "no"}): XLEN {length}, MEMORY USAGE {memory:N0} B; RSS node 0/1 {rss[0]}/{rss[1]} MB before; {string.Join("; ", polls)}"));
    }

    /// <summary>4. A 1 MB history on node 0, then one SSE request on node 1 naming it 8 times with <c>Last-Event-ID: 0:epoch,...</c> (twice).</summary>
    private async Task HistoryResumeAsync(CancellationToken cancellationToken)
    {
        int publications = Count(100);
        await using ClusterTarget cluster = await ClusterAsync(2, ["--Herald:History:Topics:0:Pattern=feed.>", "--Herald:History:Topics:0:MaxMessages=1000"], cancellationToken);
        await using RedisProbe redis = await RedisProbe.ConnectAsync(cluster.RedisEndPoint);
        await using HeraldConnection alice = await ConnectAsync(cluster.Nodes[0], "alice", AttacksCommand.AliceToken, cancellationToken);
        byte[] payload = new byte[Megabyte];
        for (int i = 0; i < publications; i++)
        {
            var frames = new ArrayBufferWriter<byte>(Megabyte + 256);
            FrameWriter.WritePublish(frames, Topic.EncodeName("feed.big"), default, PayloadFlags.None, payload);
            await alice.UntilPongAsync(frames.WrittenMemory, cancellationToken, "publishing");
        }

        long length = await SettledAsync(() => redis.Db.StreamLengthAsync("{herald}:s:feed.big"), cancellationToken);
        long memory = await redis.MemoryUsageAsync("{herald}:s:feed.big");
        string epoch = (string?)await redis.Db.HashGetAsync("{herald}:h:feed.big", "e") ?? "x";
        HeraldNode node = cluster.Nodes[1];
        string before = BrokerRss.Mb(node);
        using var http = new HttpClient { Timeout = Timeout.InfiniteTimeSpan };
        var requests = new List<string>();
        for (int r = 0; r < 2; r++)
        {
            long output = await redis.OutputBytesAsync();
            using var request = new HttpRequestMessage(HttpMethod.Get, $"http://{target.Host}:{node.HttpPort.ToString(C)}/sse?{string.Join('&', Enumerable.Repeat("topic=feed.big", 8))}");
            request.Headers.Add("Last-Event-ID", string.Join(',', Enumerable.Repeat($"0:{epoch}", 8)));
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", AttacksCommand.AliceToken);
            (int status, long read, long peak) = await ReadBoundedAsync(http, request, node, cancellationToken);
            requests.Add($"request {r + 1}: {status}, {read:N0} B read in 20 s at most, Redis sent {await redis.OutputBytesAsync() - output:N0} B, node 1 RSS peak {peak / Megabyte} MB");
        }

        Console.WriteLine(Line(4, $"history feed.big {length} x 1 MB (MEMORY USAGE {memory:N0} B); one SSE stream naming it 8 times from 0: node 1 RSS {before} MB before; {string.Join("; ", requests)}"));
    }

    /// <summary>5. mallory's SSE requests for topics she may not read, under a history rule (History:MaxTopics 100): what histories exist after, and alice's.</summary>
    private async Task RefusedHistoriesAsync(CancellationToken cancellationToken)
    {
        int requests = Count(300);
        await using var herald = (HeraldTarget)await HeraldTarget.StartAsync(
            target with { Target = "herald", ServerArguments = [.. AttacksCommand.TokenArguments(), "--Herald:History:Topics:0:Pattern=orders.>", "--Herald:History:Topics:0:MaxMessages=100", "--Herald:History:MaxTopics=100"] },
            cancellationToken);
        await using HeraldConnection alice = await HeraldConnection.ConnectAsync(herald.Endpoints.At(herald.Endpoints.FirstPort), "alice", cancellationToken, auth: AttacksCommand.AliceToken);
        var frames = new ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(frames, Topic.EncodeName("orders.important"), default, PayloadFlags.None, "m1"u8);
        await alice.UntilPongAsync(frames.WrittenMemory, cancellationToken, "publishing");
        string before = await HistoriesAsync(herald, cancellationToken);
        string rss = TargetReport.Rss(herald.ServerProcess) is { } r0 ? (r0 / Megabyte).ToString(C) : "?";
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(30) };
        var statuses = new Dictionary<int, int>();
        for (int i = 0; i < requests; i++)
        {
            using var request = new HttpRequestMessage(HttpMethod.Get, $"http://{target.Host}:{herald.HttpPort.ToString(C)}/sse?topic=orders.m{i.ToString(C)}");
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", AttacksCommand.MalloryToken);
            if (i % 2 == 1)
            {
                request.Headers.Add("Last-Event-ID", "0:x");
            }

            using HttpResponseMessage response = await http.SendAsync(request, HttpCompletionOption.ResponseHeadersRead, cancellationToken);
            statuses[(int)response.StatusCode] = statuses.GetValueOrDefault((int)response.StatusCode) + 1;
        }

        string after = await HistoriesAsync(herald, cancellationToken);
        string rssAfter = TargetReport.Rss(herald.ServerProcess) is { } r1 ? (r1 / Megabyte).ToString(C) : "?";
        Console.WriteLine(Line(5, $"{requests} SSE requests from mallory for orders.mN ({string.Join(", ", statuses.Select(s => $"{s.Value} x {s.Key}"))}): histories {before} -> {after} (/varz); broker RSS {rss} -> {rssAfter} MB"));
    }

    /// <summary>6. WebSocket subscribers that stop reading, are flooded, then send a Close: what the broker counts and holds 10 s later.</summary>
    private async Task ClosedWebSocketsAsync(CancellationToken cancellationToken)
    {
        int stalled = Count(150);
        await using var herald = (HeraldTarget)await HeraldTarget.StartAsync(target with { Target = "herald", Token = null }, cancellationToken);
        BrokerEndpoints web = await BrokerEndpoints.ResolveAsync(target.Host, herald.HttpPort, herald.HttpPort, cancellationToken);
        web.WebSocket = true;
        string rss = TargetReport.Rss(herald.ServerProcess) is { } r0 ? (r0 / Megabyte).ToString(C) : "?";
        var subscribers = new List<HeraldConnection>();
        try
        {
            for (int i = 0; i < stalled; i++)
            {
                HeraldConnection subscriber = await HeraldConnection.ConnectAsync(web.At(herald.HttpPort), $"stalled-{i}", cancellationToken, receiveBufferSize: 8 * 1024, via: web, receiveWindow: 4096);
                subscribers.Add(subscriber);
                await subscriber.SubscribeAsync(1, "feed", cancellationToken);
            }

            await using HeraldConnection flood = await HeraldConnection.ConnectAsync(herald.Endpoints.At(herald.Endpoints.FirstPort), "flood", cancellationToken);
            byte[] payload = new byte[16 * 1024];
            await PipelinedAsync(flood, 220, (frames, _) => FrameWriter.WritePublish(frames, Topic.EncodeName("feed"), default, PayloadFlags.None, payload), cancellationToken, batch: 20);
            string flooded = await ConnectionsAsync(herald, cancellationToken);
            foreach (HeraldConnection subscriber in subscribers)
            {
                await subscriber.SendWebSocketCloseAsync(cancellationToken);
            }

            await Task.Delay(TimeSpan.FromSeconds(1), cancellationToken);
            string closing = await ConnectionsAsync(herald, cancellationToken);
            await Task.Delay(TimeSpan.FromSeconds(9), cancellationToken);
            Console.WriteLine(Line(6, $"{stalled} WebSocket subscribers stalled (220 x 16 KiB each), then a Close from each: flooded {flooded}; 1 s after the Close {closing}; 10 s after {await ConnectionsAsync(herald, cancellationToken)}; broker RSS {rss} MB before the subscribers, {(TargetReport.Rss(herald.ServerProcess) ?? 0) / Megabyte} MB 10 s after the Close"));
        }
        finally
        {
            foreach (HeraldConnection subscriber in subscribers)
            {
                await subscriber.DisposeAsync();
            }
        }
    }

    /// <summary>7. mallory holds 3,000 queue groups on node 0 and toggles one 100 times: what node 1 reads from Redis.</summary>
    private async Task GroupTogglesAsync(CancellationToken cancellationToken)
    {
        int groups = Count(3000), toggles = Count(100);
        await using ClusterTarget cluster = await ClusterAsync(2, [], cancellationToken);
        await using RedisProbe redis = await RedisProbe.ConnectAsync(cluster.RedisEndPoint);
        await using HeraldConnection mallory = await ConnectAsync(cluster.Nodes[0], "mallory", AttacksCommand.MalloryToken, cancellationToken, Capabilities.QueueGroups);
        byte[] jobs = Topic.EncodePattern(mallory.Welcome.InboxPrefix + ".jobs");
        await PipelinedAsync(mallory, groups, (frames, i) => FrameWriter.WriteSubscribe(frames, (uint)(i + 1), jobs, queue: Encoding.UTF8.GetBytes($"q{i.ToString(C)}")), cancellationToken);
        await SettledAsync(() => redis.CallsAsync("hgetall"), cancellationToken);
        (int keys, long record) = await redis.KeysAsync("{herald}:g:*");
        (string rss, long calls, long output) = (BrokerRss.Mb(cluster.Nodes[1]), await redis.CallsAsync("hgetall"), await redis.OutputBytesAsync());
        var frames = new ArrayBufferWriter<byte>();
        for (int t = 0; t < toggles; t++)
        {
            frames.ResetWrittenCount();
            FrameWriter.WriteUnsubscribe(frames, 1);
            await mallory.UntilPongAsync(frames.WrittenMemory, cancellationToken, "leaving a group");
            frames.ResetWrittenCount();
            FrameWriter.WriteSubscribe(frames, 1, jobs, queue: "q0"u8);
            await mallory.UntilPongAsync(frames.WrittenMemory, cancellationToken, "joining a group");
        }

        long read = await SettledAsync(() => redis.CallsAsync("hgetall"), cancellationToken) - calls;
        long sent = await redis.OutputBytesAsync() - output;
        Console.WriteLine(Line(7, $"{groups} queue groups of mallory's on node 0 ({keys} group records, {record:N0} B in Redis), one toggled {toggles} times ({2 * toggles} changes): {read} HGETALLs, Redis sent {sent:N0} B ({sent / (2 * toggles):N0} B a change); node 1 RSS {rss} -> {BrokerRss.Mb(cluster.Nodes[1])} MB"));
    }

    private async Task<ClusterTarget> ClusterAsync(int nodes, string[] arguments, CancellationToken cancellationToken) =>
        (ClusterTarget)await ClusterTarget.StartAsync(target with { Nodes = nodes, ServerArguments = [.. AttacksCommand.TokenArguments(), .. arguments] }, cancellationToken);

    private static Task<HeraldConnection> ConnectAsync(HeraldNode node, string name, string token, CancellationToken cancellationToken, Capabilities capabilities = Capabilities.None) =>
        HeraldConnection.ConnectAsync(node.Endpoints.At(node.Endpoints.FirstPort), name, cancellationToken, via: node.Endpoints, capabilities: capabilities, auth: token);

    private static LongPollClient LongPoll(HeraldNode node) =>
        new(node.Endpoints.Address, node.HttpPort, node.Sources, TimeSpan.FromSeconds(10), bearer: AttacksCommand.MalloryToken);

    private static string Line(int attack, string figures) => $"attack {attack.ToString(C)}: {figures}";

    /// <summary>
    /// <paramref name="count"/> frames written by <paramref name="write"/>, sent <paramref name="batch"/> at a time, each batch
    /// followed by a PING whose PONG is awaited; returns the non-fatal ERRORs (refusals) the broker answered.
    /// </summary>
    private static async Task<int> PipelinedAsync(HeraldConnection connection, int count, Action<ArrayBufferWriter<byte>, int> write, CancellationToken cancellationToken, Action<FrameType>? onFrame = null, int batch = 500)
    {
        var frames = new ArrayBufferWriter<byte>();
        int refused = 0;
        for (int i = 0; i < count; i++)
        {
            write(frames, i);
            if ((i + 1) % batch == 0 || i == count - 1)
            {
                refused += await connection.UntilPongAsync(frames.WrittenMemory, cancellationToken, "sending a batch", onFrame);
                frames.ResetWrittenCount();
            }
        }

        return refused;
    }

    /// <summary>
    /// Reads <paramref name="read"/> every half second until two reads in a row agree (what the broker does after its PONG,
    /// in Redis or between nodes, has come to rest), for at most two minutes; returns the last value.
    /// </summary>
    private static async Task<long> SettledAsync(Func<Task<long>> read, CancellationToken cancellationToken)
    {
        long last = await read();
        long start = Stopwatch.GetTimestamp();
        while (Stopwatch.GetElapsedTime(start) < TimeSpan.FromMinutes(2))
        {
            await Task.Delay(TimeSpan.FromSeconds(1), cancellationToken);
            long now = await read();
            if (now == last)
            {
                return now;
            }

            last = now;
        }

        return last;
    }

    /// <summary>Sends <paramref name="request"/> and reads its body for at most 20 s, noting <paramref name="node"/>'s highest RSS meanwhile.</summary>
    private static async Task<(int Status, long Read, long PeakRss)> ReadBoundedAsync(HttpClient http, HttpRequestMessage request, HeraldNode node, CancellationToken cancellationToken)
    {
        using var bounded = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        bounded.CancelAfter(TimeSpan.FromSeconds(20));
        long read = 0, peak = BrokerRss.Bytes(node);
        int status = 0;
        using var sampling = new PeriodicTimer(TimeSpan.FromMilliseconds(250));
        Task sampler = Task.Run(async () =>
        {
            while (await sampling.WaitForNextTickAsync(CancellationToken.None) && !bounded.IsCancellationRequested)
            {
                peak = Math.Max(peak, BrokerRss.Bytes(node));
            }
        }, CancellationToken.None);
        try
        {
            using HttpResponseMessage response = await http.SendAsync(request, HttpCompletionOption.ResponseHeadersRead, bounded.Token);
            status = (int)response.StatusCode;
            await using Stream body = await response.Content.ReadAsStreamAsync(bounded.Token);
            byte[] buffer = new byte[256 * 1024];
            for (int n; (n = await body.ReadAsync(buffer, bounded.Token)) > 0;)
            {
                read += n;
            }
        }
        catch (Exception e) when (e is OperationCanceledException or HttpRequestException or IOException && !cancellationToken.IsCancellationRequested)
        {
            // the 20 s bound, or the broker ended the stream
        }
        finally
        {
            await bounded.CancelAsync();
            sampling.Dispose();
            await sampler;
        }

        return (status, read, Math.Max(peak, BrokerRss.Bytes(node)));
    }

    /// <summary>/varz's history figures: topics kept and topics evicted.</summary>
    private static async Task<string> HistoriesAsync(HeraldTarget herald, CancellationToken cancellationToken)
    {
        using JsonDocument? varz = await HeraldMonitoring.VarzAsync(herald, cancellationToken);
        return $"{HeraldMonitoring.Number(varz, "history", "topics")?.ToString(C) ?? "?"} topics ({HeraldMonitoring.Number(varz, "history", "evicted_topics")?.ToString(C) ?? "?"} evicted)";
    }

    /// <summary>/varz's connection count and the broker's ESTABLISHED sockets on its HTTP port (<c>ss</c>).</summary>
    private static async Task<string> ConnectionsAsync(HeraldTarget herald, CancellationToken cancellationToken)
    {
        using JsonDocument? varz = await HeraldMonitoring.VarzAsync(herald, cancellationToken);
        var start = new ProcessStartInfo("ss", ["-Htn", "state", "established", $"sport = :{herald.HttpPort.ToString(C)}"]) { RedirectStandardOutput = true, UseShellExecute = false };
        using Process ss = Process.Start(start)!;
        string sockets = await ss.StandardOutput.ReadToEndAsync(cancellationToken);
        await ss.WaitForExitAsync(cancellationToken);
        return $"/varz connections {HeraldMonitoring.Number(varz, "connections")?.ToString(C) ?? "?"}, broker-side ESTABLISHED sockets on the HTTP port {sockets.Split('\n', StringSplitOptions.RemoveEmptyEntries).Length.ToString(C)}, RSS {(TargetReport.Rss(herald.ServerProcess) ?? 0) / Megabyte} MB";
    }
}
