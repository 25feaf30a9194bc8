using System.Diagnostics.Metrics;
using Herald.Broker.Delivery;
using Herald.Broker.Telemetry;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>
/// A window backlog's loss marks (<see cref="LossMark"/>, longpoll.md §2): kept among the messages with a sequence of
/// their own, reported at the start of a take, joined so they stay as few as the messages between them, and gone
/// once acknowledged. A stream backlog keeps reporting its losses with its next write.
/// </summary>
public sealed class SubscriberBacklogMarkTests : IDisposable
{
    private readonly ServiceProvider _services = new ServiceCollection().AddMetrics().BuildServiceProvider();

    public void Dispose() => _services.Dispose();

    private SubscriberBacklog Window(int maxMessages = 100, SlowConsumerPolicy policy = SlowConsumerPolicy.DropOldest)
    {
        var backlog = new SubscriberBacklog(new BacklogLimits(maxMessages, 1 << 20, policy), new BrokerMetrics(_services.GetRequiredService<IMeterFactory>()), () => { });
        _ = new WindowPoller(backlog);
        return backlog;
    }

    private static void Message(SubscriberBacklog backlog, string text) => backlog.Enqueue(MessageBuffer.Copy(System.Text.Encoding.UTF8.GetBytes(text)), 1);

    private static WindowTake Take(SubscriberBacklog backlog, long ack)
    {
        Assert.True(backlog.TakeAbove(ack, 100, 1 << 20, out WindowTake take));
        take.Release();
        return take;
    }

    [Fact]
    public void A_loss_is_reported_where_it_lies_and_again_until_acknowledged()
    {
        SubscriberBacklog backlog = Window();
        Message(backlog, "a");
        backlog.Lost(3);
        backlog.Lost(2); // joined to the mark no poll has taken yet
        Message(backlog, "b");

        WindowTake first = Take(backlog, 0);
        Assert.Equal((1L, 1, 0L), (first.FirstSequence, first.Count, first.Dropped)); // a take ends before a mark
        WindowTake marked = Take(backlog, 1);
        Assert.Equal((3L, 1, 5L), (marked.FirstSequence, marked.Count, marked.Dropped)); // the mark held sequence 2
        WindowTake again = Take(backlog, 1);                                             // the answer was lost
        Assert.Equal((3L, 1, 5L), (again.FirstSequence, again.Count, again.Dropped));
        backlog.Acknowledge(3);
        Assert.False(backlog.TakeAbove(3, 100, 1 << 20, out _));
        Assert.Equal(5, backlog.Dropped);
    }

    [Fact]
    public void A_mark_alone_is_a_take_of_no_message_whose_ack_moves_past_it()
    {
        SubscriberBacklog backlog = Window();
        backlog.Lost(4);
        WindowTake take = Take(backlog, 0);
        Assert.Equal((2L, 0, 4L, 1L), (take.FirstSequence, take.Count, take.Dropped, take.AckAfter(0, 0)));
        Assert.False(take.Redelivery);
        WindowTake again = Take(backlog, 0);
        Assert.True(again.Redelivery); // a poll holds such a take rather than answer it at once again
        backlog.Lost(1);               // the mark was taken: a new one
        Assert.Equal((3L, 0, 1L), Take(backlog, 1) is var next ? (next.FirstSequence, next.Count, next.Dropped) : default);
    }

    [Fact]
    public void Marks_pushed_out_by_drop_oldest_join_at_the_front_and_count_every_loss_once()
    {
        SubscriberBacklog backlog = Window(maxMessages: 4);
        backlog.Lost(2);           // seq 1
        Message(backlog, "a");     // 2
        backlog.Lost(3);           // 3
        Message(backlog, "b");     // 4
        Message(backlog, "c");     // over the limit (marks count as entries): "a" dropped, the first mark kept in front
        Message(backlog, "d");     // over again: the second mark joins the first, which makes room
        WindowTake take = Take(backlog, 0);
        Assert.Equal(3, take.Count);           // "b", "c" and "d"
        Assert.Equal(1 + 2 + 3, take.Dropped); // "a" and both marks' counts, each once
        Assert.Equal(6, backlog.Dropped);
    }

    [Fact]
    public void A_mark_read_from_its_bytes_is_the_mark_written_and_anything_else_is_one_loss()
    {
        var mark = new LossMark(7, [3, 1]);
        LossMark read = LossMark.Read(mark.ToBytes());
        Assert.Equal(7, read.Dropped);
        Assert.Equal(new uint[] { 3, 1 }, read.Gaps);
        Assert.Equal(new uint[] { 1, 2, 3 }, read.Merge(new LossMark(1, [2, 3])).Gaps);
        Assert.Equal(8, read.Merge(new LossMark(1, [2, 3])).Dropped);
        Assert.Equal((1L, 0), LossMark.Read("garbage"u8) is var junk ? (junk.Dropped, junk.Gaps.Length) : default);
    }
}
