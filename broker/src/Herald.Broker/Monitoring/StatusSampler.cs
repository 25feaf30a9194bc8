using Herald.Protocol;
using System.Globalization;
using Herald.Broker.Compression;
using Herald.Broker.Engines;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Broker.Transports.LongPoll;
using Herald.Broker.Transports.Sse;
using Herald.Broker.Transports.Tcp;
using Herald.Broker.Transports.WebSockets;

namespace Herald.Broker.Monitoring;

/// <summary>
/// What <c>/statusz</c> answers: the broker's counters and tables read once, and rates computed here from
/// the previous sample, so every viewer sees the same rates and the page stays a thin reader. A sample is
/// taken when asked and at most every <see cref="MinInterval"/>; a request sooner gets the last one. Nothing
/// here runs on the message path: a sample walks the session table, the topic counters
/// (<see cref="TopicTraffic"/>, 2,048 slots) and presence's topics (<see cref="IPresence.Busiest"/>) under this class's lock.
/// </summary>
internal sealed class StatusSampler
{
    /// <summary>Shortest time between two samples: rates are over at least this long.</summary>
    public static readonly TimeSpan MinInterval = TimeSpan.FromMilliseconds(500);

    /// <summary>Rows of each table: top topics, slow consumers, long-poll sessions, compressed topics.</summary>
    public const int Rows = 10;

    /// <summary>A session is listed as a slow consumer from this share of its backlog limit (messages or bytes) on, or once it lost messages.</summary>
    public const double SlowFill = 0.1;

    private static readonly string[] Transports = [TcpConnectionHandler.Transport, WebSocketEndpoint.TransportName, PollSession.TransportName, SseSession.TransportName];

    private readonly BrokerCore _broker;
    private readonly BrokerHealth _health;
    private readonly SessionRegistry _sessions;
    private readonly PollSessionStore _polls;
    private readonly CompressionAdvisor _advisor;
    private readonly CompressionMetrics _compression;
    private readonly CompressionOptions _compressionOptions;
    private readonly MonitoringLogin _login;
    private readonly TimeProvider _time;
    private readonly Lock _gate = new();
    private readonly List<TopicSample> _topics = [];

    // The previous sample (caller holds _gate).
    private Statusz? _last;
    private long _lastAt;
    private StatusCounts _lastCounts = new(0, 0, 0, 0, 0, 0, 0, 0);
    private long _lastUntracked;
    private TimeSpan _lastCpu;

    public StatusSampler(BrokerCore broker, BrokerHealth health, SessionRegistry sessions, PollSessionStore polls, CompressionAdvisor advisor, CompressionMetrics compression, CompressionOptions compressionOptions, MonitoringLogin login, TimeProvider time)
    {
        _broker = broker;
        _health = health;
        _sessions = sessions;
        _polls = polls;
        _advisor = advisor;
        _compression = compression;
        _compressionOptions = compressionOptions;
        _login = login;
        _time = time;
        _lastAt = time.GetTimestamp(); // the first sample's rates are since the broker was built
        _lastCpu = Environment.CpuUsage.TotalTime;
    }

    /// <summary>The latest sample: taken now, or the previous one when it is younger than <see cref="MinInterval"/>.</summary>
    public Statusz Current()
    {
        lock (_gate)
        {
            long now = _time.GetTimestamp();
            TimeSpan interval = _time.GetElapsedTime(_lastAt, now);
            if (_last is not null && interval < MinInterval)
            {
                return _last;
            }

            _last = Take(now, interval);
            _lastAt = now;
            return _last;
        }
    }

