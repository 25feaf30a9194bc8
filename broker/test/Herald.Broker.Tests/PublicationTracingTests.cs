using System.Diagnostics;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Broker.Hosting;
using Herald.Broker.Telemetry;
using Herald.Broker.Tests.Infrastructure;
using Herald.Broker.Tests.Infrastructure.Otlp;
using Herald.Client;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using OpenTelemetry;
using OpenTelemetry.Exporter;
using OpenTelemetry.Resources;
using OpenTelemetry.Trace;

namespace Herald.Broker.Tests;

/// <summary>
/// One trace per message (issue 20.3), read back from a real OTLP receiver: the .NET SDK's publisher span, the
/// broker's own span for the publication and the subscribers' spans, as the three exporters sent them.
/// Isolated: activity sources are process-wide, so a broker or SDK of a test running beside these would record
/// into their tracer providers.
/// </summary>
[Collection(nameof(Isolated))]
public sealed class PublicationTracingTests
{
    private static readonly ActivitySource Caller = new("Herald.Broker.Tests.Caller");

    public static TheoryData<HeraldTransport> Transports => [HeraldTransport.Tcp, HeraldTransport.LongPoll];

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_publication_is_one_trace_from_the_publisher_through_the_broker_to_each_subscriber(HeraldTransport publishOver)
    {
        string topic = $"traced.{publishOver}.{Guid.NewGuid():N}";
        await using var receiver = await OtlpReceiver.StartAsync();
        await using var broker = await StartTracedBrokerAsync(receiver);
        using TracerProvider application = ApplicationTracing(receiver);
        await using HeraldClient tcpSubscriber = Client(broker, HeraldTransport.Tcp, "tcp-subscriber");
        await using HeraldClient pollSubscriber = Client(broker, HeraldTransport.LongPoll, "poll-subscriber");
        await using HeraldClient publisher = Client(broker, publishOver, "publisher");
        var tcpGot = new TaskCompletionSource<HeraldHeaders>(TaskCreationOptions.RunContinuationsAsynchronously);
        var pollGot = new TaskCompletionSource<HeraldHeaders>(TaskCreationOptions.RunContinuationsAsynchronously);
        await using HeraldSubscription viaTcp = await tcpSubscriber.SubscribeAsync(topic, m => tcpGot.TrySetResult(m.Headers));
        await using HeraldSubscription viaPoll = await pollSubscriber.SubscribeAsync(topic, m => pollGot.TrySetResult(m.Headers));

        string traceId;
        using (Activity checkout = Caller.StartActivity("checkout")!)
        {
            traceId = checkout.TraceId.ToHexString();
            await publisher.PublishAsync(topic, "traced");
        }

        HeraldHeaders tcpHeaders = await tcpGot.Task.WaitAsync(TimeSpan.FromSeconds(30));
        HeraldHeaders pollHeaders = await pollGot.Task.WaitAsync(TimeSpan.FromSeconds(30));
        IReadOnlyList<ReceivedSpan> trace = await FlushUntilAsync(receiver, broker, application, spans => spans.Count(s => s.TraceId == traceId) >= 5);
        trace = [.. trace.Where(s => s.TraceId == traceId)];

        ReceivedSpan send = Assert.Single(trace, s => s.Kind == Span.Types.SpanKind.Producer);
        Assert.Equal(("herald-test-app", "Herald.Client", "send " + topic), (send.Service, send.Scope, send.Name));
        Assert.Equal(Assert.Single(trace, s => s.Name == "checkout").SpanId, send.ParentSpanId);

        ReceivedSpan route = Assert.Single(trace, s => s.Scope == BrokerTracing.SourceName);
        Assert.Equal((TelemetrySetup.ServiceName, "route", Span.Types.SpanKind.Consumer), (route.Service, route.Name, route.Kind));
        Assert.Equal(send.SpanId, route.ParentSpanId); // the publisher's span, read from the traceparent header
        Assert.Equal("herald", route["messaging.system"]);
        Assert.Equal("process", route["messaging.operation.type"]);
        Assert.Equal("route", route["messaging.operation.name"]);
        Assert.Equal(topic, route["messaging.destination.name"]);
        Assert.Equal(6L, route["messaging.message.body.size"]);
        Assert.Equal(2L, route["herald.route.matched"]);
        Assert.Equal(2L, route["herald.route.queued"]);
        Assert.Equal(0L, route["herald.route.dropped"]);
        Assert.Equal(0L, route["herald.route.evicted"]);
        Assert.Equal(false, route["herald.route.compressed"]);
        Assert.Equal(publishOver == HeraldTransport.Tcp ? "tcp" : "longpoll", route["herald.transport"]);
        Assert.True(route["herald.connection.id"] is long id && id > 0, "the publisher's connection id");
        Assert.Equal("publisher", route["messaging.client.id"]);

        ReceivedSpan[] processed = [.. trace.Where(s => s.Kind == Span.Types.SpanKind.Consumer && s.Scope == "Herald.Client")];
        Assert.Equal(2, processed.Length); // the TCP subscriber's and the long-poll subscriber's handler
        Assert.All(processed, p =>
        {
            Assert.Equal("process " + topic, p.Name);
            Assert.Equal(send.SpanId, p.ParentSpanId); // the broker's span is their sibling: it forwards traceparent as it came
            Assert.Contains((traceId, send.SpanId), p.Links);
        });
        Assert.Equal(["poll-subscriber", "tcp-subscriber"], processed.Select(p => (string)p["messaging.client.id"]!).Order());

        string sent = $"00-{traceId}-{send.SpanId}-01";
        Assert.Equal(sent, tcpHeaders.GetFirstValue("traceparent"));  // byte for byte, not rewritten
        Assert.Equal(sent, pollHeaders.GetFirstValue("traceparent"));
    }

