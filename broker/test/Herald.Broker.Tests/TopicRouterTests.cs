using System.Buffers;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>The router's matching table, in-process (the socket tests cover the same router end to end).</summary>
public sealed class TopicRouterTests : IDisposable
{
    private readonly TopicRouter _router = new();

    public void Dispose() => _router.Dispose();

    [Theory]
    [InlineData("a.b.c", "a.b.c", true)]
    [InlineData("a.b.c", "a.b", false)]
    [InlineData("a.b.c", "a.b.c.d", false)]
    [InlineData("a.*.c", "a.b.c", true)]
    [InlineData("a.*.c", "a.c", false)]
    [InlineData("a.*.c", "a.b.b.c", false)]
    [InlineData("*", "a", true)]
    [InlineData("*", "a.b", false)]
    [InlineData("*.*", "a.b", true)]
    [InlineData("a.>", "a.b", true)]
    [InlineData("a.>", "a.b.c.d", true)]
    [InlineData("a.>", "a", false)]
    [InlineData(">", "a", true)]
    [InlineData(">", "a.b.c", true)]
    [InlineData("*.b.>", "a.b.c", true)]
    [InlineData("*.b.>", "a.b", false)]
    [InlineData("*.b.>", "a.x.c", false)]
    [InlineData("A.b", "a.b", false)]
    public void Pattern_matching(string pattern, string topic, bool matches)
    {
        var sink = new RecordingSink();
        _router.Add(new Subscription(sink, 1, pattern, noEcho: false));

        Assert.Equal(matches ? 1 : 0, _router.Match(topic.AsSpan()).Length);
        Assert.Equal(matches, Topic.Matches(pattern, topic)); // the client-side matcher agrees
    }

    [Fact]
    public void Each_matching_subscription_appears_once_however_patterns_overlap()
    {
        var sink = new RecordingSink();
        string[] patterns = ["a.b.c", "a.*.c", "a.b.*", "*.*.*", "a.>", ">", "*.b.>", "x.>"];
        uint sid = 1;
        foreach (string pattern in patterns)
        {
            _router.Add(new Subscription(sink, sid++, pattern, noEcho: false));
        }

        Subscription[] matched = _router.Match("a.b.c".AsSpan());

        Assert.Equal(["*.*.*", "*.b.>", ">", "a.*.c", "a.>", "a.b.*", "a.b.c"], matched.Select(s => s.Pattern).Order());
    }

    [Fact]
    public void Cached_matches_follow_subscribe_and_unsubscribe()
    {
        var sink = new RecordingSink();
        var literal = new Subscription(sink, 1, "p.q", noEcho: false);
        var wildcard = new Subscription(sink, 2, "p.*", noEcho: false);
        Assert.Empty(_router.Match("p.q".AsSpan())); // an empty result is cached too

        _router.Add(literal);
        Assert.Single(_router.Match("p.q".AsSpan()));
        _router.Add(wildcard);
        Assert.Equal(2, _router.Match("p.q".AsSpan()).Length);
        Assert.Single(_router.Match("p.other".AsSpan()));

        Assert.True(_router.Remove(literal));
        Assert.Same(wildcard, Assert.Single(_router.Match("p.q".AsSpan())));
        Assert.True(_router.Remove(wildcard));
        Assert.Empty(_router.Match("p.q".AsSpan()));
        Assert.Empty(_router.Match("p.other".AsSpan()));
        Assert.False(_router.Remove(wildcard));
        Assert.Equal(0, _router.SubscriptionCount);
    }

