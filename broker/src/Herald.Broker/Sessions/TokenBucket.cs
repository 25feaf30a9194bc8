using System.Diagnostics;

namespace Herald.Broker.Sessions;

/// <summary>
/// A rate limit charged one token per operation (a PUBLISH, a SUBSCRIBE or UNSUBSCRIBE): it refills at
/// a rate up to a burst, and may go into debt, which its session's transport pays by waiting (TCP stops
/// reading; long-poll holds its answer). Nothing is refused or dropped.
/// </summary>
/// <remarks>
/// Not thread-safe: owned by its session's one caller (a mutable struct, kept in a field). Time is
/// <see cref="Stopwatch.GetTimestamp"/>; each operation also takes it as an argument, so a test states
/// exactly when each one happens instead of sleeping.
/// </remarks>
internal struct TokenBucket
{
    private double _tokens;
    private long _refilledAt;
    private bool _warned;

    public TokenBucket(int burst)
        : this(burst, Stopwatch.GetTimestamp())
    {
    }

    /// <summary>A full bucket at <paramref name="now"/> (a <see cref="Stopwatch.GetTimestamp"/> value).</summary>
    public TokenBucket(int burst, long now)
    {
        _tokens = burst;
        _refilledAt = now;
    }

    /// <summary>
    /// Takes one token. Returns <c>true</c> once per episode of debt: the first operation over the rate, which
    /// the caller tells the client about (<c>RateLimited</c>); the rest of the episode is only paused. An
    /// episode ends when the bucket is full again (the client kept under the rate long enough), not when a
    /// pause that overshot paid the debt, so a client held at its rate is told once, not after every pause.
    /// </summary>
    public bool Take(int rate, int burst) => Take(rate, burst, Stopwatch.GetTimestamp());

    /// <summary><see cref="Take(int, int)"/> at <paramref name="now"/> (a <see cref="Stopwatch.GetTimestamp"/> value).</summary>
    public bool Take(int rate, int burst, long now)
    {
        double refilled = Math.Min(burst, _tokens + (Stopwatch.GetElapsedTime(_refilledAt, now).TotalSeconds * rate));
        _tokens = refilled - 1;
        _refilledAt = now;
        if (refilled >= burst)
        {
            _warned = false;
        }

        if (_tokens >= 0)
        {
            return false;
        }

        if (_warned)
        {
            return false;
        }

        _warned = true;
        return true;
    }

    /// <summary>
    /// The transport waited out the debt (<see cref="Debt"/>): the time its timer ran past the debt is not
    /// credited, so a pause that overshot (a late timer on a busy machine) does not end the episode and the
    /// client is not told again; only time the client itself keeps under the rate refills the bucket.
    /// </summary>
    public void Paid(int rate) => Paid(rate, Stopwatch.GetTimestamp());

    /// <summary><see cref="Paid(int)"/> at <paramref name="now"/> (a <see cref="Stopwatch.GetTimestamp"/> value).</summary>
    public void Paid(int rate, long now)
    {
        if (_tokens >= 0)
        {
            return;
        }

        _tokens = Math.Min(0, _tokens + (Stopwatch.GetElapsedTime(_refilledAt, now).TotalSeconds * rate));
        _refilledAt = now;
    }

    /// <summary>The warning of this episode was not sent (another answer took its place): the next operation in debt warns.</summary>
    public void Unwarn() => _warned = false;

    /// <summary>
    /// How long from now until the debt is paid at <paramref name="rate"/> (0: none, or paid by waiting already); never less.
    /// Reads the clock only when in debt: a read loop asks before every frame, and a clock read per frame was about
    /// 6 % of a streaming publisher's broker CPU (loadtest/docs/profile.md).
    /// </summary>
    public readonly TimeSpan Debt(int rate) => _tokens >= 0 ? TimeSpan.Zero : Debt(rate, Stopwatch.GetTimestamp());

    /// <summary><see cref="Debt(int)"/> at <paramref name="now"/> (a <see cref="Stopwatch.GetTimestamp"/> value).</summary>
    public readonly TimeSpan Debt(int rate, long now)
    {
        if (_tokens >= 0)
        {
            return TimeSpan.Zero;
        }

        double owed = -_tokens - (Stopwatch.GetElapsedTime(_refilledAt, now).TotalSeconds * rate);
        return owed > 0 ? TimeSpan.FromMilliseconds(Math.Ceiling(owed * 1000 / rate)) : TimeSpan.Zero; // whole ms, rounded up: timers truncate
    }
}
