using System.Diagnostics;

namespace Herald.Broker.Compression;

/// <summary>The process's CPU use, as a fraction of all cores (0 to 1). Injected, so tests can set it.</summary>
public interface ICpuLoad
{
    double Current { get; }
}

/// <summary>
/// Samples <see cref="Environment.CpuUsage"/> twice a second on a timer: the compression path reads a
/// field, it never measures.
/// </summary>
internal sealed class ProcessCpuLoad : ICpuLoad, IDisposable
{
    private static readonly TimeSpan Period = TimeSpan.FromMilliseconds(500);

    private readonly Timer _timer;
    private TimeSpan _lastCpu;
    private long _lastTimestamp;
    private double _current;

    public ProcessCpuLoad()
    {
        _lastCpu = Environment.CpuUsage.TotalTime;
        _lastTimestamp = Stopwatch.GetTimestamp();
        _timer = new Timer(_ => Sample(), null, Period, Period);
    }

    public double Current => Volatile.Read(ref _current);

    public void Dispose() => _timer.Dispose();

    private void Sample()
    {
        TimeSpan cpu = Environment.CpuUsage.TotalTime;
        long now = Stopwatch.GetTimestamp();
        double wall = Stopwatch.GetElapsedTime(_lastTimestamp, now).TotalSeconds * Environment.ProcessorCount;
        if (wall > 0)
        {
            Volatile.Write(ref _current, Math.Clamp((cpu - _lastCpu).TotalSeconds / wall, 0, 1));
        }

        _lastCpu = cpu;
        _lastTimestamp = now;
    }
}
