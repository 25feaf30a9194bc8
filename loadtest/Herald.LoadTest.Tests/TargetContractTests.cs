using System.Globalization;
using System.Text;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Tests;

/// <summary>
/// The <see cref="IPubSubClient"/> contract every scenario relies on, checked against each target the
/// tool can start here: a subscription is live when SubscribeAsync returns, publications arrive in order
/// and intact, a handler can reply through reply_to, and FlushAsync sends what a batched producer buffered;
/// on the targets that carry headers, a header block arrives byte for byte with its publication.
/// </summary>
public class TargetContractTests
{
    public static TheoryData<string, string> Targets => new() { { "herald", "tcp" }, { "herald", "tls" }, { "herald", "websocket" }, { "herald", "longpoll" }, { "nats", "tcp" }, { "nats", "tls" }, { "redis", "tcp" }, { "signalr", "tcp" }, { "signalr", "longpoll" } };

    internal static async Task<ITarget> StartAsync(string target, string transport, bool headers = false)
    {
        if (target is "nats" or "redis")
        {
            Repo.EnsurePeerServers();
        }

        int first = Repo.FreePorts(4);
        string[] args =
        [
            "--target", target, "--transport", transport,
            "--ports", $"{first}-{first + 1}", "--http-port", (first + 2).ToString(CultureInfo.InvariantCulture), "--monitoring-port", (first + 3).ToString(CultureInfo.InvariantCulture),
            "--port", first.ToString(CultureInfo.InvariantCulture), "--broker-dll", Repo.BrokerDll, "--setup-timeout", "60",
        ];
        TargetOptions options = Repo.TargetOptionsOf(args) with { Headers = headers };
        return await TargetFactory.StartAsync(options, CancellationToken.None);
    }

    [Theory]
    [MemberData(nameof(Targets))]
    public async Task Publications_reach_a_live_subscription_in_order_and_a_handler_can_reply(string target, string transport)
    {
        await using ITarget server = await StartAsync(target, transport);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        await using IPubSubClient subscriber = await server.ConnectAsync(0, timeout.Token);
        await using IPubSubClient publisher = await server.ConnectAsync(1, timeout.Token);

        const int count = 2000;
        var received = new List<string>();
        var all = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        await subscriber.SubscribeAsync("contract.data", (payload, _, _) =>
        {
            received.Add(Encoding.UTF8.GetString(payload));
            if (received.Count == count)
            {
                all.TrySetResult();
            }
        }, timeout.Token);
        await subscriber.SubscribeAsync("contract.echo", (payload, replyTo, _) => subscriber.Publish(Encoding.UTF8.GetString(replyTo), payload), timeout.Token);

        var reply = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        await publisher.SubscribeAsync("_INBOX.contract.1", (payload, _, _) => reply.TrySetResult(Encoding.UTF8.GetString(payload)), timeout.Token);

        for (int i = 0; i < count; i++)
        {
            await publisher.PublishAsync("contract.data", Encoding.UTF8.GetBytes($"m{i}"), sendNow: false, cancellationToken: timeout.Token);
        }

        await publisher.FlushAsync(timeout.Token);
        await all.Task.WaitAsync(timeout.Token);
        Assert.Equal(Enumerable.Range(0, count).Select(i => $"m{i}"), received);

        publisher.Publish("contract.echo", "hello"u8, "_INBOX.contract.1"u8);
        Assert.Equal("hello", await reply.Task.WaitAsync(timeout.Token));
        Assert.Null(subscriber.Failure);
        Assert.Null(publisher.Failure);
    }

    [Theory]
    [InlineData("tls", "redis")]
    [InlineData("tls", "signalr")]
    [InlineData("tls", "cluster")]
    [InlineData("websocket", "nats")]
    [InlineData("websocket", "redis")]
    [InlineData("websocket", "signalr")]
    public void A_transport_is_refused_for_a_target_the_tool_cannot_start_with_it(string transport, string target)
    {
        UsageException e = Assert.Throws<UsageException>(() => Repo.TargetOptionsOf(["--target", target, "--transport", transport]));
        Assert.Contains(transport, e.Message, StringComparison.Ordinal);
    }

    public static TheoryData<string, string> HeaderTargets => new() { { "herald", "tcp" }, { "herald", "longpoll" }, { "nats", "tcp" } };

    [Theory]
    [MemberData(nameof(HeaderTargets))]
    public async Task A_header_block_of_the_asked_size_arrives_byte_for_byte_with_its_publication(string target, string transport)
    {
        await using ITarget server = await StartAsync(target, transport, headers: true);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        await using IPubSubClient subscriber = await server.ConnectAsync(0, timeout.Token);
        await using IPubSubClient publisher = await server.ConnectAsync(1, timeout.Token);
        byte[] block = Scenarios.PublicationHeaders.Encode(server, 100);

        var received = new List<(string Payload, byte[] Headers)>();
        var all = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        await subscriber.SubscribeAsync("contract.headers", (payload, _, headers) =>
        {
            received.Add((Encoding.UTF8.GetString(payload), headers.ToArray()));
            if (received.Count == 3)
            {
                all.TrySetResult();
            }
        }, timeout.Token);

        await publisher.PublishAsync("contract.headers", "a"u8.ToArray(), headers: block, cancellationToken: timeout.Token);
        await publisher.PublishAsync("contract.headers", "b"u8.ToArray(), cancellationToken: timeout.Token);
        await publisher.PublishAsync("contract.headers", "c"u8.ToArray(), headers: block, cancellationToken: timeout.Token);
        await all.Task.WaitAsync(timeout.Token);

        Assert.Equal(100, block.Length);
        Assert.Equal(["a", "b", "c"], received.Select(r => r.Payload));
        Assert.Equal(block, received[0].Headers);
        Assert.Empty(received[1].Headers);
        Assert.Equal(block, received[2].Headers);
        Assert.Null(subscriber.Failure);
        Assert.Null(publisher.Failure);
        Assert.Equal(0, subscriber.Errors + publisher.Errors);
    }
}
