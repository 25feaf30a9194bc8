using System.Diagnostics;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// Per burst of the <c>broadcast</c> scenario: when it was published, how many subscribers have received
/// it, and when the last of them did. Memory is per burst, not per delivery, so a million subscribers
/// cost nothing here.
/// <para>
/// Threading: <see cref="MarkPublished"/> is called by the publishing loop before the burst is sent;
/// <see cref="Record"/> by any subscriber's task, concurrently. A delivery updates the burst's last
/// receipt time <em>before</em> its count, both with interlocked operations, so whoever sees the count
/// reach M also sees the final last-receipt time.
/// </para>
/// </summary>
internal sealed class BurstTracker
{
    private readonly long[] _published;   // Stopwatch timestamp; 0 = not published yet
    private readonly int[] _received;
    private readonly long[] _lastReceipt; // Stopwatch timestamp of the latest delivery so far
    private readonly int[] _late;         // deliveries that came more than one period after the publish
    private readonly long _periodTicks;
    private long _outOfRange;

    public BurstTracker(int bursts, int subscribers, double periodSeconds)
    {
        Count = bursts;
        Subscribers = subscribers;
        _published = new long[bursts];
        _received = new int[bursts];
        _lastReceipt = new long[bursts];
        _late = new int[bursts];
        _periodTicks = SecondsToTicks(periodSeconds);
    }

    /// <summary>Bursts planned (warm-up included).</summary>
    public int Count { get; }

    /// <summary>M: a burst is complete when this many deliveries of it arrived.</summary>
    public int Subscribers { get; }

    public long PeriodTicks => _periodTicks;

    /// <summary>MESSAGEs whose burst number was not one this run published.</summary>
    public long OutOfRange => Volatile.Read(ref _outOfRange);

    public static long SecondsToTicks(double seconds) => (long)(seconds * Stopwatch.Frequency);

    public static double TicksToSeconds(long ticks) => (double)ticks / Stopwatch.Frequency;

    public void MarkPublished(int burst, long timestamp) => Volatile.Write(ref _published[burst], timestamp);

    public long PublishedAt(int burst) => Volatile.Read(ref _published[burst]);

    public int Received(int burst) => Volatile.Read(ref _received[burst]);

    public long LastReceipt(int burst) => Volatile.Read(ref _lastReceipt[burst]);

    public int LateDeliveries(int burst) => Volatile.Read(ref _late[burst]);

    /// <summary>One subscriber received burst <paramref name="burst"/> at <paramref name="timestamp"/>.</summary>
    public void Record(long burst, long timestamp)
    {
        if ((ulong)burst >= (ulong)Count)
        {
            Interlocked.Increment(ref _outOfRange);
            return;
        }

        int b = (int)burst;
        long seen = Volatile.Read(ref _lastReceipt[b]);
        while (timestamp > seen)
        {
            long previous = Interlocked.CompareExchange(ref _lastReceipt[b], timestamp, seen);
            if (previous == seen)
            {
                break;
            }

            seen = previous;
        }

        long published = Volatile.Read(ref _published[b]);
        if (published != 0 && timestamp - published > _periodTicks)
        {
            Interlocked.Increment(ref _late[b]);
        }

        Interlocked.Increment(ref _received[b]);
    }

    /// <summary>Publish to last delivery, in seconds, once every subscriber has it; <c>null</c> before.</summary>
    public double? CompletionSeconds(int burst) =>
        Received(burst) >= Subscribers && PublishedAt(burst) != 0
            ? TicksToSeconds(LastReceipt(burst) - PublishedAt(burst))
            : null;
}
