using System.Buffers;
using System.Text;

namespace Herald.Broker.Telemetry;

/// <summary>
/// Publications per topic, for the status page's top topics (<c>/statusz</c>): a bounded table, never a
/// metric attribute (topic names are unbounded; the metrics stay labelled by transport, reason and code only).
/// </summary>
/// <remarks>
/// <para>
/// At most <see cref="Slots"/> (2,048) topics are counted by name at once. A topic lives in one of the
/// <see cref="Probes"/> (4) consecutive slots its hash picks (the process's randomised
/// <see cref="HashCode"/>, so nobody can pick topics that collide). Per publication the message path hashes
/// the topic's bytes (no string is made), compares at most four slots and adds to the topic's counter with
/// interlocked adds: no lock, no allocation. Only a topic's first publication allocates, its counter with
/// its name, and only when one of its slots is free; a topic whose four slots hold other topics is counted
/// in <see cref="Untracked"/>, so the page can say how much traffic is on topics it does not name.
/// </para>
/// <para>
/// Room is made by <see cref="Sample"/> only (the status endpoint, at most once per half second, and only
/// while someone looks): a counter that has not moved for <see cref="IdleAfter"/> leaves its slot. A
/// publisher that read that slot just before may add one publication to the counter being dropped (the
/// topic had been idle for that long). Two publishers that find a free slot for the same new topic at
/// once meet through a compare-exchange: one installs its counter, the other counts into it. A topic can
/// end up in two slots only when a slot ahead of its own is freed and it is looked up meanwhile; the
/// snapshot merges by name.
/// </para>
/// <para>
/// Why not count in the router's match cache, which every publication already looks up: that cache is
/// invalidated by subscription changes (a count kept there would restart at each), holds topics for
/// matching rather than for monitoring, and would tie the router to the status page.
/// </para>
/// </remarks>
internal sealed class TopicTraffic
{
    /// <summary>Topics counted by name at once.</summary>
    public const int Slots = 2048;

    /// <summary>Slots a topic may take, from the one its hash picks.</summary>
    public const int Probes = 4;

    /// <summary>A topic's counter that has not moved for this long is dropped by the next <see cref="Sample"/>.</summary>
    public static readonly TimeSpan IdleAfter = TimeSpan.FromSeconds(10);

    private const int Mask = Slots - 1;
    private const int StackBytes = 256;

    private readonly TopicCounter?[] _slots = new TopicCounter?[Slots];
    private readonly Lock _sampling = new();
    private long _untracked;

    /// <summary>Publications on topics that found no free slot (not counted by name).</summary>
    public long Untracked => Interlocked.Read(ref _untracked);

    /// <summary>Once per publication a client made here: its topic, the subscriptions it was queued to, the bytes of its MESSAGE frame.</summary>
    public void Published(in ReadOnlySequence<byte> topic, int deliveries, int bytes)
    {
        if (topic.IsSingleSegment)
        {
            Count(topic.FirstSpan, 1, deliveries, bytes);
            return;
        }

        int length = (int)topic.Length;
        byte[]? rented = null;
        Span<byte> name = length <= StackBytes ? stackalloc byte[StackBytes] : (rented = ArrayPool<byte>.Shared.Rent(length));
        name = name[..length];
        topic.CopyTo(name);
        Count(name, 1, deliveries, bytes);
        if (rented is not null)
        {
            ArrayPool<byte>.Shared.Return(rented);
        }
    }

    /// <summary>
    /// What each counted topic did since the previous sample (<paramref name="into"/> is cleared first), and
    /// drops the counters idle for <see cref="IdleAfter"/>. One caller at a time (it takes its own lock); never on the message path.
    /// </summary>
    /// <param name="now">A <see cref="TimeProvider.GetTimestamp"/> of <paramref name="time"/>.</param>
    public void Sample(TimeProvider time, long now, List<TopicSample> into)
    {
        into.Clear();
        lock (_sampling)
        {
            for (int i = 0; i < _slots.Length; i++)
            {
                TopicCounter? counter = Volatile.Read(ref _slots[i]);
                if (counter is null)
                {
                    continue;
                }

                long publications = Interlocked.Read(ref counter.Publications);
                long deliveries = Interlocked.Read(ref counter.Deliveries);
                long bytes = Interlocked.Read(ref counter.Bytes);
                long moved = publications - counter.SampledPublications;
                if (moved == 0 && counter.SampledAt != 0 && time.GetElapsedTime(counter.MovedAt, now) >= IdleAfter)
                {
                    Interlocked.CompareExchange(ref _slots[i], null, counter); // room for another topic
                    continue;
                }

                if (moved != 0 || counter.SampledAt == 0)
                {
                    counter.MovedAt = now;
                }

                into.Add(new TopicSample(counter.Topic, publications, moved, deliveries - counter.SampledDeliveries, bytes - counter.SampledBytes));
                counter.SampledPublications = publications;
                counter.SampledDeliveries = deliveries;
                counter.SampledBytes = bytes;
                counter.SampledAt = now;
            }
        }
    }

    /// <summary><paramref name="publications"/> publications to the topic <paramref name="name"/>, with their deliveries and MESSAGE bytes in total.</summary>
    public void Count(ReadOnlySpan<byte> name, long publications, long deliveries, long bytes)
    {
        var hasher = default(HashCode);
        hasher.AddBytes(name);
        int hash = hasher.ToHashCode();
        int free = -1;
        for (int i = 0; i < Probes; i++)
        {
            int index = (hash + i) & Mask;
            TopicCounter? counter = Volatile.Read(ref _slots[index]);
            if (counter is null)
            {
                free = free < 0 ? index : free;
            }
            else if (counter.Is(hash, name))
            {
                counter.Add(publications, deliveries, bytes);
                return;
            }
        }

        if (free >= 0)
        {
            var fresh = new TopicCounter(name, hash);
            TopicCounter? raced = Interlocked.CompareExchange(ref _slots[free], fresh, null);
            TopicCounter? counter = raced is null ? fresh : raced.Is(hash, name) ? raced : null;
            if (counter is not null)
            {
                counter.Add(publications, deliveries, bytes);
                return;
            }
        }

        Interlocked.Add(ref _untracked, publications);
    }

    /// <summary>One topic's counts. The totals are the message path's (interlocked); the <c>Sampled*</c> fields are <see cref="Sample"/>'s (under its lock).</summary>
    private sealed class TopicCounter(ReadOnlySpan<byte> name, int hash)
    {
        public readonly string Topic = Encoding.ASCII.GetString(name);
        public long Publications;
        public long Deliveries;
        public long Bytes;
        public long SampledPublications;
        public long SampledDeliveries;
        public long SampledBytes;
        public long SampledAt;
        public long MovedAt;

        private readonly byte[] _name = name.ToArray();
        private readonly int _hash = hash;

        public bool Is(int hash, ReadOnlySpan<byte> name) => _hash == hash && name.SequenceEqual(_name);

        public void Add(long publications, long deliveries, long bytes)
        {
            Interlocked.Add(ref Publications, publications);
            if (deliveries > 0)
            {
                Interlocked.Add(ref Deliveries, deliveries);
            }

            Interlocked.Add(ref Bytes, bytes);
        }
    }
}

/// <summary>
/// One counted topic in a <see cref="TopicTraffic.Sample"/>: its publications since it was first counted
/// (this time), and what it did since the previous sample (publications, deliveries, MESSAGE bytes).
/// </summary>
internal readonly record struct TopicSample(string Topic, long Publications, long PublishedSince, long DeliveredSince, long BytesSince);
