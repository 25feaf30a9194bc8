using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Two brokers in one process, as parallel test classes run them: each one's counters are its own, so a
/// test's exact assertions on its broker's counters hold whatever the others do.
/// </summary>
public sealed class MetricsIsolationTests
{
    [Fact]
    public async Task Each_broker_counts_only_what_happened_to_it()
    {
        await using var a = await TestBroker.StartAsync();
        await using var b = await TestBroker.StartAsync();
        using MetricsProbe metricsA = a.Metrics();
        using MetricsProbe metricsB = b.Metrics();

        // On a: one protocol error (an ordinary counter).
        await using (var offender = await ProtocolClient.ConnectAsync(a.Port))
        {
            await offender.SendAsync(w => FrameWriter.WriteSubscribe(w, 1, "too.early"u8));
            await offender.ExpectClosedWithAsync(ErrorCode.HelloRequired);
        }

        // On b: two publications, one delivered (observable counters).
        await using var subscriber = await ProtocolClient.OpenAsync(b.Port);
        await subscriber.SubscribeAsync(1, "only.b");
        await subscriber.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(b.Port);
        await publisher.PublishAsync("only.b", "one");
        await publisher.PublishAsync("nobody.listens", "two");
        await publisher.PingPongAsync();
        Assert.Equal("one", (await subscriber.ReadMessageAsync()).Text);

        Assert.Equal((1L, 0L), (metricsA["herald.protocol.errors", "error.type", "HelloRequired"], metricsB["herald.protocol.errors"]));
        Assert.Equal(1, metricsA["herald.protocol.errors"]);
        Assert.Equal((0L, 2L), (metricsA["herald.messages.published"], metricsB["herald.messages.published"]));
        Assert.Equal((0L, 1L), (metricsA["herald.messages.delivered"], metricsB["herald.messages.delivered"]));
    }
}
