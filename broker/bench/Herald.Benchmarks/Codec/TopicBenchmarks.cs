using System.Text;
using BenchmarkDotNet.Attributes;
using Herald.Protocol;

namespace Herald.Benchmarks.Codec;

/// <summary>
/// Topic checks the broker runs on every PUBLISH (<see cref="Topic.ValidateName"/>) and every SUBSCRIBE
/// (<see cref="Topic.ValidatePattern"/>), over a typical short topic and a long one near real-world
/// worst cases (spec §5).
/// </summary>
[MemoryDiagnoser]
public class TopicBenchmarks
{
    private const int MaxTopic = 256;

    private static readonly byte[] Typical = Encoding.ASCII.GetBytes("prices.eu.ACME");
    private static readonly byte[] Long = Encoding.ASCII.GetBytes(
        "telemetry.region-eu-west-1.cluster-0042.node-17.service-checkout.instance-7f3a9c.metrics.http.requests.latency.p99.bucket-250ms.v2");
    private static readonly byte[] Pattern = Encoding.ASCII.GetBytes("prices.*.>");

    [Benchmark(Baseline = true)]
    public ErrorCode ValidateName_Typical() => Topic.ValidateName(Typical, MaxTopic);

    [Benchmark]
    public ErrorCode ValidateName_Long() => Topic.ValidateName(Long, MaxTopic);

    [Benchmark]
    public ErrorCode ValidatePattern_Wildcards() => Topic.ValidatePattern(Pattern, MaxTopic);
}
