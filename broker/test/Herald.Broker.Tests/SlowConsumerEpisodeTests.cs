using System.Diagnostics.Metrics;
using Herald.Broker.Delivery;
using Herald.Broker.Telemetry;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>
/// A <c>DropOldest</c> slow-consumer episode (<c>herald.slow_consumers</c>) runs from a backlog's first drop until its
/// reader has taken everything queued: a reader that takes part of its backlog and falls behind again (a stalled socket
/// accepting one more chunk, a subscriber reading a little slower than the publishers) is one episode, not one per take.
/// Both reading modes, on the backlog itself, with the broker's own counter.
/// </summary>
public sealed class SlowConsumerEpisodeTests : IDisposable
{
    private const int Limit = 4;

    private readonly ServiceProvider _services = new ServiceCollection().AddMetrics().BuildServiceProvider();
    private readonly MeterListener _listener = new();
    private long _episodes;

    public SlowConsumerEpisodeTests()
    {
        IMeterFactory factory = _services.GetRequiredService<IMeterFactory>();
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Name == "herald.slow_consumers" && ReferenceEquals(instrument.Meter.Scope, factory))
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>((_, value, _, _) => Interlocked.Add(ref _episodes, value));
        _listener.Start();
    }

    public void Dispose()
    {
        _listener.Dispose();
        _services.Dispose();
    }

    [Fact]
    public void A_stream_reader_that_takes_part_of_its_backlog_and_falls_behind_again_is_one_episode()
    {
        SubscriberBacklog backlog = Backlog();
        var batch = new QueuedFrame[Limit];
        Messages(backlog, Limit + 2); // two dropped: the episode starts
        Assert.Equal(1, Volatile.Read(ref _episodes));

        Assert.Equal(1, Take(backlog, ref batch, maxBytes: 1)); // one frame into the socket, three still queued
        Messages(backlog, 3);                                  // behind again: dropping
        Assert.Equal(1, Volatile.Read(ref _episodes));

        Assert.Equal(Limit, Take(backlog, ref batch, maxBytes: 1 << 20)); // everything taken: caught up
        Messages(backlog, Limit + 1);
        Assert.Equal(2, Volatile.Read(ref _episodes)); // a new episode
        Assert.Equal(5, backlog.Dropped);
    }

    [Fact]
    public void A_window_reader_that_takes_part_of_its_backlog_and_falls_behind_again_is_one_episode()
    {
        SubscriberBacklog backlog = Backlog();
        _ = new WindowPoller(backlog);
        Messages(backlog, Limit + 2);
        Assert.Equal(1, Volatile.Read(ref _episodes));

        Assert.True(backlog.TakeAbove(0, 1, 1 << 20, out WindowTake first)); // one message of the window
        first.Release();
        backlog.Acknowledge(first.FirstSequence);
        Messages(backlog, 3);
        Assert.Equal(1, Volatile.Read(ref _episodes));

        Assert.True(backlog.TakeAbove(first.FirstSequence, 100, 1 << 20, out WindowTake rest)); // up to the newest: caught up
        rest.Release();
        backlog.Acknowledge(rest.FirstSequence + rest.Count - 1);
        Messages(backlog, Limit + 1);
        Assert.Equal(2, Volatile.Read(ref _episodes));
    }

    private SubscriberBacklog Backlog() =>
        new(new BacklogLimits(Limit, 1 << 20, SlowConsumerPolicy.DropOldest), new BrokerMetrics(_services.GetRequiredService<IMeterFactory>()), () => { });

    private static void Messages(SubscriberBacklog backlog, int count)
    {
        for (int i = 0; i < count; i++)
        {
            backlog.Enqueue(MessageBuffer.Copy("m"u8.ToArray()), 1);
        }
    }

    private static int Take(SubscriberBacklog backlog, ref QueuedFrame[] batch, long maxBytes)
    {
        StreamTake take = backlog.Take(ref batch, maxBytes);
        for (int i = 0; i < take.Count; i++)
        {
            batch[i].Frame.Release();
        }

        return take.Count;
    }
}
