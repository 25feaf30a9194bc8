using System.Buffers;
using System.Buffers.Binary;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// The router's part of queue groups across nodes (spec cluster.md §11), in-process: a publication of this node
/// chooses one member among its own and the weighted entries of the other nodes' (and records a choice elsewhere),
/// a publication of another node is delivered here only where its origin's choice says. The cluster tests
/// (<c>ClusterQueueGroupTests</c>) run the same across real nodes and Redis.
/// </summary>
public sealed class QueueGroupAssignmentTests : IDisposable
{
    private const ulong Self = 0x0a;
    private const ulong Other = 0x0b;
    private const ulong Third = 0x0c;

    private readonly TopicRouter _router = new();

    public void Dispose() => _router.Dispose();

    [Fact]
    public void A_publication_here_goes_to_one_member_weighed_over_every_node_and_a_choice_elsewhere_is_recorded_not_delivered()
    {
        var local = new CountingSink();
        _router.Add(new Subscription(local, 1, "jobs.*", noEcho: false, "w", "alice"));
        Subscription elsewhere = Subscription.Elsewhere(Other, "jobs.*", "w", "alice", members: 3);
        _router.AddElsewhere(elsewhere);
        var groups = new GroupAssignments(Self);

        const int Count = 4000;
        int there = 0;
        for (int i = 0; i < Count; i++)
        {
            int delivered = _router.Publish(new PublishContext(Publication("jobs.eu"), []) { Groups = groups.Decide() });
            Assert.Equal(1, delivered + groups.Count); // here or there, never both, never neither
            if (groups.Count == 1)
            {
                Assert.Equal((elsewhere.GroupId, Other), groups[0]);
                there++;
            }
        }

        Assert.Equal(Count - there, local.Received);
        Assert.InRange(there, Count * 6 / 10, Count * 9 / 10); // three of four members are there: about 3,000, a bound that cannot flake
    }

    [Fact]
    public void A_publication_from_another_node_is_delivered_here_only_where_its_origin_chose()
    {
        var local = new CountingSink();
        var member = new Subscription(local, 1, "jobs.*", noEcho: false, "w", "alice");
        _router.Add(member);
        _router.AddElsewhere(Subscription.Elsewhere(Other, "jobs.*", "w", "alice", members: 1));
        var groups = new GroupAssignments(Self);

        Assert.Equal(1, _router.Publish(new PublishContext(Publication("jobs.eu"), []) { Groups = groups.Apply(Third, Carried((member.GroupId, Self))) }));       // named here
        Assert.Equal(0, _router.Publish(new PublishContext(Publication("jobs.eu"), []) { Groups = groups.Apply(Third, Carried((member.GroupId, Other))) }));      // named elsewhere
        Assert.Equal(0, _router.Publish(new PublishContext(Publication("jobs.eu"), []) { Groups = groups.Apply(Other, default) }));                               // not named: its origin holds members, so it chose itself
        Assert.Equal(1, _router.Publish(new PublishContext(Publication("jobs.eu"), []) { Groups = groups.Apply(Third, default) }));                               // not named, and its origin holds none: it knew of no member
        Assert.Equal(1, _router.Publish(new PublishContext(Publication("jobs.eu"), []) { Groups = groups.Apply(Self, default) }));                                // this node's own, back from Redis (a history topic)
        Assert.Equal(0, _router.Publish(new PublishContext(Publication("jobs.eu"), []) { Groups = groups.Apply(Third, Carried((member.GroupId ^ 1, Self), (member.GroupId, Other))) })); // another group's entry does not count
        Assert.Equal(3, local.Received);
    }

    [Fact]
    public void Another_identitys_group_of_the_same_name_is_chosen_on_its_own()
    {
        var alice = new CountingSink();
        var mallory = new CountingSink();
        _router.Add(new Subscription(alice, 1, "jobs.*", noEcho: false, "w", "alice"));
        _router.Add(new Subscription(mallory, 1, "jobs.*", noEcho: false, "w", "mallory"));
        Subscription mallorys = Subscription.Elsewhere(Other, "jobs.*", "w", "mallory", members: 1000);
        _router.AddElsewhere(mallorys);
        var groups = new GroupAssignments(Self);

        for (int i = 0; i < 100; i++)
        {
            _router.Publish(new PublishContext(Publication("jobs.eu"), []) { Groups = groups.Decide() });
            for (int j = 0; j < groups.Count; j++)
            {
                Assert.Equal(mallorys.GroupId, groups[j].Group); // mallory's many members elsewhere weigh in mallory's group only
            }
        }

        Assert.Equal(100, alice.Received);
    }

    [Fact]
    public void Past_what_an_envelope_carries_a_group_is_chosen_here_and_entries_elsewhere_count_for_no_limit()
    {
        using var router = new TopicRouter(maxPatterns: 1);
        var local = new CountingSink();
        router.Add(new Subscription(local, 1, "many.>", noEcho: false, "zz", "alice")); // its group sorts last ('>' after '*'): chosen once the envelope is full
        router.AddElsewhere(Subscription.Elsewhere(Other, "many.>", "zz", "alice", members: 1_000_000));
        for (int i = 0; i < GroupAssignments.Max; i++)
        {
            router.AddElsewhere(Subscription.Elsewhere(Other, "many.*", $"a{i:D2}", "alice", members: 1)); // members only elsewhere, on another pattern
        }

        Assert.Equal((1, 1), (router.SubscriptionCount, router.PatternCount));
        var groups = new GroupAssignments(Self);
        for (int i = 0; i < 20; i++)
        {
            Assert.Equal(1, router.Publish(new PublishContext(Publication("many.x"), []) { Groups = groups.Decide() })); // the last group: here, as the envelope is full
            Assert.Equal(GroupAssignments.Max, groups.Count);
        }

        Assert.Equal(20, local.Received);
    }

    private static PublishFrame Publication(string topic)
    {
        var frame = new ArrayBufferWriter<byte>();
        FrameWriter.WritePublish(frame, Encoding.ASCII.GetBytes(topic), default, PayloadFlags.None, "x"u8);
        var reader = new MessagePack.MessagePackReader(frame.WrittenMemory[ProtocolConstants.LengthPrefixSize..]);
        FrameDecoder.ReadHeader(ref reader, out int count);
        return FrameDecoder.ReadPublish(ref reader, count);
    }

    private static ReadOnlyMemory<byte> Carried(params (ulong Group, ulong Node)[] assignments)
    {
        byte[] bytes = new byte[assignments.Length * GroupAssignments.Size];
        for (int i = 0; i < assignments.Length; i++)
        {
            BinaryPrimitives.WriteUInt64BigEndian(bytes.AsSpan(i * GroupAssignments.Size), assignments[i].Group);
            BinaryPrimitives.WriteUInt64BigEndian(bytes.AsSpan((i * GroupAssignments.Size) + 8), assignments[i].Node);
        }

        return bytes;
    }

    private sealed class CountingSink : IMessageSink
    {
        public int Received { get; private set; }

        public bool AcceptsZstd => false;

        public bool AcceptsHeaders => false;

        public Enqueued Enqueue(MessageBuffer frame, uint sid)
        {
            Received++;
            frame.Release(1);
            return Enqueued.Queued;
        }

        public void Flush()
        {
        }

        public void ScheduleFlush()
        {
        }
    }
}
