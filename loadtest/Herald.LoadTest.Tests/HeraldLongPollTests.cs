using System.Text;
using Herald.LoadTest.Targets;
using Herald.Testing;

namespace Herald.LoadTest.Tests;

/// <summary>
/// What the herald/longpoll target adds to the contract: a message routed while the session has no poll
/// outstanding is delivered by the next poll, once, and request/reply works across the TCP and long-poll
/// transports in both directions.
/// </summary>
public class HeraldLongPollTests
{
    [Fact]
    public async Task A_message_published_while_no_poll_is_outstanding_is_delivered_once()
    {
        await using ITarget server = await TargetContractTests.StartAsync("herald", "longpoll");
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        await using IPubSubClient subscriber = await server.ConnectAsync(0, timeout.Token);
        await using IPubSubClient publisher = await server.ConnectAsync(1, timeout.Token);

        var received = new List<string>();
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        await subscriber.SubscribeAsync("gap.data", (payload, _, _) =>
        {
            string text = Encoding.UTF8.GetString(payload);
            received.Add(text);
            if (text == "one")
            {
                // The handler runs on the poll loop, between two polls: "two" is routed (the publisher's
                // flush completes on the 202, after routing) while this session has no poll outstanding.
                publisher.PublishAsync("gap.data", "two"u8.ToArray(), cancellationToken: timeout.Token).AsTask().Wait(timeout.Token);
                publisher.FlushAsync(timeout.Token).AsTask().Wait(timeout.Token);
            }
            else if (text == "three")
            {
                done.TrySetResult();
            }
        }, timeout.Token);

        publisher.Publish("gap.data", "one"u8);
        await publisher.FlushAsync(timeout.Token);
        await Until.True(() => received.Count >= 2, "the first two messages arrive");

        publisher.Publish("gap.data", "three"u8);
        await done.Task.WaitAsync(timeout.Token);
        Assert.Equal(["one", "two", "three"], received);
        Assert.Null(subscriber.Failure);
        Assert.Null(publisher.Failure);
    }

    [Fact]
    public async Task Request_reply_works_between_a_tcp_client_and_a_long_poll_client()
    {
        await using ITarget server = await TargetContractTests.StartAsync("herald", "longpoll");
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        await using IPubSubClient poller = await server.ConnectAsync(0, timeout.Token);
        await using HeraldTcpClient tcp = await HeraldTcpClient.ConnectAsync(((HeraldTarget)server).Endpoints.For(0), "loadtest-tcp", timeout.Token);

        await poller.SubscribeAsync("rr.poll", (payload, replyTo, _) => poller.Publish(Encoding.UTF8.GetString(replyTo), [.. "poll:"u8, .. payload]), timeout.Token);
        await tcp.SubscribeAsync("rr.tcp", (payload, replyTo, _) => tcp.Publish(Encoding.UTF8.GetString(replyTo), [.. "tcp:"u8, .. payload]), timeout.Token);
        var tcpGot = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        var pollerGot = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        await tcp.SubscribeAsync("_INBOX.tcp", (payload, _, _) => tcpGot.TrySetResult(Encoding.UTF8.GetString(payload)), timeout.Token);
        await poller.SubscribeAsync("_INBOX.poll", (payload, _, _) => pollerGot.TrySetResult(Encoding.UTF8.GetString(payload)), timeout.Token);

        tcp.Publish("rr.poll", "ping1"u8, "_INBOX.tcp"u8);
        poller.Publish("rr.tcp", "ping2"u8, "_INBOX.poll"u8);

        Assert.Equal("poll:ping1", await tcpGot.Task.WaitAsync(timeout.Token));
        Assert.Equal("tcp:ping2", await pollerGot.Task.WaitAsync(timeout.Token));
        Assert.Null(poller.Failure);
        Assert.Null(tcp.Failure);
    }
}
