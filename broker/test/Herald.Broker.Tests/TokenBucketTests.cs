using System.Diagnostics;
using Herald.Broker.Sessions;

namespace Herald.Broker.Tests;

/// <summary>
/// The rate bucket's episodes (spec §6.3: RateLimited is told once per episode): a client over its rate is told
/// once, a late timer on the broker's side does not make a new episode, and a client that really kept under the
/// rate for a burst's worth starts a new one. Each operation is given the moment it happens (a timestamp), so
/// every figure is exact whatever the machine's load.
/// </summary>
public sealed class TokenBucketTests
{
    private const int Rate = 100; // tokens a second: the debt of one operation is 10 ms
    private const int Burst = 5;  // a full bucket is 50 ms of the rate

    [Fact]
    public void The_first_operation_over_the_burst_is_told_and_the_rest_of_the_episode_is_not()
    {
        var bucket = new TokenBucket(Burst, At(0));
        bool[] told = [.. Enumerable.Range(0, 20).Select(_ => bucket.Take(Rate, Burst, At(0)))];
        Assert.Equal([5], Told(told));
        Assert.Equal(TimeSpan.FromMilliseconds(150), bucket.Debt(Rate, At(0))); // fifteen over, 10 ms each
        Assert.Equal(TimeSpan.FromMilliseconds(50), bucket.Debt(Rate, At(100))); // paid down by the time that passed
        Assert.Equal(TimeSpan.Zero, bucket.Debt(Rate, At(150)));
    }

    [Fact]
    public void A_pause_that_overshot_the_debt_does_not_end_the_episode()
    {
        var bucket = new TokenBucket(Burst, At(0));
        Assert.Equal([5], Told([.. Enumerable.Range(0, 7).Select(_ => bucket.Take(Rate, Burst, At(0)))])); // two over: told at the sixth
        Assert.Equal(TimeSpan.FromMilliseconds(20), bucket.Debt(Rate, At(0)));

        bucket.Paid(Rate, At(200)); // the transport's timer for a 20 ms debt fired ten times late
        Assert.DoesNotContain(true, Enumerable.Range(0, 10).Select(_ => bucket.Take(Rate, Burst, At(200)))); // the same episode: not told again
        Assert.Equal(TimeSpan.FromMilliseconds(100), bucket.Debt(Rate, At(200))); // and every one of them is in debt, paid by the next pause
    }

    [Fact]
    public void Without_the_pause_paid_the_late_timer_would_end_the_episode()
    {
        // The behaviour Paid removes, shown so the test above can fail: the overshoot refills the bucket.
        var bucket = new TokenBucket(Burst, At(0));
        for (int i = 0; i < 7; i++)
        {
            bucket.Take(Rate, Burst, At(0));
        }

        Assert.Equal([5], Told([.. Enumerable.Range(0, 6).Select(_ => bucket.Take(Rate, Burst, At(200)))])); // refilled to the burst: five free, and the next debt is a new episode, told again
    }

    [Fact]
    public void A_client_that_keeps_under_the_rate_for_a_burst_s_worth_after_the_pause_starts_a_new_episode()
    {
        var bucket = new TokenBucket(Burst, At(0));
        for (int i = 0; i < 7; i++)
        {
            bucket.Take(Rate, Burst, At(0));
        }

        bucket.Paid(Rate, At(30));
        Assert.Equal([5], Told([.. Enumerable.Range(0, 7).Select(_ => bucket.Take(Rate, Burst, At(81)))])); // 51 ms without sending: a full bucket again, a new episode

        var early = new TokenBucket(Burst, At(0));
        for (int i = 0; i < 7; i++)
        {
            early.Take(Rate, Burst, At(0));
        }

        early.Paid(Rate, At(30));
        Assert.Empty(Told([.. Enumerable.Range(0, 7).Select(_ => early.Take(Rate, Burst, At(79)))])); // 1 ms short of a full bucket: the same episode
    }

    // The Stopwatch timestamp `ms` milliseconds after an arbitrary start.
    private static long At(double ms) => 1_000_000 + (long)(ms * Stopwatch.Frequency / 1000);

    private static int[] Told(bool[] told) => [.. told.Select((t, i) => (t, i)).Where(x => x.t).Select(x => x.i)];
}
