using Herald.Broker.Sessions;

namespace Herald.Broker.Tests;

/// <summary>
/// The rate bucket's episodes (spec §6.3: RateLimited is told once per episode): a client over its rate is told
/// once, a late timer on the broker's side does not make a new episode, and a client that really kept under the
/// rate for a burst's worth starts a new one. The sleeps stand for time passing; nothing here asserts a speed.
/// </summary>
public sealed class TokenBucketTests
{
    private const int Rate = 100; // tokens a second: the debt of one operation is 10 ms
    private const int Burst = 5;  // a full bucket is 50 ms of the rate

    [Fact]
    public void The_first_operation_over_the_burst_is_told_and_the_rest_of_the_episode_is_not()
    {
        var bucket = new TokenBucket(Burst);
        bool[] told = [.. Enumerable.Range(0, 20).Select(_ => bucket.Take(Rate, Burst))];
        Assert.Equal([5], told.Select((t, i) => (t, i)).Where(x => x.t).Select(x => x.i));
    }

    [Fact]
    public void A_pause_that_overshot_the_debt_does_not_end_the_episode()
    {
        var bucket = new TokenBucket(Burst);
        for (int i = 0; i < 7; i++)
        {
            bucket.Take(Rate, Burst); // two over: told at the sixth
        }

        Thread.Sleep(200); // the transport's timer for a 20 ms debt fired ten times late
        bucket.Paid(Rate);
        Assert.DoesNotContain(true, Enumerable.Range(0, 10).Select(_ => bucket.Take(Rate, Burst))); // the same episode: not told again
        Assert.True(bucket.Debt(Rate) > TimeSpan.Zero); // and every one of them is in debt, paid by the next pause
    }

    [Fact]
    public void Without_the_pause_paid_the_late_timer_would_end_the_episode()
    {
        // The behaviour Paid removes, shown so the test above can fail: the overshoot refills the bucket.
        var bucket = new TokenBucket(Burst);
        for (int i = 0; i < 7; i++)
        {
            bucket.Take(Rate, Burst);
        }

        Thread.Sleep(200);
        Assert.False(bucket.Take(Rate, Burst)); // refilled to the burst: this one is free...
        for (int i = 0; i < 4; i++)
        {
            bucket.Take(Rate, Burst);
        }

        Assert.True(bucket.Take(Rate, Burst)); // ...and the next debt is a new episode, told again
    }

    [Fact]
    public void A_client_that_keeps_under_the_rate_for_a_burst_s_worth_after_the_pause_starts_a_new_episode()
    {
        var bucket = new TokenBucket(Burst);
        for (int i = 0; i < 7; i++)
        {
            bucket.Take(Rate, Burst);
        }

        Thread.Sleep(30);
        bucket.Paid(Rate);
        Thread.Sleep(150); // the client itself sends nothing for longer than a full bucket takes
        bool[] told = [.. Enumerable.Range(0, 7).Select(_ => bucket.Take(Rate, Burst))];
        Assert.Contains(true, told);
    }
}