    [Fact]
    public async Task Across_nodes_each_node_records_its_route_span_under_the_publishers_span()
    {
        string topic = $"traced.cluster.{Guid.NewGuid():N}";
        await using var receiver = await OtlpReceiver.StartAsync();
        // Both nodes run in this process and activity sources are process-wide: one node's tracer provider
        // records both nodes' route spans, so only node 1 exports (each span once), as two processes would.
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, configureNode: (node, o) =>
        {
            if (node == 1)
            {
                o.Telemetry.Otlp.Enabled = true;
                o.Telemetry.Otlp.Protocol = OtlpProtocol.HttpProtobuf;
                o.Telemetry.Otlp.Endpoint = receiver.BaseAddress;
            }
        });
        using TracerProvider application = ApplicationTracing(receiver);
        await using HeraldClient remote = new($"tcp://127.0.0.1:{cluster[1].Port}");
        var got = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        await using HeraldSubscription subscription = await remote.SubscribeAsync(topic, _ => got.TrySetResult());
        await remote.FlushAsync();
        await using HeraldClient publisher = new($"tcp://127.0.0.1:{cluster[0].Port}");

        string traceId;
        using (Activity checkout = Caller.StartActivity("checkout")!)
        {
            traceId = checkout.TraceId.ToHexString();
            await publisher.PublishAsync(topic, "across");
        }

        await got.Task.WaitAsync(TimeSpan.FromSeconds(30));
        IReadOnlyList<ReceivedSpan> trace = await FlushUntilAsync(receiver, cluster[1], application, spans => spans.Count(s => s.TraceId == traceId && s.Scope == BrokerTracing.SourceName) >= 2 && spans.Any(s => s.TraceId == traceId && s.Name == "process " + topic));
        trace = [.. trace.Where(s => s.TraceId == traceId)];

        ReceivedSpan send = Assert.Single(trace, s => s.Kind == Span.Types.SpanKind.Producer);
        ReceivedSpan[] routes = [.. trace.Where(s => s.Scope == BrokerTracing.SourceName)];
        Assert.Equal(2, routes.Length);
        Assert.All(routes, r => Assert.Equal((send.SpanId, "route"), (r.ParentSpanId, r.Name)));
        ReceivedSpan origin = Assert.Single(routes, r => (string?)r["herald.transport"] == "tcp");
        ReceivedSpan there = Assert.Single(routes, r => (string?)r["herald.transport"] == "cluster");
        Assert.Equal(0L, origin["herald.route.matched"]); // nobody on the publisher's node
        Assert.Equal(1L, there["herald.route.matched"]);
        Assert.Equal(1L, there["herald.route.queued"]);
        Assert.Equal(cluster[0].Engine().NodeId.ToString("x16", System.Globalization.CultureInfo.InvariantCulture), there["herald.cluster.origin"]);
        Assert.Equal(send.SpanId, Assert.Single(trace, s => s.Name == "process " + topic).ParentSpanId);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_publication_without_a_sampled_traceparent_gets_no_broker_span(HeraldTransport publishOver)
    {
        string topic = $"untraced.{publishOver}.{Guid.NewGuid():N}";
        await using var receiver = await OtlpReceiver.StartAsync();
        await using var broker = await StartTracedBrokerAsync(receiver);
        await using HeraldClient subscriber = Client(broker, HeraldTransport.Tcp, "subscriber");
        await using HeraldClient publisher = Client(broker, publishOver, "publisher"); // nothing listens to Herald.Client: headers go as given
        int received = 0;
        var all = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic, _ =>
        {
            if (Interlocked.Increment(ref received) == 4)
            {
                all.TrySetResult();
            }
        });
        string unsampled = $"00-{ActivityTraceId.CreateRandom()}-{ActivitySpanId.CreateRandom()}-00";
        string sampledTrace = ActivityTraceId.CreateRandom().ToHexString();

