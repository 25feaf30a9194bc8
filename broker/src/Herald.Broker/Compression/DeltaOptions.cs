using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Compression;

/// <summary>
/// Fossil deltas against a topic's previous publication (spec §11.2), bound from <c>Herald:Compression:Deltas</c>;
/// every limit is in the README's configuration table and its memory formula.
/// </summary>
public sealed class DeltaOptions
{
    /// <summary>Grant the deltas capability (TCP and WebSocket). Off: subscriptions that ask get full messages.</summary>
    public bool Enabled { get; set; } = true;

    /// <summary>Largest payload kept as a topic's base: a larger publication goes out full, and so does the next one.</summary>
    [Range(0, int.MaxValue)]
    public int MaxPayloadBytes { get; set; } = 16 * 1024;

    /// <summary>Bytes kept for all topics' bases together: a topic that would pass it gets full messages until room is made.</summary>
    [Range(0, long.MaxValue)]
    public long MaxKeptBytes { get; set; } = 64L * 1024 * 1024;

    /// <summary>A topic whose average delta/original ratio is above this stops computing deltas, but for probes.</summary>
    [Range(0.0, 1.0)]
    public double RatioDisableLimit { get; set; } = 0.8;

    /// <summary>Deltas a topic computes before its ratio can switch it off.</summary>
    [Range(1, 1000)]
    public int WarmupSamples { get; set; } = 3;

    /// <summary>A switched-off topic computes a delta again (a probe) every this many publications.</summary>
    [Range(1, int.MaxValue)]
    public int ProbeEveryMessages { get; set; } = 100;
}