    [Fact]
    public void A_change_invalidates_only_the_cached_topics_its_pattern_matches()
    {
        var sink = new RecordingSink();
        string[] cached = ["a.1", "a.2", "a.1.x", "b.1", "b.2.x", "c"];
        foreach (string topic in cached)
        {
            Assert.Empty(_router.Match(topic.AsSpan()));
        }

        Assert.Equal(cached.Length, _router.CachedTopics);

        _router.Add(new Subscription(sink, 1, "z.exact", noEcho: false)); // literal, not cached: touches one entry, removes none
        long visits = _router.InvalidationVisits;
        _router.Add(new Subscription(sink, 2, "*.nomatch", noEcho: false)); // no two-token topic ends in 'nomatch'
        Assert.Equal(0, _router.InvalidationVisits - visits);
        Assert.Equal(cached.Length, _router.CachedTopics);

        _router.Add(new Subscription(sink, 3, "a.*", noEcho: false));
        Assert.Equal(2, _router.InvalidationVisits - visits); // a.1 and a.2: nothing of b or c
        Assert.Equal(cached.Length - 2, _router.CachedTopics);

        _router.Add(new Subscription(sink, 4, "b.>", noEcho: false));
        Assert.Equal(cached.Length - 4, _router.CachedTopics); // and b.1 and b.2.x (b.2 is only a branch)

        Assert.Single(_router.Match("a.1".AsSpan()));
        Assert.Single(_router.Match("b.2.x".AsSpan()));
        Assert.Empty(_router.Match("a.1.x".AsSpan()));
        Assert.Empty(_router.Match("c".AsSpan()));
    }

    [Fact]
    public void A_wildcard_whose_last_tokens_no_cached_topic_has_looks_at_nothing_whatever_its_first_tokens_share()
    {
        var sink = new RecordingSink();
        int topics = TopicRouter.MaxInvalidationVisits * 2;
        for (int i = 0; i < topics; i++)
        {
            Assert.Empty(_router.Match($"d.{i}.status".AsSpan()));
        }

        long visits = _router.InvalidationVisits;
        var alarm = new Subscription(sink, 1, "d.*.alarm", noEcho: false); // '*' after 'd' reaches them all; 'alarm' none
        _router.Add(alarm);

        Assert.Equal(0, _router.InvalidationVisits - visits);
        Assert.Equal(topics, _router.CachedTopics);
        Assert.Same(alarm, Assert.Single(_router.Match("d.7.alarm".AsSpan())));
        Assert.Empty(_router.Match("d.7.status".AsSpan()));

        var status = new Subscription(sink, 2, "*.7.status", noEcho: false); // from the back: one candidate, d.7.status
        _router.Add(status);
        Assert.Equal(topics, _router.CachedTopics); // d.7.status went, d.7.alarm came when it was matched above
        Assert.Same(status, Assert.Single(_router.Match("d.7.status".AsSpan())));
        Assert.Empty(_router.Match("d.8.status".AsSpan()));

        Assert.True(_router.Remove(alarm));
        Assert.Empty(_router.Match("d.7.alarm".AsSpan()));
    }

    [Fact]
    public void A_wildcard_fanning_out_past_the_bound_from_both_sides_drops_the_whole_cache_and_matches_stay_right()
    {
        var sink = new RecordingSink();
        int topics = TopicRouter.MaxInvalidationVisits * 2;
        for (int i = 0; i < topics; i++)
        {
            Assert.Empty(_router.Match($"a.{i}.b".AsSpan()));
            Assert.Empty(_router.Match($"c.{i}.d".AsSpan()));
        }

        long visits = _router.InvalidationVisits;
        var cross = new Subscription(sink, 1, "a.*.d", noEcho: false); // many start with 'a', many end in 'd': none both
        _router.Add(cross);

        Assert.InRange(_router.InvalidationVisits - visits, 1, TopicRouter.MaxInvalidationVisits + 1);
        Assert.Equal(0, _router.CachedTopics);
        Assert.Same(cross, Assert.Single(_router.Match("a.7.d".AsSpan())));
        Assert.Empty(_router.Match("a.7.b".AsSpan()));

        visits = _router.InvalidationVisits;
        var wide = new Subscription(sink, 2, "a.>", noEcho: false); // every cached a.N.x below 'a', counted before walking
        for (int i = 0; i < topics; i++)
        {
            Assert.Empty(_router.Match($"a.{i}.b".AsSpan()));
        }

        _router.Add(wide);
        Assert.Equal(0, _router.InvalidationVisits - visits); // more than the bound below 'a': dropped without a walk
        Assert.Equal(0, _router.CachedTopics);
        Assert.Same(wide, Assert.Single(_router.Match("a.7.b".AsSpan())));
        Assert.True(_router.Remove(cross));
        Assert.Empty(_router.Match("c.7.d".AsSpan()));
    }

