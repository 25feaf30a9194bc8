using System.Buffers;
using System.Diagnostics;
using System.Net;
using System.Net.Http.Json;
using System.Text;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Rates are charged per frame and held per frame, whatever the read batches (issue 12.9, 22.2): at rate R
/// and burst B, the i-th operation is carried out no sooner than (i - B - 1) / R seconds after the first was
/// sent. Each bound is checked against when the test saw the i-th answer, which on a slow machine only comes
/// later: a count bounded by elapsed time, never a speed asserted.
/// </summary>
public sealed class RateLimitTests
{
    private const int Rate = 5;
    private const int Burst = 5;
    private const int Sent = 20;

    [Fact]
    public async Task Publishes_sent_in_one_write_are_routed_at_the_rate_not_a_read_batch_at_a_time()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.PublishRatePerSecond = Rate;
            o.Limits.PublishBurst = Burst;
        });
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, "subscriber");
        await subscriber.SubscribeAsync(1, "rate");
        await subscriber.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");

        var clock = Stopwatch.StartNew();
        await publisher.SendAsync(w =>
        {
            for (int i = 0; i < Sent; i++)
            {
                FrameWriter.WritePublish(w, "rate"u8, default, PayloadFlags.None, BitConverter.GetBytes(i)); // one write: one read batch
            }
        });

        for (int i = 0; i < Sent; i++)
        {
            Frame message = await subscriber.ReadMessageAsync();
            Assert.Equal(i, BitConverter.ToInt32(message.Payload));
            AssertWithinRate(i + 1, clock.Elapsed);
        }

        Frame warning = await publisher.ReadAsync();
        Assert.Equal((ErrorCode.RateLimited, false), (warning.Error!.Value.Code, warning.Error.Value.Fatal));
    }

    [Fact]
    public async Task Subscription_changes_over_tcp_are_held_to_their_rate_made_and_told_once()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.SubscriptionRatePerSecond = Rate;
            o.Limits.SubscriptionBurst = Burst;
        });
        using MetricsProbe metrics = broker.Metrics();
        await using var client = await ProtocolClient.OpenAsync(broker.Port, "churner");

        // SUBSCRIBE and UNSUBSCRIBE in turn, each followed by a PING (never charged): the i-th PONG comes
        // after the i-th change was made.
        var clock = Stopwatch.StartNew();
        await client.SendAsync(w =>
        {
            for (int i = 0; i < Sent; i++)
            {
                if (i % 2 == 0)
                {
                    FrameWriter.WriteSubscribe(w, 1, "churn.>"u8);
                }
                else
                {
                    FrameWriter.WriteUnsubscribe(w, 1);
                }

                FrameWriter.WritePing(w);
            }

            FrameWriter.WriteSubscribe(w, 2, "kept"u8); // the change after the last is made too
        });

        int pongs = 0;
        int warnings = 0;
        while (pongs < Sent)
        {
            Frame frame = await client.ReadAsync();
            if (frame.Type == FrameType.Pong)
            {
                AssertWithinRate(++pongs, clock.Elapsed);
            }
            else
            {
                Assert.Equal((ErrorCode.RateLimited, false), (frame.Error!.Value.Code, frame.Error.Value.Fatal));
                warnings++;
            }
        }

        Assert.True(warnings >= 1, "the churner was never told RateLimited");
        await client.PublishAsync("kept", "made");
        Assert.Equal(["made"], (await client.PingPongAsync()).Select(f => f.Text)); // no more warnings: each one came before its PONG
        Assert.Equal(warnings, metrics["herald.protocol.errors", "error.type", "RateLimited"]); // told once per episode, each counted
        Assert.Equal(warnings, metrics["herald.protocol.errors"]);
    }

    [Fact]
    public async Task Subscription_changes_over_long_poll_hold_their_answers_to_the_rate_with_the_notice()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.SubscriptionRatePerSecond = Rate;
            o.Limits.SubscriptionBurst = Burst;
        });
        LongPollClient session = await LongPollClient.CreateAsync(broker.Http);

        var clock = Stopwatch.StartNew();
        int notices = 0;
        for (int i = 0; i < Sent; i++)
        {
            using HttpResponseMessage response = i % 2 == 0
                ? await broker.Http.PostAsJsonAsync($"{session.Base}/subscriptions", new { sid = 1, pattern = "churn.>" })
                : await broker.Http.DeleteAsync($"{session.Base}/subscriptions/1");
            Assert.Equal(HttpStatusCode.NoContent, response.StatusCode);
            AssertWithinRate(i + 1, clock.Elapsed);
            if (response.Headers.TryGetValues("Herald-Notice", out IEnumerable<string>? notice))
            {
                Assert.Equal("RateLimited", notice.Single());
                notices++;
            }
        }

        Assert.True(notices >= 1, "no answer carried the RateLimited notice");
    }

    [Fact]
    public async Task With_the_defaults_ten_thousand_subscriptions_at_start_pass_and_churn_past_them_is_rate_limited()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var client = await ProtocolClient.OpenAsync(broker.Port, "many");

        await client.SendAsync(w =>
        {
            for (uint sid = 1; sid <= 10_000; sid++)
            {
                FrameWriter.WriteSubscribe(w, sid, Encoding.UTF8.GetBytes($"start.{sid}"));
            }
        });
        Assert.Empty(await client.PingPongAsync()); // no ERROR (PingPongAsync fails on any): the whole start is within the burst

        // Churn: the bucket is empty now, so a thousand pairs meet the rate.
        await client.SendAsync(w =>
        {
            for (int i = 0; i < 1_000; i++)
            {
                FrameWriter.WriteUnsubscribe(w, 1);
                FrameWriter.WriteSubscribe(w, 1, "start.1"u8);
            }
        });
        Frame warning = await client.ReadAsync();
        Assert.Equal((ErrorCode.RateLimited, false), (warning.Error!.Value.Code, warning.Error.Value.Fatal));
        Assert.Empty(await client.PingPongAsync()); // one episode: held at the rate, told once
    }

    /// <summary>The <paramref name="count"/>-th operation may be carried out <paramref name="elapsed"/> after the first was sent.</summary>
    private static void AssertWithinRate(int count, TimeSpan elapsed) =>
        Assert.True(count <= Burst + 1 + (Rate * elapsed.TotalSeconds), $"operation {count} was carried out {elapsed.TotalSeconds:0.000} s after sending began: more than burst {Burst} + rate {Rate}/s allows");
}
