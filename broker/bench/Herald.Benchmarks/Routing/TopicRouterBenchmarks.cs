using System.Diagnostics.Metrics;
using BenchmarkDotNet.Attributes;
using Herald.Broker.Delivery;
using Herald.Broker.Routing;
using Herald.Broker.Telemetry;

namespace Herald.Benchmarks.Routing;

/// <summary>
/// The router's two paths with a match cache of <see cref="CachedTopics"/> topics that other publishers
/// filled (<c>device.N.status</c>, none subscribed): one subscription change (SUBSCRIBE then UNSUBSCRIBE,
/// of an exact topic; of a wildcard that shares no token with the cached topics; and of one whose '*' follows their
/// first token, <c>device.*.alarm</c>, so that a walk from the front would reach every one of them), and
/// a publisher's match of its own cached topic. A change must cost the same whatever the cache holds;
/// a publish match is one lock-free cache lookup. Figures are per pair (changes) or per lookup (match).
/// </summary>
[MemoryDiagnoser]
public class TopicRouterBenchmarks : IDisposable
{
    private const string HotTopic = "bench.hot";

    private readonly ServiceMeterFactory _meters = new();
    private TopicRouter _router = null!;
    private Subscription _exact = null!;
    private Subscription _wildcard = null!;
    private Subscription _fanning = null!;

    /// <summary>Topics in the match cache, the publisher's own included (0: none but the publisher's, cached on its first match).</summary>
    [Params(0, 1_000, 65_536)]
    public int CachedTopics { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _router = new TopicRouter(new BrokerMetrics(_meters));
        var sink = DiscardingSink.Instance; // subscribers that drop everything: the router's cost alone
        _router.Add(new Subscription(sink, 1, HotTopic, noEcho: false));
        _exact = new Subscription(sink, 2, "other.exact", noEcho: false);
        _wildcard = new Subscription(sink, 3, "other.*.alarm", noEcho: false);
        _fanning = new Subscription(sink, 4, "device.*.alarm", noEcho: false);
        for (int i = 0; i < CachedTopics - 1; i++)
        {
            _router.Match($"device.{i}.status".AsSpan());
        }

        if (_router.Match(HotTopic.AsSpan()).Length != 1)
        {
            throw new InvalidOperationException("The publisher's topic does not match its subscription.");
        }
    }

    [GlobalCleanup]
    public void Dispose()
    {
        _router.Dispose();
        _meters.Dispose();
        GC.SuppressFinalize(this);
    }

    [Benchmark]
    public bool SubscribeUnsubscribeExact()
    {
        _router.Add(_exact);
        return _router.Remove(_exact);
    }

    [Benchmark]
    public bool SubscribeUnsubscribeWildcard()
    {
        _router.Add(_wildcard);
        return _router.Remove(_wildcard);
    }

    [Benchmark]
    public bool SubscribeUnsubscribeFanningWildcard()
    {
        _router.Add(_fanning);
        return _router.Remove(_fanning);
    }

    [Benchmark(Baseline = true)]
    public int PublishMatch() => _router.Match(HotTopic.AsSpan()).Length;
}
