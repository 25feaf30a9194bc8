using System.Diagnostics;
using System.Diagnostics.Metrics;
using Herald.Protocol;

namespace Herald.Broker.Telemetry;

/// <summary>Why a connection or long-poll session ended: the bounded values of <c>herald.close.reason</c>.</summary>
internal enum DisconnectReason
{
    /// <summary>The client closed it (end of stream, or DELETE of a long-poll session).</summary>
    ClientClose,

    /// <summary>The slow-consumer policy <c>Disconnect</c> closed it.</summary>
    SlowConsumer,

    /// <summary>The client broke the protocol (any fatal ERROR other than the ones below).</summary>
    ProtocolError,

    /// <summary>Handshake timeout, stale connection (unanswered PINGs), long-poll inactivity.</summary>
    Timeout,

    /// <summary>The broker is shutting down.</summary>
    Shutdown,

    /// <summary>A fault in the broker (InternalError).</summary>
    Error,
}

/// <summary>
/// The broker's meter, <c>Herald.Broker</c>, exported to Prometheus (<c>/metrics</c>) and OTLP by
/// <see cref="TelemetrySetup"/>. Names follow OpenTelemetry's conventions: a <c>herald.</c> namespace,
/// UCUM units (<c>By</c>, <c>s</c>, <c>{message}</c>), namespaced attributes. Prometheus shows
/// <c>herald.messages.published</c> (a counter) as <c>herald_messages_published_total</c> and the attribute
/// <c>herald.transport</c> as the label <c>herald_transport</c>.
/// </summary>
/// <remarks>
/// <para>
/// The hot path stays cheap. The per-message counts (published, delivered, sent: messages and bytes) are
/// plain running totals, one interlocked add each, per transport where they carry it, which observable
/// counters report when the exporter collects: no instrument call, tag lookup or aggregator update per
/// message (those cost about 10 % of the broker's CPU on a one-to-one stream). <c>/varz</c> reads the same
/// totals. Rarer events (connections, errors, policy, polls) go through ordinary counters. Only bounded
/// attributes (transport, reason, error code, policy, outcome): never a topic name.
/// </para>
/// <para>
/// Values that are state rather than events (open connections, subscriptions, queues) are observable
/// instruments read at collection time: see <see cref="BrokerGauges"/>. Compression instruments are
/// created on the same meter by <c>Compression/</c>.
/// </para>
/// <para>
/// The meter is the host's own: made through the host's <see cref="IMeterFactory"/> (which is its
/// <see cref="Meter.Scope"/>), never a static <c>new Meter(...)</c>. Two brokers in one process (tests, an
/// embedder) therefore have two meters of the same name whose counts never mix; a
/// <see cref="MeterListener"/> tells them apart by <see cref="Meter.Scope"/> or by comparing with
/// <see cref="Meter"/>.
/// </para>
/// </remarks>
internal sealed class BrokerMetrics
{
    public const string MeterName = "Herald.Broker";

    /// <summary><c>tcp</c> or <c>longpoll</c> (the transport's own constant).</summary>
    public const string TransportAttribute = "herald.transport";

    public const string CloseReasonAttribute = "herald.close.reason";

    /// <summary>The protocol error code (OpenTelemetry's general <c>error.type</c>).</summary>
    public const string ErrorTypeAttribute = "error.type";

    public const string SlowConsumerPolicyAttribute = "herald.slow_consumer.policy";

    public const string PolicyOutcomeAttribute = "herald.policy.outcome";

    public const string PollOutcomeAttribute = "herald.poll.outcome";

