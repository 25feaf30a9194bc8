using System.Buffers;
using System.Text;
using Herald.Broker.Telemetry;

namespace Herald.Broker.Tests;

/// <summary>
/// The status page's per-topic counters (<see cref="TopicTraffic"/>): exact per topic, bounded by
/// <see cref="TopicTraffic.Slots"/> whatever the number of topics (the rest counted, not named), and room
/// made for new topics only by a sample that finds a counter idle.
/// </summary>
public sealed class TopicTrafficTests
{
    [Fact]
    public void Counts_each_topic_exactly_and_a_sample_gives_what_moved_since_the_previous_one()
    {
        var traffic = new TopicTraffic();
        var time = new ManualTime();
        for (int i = 0; i < 5; i++)
        {
            traffic.Published(Topic("prices.eu"), deliveries: 2, bytes: 100);
        }

        traffic.Published(Topic("prices.us"), deliveries: 0, bytes: 40);
        traffic.Published(Split("prices.us"), deliveries: 3, bytes: 40); // a topic across two buffer segments is the same topic

        var samples = new List<TopicSample>();
        traffic.Sample(time, time.GetTimestamp(), samples);
        Assert.Equal(
            [new TopicSample("prices.eu", 5, 5, 10, 500), new TopicSample("prices.us", 2, 2, 3, 80)],
            samples.OrderBy(s => s.Topic, StringComparer.Ordinal));

        traffic.Published(Topic("prices.eu"), deliveries: 1, bytes: 100);
        time.Advance(TimeSpan.FromSeconds(1));
        traffic.Sample(time, time.GetTimestamp(), samples);
        Assert.Equal(
            [new TopicSample("prices.eu", 6, 1, 1, 100), new TopicSample("prices.us", 2, 0, 0, 0)],
            samples.OrderBy(s => s.Topic, StringComparer.Ordinal));
        Assert.Equal(0, traffic.Untracked);
    }

    [Fact]
    public void Holds_at_most_its_slots_and_counts_every_other_publication_as_untracked()
    {
        var traffic = new TopicTraffic();
        var time = new ManualTime();
        int topics = TopicTraffic.Slots * 3;
        for (int i = 0; i < topics; i++)
        {
            traffic.Published(Topic($"flood.{i}"), deliveries: 0, bytes: 10);
        }

        var samples = new List<TopicSample>();
        traffic.Sample(time, time.GetTimestamp(), samples);

        Assert.InRange(samples.Count, TopicTraffic.Slots / 2, TopicTraffic.Slots);
        Assert.Equal(samples.Count, samples.Select(s => s.Topic).Distinct().Count());
        Assert.All(samples, s => Assert.Equal(1, s.Publications));
        Assert.Equal(topics, samples.Sum(s => s.Publications) + traffic.Untracked); // nothing lost, nothing counted twice
    }

    [Fact]
    public void A_counter_idle_for_its_time_leaves_its_slot_to_a_new_topic()
    {
        var traffic = new TopicTraffic();
        var time = new ManualTime();
        var samples = new List<TopicSample>();
        for (int i = 0; samples.Count < TopicTraffic.Slots; i++)
        {
            Assert.True(i < TopicTraffic.Slots * 100, $"the table did not fill: {samples.Count} of {TopicTraffic.Slots} slots");
            traffic.Published(Topic($"old.{i}"), deliveries: 0, bytes: 10); // until every slot is taken
            if (i % 256 == 0)
            {
                traffic.Sample(time, time.GetTimestamp(), samples);
            }
        }

        long untracked = traffic.Untracked;
        traffic.Published(Topic("busy"), deliveries: 0, bytes: 10);
        traffic.Published(Topic("busy"), deliveries: 0, bytes: 10);
        Assert.Equal(untracked + 2, traffic.Untracked); // no room: counted, not named

        // Still within the idle time: every counter keeps its slot.
        time.Advance(TopicTraffic.IdleAfter - TimeSpan.FromSeconds(1));
        traffic.Sample(time, time.GetTimestamp(), samples);
        Assert.NotEmpty(samples);

        // Past it: the idle counters go, and the next publications of a new topic are counted by name.
        time.Advance(TimeSpan.FromSeconds(2));
        traffic.Sample(time, time.GetTimestamp(), samples);
        Assert.Empty(samples);
        traffic.Published(Topic("busy"), deliveries: 0, bytes: 10);
        traffic.Published(Topic("busy"), deliveries: 0, bytes: 10);
        time.Advance(TimeSpan.FromSeconds(1));
        traffic.Sample(time, time.GetTimestamp(), samples);
        Assert.Equal([new TopicSample("busy", 2, 2, 0, 20)], samples);
        Assert.Equal(untracked + 2, traffic.Untracked);
    }

    [Fact]
    public void Publishers_on_many_threads_lose_no_count()
    {
        var traffic = new TopicTraffic();
        const int PerThread = 20_000;
        string[] topics = ["a.b", "a.c", "x"];
        Parallel.For(0, 4, thread =>
        {
            for (int i = 0; i < PerThread; i++)
            {
                traffic.Published(Topic(topics[i % topics.Length]), deliveries: 1, bytes: 1);
            }
        });

        var samples = new List<TopicSample>();
        var time = new ManualTime();
        traffic.Sample(time, time.GetTimestamp(), samples);
        Assert.Equal(4 * PerThread, samples.Sum(s => s.Publications));
        Assert.Equal(topics.Order(StringComparer.Ordinal), samples.Select(s => s.Topic).Distinct().Order(StringComparer.Ordinal));
    }

    private static ReadOnlySequence<byte> Topic(string name) => new(Encoding.ASCII.GetBytes(name));

    private static ReadOnlySequence<byte> Split(string name)
    {
        byte[] bytes = Encoding.ASCII.GetBytes(name);
        var first = new Segment(bytes.AsMemory(0, 3));
        Segment last = first.Append(bytes.AsMemory(3));
        return new ReadOnlySequence<byte>(first, 0, last, last.Memory.Length);
    }

    private sealed class Segment : ReadOnlySequenceSegment<byte>
    {
        public Segment(ReadOnlyMemory<byte> memory) => Memory = memory;

        public Segment Append(ReadOnlyMemory<byte> memory)
        {
            var next = new Segment(memory) { RunningIndex = RunningIndex + Memory.Length };
            Next = next;
            return next;
        }
    }

    private sealed class ManualTime : TimeProvider
    {
        private long _now = 1_000_000;

        public override long TimestampFrequency => TimeSpan.TicksPerSecond;

        public override long GetTimestamp() => _now;

        public void Advance(TimeSpan by) => _now += by.Ticks;
    }
}
