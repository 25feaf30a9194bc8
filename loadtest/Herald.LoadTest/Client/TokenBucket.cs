using System.Diagnostics;

namespace Herald.LoadTest.Client;

/// <summary>
/// A token bucket in bytes, to cap how fast a connection reads from its socket: tokens accrue at
/// <see cref="BytesPerSecond"/> up to <see cref="Burst"/>; a reader takes a grant before each receive and
/// gives back what the receive did not use. Reading no faster than the link lets TCP's own flow control
/// hold the sender (here the broker) back exactly as a slow link would, so the broker's send queue,
/// not the kernel, absorbs what the link cannot carry.
/// <para>
/// Time-based: a late wake-up is no loss, the tokens accrued meanwhile are granted (up to the burst), so
/// the long-run rate is the configured one even with a coarse timer. Not thread-safe: one reader.
/// </para>
/// </summary>
internal sealed class TokenBucket
{
    private readonly double _bytesPerTick;
    private readonly int _minGrant;
    private double _tokens;
    private long _last;

    /// <param name="bytesPerSecond">Link rate in bytes per second.</param>
    /// <param name="burst">Most bytes granted at once (the bucket's depth); 0 chooses the larger of 16 KiB and 10 ms at the link rate.</param>
    public TokenBucket(double bytesPerSecond, int burst = 0)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(bytesPerSecond);
        BytesPerSecond = bytesPerSecond;
        Burst = burst > 0 ? burst : (int)Math.Max(16 * 1024, bytesPerSecond * 0.010);
        _minGrant = Math.Min(Burst, 4 * 1024); // below this a wake-up is not worth a receive call
        _bytesPerTick = bytesPerSecond / Stopwatch.Frequency;
        _tokens = Burst; // a link starts idle
        _last = Stopwatch.GetTimestamp();
    }

    public double BytesPerSecond { get; }

    public int Burst { get; }

    /// <summary>Time spent waiting for tokens so far (the link was the limit).</summary>
    public TimeSpan Waited { get; private set; }

    /// <summary>
    /// Waits until some tokens are available and takes up to <paramref name="wanted"/> of them (at least
    /// one, at most <see cref="Burst"/>). Hand back what was not used with <see cref="Refund"/>.
    /// </summary>
    public async ValueTask<int> AcquireAsync(int wanted, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(wanted);
        int threshold = Math.Min(wanted, _minGrant);
        while (true)
        {
            Refill();
            if (_tokens >= threshold)
            {
                int grant = (int)Math.Min(Math.Min(_tokens, wanted), Burst);
                _tokens -= grant;
                return grant;
            }

            double seconds = (threshold - _tokens) / BytesPerSecond;
            long start = Stopwatch.GetTimestamp();
            await Task.Delay(TimeSpan.FromMilliseconds(Math.Max(1, seconds * 1000)), cancellationToken);
            Waited += Stopwatch.GetElapsedTime(start);
        }
    }

    /// <summary>Gives back the part of a grant that a receive did not use.</summary>
    public void Refund(int unused)
    {
        if (unused > 0)
        {
            _tokens = Math.Min(Burst, _tokens + unused);
        }
    }

    private void Refill()
    {
        long now = Stopwatch.GetTimestamp();
        _tokens = Math.Min(Burst, _tokens + ((now - _last) * _bytesPerTick));
        _last = now;
    }
}