    /// <summary>Bucket bounds of <c>herald.fanout.duration</c>, seconds: 10 us to 5 s.</summary>
    public static readonly double[] FanoutBuckets = [0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

    private static readonly string[] ReasonNames = ["client_close", "slow_consumer", "protocol_error", "timeout", "shutdown", "error"];

    /// <summary>The transports, as sessions name themselves (<see cref="Sessions.ProtocolSession.Transport"/>): the values of <c>herald.transport</c>.</summary>
    private static readonly string[] TransportNames = ["tcp", "longpoll", "websocket", "sse", "api"];

    private readonly Histogram<double> _fanout;
    private readonly Counter<long> _protocolErrors;
    private readonly Counter<long> _slowConsumers;
    private readonly Counter<long> _opened;
    private readonly Counter<long> _closed;
    private readonly Counter<long> _policyRequests;
    private readonly Counter<long> _polls;
    private readonly Counter<long> _redelivered;
    private long _totalNoResponders;

    // Running totals (Interlocked), per transport where the instrument has the attribute, in TransportNames' order.
    private readonly long[] _publishedBy = new long[TransportNames.Length];
    private readonly long[] _publishedBytesBy = new long[TransportNames.Length];
    private readonly long[] _sentBy = new long[TransportNames.Length];
    private readonly long[] _sentBytesBy = new long[TransportNames.Length];
    private long _totalDelivered;
    private long _totalDeliveredBytes;
    private long _totalOpened;
    private long _totalClosed;
    private long _totalSlowConsumers;
    private long _totalDropped;
    private long _totalProtocolErrors;

    // The router's totals (Routing/TopicRouter): a cache hit is once per publication, so a running total too.
    private long _totalSubscriptionChanges;
    private long _totalRouterCacheMisses;
    private long _reportedRouterCacheHits;
    private long _totalRouterCacheEvictions;
    private long _routerCacheSize;

    public BrokerMetrics(IMeterFactory meterFactory)
    {
        Meter meter = meterFactory.Create(MeterName);
        Meter = meter;

        // Existing names are kept: tests and dashboards read them.
        meter.CreateObservableCounter("herald.messages.published", () => ByTransport(_publishedBy), "{message}", "Publications received, by the publisher's transport.");
        meter.CreateObservableCounter("herald.messages.published.bytes", () => ByTransport(_publishedBytesBy), "By", "Bytes of the MESSAGE frames built from publications (one per publication that had a subscriber), by the publisher's transport.");
        meter.CreateObservableCounter("herald.messages.delivered", () => Interlocked.Read(ref _totalDelivered), "{message}", "Messages queued to subscribers (one per matching subscription).");
        meter.CreateObservableCounter("herald.messages.delivered.bytes", () => Interlocked.Read(ref _totalDeliveredBytes), "By", "Bytes queued to subscribers (frame size times subscribers).");
        meter.CreateObservableCounter("herald.messages.sent", () => ByTransport(_sentBy), "{message}", "MESSAGE frames written to subscribers (TCP socket writes, long-poll responses), by the subscriber's transport.");
        meter.CreateObservableCounter("herald.messages.sent.bytes", () => ByTransport(_sentBytesBy), "By", "Bytes of MESSAGE frames written to subscribers, by the subscriber's transport.");
        _fanout = meter.CreateHistogram<double>(
            "herald.fanout.duration",
            "s",
            "Time from a publication being read to its last subscriber write; one publication in 16 of each connection or session is sampled.",
            tags: null,
            advice: new InstrumentAdvice<double> { HistogramBucketBoundaries = FanoutBuckets });
        _protocolErrors = meter.CreateCounter<long>("herald.protocol.errors", "{error}", "Connections closed or warned for breaking the protocol, by error code (error.type).");
        _slowConsumers = meter.CreateCounter<long>("herald.slow_consumers", "{event}", "Slow-consumer episodes, by policy: a connection closed (Disconnect), or a subscriber that starts losing messages (DropOldest; once until it has taken everything queued for it again).");
        meter.CreateObservableCounter("herald.messages.dropped", () => Interlocked.Read(ref _totalDropped), "{message}", "Messages dropped by the DropOldest policy, counted when dropped.");
        _opened = meter.CreateCounter<long>("herald.connections.opened", "{connection}", "Connections accepted (TCP) and sessions created (long-poll), by transport.");
        _closed = meter.CreateCounter<long>("herald.connections.closed", "{connection}", "Connections and sessions ended, by transport and reason (herald.close.reason).");
        _policyRequests = meter.CreateCounter<long>("herald.policy.requests", "{request}", "Socket-policy connections, by outcome (silverlight, flash, refused, timeout, shed, busy, aborted).");
        _polls = meter.CreateCounter<long>("herald.longpoll.polls", "{poll}", "Long polls answered, by outcome (messages, empty: the poll timeout passed, replaced, ended).");
        meter.CreateObservableCounter("herald.requests.no_responders", () => Interlocked.Read(ref _totalNoResponders), "{request}", "Requests (PUBLISH with reply_to) that reached no subscription, answered at once with a no-responders status (spec §7).");
        _redelivered = meter.CreateCounter<long>("herald.longpoll.redeliveries", "{response}", "Poll responses that sent again messages a lost response had carried.");
        meter.CreateObservableCounter("herald.subscriptions.changes", () => Interlocked.Read(ref _totalSubscriptionChanges), "{change}", "Subscriptions added to and removed from the router (SUBSCRIBE, UNSUBSCRIBE, a session's end), all transports.");
        meter.CreateObservableCounter("herald.router.cache.hits", RouterCacheHits, "{lookup}", "Publications whose topic the router found in its match cache (no lock taken).");
        meter.CreateObservableCounter("herald.router.cache.misses", () => Interlocked.Read(ref _totalRouterCacheMisses), "{lookup}", "Publications whose topic the router matched against the subscriptions, then cached.");
        meter.CreateObservableCounter("herald.router.cache.evictions", () => Interlocked.Read(ref _totalRouterCacheEvictions), "{entry}", "Match-cache entries dropped to keep the cache within its bound, or all at once by a subscription change too wide to look at entry by entry.");
        meter.CreateObservableUpDownCounter("herald.router.cache.size", () => Interlocked.Read(ref _routerCacheSize), "{entry}", "Topics in the router's match cache.");
    }

    /// <summary>The broker's one meter; <see cref="BrokerGauges"/> and <c>Compression/</c> add their instruments to it.</summary>
    public Meter Meter { get; }

    public long TotalPublished => Sum(_publishedBy);

    /// <summary>
    /// Router match-cache hits, derived so that a hit costs the publish path nothing: every publication is
    /// matched once, so hits are publications less misses. A miss is counted when it happens and its
    /// publication a moment later, so a read in between could dip; the highest value reported is kept
    /// (a counter never goes down).
    /// </summary>
    public long RouterCacheHits()
    {
        long hits = TotalPublished - Interlocked.Read(ref _totalRouterCacheMisses);
        long reported = Interlocked.Read(ref _reportedRouterCacheHits);
        while (hits > reported)
        {
            long seen = Interlocked.CompareExchange(ref _reportedRouterCacheHits, hits, reported);
            if (seen == reported)
            {
                return hits;
            }

            reported = seen;
        }

        return reported;
    }

    public long TotalPublishedBytes => Sum(_publishedBytesBy);

    public long TotalDelivered => Interlocked.Read(ref _totalDelivered);

    public long TotalSent => Sum(_sentBy);

    public long TotalSentBytes => Sum(_sentBytesBy);

    public long TotalConnectionsOpened => Interlocked.Read(ref _totalOpened);

    public long TotalConnectionsClosed => Interlocked.Read(ref _totalClosed);

    public long TotalSlowConsumers => Interlocked.Read(ref _totalSlowConsumers);

    public long TotalDropped => Interlocked.Read(ref _totalDropped);

    public long TotalProtocolErrors => Interlocked.Read(ref _totalProtocolErrors);

    /// <summary>Once per publication: <paramref name="deliveries"/> subscriptions got it.</summary>
    public void Published(string transport, int deliveries)
    {
        Interlocked.Increment(ref _publishedBy[IndexOf(transport)]);
        if (deliveries > 0)
        {
            Interlocked.Add(ref _totalDelivered, deliveries);
        }
    }

    /// <summary>
    /// Publications per topic for the status page (<c>/statusz</c>), a bounded table; null when the
    /// monitoring endpoints are off (<c>Herald:Monitoring:Enabled=false</c>): then nothing is counted by topic.
    /// </summary>
    public TopicTraffic? Topics { get; init; }

    /// <summary>
    /// Once per publication a client made here: <see cref="Published(string, int, int)"/>, and counted by
    /// <paramref name="topic"/> in <see cref="Topics"/> (no lock or allocation, see <see cref="TopicTraffic"/>).
    /// </summary>
    public void Published(string transport, in System.Buffers.ReadOnlySequence<byte> topic, int deliveries, int frameBytes)
    {
        Published(transport, deliveries, frameBytes);
        Topics?.Published(topic, deliveries, frameBytes);
    }

    /// <summary>
    /// Several publications a client made here to <paramref name="topic"/>, counted at once (a read loop's
    /// <see cref="PublicationTally"/>): what as many calls of <see cref="Published(string, in System.Buffers.ReadOnlySequence{byte}, int, int)"/> count.
    /// </summary>
    public void Published(string transport, ReadOnlySpan<byte> topic, in PublishedCounts counts)
    {
        int index = IndexOf(transport);
        Interlocked.Add(ref _publishedBy[index], counts.Publications);
        if (counts.PublishedBytes > 0)
        {
            Interlocked.Add(ref _publishedBytesBy[index], counts.PublishedBytes);
        }

        if (counts.Deliveries > 0)
        {
            Interlocked.Add(ref _totalDelivered, counts.Deliveries);
            if (counts.DeliveredBytes > 0)
            {
                Interlocked.Add(ref _totalDeliveredBytes, counts.DeliveredBytes);
            }
        }

        Topics?.Count(topic, counts.Publications, counts.Deliveries, counts.FrameBytes);
    }

    /// <summary>
    /// Once per publication, with the size of the MESSAGE frame routed (header and envelope; 0 if nobody
    /// was subscribed, so no frame was built): also counts published and delivered bytes.
    /// </summary>
    public void Published(string transport, int deliveries, int frameBytes)
    {
        int index = IndexOf(transport);
        Interlocked.Increment(ref _publishedBy[index]);
        if (deliveries > 0 && frameBytes > 0)
        {
            Interlocked.Add(ref _publishedBytesBy[index], frameBytes);
        }

        Delivered(deliveries, frameBytes);
    }

    /// <summary>
    /// The deliveries of one publication and their bytes: part of <see cref="Published(string, int, int)"/>, and alone
    /// for a publication another node published (Cluster/), delivered here but not published here.
    /// </summary>
    public void Delivered(int deliveries, int frameBytes)
    {
        if (deliveries > 0)
        {
            Interlocked.Add(ref _totalDelivered, deliveries);
            if (frameBytes > 0)
            {
                Interlocked.Add(ref _totalDeliveredBytes, (long)frameBytes * deliveries);
            }
        }
    }

    /// <summary>Once per write batch (a drain of a TCP queue, one long-poll response): frames written to one subscriber.</summary>
    public void Sent(string transport, int messages, long bytes)
    {
        if (messages <= 0)
        {
            return;
        }

        int index = IndexOf(transport);
        Interlocked.Add(ref _sentBy[index], messages);
        Interlocked.Add(ref _sentBytesBy[index], bytes);
    }

    /// <summary>Whether anyone listens to <c>herald.fanout.duration</c>: check it before taking timestamps.</summary>
    public bool FanoutEnabled => _fanout.Enabled;

    /// <summary>
    /// Each session records the fan-out latency of one publication in this many (a power of two): its first,
    /// then one after every <c>FanoutSampling - 1</c>. A sample of every publisher's traffic, quiet ones
    /// included, at a sixteenth of the cost.
    /// </summary>
    public const int FanoutSampling = 16;

    /// <summary>
    /// Once per publication, when its last subscriber write is done. <paramref name="receivedTimestamp"/> is
    /// <see cref="Stopwatch.GetTimestamp"/> taken when the PUBLISH was read.
    /// </summary>
    public void FanoutCompleted(long receivedTimestamp) => _fanout.Record(Stopwatch.GetElapsedTime(receivedTimestamp).TotalSeconds);

    public void ProtocolError(ErrorCode code)
    {
        _protocolErrors.Add(1, new KeyValuePair<string, object?>(ErrorTypeAttribute, code.ToString()));
        Interlocked.Increment(ref _totalProtocolErrors);
    }

    public void SlowConsumer(string policy)
    {
        _slowConsumers.Add(1, new KeyValuePair<string, object?>(SlowConsumerPolicyAttribute, policy));
        Interlocked.Increment(ref _totalSlowConsumers);
    }

    /// <summary>When messages are dropped: a running total only (no instrument call), as this is per publication per stalled subscriber.</summary>
    public void Dropped(long count) => Interlocked.Add(ref _totalDropped, count);

    public void PolicyRequest(string outcome) => _policyRequests.Add(1, new KeyValuePair<string, object?>(PolicyOutcomeAttribute, outcome));

    public void Poll(string outcome) => _polls.Add(1, new KeyValuePair<string, object?>(PollOutcomeAttribute, outcome));

    public void Redelivered() => _redelivered.Add(1);

    /// <summary>A request reached no subscription and its requester was told so (spec §7).</summary>
    public void NoResponders() => Interlocked.Increment(ref _totalNoResponders);

    /// <summary>Requests answered with a no-responders status so far (this broker's).</summary>
    public long TotalNoResponders => Interlocked.Read(ref _totalNoResponders);

    public void ConnectionOpened(string transport)
    {
        _opened.Add(1, new KeyValuePair<string, object?>(TransportAttribute, transport));
        Interlocked.Increment(ref _totalOpened);
    }

    /// <summary>
    /// Paired with <see cref="ConnectionOpened"/> by the session tables; counts toward <c>/varz</c> only. The
    /// open count (<c>herald.connections</c>) is read from the session tables themselves
    /// (<see cref="BrokerGauges"/>), and why a connection ended is recorded by
    /// <see cref="Disconnected(string, DisconnectReason)"/>.
    /// </summary>
    public void ConnectionClosed(string transport) => Interlocked.Increment(ref _totalClosed);

    /// <summary>Once per connection or session that ends, with why (in addition to <see cref="ConnectionClosed"/>).</summary>
    public void Disconnected(string transport, DisconnectReason reason) =>
        _closed.Add(1, new KeyValuePair<string, object?>(TransportAttribute, transport), new KeyValuePair<string, object?>(CloseReasonAttribute, ReasonNames[(int)reason]));

    /// <summary>The same, from the code a TCP connection was closed with (<see cref="ErrorCode.None"/>: the client closed it).</summary>
    public void Disconnected(string transport, ErrorCode code) => Disconnected(transport, ReasonOf(code));

    public static DisconnectReason ReasonOf(ErrorCode code) => code switch
    {
        ErrorCode.None => DisconnectReason.ClientClose,
        ErrorCode.SlowConsumer => DisconnectReason.SlowConsumer,
        ErrorCode.HandshakeTimeout or ErrorCode.StaleConnection => DisconnectReason.Timeout,
        ErrorCode.ShuttingDown => DisconnectReason.Shutdown,
        ErrorCode.InternalError => DisconnectReason.Error,
        _ => DisconnectReason.ProtocolError,
    };

    /// <summary>A transport's index in <see cref="TransportNames"/>: the sessions' names are the same constants, so a reference compare decides (the string compare is for a copy).</summary>
    private static int IndexOf(string transport)
    {
        for (int i = 0; i < TransportNames.Length; i++)
        {
            if (ReferenceEquals(transport, TransportNames[i]))
            {
                return i;
            }
        }

        int found = Array.IndexOf(TransportNames, transport);
        return found >= 0 ? found : 0;
    }

    private static long Sum(long[] totals)
    {
        long sum = 0;
        for (int i = 0; i < totals.Length; i++)
        {
            sum += Interlocked.Read(ref totals[i]);
        }

        return sum;
    }

    private static Measurement<long>[] ByTransport(long[] totals)
    {
        var measurements = new Measurement<long>[totals.Length];
        for (int i = 0; i < totals.Length; i++)
        {
            measurements[i] = new(Interlocked.Read(ref totals[i]), new KeyValuePair<string, object?>(TransportAttribute, TransportNames[i]));
        }

        return measurements;
    }

    /// <summary>Once per subscription added to or removed from the router.</summary>
    public void SubscriptionChanged() => Interlocked.Increment(ref _totalSubscriptionChanges);

    /// <summary>Once per publication whose topic was in the router's match cache.</summary>

    /// <summary>Once per publication whose topic was not.</summary>
    public void RouterCacheMiss() => Interlocked.Increment(ref _totalRouterCacheMisses);

    public void RouterCacheEvicted(int entries) => Interlocked.Add(ref _totalRouterCacheEvictions, entries);

    /// <summary>The match cache's size, after each change to it.</summary>
    public void RouterCacheSize(int entries) => Interlocked.Exchange(ref _routerCacheSize, entries);

    public long TotalSubscriptionChanges => Interlocked.Read(ref _totalSubscriptionChanges);

    public long TotalRouterCacheEvictions => Interlocked.Read(ref _totalRouterCacheEvictions);

    /// <summary>The attribute value of <paramref name="reason"/> (<c>client_close</c>, ...).</summary>
    public static string NameOf(DisconnectReason reason) => ReasonNames[(int)reason];
}