    // Caller holds _gate.
    private Statusz Take(long now, TimeSpan interval)
    {
        double seconds = Math.Max(interval.TotalSeconds, MinInterval.TotalSeconds); // only the first sample can be sooner (the sampler is made at start)
        BrokerMetrics metrics = _broker.Metrics;
        var counts = new StatusCounts(
            metrics.TotalPublished,
            metrics.TotalPublishedBytes,
            metrics.TotalDelivered,
            metrics.TotalSent,
            metrics.TotalSentBytes,
            metrics.TotalDropped,
            metrics.TotalSlowConsumers,
            metrics.TotalConnectionsOpened);
        StatusCounts last = _lastCounts;
        var rates = new StatusRates(
            Rate(counts.Published - last.Published),
            Rate(counts.PublishedBytes - last.PublishedBytes),
            Rate(counts.Delivered - last.Delivered),
            Rate(counts.Sent - last.Sent),
            Rate(counts.SentBytes - last.SentBytes),
            Rate(counts.Dropped - last.Dropped),
            Rate(counts.SlowConsumers - last.SlowConsumers),
            Rate(counts.ConnectionsOpened - last.ConnectionsOpened));
        _lastCounts = counts;

        var connections = new SortedDictionary<string, int>(StringComparer.Ordinal);
        foreach (string transport in Transports)
        {
            connections[transport] = 0;
        }

        var slow = new List<StatusSlowConsumer>();
        var polls = new List<StatusPollSession>();
        foreach (ProtocolSession session in _sessions.Sessions)
        {
            connections[session.Transport] = connections.GetValueOrDefault(session.Transport) + 1;
            (long messages, long bytes) = session.Backlog.Pending;
            long dropped = session.Backlog.Dropped;
            Delivery.BacklogLimits limits = session.Backlog.Limits;
            double fill = Math.Max(Share(messages, limits.MaxMessages), Share(bytes, limits.MaxBytes));
            if (fill >= SlowFill || dropped > 0)
            {
                slow.Add(new StatusSlowConsumer(session.Id, session.Transport, session.ClientName, messages, bytes, Math.Round(fill, 3), dropped, limits.Policy.ToString()));
            }

            if (session is PollSession poll)
            {
                polls.Add(new StatusPollSession(poll.Id, poll.ClientName, Math.Round(poll.Idle.TotalSeconds, 1), poll.IsPolling, poll.SubscriptionCount, messages));
            }
        }

        slow.Sort(static (a, b) => a.Fill != b.Fill ? b.Fill.CompareTo(a.Fill) : a.Dropped != b.Dropped ? b.Dropped.CompareTo(a.Dropped) : a.Cid.CompareTo(b.Cid));
        polls.Sort(static (a, b) => a.PendingMessages != b.PendingMessages ? b.PendingMessages.CompareTo(a.PendingMessages) : a.Cid.CompareTo(b.Cid));

        var process = new StatusProcess(Math.Round(CpuPercent(seconds), 1), Environment.WorkingSet, GC.GetGCMemoryInfo().HeapSizeBytes);
        (long bytesIn, long bytesOut) = _compression.Bytes;
        var compressed = new List<StatusTopicRatio>();
        foreach (ActionRatio ratio in _advisor.Ratios(Rows))
        {
            compressed.Add(new StatusTopicRatio(ratio.Action, Math.Round(ratio.Ratio, 4), ratio.Samples, ratio.Compressing));
        }

        DateTimeOffset wall = DateTimeOffset.UtcNow;
        return new Statusz(
            _broker.ServerName,
            BrokerVersion.Value,
            _health.State.ToString().ToLowerInvariant(),
            wall,
            Math.Round((wall - _health.StartedAt).TotalSeconds, 3),
            Math.Round(seconds, 3),
            _login.Required,
            connections,
            _broker.Router.SubscriptionCount,
            _broker.Router.PatternCount,
            counts,
            rates,
            TopTopics(metrics.Topics, now, seconds),
            Take(slow, Rows),
            new StatusLongPoll(_polls.Count, _polls.HeldPolls, Take(polls, Rows)),
            new StatusCompression(_compressionOptions.Enabled, bytesIn, bytesOut, compressed),
            process,
            _broker.ClusterStatus.Snapshot() is { } cluster ? ClusterOf(cluster) : null,
            MonitoringEndpoints.Presence(_broker.Presence));

        double Rate(long delta) => Math.Round(Math.Max(0, delta) / seconds, 2);
    }

    /// <summary>The busiest counted topics: by publications over the interval, then by their total.</summary>
    private StatusTopTopics TopTopics(TopicTraffic? traffic, long now, double seconds)
    {
        if (traffic is null)
        {
            return new StatusTopTopics(0, 0, 0, []);
        }

        traffic.Sample(_time, now, _topics);
        long untracked = traffic.Untracked;
        double untrackedRate = Math.Round(Math.Max(0, untracked - _lastUntracked) / seconds, 2);
        _lastUntracked = untracked;

        // A topic counted in two slots (see TopicTraffic) is one row. Reply inboxes (_INBOX., spec §7) are never
        // listed: their names say who asks whom, and monitoring names no inbox (/subsz only counts them).
        var merged = new Dictionary<string, TopicSample>(_topics.Count, StringComparer.Ordinal);
        foreach (TopicSample sample in _topics)
        {
            if (sample.Topic.StartsWith(ProtocolConstants.InboxPrefix, StringComparison.Ordinal))
            {
                continue;
            }

            merged[sample.Topic] = merged.TryGetValue(sample.Topic, out TopicSample other)
                ? new TopicSample(sample.Topic, sample.Publications + other.Publications, sample.PublishedSince + other.PublishedSince, sample.DeliveredSince + other.DeliveredSince, sample.BytesSince + other.BytesSince)
                : sample;
        }

        var ranked = merged.Values.ToList();
        ranked.Sort(static (a, b) => a.PublishedSince != b.PublishedSince ? b.PublishedSince.CompareTo(a.PublishedSince)
            : a.Publications != b.Publications ? b.Publications.CompareTo(a.Publications)
            : string.CompareOrdinal(a.Topic, b.Topic));
        var top = new List<StatusTopic>(Math.Min(Rows, ranked.Count));
        for (int i = 0; i < ranked.Count && top.Count < Rows; i++)
        {
            TopicSample t = ranked[i];
            top.Add(new StatusTopic(t.Topic, Math.Round(t.PublishedSince / seconds, 2), Math.Round(t.DeliveredSince / seconds, 2), Math.Round(t.BytesSince / seconds, 1), t.Publications));
        }

        return new StatusTopTopics(merged.Count, TopicTraffic.Slots, untrackedRate, top);
    }

    // Caller holds _gate.
    private double CpuPercent(double seconds)
    {
        TimeSpan cpu = Environment.CpuUsage.TotalTime;
        double percent = (cpu - _lastCpu).TotalSeconds / seconds * 100;
        _lastCpu = cpu;
        return Math.Max(0, percent);
    }

    private static StatusCluster ClusterOf(ClusterSnapshot cluster) => new(cluster.Node, cluster.Connected, [.. cluster.Members.Select(MonitoringEndpoints.NodeOf)], MonitoringEndpoints.ShardsOf(cluster));

    private static double Share(long used, long limit) => limit <= 0 ? 0 : (double)used / limit;

    private static List<T> Take<T>(List<T> rows, int count)
    {
        if (rows.Count > count)
        {
            rows.RemoveRange(count, rows.Count - count);
        }

        return rows;
    }
}
