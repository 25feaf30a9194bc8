using System.Collections.Concurrent;
using System.Diagnostics;
using Herald.Client.Telemetry;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// Activity listeners are process-wide: these tests run alone (no other test publishes while one listens,
/// and "nothing listens" holds while the last one runs).
/// </summary>
[CollectionDefinition(nameof(TracingCollection), DisableParallelization = true)]
public sealed class TracingCollection : ICollectionFixture<BrokerFixture>;

/// <summary>
/// One trace per message (issue 20.3): the publisher's <c>send</c> span travels as <c>traceparent</c> in the
/// headers, through the real broker, and the subscriber's handler runs in a <c>process</c> span under it.
/// </summary>
[Collection(nameof(TracingCollection))]
public class TracingTests(BrokerFixture fixture)
{
    private static readonly ActivitySource Caller = new("Herald.Client.Tests.Caller");

    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_publication_and_the_handler_that_processes_it_are_one_trace(HeraldTransport transport)
    {
        string topic = Topics.Unique("traced");
        using var spans = new SpanRecorder(ClientTracing.SourceName, Caller.Name);
        await using HeraldClient subscriber = fixture.Client(transport);
        await using HeraldClient publisher = fixture.Client(transport);
        var handled = new TaskCompletionSource<(Activity? Span, HeraldHeaders Headers)>(TaskCreationOptions.RunContinuationsAsynchronously);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic, m => handled.TrySetResult((Activity.Current, m.Headers)));

        Activity caller = Caller.StartActivity("checkout")!;
        await publisher.PublishAsync(topic, "traced", HeraldHeaders.Empty.Add("X-Tag", "kept"));
        caller.Dispose();
        (Activity? consumer, HeraldHeaders headers) = await handled.Task.Within();

        Activity producer = Assert.Single(spans.Stopped, a => a.Kind == ActivityKind.Producer && Equals(a.GetTagItem("messaging.destination.name"), topic));
        Assert.Equal("send " + topic, producer.DisplayName);
        Assert.Equal(caller.SpanId, producer.ParentSpanId); // the current span is the publication's parent
        Assert.Equal(producer.Id, headers.GetFirstValue("traceparent"));
        Assert.Equal("kept", headers.GetFirstValue("X-Tag"));

        Assert.NotNull(consumer);
        Assert.Equal(ActivityKind.Consumer, consumer.Kind);
        Assert.Equal(ClientTracing.SourceName, consumer.Source.Name);
        Assert.Equal("process " + topic, consumer.DisplayName);
        Assert.Equal(caller.TraceId, consumer.TraceId);
        Assert.Equal(producer.TraceId, consumer.TraceId);
        Assert.Equal(producer.SpanId, consumer.ParentSpanId);
        Assert.Contains(consumer.Links, l => l.Context.TraceId == producer.TraceId && l.Context.SpanId == producer.SpanId);

        Assert.Equal("herald", producer.GetTagItem("messaging.system"));
        Assert.Equal("send", producer.GetTagItem("messaging.operation.type"));
        Assert.Equal(6, producer.GetTagItem("messaging.message.body.size"));
        Assert.Equal("127.0.0.1", producer.GetTagItem("server.address"));
        Assert.Equal("test-" + transport, producer.GetTagItem("messaging.client.id"));
        Assert.Equal("herald", consumer.GetTagItem("messaging.system"));
        Assert.Equal("process", consumer.GetTagItem("messaging.operation.type"));
        Assert.Equal(topic, consumer.GetTagItem("messaging.destination.name"));
        Assert.Equal(topic, consumer.GetTagItem("messaging.destination.subscription.name"));
    }

    [Fact]
    public async Task With_nobody_listening_to_Herald_Client_no_traceparent_is_added_even_inside_a_span()
    {
        string topic = Topics.Unique("untraced");
        using var callerOnly = new SpanRecorder(Caller.Name);
        await using HeraldClient subscriber = fixture.Client(HeraldTransport.Tcp);
        await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic);

        Assert.False(ClientTracing.Source.HasListeners());
        using (Activity? caller = Caller.StartActivity("checkout"))
        {
            Assert.NotNull(caller);
            await publisher.PublishAsync(topic, "plain");
            await publisher.PublishAsync(topic, "tagged", HeraldHeaders.Empty.Add("X-Tag", "a"));
        }

        HeraldMessage plain = await subscription.ReadAsync(Wait.Token());
        HeraldMessage tagged = await subscription.ReadAsync(Wait.Token());
        Assert.Empty(plain.Headers);
        Assert.Equal(["X-Tag"], tagged.Headers.Keys);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_traced_publication_on_a_connection_without_headers_goes_without_its_trace_context(HeraldTransport transport)
    {
        string topic = Topics.Unique("traced.old");
        using var spans = new SpanRecorder(ClientTracing.SourceName);
        await using HeraldClient subscriber = fixture.Client(HeraldTransport.Tcp);
        await using HeraldClient publisher = fixture.Client(transport, o => o.EnableHeaders = false);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic);

        await publisher.PublishAsync(topic, "still sent");

        HeraldMessage message = await subscription.ReadAsync(Wait.Token());
        Assert.Equal("still sent", message.GetString());
        Assert.Empty(message.Headers);
        Assert.Single(spans.Stopped, a => a.Kind == ActivityKind.Producer && Equals(a.GetTagItem("messaging.destination.name"), topic));
    }

    /// <summary>Records the spans of the named sources, sampling all of them, for as long as it lives.</summary>
    private sealed class SpanRecorder : IDisposable
    {
        private readonly ActivityListener _listener;

        public SpanRecorder(params string[] sources)
        {
            _listener = new ActivityListener
            {
                ShouldListenTo = s => sources.Contains(s.Name),
                Sample = static (ref ActivityCreationOptions<ActivityContext> _) => ActivitySamplingResult.AllDataAndRecorded,
                ActivityStopped = Stopped.Enqueue,
            };
            ActivitySource.AddActivityListener(_listener);
        }

        public ConcurrentQueue<Activity> Stopped { get; } = new();

        public void Dispose() => _listener.Dispose();
    }
}
