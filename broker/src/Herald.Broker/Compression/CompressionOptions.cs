using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Compression;

/// <summary>
/// Adaptive Zstd compression (the adaptive-encoding seed): decided per publication, at run time, by
/// size, process CPU and the compression ratio each action (topic) has been getting. Bound from
/// <c>Herald:Compression</c>; every threshold is in the README's configuration table.
/// </summary>
public sealed class CompressionOptions
{
    /// <summary>Fossil deltas against a topic's previous publication (<c>Herald:Compression:Deltas</c>, spec §11.2).</summary>
    public DeltaOptions Deltas { get; set; } = new();

    /// <summary>Offer Zstd to clients that support it. Off: every frame goes out plain.</summary>
    public bool Enabled { get; set; } = true;

    /// <summary>Never compress payloads below this many bytes (the seed's NoCompressionLimit).</summary>
    [Range(0, int.MaxValue)]
    public int NoCompressionLimit { get; set; } = 1024;

    /// <summary>Payloads below this size use <see cref="FastLevel"/>.</summary>
    [Range(1, int.MaxValue)]
    public int FastMaxBytes { get; set; } = 16 * 1024;

    /// <summary>Payloads below this size (and at least <see cref="FastMaxBytes"/>) use <see cref="NormalLevel"/>; larger use <see cref="MaxLevel"/>.</summary>
    [Range(1, int.MaxValue)]
    public int NormalMaxBytes { get; set; } = 128 * 1024;

    [Range(-5, 22)]
    public int FastLevel { get; set; } = 1;

    [Range(-5, 22)]
    public int NormalLevel { get; set; } = 3;

    [Range(-5, 22)]
    public int MaxLevel { get; set; } = 7;

    /// <summary>Process CPU (fraction of all cores) above which compression starts backing off; 1: never.</summary>
    [Range(0.0, 1.0)]
    public double CpuBackoffStart { get; set; } = 0.6;

    /// <summary>Process CPU (fraction of all cores) at and above which nothing is compressed (the seed's CpuDisableLimit); 1: never.</summary>
    [Range(0.0, 1.0)]
    public double CpuDisableLimit { get; set; } = 0.85;

    /// <summary>An action and size bucket whose average compressed/original ratio is above this stops being compressed (the seed's CompressionRatioDisableLimit).</summary>
    [Range(0.0, 1.0)]
    public double CompressionRatioDisableLimit { get; set; } = 0.9;

    /// <summary>Compressions an action and size bucket gets before its ratio can switch it off.</summary>
    [Range(1, 1000)]
    public int WarmupSamples { get; set; } = 3;

    /// <summary>A switched-off action is compressed again (probed) every this many messages...</summary>
    [Range(1, int.MaxValue)]
    public int ProbeEveryMessages { get; set; } = 100;

    /// <summary>...or once this much time has passed, whichever comes first.</summary>
    public TimeSpan ProbeInterval { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>Most actions (topic and size bucket) tracked; past it the table starts over.</summary>
    [Range(16, 10_000_000)]
    public int MaxTrackedActions { get; set; } = 10_000;
}