        await publisher.PublishAsync(topic, "no headers");
        await publisher.PublishAsync(topic, "headers, no traceparent", HeraldHeaders.Empty.Add("X-Tag", "kept"));
        await publisher.PublishAsync(topic, "not sampled", HeraldHeaders.Empty.Add("traceparent", unsampled));
        await publisher.PublishAsync(topic, "sampled", HeraldHeaders.Empty.Add("traceparent", $"00-{sampledTrace}-{ActivitySpanId.CreateRandom()}-01"));
        await all.Task.WaitAsync(TimeSpan.FromSeconds(30));

        // The last publication's span is the barrier: the earlier three were routed, and their spans (had there
        // been any) ended, before it, so once it is exported they would have been too.
        IReadOnlyList<ReceivedSpan> spans = await FlushUntilAsync(receiver, broker, application: null, s => s.Any(x => x.TraceId == sampledTrace));
        ReceivedSpan route = Assert.Single(spans, s => s.Scope == BrokerTracing.SourceName);
        Assert.Equal(sampledTrace, route.TraceId);
    }

    [Fact]
    public async Task A_publisher_that_samples_every_publication_gets_broker_spans_only_as_the_brokers_sampler_allows()
    {
        await using var receiver = await OtlpReceiver.StartAsync();
        await using var broker = await StartTracedBrokerAsync(receiver, o => o.Telemetry.Otlp.RemoteSampledSpansPerSecond = 1);
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander");
        await bystander.SubscribeAsync(1, "forced.>");
        await bystander.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher", capabilities: Capabilities.Headers);

        const int Publications = 200;
        var traces = new HashSet<string>();
        for (int i = 0; i < Publications; i++)
        {
            string traceId = ActivityTraceId.CreateRandom().ToHexString();
            traces.Add(traceId);
            await publisher.PublishAsync($"forced.{i}", "x", [new("traceparent", [$"00-{traceId}-{ActivitySpanId.CreateRandom()}-01"])]);
        }

        await publisher.PingPongAsync(); // every publication routed: any span of theirs ended before the PONG was written
        for (int i = 0; i < Publications; i++)
        {
            Assert.Equal($"forced.{i}", (await bystander.ReadMessageAsync()).Topic); // the bystander got them all, in order
        }

        _ = await FlushUntilAsync(receiver, broker, application: null, s => s.Any(x => x.Scope == BrokerTracing.SourceName));
        Assert.True(broker.Services.GetRequiredService<TracerProvider>().ForceFlush(10_000)); // whatever ended is exported
        List<ReceivedSpan> routes = receiver.Spans.Where(s => s.Scope == BrokerTracing.SourceName).ToList();
        Assert.All(routes, r => Assert.Contains(r.TraceId, traces));
        Assert.All(routes, r => Assert.Equal("route", r.Name)); // never the topic: a span name is a label
        Assert.InRange(routes.Count, 1, Publications / 4); // one a second (a burst of one): far fewer than the 200 the publisher asked for
    }

    public static TheoryData<SlowConsumerPolicy> Policies => [SlowConsumerPolicy.DropOldest, SlowConsumerPolicy.Disconnect];

    [Theory]
    [MemberData(nameof(Policies))]
    public async Task The_broker_span_counts_what_the_backlogs_did_and_the_compression(SlowConsumerPolicy policy)
    {
        await using var receiver = await OtlpReceiver.StartAsync();
        await using var broker = await StartTracedBrokerAsync(receiver, o =>
        {
            o.LongPoll.MaxPendingMessagesPerSession = 1;
            o.LongPoll.SlowConsumerPolicy = policy;
        });
        LongPollClient full = await LongPollClient.CreateAsync(broker.Http); // never polls: room for one message
        await full.SubscribeAsync(1, "feed");
        await using var zstd = await ProtocolClient.OpenAsync(broker.Port, "zstd", capabilities: Capabilities.Zstd | Capabilities.Headers);
        await zstd.SubscribeAsync(1, "feed");
        await zstd.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher", capabilities: Capabilities.Headers);
        string traceId = ActivityTraceId.CreateRandom().ToHexString();
        string payload = string.Concat(Enumerable.Repeat("compressible ", 400)); // 5,200 bytes, well over NoCompressionLimit

        await publisher.PublishAsync("feed", "fills the long-poll backlog");
        await publisher.PublishAsync("feed", payload, [new("traceparent", [$"00-{traceId}-{ActivitySpanId.CreateRandom()}-01"])]);
        await publisher.PingPongAsync(); // both routed: the span ended before the PONG was written

        ReceivedSpan route = Assert.Single(await FlushUntilAsync(receiver, broker, application: null, s => s.Any(x => x.TraceId == traceId)), s => s.TraceId == traceId);
        Assert.Equal(2L, route["herald.route.matched"]);
        Assert.Equal(policy == SlowConsumerPolicy.DropOldest ? 2L : 1L, route["herald.route.queued"]);
        Assert.Equal(policy == SlowConsumerPolicy.DropOldest ? 0L : 1L, route["herald.route.dropped"]); // Disconnect: the full backlog refused it
        Assert.Equal(policy == SlowConsumerPolicy.DropOldest ? 1L : 0L, route["herald.route.evicted"]); // DropOldest: the older message made room
        Assert.Equal(true, route["herald.route.compressed"]); // the Zstd subscriber's form, compressed by the broker
        Assert.True(route["herald.route.compression_ratio"] is double ratio && ratio > 2, $"ratio {route["herald.route.compression_ratio"]}");
        Assert.Equal((long)Encoding.UTF8.GetByteCount(payload), route["messaging.message.body.size"]);
    }

    /// <summary>What an application registers to trace its messages: the client's source and its own, exported to the receiver.</summary>
    private static TracerProvider ApplicationTracing(OtlpReceiver receiver) => Sdk.CreateTracerProviderBuilder()
        .ConfigureResource(r => r.AddService("herald-test-app"))
        .AddSource("Herald.Client", Caller.Name)
        .AddOtlpExporter(o =>
        {
            o.Protocol = OtlpExportProtocol.HttpProtobuf;
            o.Endpoint = receiver.TracesEndpoint;
        })
        .Build();

    private static Task<TestBroker> StartTracedBrokerAsync(OtlpReceiver receiver, Action<HeraldOptions>? configure = null) => TestBroker.StartAsync(o =>
    {
        o.Telemetry.Otlp.Enabled = true;
        o.Telemetry.Otlp.Protocol = OtlpProtocol.HttpProtobuf;
        o.Telemetry.Otlp.Endpoint = receiver.BaseAddress;
        configure?.Invoke(o);
    });

    private static HeraldClient Client(TestBroker broker, HeraldTransport transport, string name) => new(new HeraldClientOptions
    {
        Url = transport == HeraldTransport.Tcp ? $"tcp://127.0.0.1:{broker.Port}" : $"http://127.0.0.1:{broker.HttpPort}",
        ClientName = name,
    });

    /// <summary>Pushes the broker's (and the application's) ended spans out until <paramref name="condition"/> holds (30 s at most): a span ends after the handler returns, so it may miss one flush.</summary>
    private static async Task<IReadOnlyList<ReceivedSpan>> FlushUntilAsync(OtlpReceiver receiver, TestBroker broker, TracerProvider? application, Func<IReadOnlyList<ReceivedSpan>, bool> condition)
    {
        var tracer = broker.Services.GetRequiredService<TracerProvider>();
        return await Until.Value(
            () =>
            {
                Assert.True(tracer.ForceFlush(10_000));
                Assert.True(application?.ForceFlush(10_000) ?? true);
                return Task.FromResult(receiver.Spans);
            },
            condition,
            "the spans the test waits for are exported");
    }
}
