using System.Diagnostics.Metrics;

namespace Herald.Benchmarks.Routing;

/// <summary>The meters a broker's <c>BrokerMetrics</c> is built on, outside a host: kept and disposed with the benchmark.</summary>
internal sealed class ServiceMeterFactory : IMeterFactory
{
    private readonly List<Meter> _meters = [];

    public Meter Create(MeterOptions options)
    {
        var meter = new Meter(options.Name, options.Version, options.Tags, scope: this);
        _meters.Add(meter);
        return meter;
    }

    public void Dispose()
    {
        foreach (Meter meter in _meters)
        {
            meter.Dispose();
        }
    }
}
