using System.Collections.Concurrent;
using System.Numerics;

namespace Herald.Broker.Compression;

/// <summary>Why a publication was, or was not, compressed.</summary>
public enum CompressionDecision
{
    Compress,
    Probe,
    TooSmall,
    Incompressible,
    CpuBusy,
    Disabled,
}

/// <summary>
/// Decides per publication whether to compress, after the adaptive-encoding seed: never below
/// <see cref="CompressionOptions.NoCompressionLimit"/>; never when the process is busy (backing off
/// progressively between <see cref="CompressionOptions.CpuBackoffStart"/> and
/// <see cref="CompressionOptions.CpuDisableLimit"/>); and not for an action (topic) and size bucket
/// whose recent compressed/original ratio is worse than the limit, except for a probe every N messages
/// or T seconds, so an action whose content turns compressible is switched back on.
/// </summary>
/// <remarks>Thread-safe: the table is concurrent, each action's statistics are guarded by their own lock.</remarks>
internal sealed class CompressionAdvisor
{
    private const double RecentWeight = 0.3; // exponential average: recent messages count most

    private readonly CompressionOptions _options;
    private readonly ICpuLoad _cpu;
    private readonly TimeProvider _time;
    private readonly ConcurrentDictionary<(string Action, int Bucket), ActionStats> _actions = new();

    public CompressionAdvisor(CompressionOptions options, ICpuLoad cpu, TimeProvider time)
    {
        _options = options;
        _cpu = cpu;
        _time = time;
    }

    public int TrackedActions => _actions.Count;

    /// <summary>Decides for a payload of <paramref name="size"/> bytes on <paramref name="action"/>; <paramref name="level"/> is the Zstd level to use.</summary>
    public CompressionDecision Decide(string action, int size, out int level)
    {
        level = size < _options.FastMaxBytes ? _options.FastLevel : size < _options.NormalMaxBytes ? _options.NormalLevel : _options.MaxLevel;
        if (!_options.Enabled)
        {
            return CompressionDecision.Disabled;
        }

        if (size < _options.NoCompressionLimit)
        {
            return CompressionDecision.TooSmall;
        }

        double cpu = _cpu.Current;
        if (cpu >= _options.CpuDisableLimit && _options.CpuDisableLimit < 1) // 1: never (a sample may read just above it)
        {
            return CompressionDecision.CpuBusy;
        }

        if (cpu > _options.CpuBackoffStart && _options.CpuBackoffStart < 1)
        {
            // Linear back-off: at the start of the band nearly everything is compressed, at its end nothing.
            double keep = (_options.CpuDisableLimit - cpu) / (_options.CpuDisableLimit - _options.CpuBackoffStart);
            if (Random.Shared.NextDouble() >= keep)
            {
                return CompressionDecision.CpuBusy;
            }
        }

        ActionStats stats = Stats(action, size);
        lock (stats)
        {
            if (stats.Samples < _options.WarmupSamples || stats.Ratio <= _options.CompressionRatioDisableLimit)
            {
                return CompressionDecision.Compress;
            }

            stats.SkippedSinceProbe++;
            long now = _time.GetTimestamp();
            if (stats.SkippedSinceProbe >= _options.ProbeEveryMessages || _time.GetElapsedTime(stats.LastProbe, now) >= _options.ProbeInterval)
            {
                stats.SkippedSinceProbe = 0;
                stats.LastProbe = now;
                return CompressionDecision.Probe;
            }

            return CompressionDecision.Incompressible;
        }
    }

    /// <summary>Records what a compression achieved, for the action's ratio.</summary>
    public void Record(string action, int size, int compressedSize)
    {
        ActionStats stats = Stats(action, size);
        double ratio = size == 0 ? 1 : (double)compressedSize / size;
        lock (stats)
        {
            stats.Ratio = stats.Samples == 0 ? ratio : (stats.Ratio * (1 - RecentWeight)) + (ratio * RecentWeight);
            stats.Samples++;
            if (stats.Ratio > _options.CompressionRatioDisableLimit && stats.Samples >= _options.WarmupSamples && stats.SkippedSinceProbe == 0 && stats.LastProbe == 0)
            {
                stats.LastProbe = _time.GetTimestamp(); // just switched off: the probe clock starts now
            }
        }
    }

    /// <summary>The current average ratio of an action's size bucket, or null before its first compression.</summary>
    public double? Ratio(string action, int size) => _actions.TryGetValue((action, Bucket(size)), out ActionStats? s) && s.Samples > 0 ? s.Ratio : null;

    /// <summary>
    /// The actions (topics) with a compression ratio now, their size buckets merged (weighted by samples):
    /// the <paramref name="max"/> compressed most often. For the status page; walks the table (bounded by
    /// <see cref="CompressionOptions.MaxTrackedActions"/>), never on the message path.
    /// </summary>
    public List<ActionRatio> Ratios(int max)
    {
        var merged = new Dictionary<string, (double Weighted, long Samples, bool Compressing)>(StringComparer.Ordinal);
        foreach (KeyValuePair<(string Action, int Bucket), ActionStats> entry in _actions)
        {
            ActionStats stats = entry.Value;
            double ratio;
            int samples;
            lock (stats)
            {
                ratio = stats.Ratio;
                samples = stats.Samples;
            }

            if (samples == 0)
            {
                continue;
            }

            bool compressing = samples < _options.WarmupSamples || ratio <= _options.CompressionRatioDisableLimit;
            (double weighted, long total, bool any) = merged.GetValueOrDefault(entry.Key.Action);
            merged[entry.Key.Action] = (weighted + (ratio * samples), total + samples, any || compressing);
        }

        var ratios = new List<ActionRatio>(merged.Count);
        foreach (KeyValuePair<string, (double Weighted, long Samples, bool Compressing)> action in merged)
        {
            ratios.Add(new ActionRatio(action.Key, action.Value.Weighted / action.Value.Samples, action.Value.Samples, action.Value.Compressing));
        }

        ratios.Sort(static (a, b) => a.Samples != b.Samples ? b.Samples.CompareTo(a.Samples) : string.CompareOrdinal(a.Action, b.Action));
        if (ratios.Count > max)
        {
            ratios.RemoveRange(max, ratios.Count - max);
        }

        return ratios;
    }

    private ActionStats Stats(string action, int size)
    {
        if (_actions.Count >= _options.MaxTrackedActions && !_actions.ContainsKey((action, Bucket(size))))
        {
            _actions.Clear(); // bounded memory against a flood of distinct topics; the busy ones re-learn fast
        }

        return _actions.GetOrAdd((action, Bucket(size)), static _ => new ActionStats());
    }

    /// <summary>Messages of similar size share statistics: one bucket per power of two.</summary>
    private static int Bucket(int size) => size <= 1 ? 0 : BitOperations.Log2((uint)size);

    private sealed class ActionStats
    {
        public double Ratio;
        public int Samples;
        public long SkippedSinceProbe;
        public long LastProbe;
    }
}

/// <summary>
/// An action's (topic's) recent compressed/original ratio (an exponential average, so recent messages count
/// most), from <paramref name="Samples"/> compressions; <paramref name="Compressing"/>: some size bucket of
/// it is compressed now (the others are only probed now and then).
/// </summary>
internal readonly record struct ActionRatio(string Action, double Ratio, long Samples, bool Compressing);
