using System.Collections.Concurrent;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// A stand-in for a UI thread's context: work posted to it runs with it installed as the current context,
/// one item at a time, and is counted.
/// </summary>
public sealed class RecordingContext : SynchronizationContext
{
    private readonly Lock _one = new();
    private int _posted;

    public int Posted => Volatile.Read(ref _posted);

    public override void Post(SendOrPostCallback d, object? state)
    {
        Interlocked.Increment(ref _posted);
        ThreadPool.QueueUserWorkItem(_ =>
        {
            lock (_one)
            {
                SynchronizationContext? previous = Current;
                SetSynchronizationContext(this);
                try
                {
                    d(state);
                }
                finally
                {
                    SetSynchronizationContext(previous);
                }
            }
        });
    }

    public override void Send(SendOrPostCallback d, object? state) => throw new NotSupportedException();
}

/// <summary>Messages arrive on the thread pool, never on the subscriber's context, unless it opts in (the net.tcp seed's 163x lesson).</summary>
public class ThreadingTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task By_default_a_handler_runs_on_the_thread_pool_not_on_the_subscribers_context(HeraldTransport transport)
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(transport);
        await client.ConnectAsync(Wait.Token());
        var context = new RecordingContext();
        var seen = new ConcurrentQueue<(SynchronizationContext? Context, bool Pool)>();
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);

        HeraldSubscription subscription = await SubscribeFrom(context, () => client.SubscribeAsync(topic, m =>
        {
            seen.Enqueue((SynchronizationContext.Current, Thread.CurrentThread.IsThreadPoolThread));
            if (seen.Count == 3)
            {
                done.TrySetResult();
            }
        }));
        for (int i = 0; i < 3; i++)
        {
            await client.PublishAsync(topic, "m");
        }

        await done.Task.Within();
        await subscription.DisposeAsync();
        Assert.All(seen, s => Assert.NotSame(context, s.Context));
        Assert.All(seen, s => Assert.True(s.Pool));
        Assert.Equal(0, context.Posted); // nothing of the client's was posted to the subscriber's context
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task With_DeliverOnCapturedContext_a_handler_runs_on_the_context_captured_at_subscribe_time_in_order(HeraldTransport transport)
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(transport, o => o.DeliverOnCapturedContext = true);
        await client.ConnectAsync(Wait.Token());
        var context = new RecordingContext();
        var seen = new ConcurrentQueue<(SynchronizationContext? Context, string Text)>();
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);

        HeraldSubscription subscription = await SubscribeFrom(context, () => client.SubscribeAsync(topic, async m =>
        {
            seen.Enqueue((SynchronizationContext.Current, m.GetString()));
            await Task.Yield(); // an async handler carries on on its context
            if (seen.Count == 20)
            {
                done.TrySetResult();
            }
        }));
        for (int i = 0; i < 20; i++)
        {
            await client.PublishAsync(topic, i.ToString(System.Globalization.CultureInfo.InvariantCulture));
        }

        await done.Task.Within();
        await subscription.DisposeAsync();
        Assert.All(seen, s => Assert.Same(context, s.Context));
        Assert.Equal(Enumerable.Range(0, 20).Select(i => i.ToString(System.Globalization.CultureInfo.InvariantCulture)), seen.Select(s => s.Text));
        Assert.True(context.Posted >= 20);
    }

    [Fact]
    public async Task Events_are_raised_on_the_thread_pool()
    {
        await using HeraldClient client = fixture.Client(HeraldTransport.Tcp);
        var context = new RecordingContext();
        var raisedOn = new TaskCompletionSource<SynchronizationContext?>(TaskCreationOptions.RunContinuationsAsynchronously);
        client.StateChanged += (_, e) =>
        {
            if (e.Current == ConnectionState.Connected)
            {
                raisedOn.TrySetResult(SynchronizationContext.Current);
            }
        };

        await SubscribeFrom(context, () => client.SubscribeAsync(Topics.Unique()));

        Assert.NotSame(context, await raisedOn.Task.Within());
    }

    /// <summary>Calls <paramref name="subscribe"/> with <paramref name="context"/> installed, as a UI thread would.</summary>
    private static async Task<HeraldSubscription> SubscribeFrom(SynchronizationContext context, Func<Task<HeraldSubscription>> subscribe)
    {
        SynchronizationContext? previous = SynchronizationContext.Current;
        SynchronizationContext.SetSynchronizationContext(context);
        Task<HeraldSubscription> subscribing;
        try
        {
            subscribing = subscribe();
        }
        finally
        {
            SynchronizationContext.SetSynchronizationContext(previous);
        }

        return await subscribing.ConfigureAwait(false);
    }
}
