using System.Diagnostics;
using System.Text;
using Herald.Broker.Routing;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// Issue 22, point 1: subscription churn costs only the churner. Runs alone (<see cref="Isolated"/>): it
/// fills the router's match cache with 70,000 publications and reports a throughput ratio.
/// </summary>
[Collection(nameof(Isolated))]
public sealed class RouterChurnTests(ITestOutputHelper output)
{
    private const int FloodTopics = 70_000;
    private const int PairsPerChurner = 10_000;
    private const int PairsPerWrite = 100;
    private const string BystanderTopic = "rt.bystander";

    private int _sequence; // the bystander's next payload

    [Fact]
    public async Task Wildcard_churn_over_a_full_match_cache_touches_only_what_the_pattern_matches_and_the_bystander_carries_on()
    {
        // The router's own cost: the subscription-change rate (which would hold each churner to 1,000 changes/s
        // after its burst of 10,000; RateLimitTests) is off, so the churn is as fast as the router lets it be.
        await using var broker = await TestBroker.StartAsync(o => o.Limits.SubscriptionRatePerSecond = 0);
        TopicRouter router = broker.Services.GetRequiredService<TopicRouter>();

        // Someone publishes 70,000 distinct topics nobody subscribes to: the match cache fills to its bound.
        await using (var flooder = await ProtocolClient.OpenAsync(broker.Port, "flooder"))
        {
            for (int start = 0; start < FloodTopics; start += 5_000)
            {
                int first = start;
                await flooder.SendAsync(w =>
                {
                    for (int i = first; i < first + 5_000; i++)
                    {
                        FrameWriter.WritePublish(w, Encoding.ASCII.GetBytes($"flood.{i}"), default, PayloadFlags.None, []);
                    }
                });
            }

            Assert.Empty(await flooder.PingPongAsync()); // every PUBLISH routed
        }

        Assert.InRange(router.CachedTopics, TopicRouter.DefaultCacheCapacity * 3 / 4, TopicRouter.DefaultCacheCapacity);

        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander");
        await bystander.SubscribeAsync(1, BystanderTopic);
        await bystander.PingPongAsync();
        (int baselineTrips, TimeSpan baselineTime) = await RoundTripsAsync(bystander, () => true, minimum: 2_000);
        int cachedBefore = router.CachedTopics;

        using MetricsProbe metrics = broker.Metrics();
        long visitsBefore = router.InvalidationVisits;

        // Two connections churn wildcards that match none of the cached topics, while the bystander keeps going.
        await using var churnerA = await ProtocolClient.OpenAsync(broker.Port, "churner-a");
        await using var churnerB = await ProtocolClient.OpenAsync(broker.Port, "churner-b");
        Task churn = Task.WhenAll(ChurnAsync(churnerA, "churn.*.>"), ChurnAsync(churnerB, "*.nomatch"));
        (int churnTrips, TimeSpan churnTime) = await RoundTripsAsync(bystander, () => churn.IsCompleted, minimum: 1);
        await churn.WaitAsync(TimeSpan.FromMinutes(2)); // a hang bound, not a speed: every SUBSCRIBE/UNSUBSCRIBE was answered (by the PING after it)

        long changes = metrics["herald.subscriptions.changes"];
        long visits = router.InvalidationVisits - visitsBefore;
        Assert.Equal(2L * 2 * PairsPerChurner, changes);

        // The router's work per change is what the pattern reaches in the cache: "churn.*.>" reaches nothing,
        // "*.nomatch" the cache's top-level tokens (flood, rt). Before, each change walked every cached topic.
        Assert.InRange(visits, 0, changes * 4);
        Assert.Equal(0, metrics["herald.router.cache.evictions"]);
        Assert.Equal(0, metrics["herald.router.cache.size"]); // no change since the probe was made
        Assert.Equal(cachedBefore, router.CachedTopics);

        // The bystander's topic stayed cached throughout: each of its publishes was a lock-free hit.
        Assert.Equal(churnTrips, metrics["herald.router.cache.hits"]);
        Assert.Equal(0, metrics["herald.router.cache.misses"]);

        double baselineRate = baselineTrips / baselineTime.TotalSeconds;
        double churnRate = churnTrips / churnTime.TotalSeconds;
        output.WriteLine(
            $"bystander round trips: baseline {baselineRate:F0}/s ({baselineTrips} in {baselineTime.TotalMilliseconds:F0} ms), " +
            $"during churn {churnRate:F0}/s ({churnTrips} in {churnTime.TotalMilliseconds:F0} ms), ratio {churnRate / baselineRate:F2}; " +
            $"{changes} changes, {visits} cached topics visited, {router.CachedTopics} cached");
    }

    /// <summary>Closed-loop publish, then its delivery, until <paramref name="done"/> (and at least <paramref name="minimum"/>): each arrives, in order.</summary>
    private async Task<(int Trips, TimeSpan Elapsed)> RoundTripsAsync(ProtocolClient client, Func<bool> done, int minimum)
    {
        var clock = Stopwatch.StartNew();
        int trips = 0;
        while (trips < minimum || !done())
        {
            await client.PublishAsync(BystanderTopic, BitConverter.GetBytes(_sequence));
            Frame message = await client.ReadMessageAsync();
            Assert.Equal(_sequence, BitConverter.ToInt32(message.Payload));
            _sequence++;
            trips++;
        }

        return (trips, clock.Elapsed);
    }

    /// <summary>SUBSCRIBE and UNSUBSCRIBE of one pattern, a hundred pairs per write, each write answered by a PONG before the next.</summary>
    private static async Task ChurnAsync(ProtocolClient churner, string pattern)
    {
        byte[] bytes = Encoding.ASCII.GetBytes(pattern);
        for (int pairs = 0; pairs < PairsPerChurner; pairs += PairsPerWrite)
        {
            await churner.SendAsync(w =>
            {
                for (int i = 0; i < PairsPerWrite; i++)
                {
                    FrameWriter.WriteSubscribe(w, 1, bytes);
                    FrameWriter.WriteUnsubscribe(w, 1);
                }
            });
            Assert.Empty(await churner.PingPongAsync());
        }
    }
}