    [Fact]
    public void Cached_matches_stay_those_of_the_client_side_matcher_through_random_changes()
    {
        // Topics and patterns over a small alphabet, so that wildcards from either side overlap, miss and fan out.
        var random = new Random(20261129);
        string[] tokens = ["a", "b", "c", "d"];
        string Topic(int length) => string.Join('.', Enumerable.Range(0, length).Select(_ => tokens[random.Next(tokens.Length)]));
        string Pattern()
        {
            int length = random.Next(1, 5);
            var parts = Enumerable.Range(0, length).Select(_ => random.Next(4) == 0 ? "*" : tokens[random.Next(tokens.Length)]).ToList();
            if (random.Next(4) == 0)
            {
                parts[^1] = ">";
            }

            return string.Join('.', parts);
        }

        string[] topics = Enumerable.Range(0, 300).Select(_ => Topic(random.Next(1, 5))).Distinct().ToArray();
        var sink = new RecordingSink();
        var live = new List<Subscription>();
        for (int step = 0; step < 400; step++)
        {
            if (live.Count > 0 && random.Next(3) == 0)
            {
                Subscription gone = live[random.Next(live.Count)];
                Assert.True(_router.Remove(gone));
                live.Remove(gone);
            }
            else
            {
                var added = new Subscription(sink, (uint)step + 1, Pattern(), noEcho: false);
                _router.Add(added);
                live.Add(added);
            }

            foreach (string topic in topics.Where((_, i) => i % 7 == step % 7))
            {
                string[] expected = live.Where(s => Herald.Protocol.Topic.Matches(s.Pattern, topic)).Select(s => s.Pattern).Order().ToArray();
                Assert.Equal(expected, _router.Match(topic.AsSpan()).Select(s => s.Pattern).Order().ToArray());
            }
        }
    }

    [Fact]
    public void A_full_cache_evicts_a_quarter_and_no_evicted_or_invalidated_entry_comes_back_stale()
    {
        using var router = new TopicRouter(cacheCapacity: 100);
        var sink = new RecordingSink();
        var all = new Subscription(sink, 1, "t.*", noEcho: false);
        router.Add(all);
        for (int i = 0; i < 250; i++)
        {
            Assert.Single(router.Match($"t.{i}".AsSpan()));
            Assert.InRange(router.CachedTopics, 1, 100);
        }

        Assert.True(router.CachedTopics >= 75);
        Assert.True(router.Remove(all));
        for (int i = 0; i < 250; i++)
        {
            Assert.Empty(router.Match($"t.{i}".AsSpan()));
        }
    }

    [Fact]
    public void Publish_encodes_once_and_every_sink_gets_the_same_bytes()
    {
        var sinks = Enumerable.Range(0, 50).Select(_ => new RecordingSink()).ToArray();
        for (int i = 0; i < sinks.Length; i++)
        {
            _router.Add(new Subscription(sinks[i], (uint)(i + 1), "t.*", noEcho: i == 0));
        }

        PublishFrame publish = Decode(w => FrameWriter.WritePublish(w, "t.x"u8, "_INBOX.r"u8, PayloadFlags.None, "payload"u8));
        var toFlush = new List<IMessageSink>();

        int delivered = _router.Publish(new PublishContext(in publish, toFlush) { Origin = sinks[0] });

        Assert.Equal(49, delivered);                       // sinks[0] asked not to see its own publication
        Assert.Equal(49, toFlush.Count);                   // each idle sink is flushed once, by the publisher
        Assert.Equal(1, _router.EncodedFrames);
        MessageBuffer shared = sinks[1].Frames[0].Frame;
        Assert.All(sinks.Skip(1), s => Assert.Same(shared, Assert.Single(s.Frames).Frame));
        Assert.Empty(sinks[0].Frames);
    }

