using System.Diagnostics;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// The time line every scenario shares: <c>--warmup</c> seconds, then a measured window of
/// <c>--seconds</c>, bracketed by two snapshots of the scenario's counters; a progress callback once a
/// second; an early end when the scenario reports it cannot go on or the user presses Ctrl+C.
/// </summary>
internal static class MeasuredWindow
{
    private const double AbortCheckSeconds = 0.25;

    /// <param name="take">Snapshots the scenario's counters.</param>
    /// <param name="progress">Called once a second with the time since the start, the previous and the current snapshot, and whether the window has started.</param>
    /// <param name="abortReason">Checked every quarter second: non-null ends the run early.</param>
    /// <param name="windowStarted">Called right after the first snapshot of the window is taken.</param>
    public static async Task<WindowResult<T>> RunAsync<T>(
        double warmupSeconds,
        double seconds,
        Func<T> take,
        Action<double, T, T, bool> progress,
        Func<string?> abortReason,
        Action? windowStarted,
        CancellationToken cancellationToken)
        where T : struct
    {
        long t0 = Stopwatch.GetTimestamp();
        double Elapsed() => Stopwatch.GetElapsedTime(t0).TotalSeconds;
        T previous = take();
        T? start = null;
        double windowEnd = warmupSeconds + seconds;
        double nextTick = 1;
        while (true)
        {
            double due = Math.Min(nextTick, start is null ? warmupSeconds : windowEnd);
            double wait = Math.Min(due - Elapsed(), AbortCheckSeconds);
            if (wait > 0)
            {
                try
                {
                    await Task.Delay(TimeSpan.FromSeconds(wait), cancellationToken);
                }
                catch (OperationCanceledException)
                {
                    return new WindowResult<T>(start, take(), Interrupted: true, Aborted: null);
                }
            }

            if (abortReason() is { } reason)
            {
                return new WindowResult<T>(start, take(), Interrupted: false, reason);
            }

            double now = Elapsed();
            if (start is null && now >= warmupSeconds)
            {
                start = take();
                windowStarted?.Invoke();
            }

            if (now >= windowEnd)
            {
                return new WindowResult<T>(start, take(), Interrupted: false, Aborted: null);
            }

            if (now >= nextTick)
            {
                T current = take();
                progress(now, previous, current, start is not null);
                previous = current;
                nextTick += 1;
            }
        }
    }
}

/// <summary>The snapshots that bracket the measured window (<see cref="Start"/> is null when the run ended during warm-up).</summary>
internal readonly record struct WindowResult<T>(T? Start, T End, bool Interrupted, string? Aborted)
    where T : struct;
