using System.Globalization;
using System.Net;
using System.Text;
using Herald.Broker.Hosting;
using Herald.Broker.Tests.Infrastructure;
using Herald.Broker.Tests.Infrastructure.Otlp;
using Microsoft.Extensions.DependencyInjection;
using OpenTelemetry.Metrics;
using OpenTelemetry.Trace;

namespace Herald.Broker.Tests;

/// <summary>
/// The Prometheus scrape endpoint and the OTLP export, read the way a collector reads them. Isolated:
/// OpenTelemetry subscribes to meters by name, so a broker's /metrics would also count the brokers of
/// tests running beside it in this process (a broker process has one).
/// </summary>
[Collection(nameof(Isolated))]
public sealed class OperationsMetricsTests
{
    [Fact]
    public async Task Scraped_metrics_change_as_messages_flow_over_tcp_and_long_poll()
    {
        await using var broker = await TestBroker.StartAsync();
        PrometheusScrape before = await PrometheusScrape.GetAsync(broker.Monitoring);
        Assert.Equal(0, before.Sum("herald_connections", ("herald_transport", "tcp")));
        Assert.True(before.Has("herald_connections"), "open connections are reported (as 0) before anyone connects");

        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, "sub");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "pub");
        await subscriber.SubscribeAsync(1, "orders.*");
        await subscriber.PingPongAsync();
        LongPollClient poller = await LongPollClient.CreateAsync(broker.Http);
        await poller.SubscribeAsync(1, "orders.>");
        for (int i = 0; i < 5; i++)
        {
            await publisher.PublishAsync("orders.eu", $"tcp {i}");
        }

        using (await LongPollClient.PublishOneShotAsync(broker.Http, "orders.us", "http"))
        {
        }

        await publisher.PingPongAsync();
        for (int i = 0; i < 6; i++)
        {
            await subscriber.ReadMessageAsync();
        }

        Assert.Equal(6, (await poller.PollAsync(0)).Count);
        PrometheusScrape during = await PrometheusScrape.GetAsync(broker.Monitoring);

        Assert.Equal(5, during.Sum("herald_messages_published_total", ("herald_transport", "tcp")) - before.Sum("herald_messages_published_total", ("herald_transport", "tcp")));
        Assert.Equal(1, during.Sum("herald_messages_published_total", ("herald_transport", "longpoll")) - before.Sum("herald_messages_published_total", ("herald_transport", "longpoll")));
        Assert.Equal(12, during.Sum("herald_messages_delivered_total") - before.Sum("herald_messages_delivered_total")); // 6 publications x 2 subscriptions
        Assert.Equal(2, during.Sum("herald_connections", ("herald_transport", "tcp")));
        Assert.Equal(1, during.Sum("herald_connections", ("herald_transport", "longpoll")));
        Assert.Equal(2, during.Sum("herald_connections_opened_total", ("herald_transport", "tcp")));
        Assert.Equal(2, during.Sum("herald_subscriptions"));
        Assert.Equal(2, during.Sum("herald_topics")); // orders.* and orders.>
        Assert.Equal(1, during.Sum("herald_longpoll_polls_total", ("herald_poll_outcome", "messages")));
        Assert.Equal(1, during.Sum("http_server_request_duration_seconds_count", ("http_route", "/poll/publish"))); // ASP.NET Core's request metrics: this test's one one-shot publish
        Assert.True(during.Has("dotnet_process_cpu_time_seconds_total"), "runtime metrics are exported");

        await subscriber.DisposeAsync();
        await publisher.DisposeAsync();
        PrometheusScrape after = await Until.Value(() => PrometheusScrape.GetAsync(broker.Monitoring), s => s.Sum("herald_connections", ("herald_transport", "tcp")) == 0, "no TCP connection in the scrape");
        Assert.Equal(1, after.Sum("herald_subscriptions")); // the long-poll one is left
    }

    [Fact]
    public async Task The_fanout_latency_samples_each_publishers_first_publication_and_one_in_sixteen_after()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, "sub");
        await subscriber.SubscribeAsync(1, "samples.>");
        await subscriber.PingPongAsync();
        await using var busy = await ProtocolClient.OpenAsync(broker.Port, "busy");
        await using var quiet = await ProtocolClient.OpenAsync(broker.Port, "quiet");

        for (int i = 0; i < 33; i++)
        {
            await busy.PublishAsync("samples.busy", $"{i}");
        }

        await quiet.PublishAsync("samples.quiet", "once");
        for (int i = 0; i < 34; i++)
        {
            await subscriber.ReadMessageAsync(); // each was written, so its fan-out ended (and was recorded if sampled)
        }

        PrometheusScrape scrape = await PrometheusScrape.GetAsync(broker.Monitoring);
        Assert.Equal(4, scrape.Sum("herald_fanout_duration_seconds_count")); // busy: its 1st, 17th and 33rd; quiet: its only one
    }

    [Fact]
    public async Task Prometheus_can_be_turned_off()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Telemetry.Prometheus = false);

        using HttpResponseMessage response = await broker.Monitoring.GetAsync("/metrics");

        Assert.Equal(HttpStatusCode.NotFound, response.StatusCode);
    }

    [Fact]
    public async Task Otlp_export_sends_broker_metrics_and_http_traces_to_a_collector()
    {
        await using var receiver = await OtlpReceiver.StartAsync();
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Telemetry.Otlp.Enabled = true;
            o.Telemetry.Otlp.Protocol = OtlpProtocol.HttpProtobuf;
            o.Telemetry.Otlp.Endpoint = receiver.BaseAddress;
            o.Telemetry.Otlp.MetricsInterval = TimeSpan.FromMilliseconds(200);
        });
        await using (var client = await ProtocolClient.OpenAsync(broker.Port))
        {
            await client.PublishAsync("traced", "x");
            await client.PingPongAsync();
        }

        using (await LongPollClient.PublishOneShotAsync(broker.Http, "traced", "over http"))
        using (await broker.Monitoring.GetAsync("/healthz"))
        {
        }

        // Push now rather than wait for the span batch delay and the export interval. (The meter provider's
        // flush reports false whatever OTLP did: its Prometheus reader only collects when scraped.) A request's
        // span ends just after its response is sent, so it may miss one flush: flush until it is there (10 s at
        // most), then once more so that a /healthz span, had there been one, would be out too.
        var tracer = broker.Services.GetRequiredService<TracerProvider>();
        await Until.True(
            () =>
            {
                Assert.True(tracer.ForceFlush(10_000));
                return receiver.Spans.Any(IsPollPublish);
            },
            "the long-poll publish's span is exported");

        Assert.True(tracer.ForceFlush(10_000));
        broker.Services.GetRequiredService<MeterProvider>().ForceFlush(10_000);

        IReadOnlyList<ReceivedSpan> spans = receiver.Spans;
        IReadOnlyList<ReceivedMetric> metrics = await Until.Value(() => Task.FromResult(receiver.Metrics), m => m.Any(metric => metric.Name == "herald.messages.published"), "the published counter exported over OTLP");
        ReceivedSpan publish = Assert.Single(spans, IsPollPublish);                     // the span of the long-poll publish
        Assert.Equal(Span.Types.SpanKind.Server, publish.Kind);
        Assert.Equal(TelemetrySetup.ServiceName, publish.Service);
        Assert.DoesNotContain(spans, s => s["url.path"] is "/healthz");               // probes are not traced
        Assert.DoesNotContain(spans, s => s.Scope == "Herald.Broker");                // nothing carried a traceparent
        ReceivedMetric published = Assert.Single(metrics.Where(m => m.Name == "herald.messages.published").Take(1));
        Assert.Contains("herald.transport", published.AttributeKeys);
        Assert.Equal(TelemetrySetup.ServiceName, published.Service);
    }

    private static bool IsPollPublish(ReceivedSpan span) => span["url.path"] is "/poll/publish";
}

