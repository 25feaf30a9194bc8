namespace Herald.Broker.Monitoring;

/// <summary>The process's CPU use for <c>/varz</c>: total CPU time, and percent of one core since the previous sample (as <c>top</c> shows it).</summary>
internal sealed class ProcessUsage
{
    private readonly Lock _gate = new();
    private long _lastTick = Environment.TickCount64;
    private TimeSpan _lastCpu = Environment.CpuUsage.TotalTime;

    public static double CpuSeconds => Environment.CpuUsage.TotalTime.TotalSeconds;

    /// <summary>CPU used since the previous call (or since start), in percent of one core.</summary>
    public double SampleCpuPercent()
    {
        lock (_gate)
        {
            long tick = Environment.TickCount64;
            TimeSpan cpu = Environment.CpuUsage.TotalTime;
            long wall = tick - _lastTick;
            double percent = wall <= 0 ? 0 : (cpu - _lastCpu).TotalMilliseconds / wall * 100;
            _lastTick = tick;
            _lastCpu = cpu;
            return Math.Max(0, percent);
        }
    }
}
