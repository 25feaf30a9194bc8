using System.Diagnostics.Metrics;
using Herald.Broker.Telemetry;

namespace Herald.Broker.Compression;

/// <summary>
/// Compression instruments, on the broker's one meter. Tagged by decision (bounded), never by topic:
/// per-action ratios are in the advisor, not in metric tags of unbounded cardinality.
/// </summary>
internal sealed class CompressionMetrics
{
    private readonly Counter<long> _decisions;
    private readonly Counter<long> _bytesIn;
    private readonly Counter<long> _bytesOut;
    private readonly Counter<double> _cpu;
    private long _totalIn;
    private long _totalOut;

    public CompressionMetrics(IMeterFactory meterFactory)
    {
        Meter meter = meterFactory.Create(BrokerMetrics.MeterName);
        _decisions = meter.CreateCounter<long>("herald.compression.decisions", "{message}", "Compression decisions per publication that had a Zstd-capable subscriber, by decision (compress, probe, too_small, incompressible, cpu_busy, disabled).");
        _bytesIn = meter.CreateCounter<long>("herald.compression.input", "By", "Payload bytes before compression.");
        _bytesOut = meter.CreateCounter<long>("herald.compression.output", "By", "Payload bytes after compression.");
        _cpu = meter.CreateCounter<double>("herald.compression.cpu_time", "s", "CPU time spent compressing.");
        meter.CreateObservableGauge("herald.compression.ratio", () => Interlocked.Read(ref _totalIn) == 0 ? 1.0 : (double)Interlocked.Read(ref _totalOut) / Interlocked.Read(ref _totalIn), "1", "Compressed/original bytes over all compressions so far.");
    }

    /// <summary>Payload bytes compressed so far, before and after (the status page's overall ratio).</summary>
    public (long Before, long After) Bytes => (Interlocked.Read(ref _totalIn), Interlocked.Read(ref _totalOut));

    /// <summary>Compressions done so far (tests: one per publication, whatever the subscriber count).</summary>
    public long Compressions { get; private set; }

    public void Decision(CompressionDecision decision) => _decisions.Add(1, new KeyValuePair<string, object?>("decision", Name(decision)));

    public void Compressed(int before, int after, TimeSpan cpu)
    {
        Compressions++;
        Interlocked.Add(ref _totalIn, before);
        Interlocked.Add(ref _totalOut, after);
        _bytesIn.Add(before);
        _bytesOut.Add(after);
        _cpu.Add(cpu.TotalSeconds);
    }

    private static string Name(CompressionDecision decision) => decision switch
    {
        CompressionDecision.Compress => "compress",
        CompressionDecision.Probe => "probe",
        CompressionDecision.TooSmall => "too_small",
        CompressionDecision.Incompressible => "incompressible",
        CompressionDecision.CpuBusy => "cpu_busy",
        _ => "disabled",
    };
}