/// <summary>One sample of a Prometheus text exposition: <c>name{labels} value</c>.</summary>
public sealed record PrometheusSample(string Name, IReadOnlyDictionary<string, string> Labels, double Value);

/// <summary>A parsed <c>/metrics</c> answer (Prometheus text format 0.0.4), as Prometheus itself reads it.</summary>
public sealed class PrometheusScrape
{
    private PrometheusScrape(List<PrometheusSample> samples, string text)
    {
        Samples = samples;
        Text = text;
        Names = samples.Select(s => s.Name).ToHashSet(StringComparer.Ordinal);
    }

    public IReadOnlyList<PrometheusSample> Samples { get; }

    public IReadOnlySet<string> Names { get; }

    public string Text { get; }

    public static async Task<PrometheusScrape> GetAsync(HttpClient http)
    {
        using HttpResponseMessage response = await http.GetAsync("/metrics");
        response.EnsureSuccessStatusCode();
        Assert.StartsWith("text/plain", response.Content.Headers.ContentType?.MediaType, StringComparison.Ordinal);
        return Parse(await response.Content.ReadAsStringAsync());
    }

    public static PrometheusScrape Parse(string text)
    {
        var samples = new List<PrometheusSample>();
        foreach (string raw in text.Split('\n'))
        {
            string line = raw.Trim();
            if (line.Length == 0 || line.StartsWith('#'))
            {
                continue;
            }

            int brace = line.IndexOf('{', StringComparison.Ordinal);
            int space = line.IndexOf(' ', StringComparison.Ordinal);
            var labels = new Dictionary<string, string>(StringComparer.Ordinal);
            string name;
            string rest;
            if (brace >= 0 && brace < space)
            {
                name = line[..brace];
                int end = ParseLabels(line, brace + 1, labels);
                rest = line[(end + 1)..].Trim();
            }
            else
            {
                name = line[..space];
                rest = line[(space + 1)..].Trim();
            }

            string value = rest.Split(' ')[0];
            samples.Add(new PrometheusSample(name, labels, value switch
            {
                "+Inf" => double.PositiveInfinity,
                "-Inf" => double.NegativeInfinity,
                "NaN" => double.NaN,
                _ => double.Parse(value, CultureInfo.InvariantCulture),
            }));
        }

        return new PrometheusScrape(samples, text);
    }

    public bool Has(string name) => Names.Contains(name);

    /// <summary>The sum of every sample of <paramref name="name"/> whose labels include <paramref name="where"/> (0 if none).</summary>
    public double Sum(string name, params (string Label, string Value)[] where) =>
        Samples.Where(s => s.Name == name && where.All(w => s.Labels.TryGetValue(w.Label, out string? v) && v == w.Value)).Sum(s => s.Value);

    // Returns the index of the closing brace.
    private static int ParseLabels(string line, int i, Dictionary<string, string> labels)
    {
        while (line[i] != '}')
        {
            int equals = line.IndexOf('=', i);
            string label = line[i..equals].Trim(' ', ',');
            var value = new StringBuilder();
            int j = equals + 2; // past ="
            for (; line[j] != '"'; j++)
            {
                if (line[j] == '\\')
                {
                    j++;
                    value.Append(line[j] == 'n' ? '\n' : line[j]);
                }
                else
                {
                    value.Append(line[j]);
                }
            }

            labels[label] = value.ToString();
            i = j + 1;
            while (line[i] is ',' or ' ')
            {
                i++;
            }
        }

        return i;
    }
}