    [Fact]
    public void A_publication_with_headers_is_encoded_once_per_form_and_a_header_less_one_once()
    {
        var aware = Enumerable.Range(0, 10).Select(_ => new RecordingSink { AcceptsHeaders = true }).ToArray();
        var plain = Enumerable.Range(0, 10).Select(_ => new RecordingSink()).ToArray();
        uint sid = 1;
        foreach (RecordingSink sink in aware.Concat(plain))
        {
            _router.Add(new Subscription(sink, sid++, "h.>", noEcho: false));
        }

        PublishFrame withHeaders = Decode(w => FrameWriter.WritePublish(w, "h.x"u8, default, PayloadFlags.None, "p"u8, HeaderBlock.Encode([new("K", ["v"])])));
        Assert.Equal(20, _router.Publish(new PublishContext(in withHeaders, [])));
        Assert.Equal(2, _router.EncodedFrames); // one form with the block, one without
        MessageBuffer seven = aware[0].Frames[0].Frame;
        MessageBuffer six = plain[0].Frames[0].Frame;
        Assert.All(aware, s => Assert.Same(seven, Assert.Single(s.Frames).Frame));
        Assert.All(plain, s => Assert.Same(six, Assert.Single(s.Frames).Frame));
        Assert.Equal((0x97, 0x96), (seven.Span[4], six.Span[4]));

        PublishFrame without = Decode(w => FrameWriter.WritePublish(w, "h.y"u8, default, PayloadFlags.None, "p"u8));
        Assert.Equal(20, _router.Publish(new PublishContext(in without, [])));
        Assert.Equal(3, _router.EncodedFrames); // no headers: one form for everyone, as before headers existed
        MessageBuffer shared = aware[0].Frames[1].Frame;
        Assert.All(aware.Concat(plain), s => Assert.Same(shared, s.Frames[1].Frame));
    }

    [Fact]
    public void Publish_without_subscribers_encodes_nothing()
    {
        PublishFrame publish = Decode(w => FrameWriter.WritePublish(w, "nobody.home"u8, default, PayloadFlags.None, "x"u8));

        Assert.Equal(0, _router.Publish(new PublishContext(in publish, [])));
        Assert.Equal(0, _router.EncodedFrames);
    }

    [Fact]
    public async Task Concurrent_subscribe_unsubscribe_and_publish_stay_consistent()
    {
        var stable = new RecordingSink();
        _router.Add(new Subscription(stable, 1, "load.>", noEcho: false));
        using var stop = new CancellationTokenSource();
        Task churn = Task.Run(() =>
        {
            var sink = new RecordingSink();
            for (uint i = 0; !stop.IsCancellationRequested; i++)
            {
                var s = new Subscription(sink, i + 2, (i % 3) switch { 0 => "load.a", 1 => "load.*", _ => "load.>" }, noEcho: false);
                _router.Add(s);
                _router.Remove(s);
            }
        });

        for (int i = 0; i < 20_000; i++)
        {
            Subscription[] matched = _router.Match("load.a".AsSpan());
            Assert.Contains(matched, s => s.Sink == stable); // never lost while others churn
        }

        await stop.CancelAsync();
        await churn;
        Assert.Single(_router.Match("load.a".AsSpan()));
    }

    private static PublishFrame Decode(Action<IBufferWriter<byte>> write)
    {
        var buffer = new ArrayBufferWriter<byte>();
        write(buffer);
        var sequence = new ReadOnlySequence<byte>(buffer.WrittenMemory);
        Assert.True(FrameReader.TryReadFrame(ref sequence, int.MaxValue, out ReadOnlySequence<byte> body));
        var reader = new MessagePack.MessagePackReader(body);
        FrameDecoder.ReadHeader(ref reader, out int count);
        return FrameDecoder.ReadPublish(ref reader, count);
    }

    /// <summary>A sink that keeps what it is given (in-process router tests only; sockets are tested elsewhere).</summary>
    private sealed class RecordingSink : IMessageSink
    {
        public List<(MessageBuffer Frame, uint Sid)> Frames { get; } = [];

        public bool AcceptsZstd { get; init; }

        public bool AcceptsHeaders { get; init; }

        public Enqueued Enqueue(MessageBuffer frame, uint sid)
        {
            Frames.Add((frame, sid));
            return Frames.Count == 1 ? Enqueued.Queued | Enqueued.Wake : Enqueued.Queued;
        }

        public void Flush()
        {
        }

        public void ScheduleFlush()
        {
        }

        public override string ToString() => Encoding.ASCII.GetString(Frames.Count > 0 ? Frames[0].Frame.Span : []);
    }
}
