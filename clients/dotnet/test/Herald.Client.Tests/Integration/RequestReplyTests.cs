using Herald.Client.Tests.Infrastructure;

namespace Herald.Client.Tests.Integration;

[MessagePack.MessagePackObject]
public sealed record Quote([property: MessagePack.Key(0)] string Symbol, [property: MessagePack.Key(1)] decimal Price);

/// <summary>Request/reply (spec §7): an inbox subscription per client, a fresh reply_to per request, a timeout.</summary>
public class RequestReplyTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    public static TheoryData<HeraldTransport, HeraldTransport> TransportPairs => PubSubTests.TransportPairs;

    [Theory]
    [MemberData(nameof(TransportPairs))]
    public async Task A_request_gets_the_responders_reply(HeraldTransport requesterTransport, HeraldTransport responderTransport)
    {
        string topic = Topics.Unique("svc.echo");
        await using HeraldClient responder = fixture.Client(responderTransport);
        await using HeraldClient requester = fixture.Client(requesterTransport);
        await using HeraldSubscription service = await responder.SubscribeAsync(topic, async m => await m.RespondAsync("echo: " + m.GetString()));

        HeraldMessage reply = await requester.RequestAsync(topic, "ping", TimeSpan.FromSeconds(10), Wait.Token());

        Assert.Equal("echo: ping", reply.GetString());
        Assert.StartsWith("_INBOX.", reply.Topic, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Typed_requests_and_replies_go_through_MessagePack()
    {
        string topic = Topics.Unique("svc.quote");
        await using HeraldClient responder = fixture.Client(HeraldTransport.Tcp);
        await using HeraldClient requester = fixture.Client(HeraldTransport.LongPoll);
        await using HeraldSubscription service = await responder.SubscribeAsync(topic, async m =>
        {
            string symbol = m.Deserialize<string>();
            await m.RespondAsync(new Quote(symbol, symbol.Length * 10.5m));
        });

        Quote quote = await requester.RequestAsync<string, Quote>(topic, "ACME", TimeSpan.FromSeconds(10), Wait.Token());

        Assert.Equal(new Quote("ACME", 42m), quote);
    }

    [Fact]
    public async Task Concurrent_requests_each_get_their_own_reply()
    {
        string topic = Topics.Unique("svc.square");
        await using HeraldClient responder = fixture.Client(HeraldTransport.Tcp);
        await using HeraldClient requester = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription service = await responder.SubscribeAsync(topic, async m => await m.RespondAsync(m.Deserialize<int>() * m.Deserialize<int>()));

        int[] squares = await Task.WhenAll(Enumerable.Range(1, 20).Select(i => requester.RequestAsync<int, int>(topic, i, TimeSpan.FromSeconds(10), Wait.Token())));

        Assert.Equal(Enumerable.Range(1, 20).Select(i => i * i), squares);
    }

    [Theory]
    [InlineData(HeraldTransport.Tcp)]
    [InlineData(HeraldTransport.LongPoll)]
    [InlineData(HeraldTransport.WebSocket)]
    public async Task A_request_nobody_answers_without_the_no_responders_status_times_out_with_HeraldTimeoutException(HeraldTransport transport)
    {
        string topic = Topics.Unique("nobody.home");
        await using HeraldClient requester = fixture.Client(transport, o => o.EnableNoResponders = false);
        await requester.ConnectAsync(Wait.Token()); // the 300 ms below is for the reply, not for a cold connect

        var e = await Assert.ThrowsAsync<HeraldTimeoutException>(() => requester.RequestAsync(topic, "hello?", TimeSpan.FromMilliseconds(300)));

        Assert.True(requester.ServerInfo!.Headers);
        Assert.False(requester.ServerInfo.NoResponders);
        Assert.IsAssignableFrom<HeraldException>(e);
        Assert.Contains("No reply", e.Message, StringComparison.Ordinal);
        Assert.Equal(topic, e.Topic);
        Assert.Equal(TimeSpan.FromMilliseconds(300), e.Timeout);
        Assert.Equal(ConnectionState.Connected, requester.State); // a timeout is not a connection problem
    }

    [Theory]
    [InlineData(HeraldTransport.Tcp)]
    [InlineData(HeraldTransport.LongPoll)]
    [InlineData(HeraldTransport.WebSocket)]
    public async Task A_request_to_a_topic_nobody_serves_fails_at_once_with_HeraldNoRespondersException(HeraldTransport transport)
    {
        string topic = Topics.Unique("svc.unserved");
        await using HeraldClient requester = fixture.Client(transport);
        await using HeraldClient responder = fixture.Client(HeraldTransport.Tcp);

        // A minute to wait, a hang guard of Wait.Limit: only the broker's answer can end it in time, as this type.
        var e = await Assert.ThrowsAsync<HeraldNoRespondersException>(() => requester.RequestAsync(topic, "anyone?", TimeSpan.FromMinutes(1)).Within());

        Assert.True(requester.ServerInfo!.NoResponders);
        Assert.IsAssignableFrom<HeraldException>(e);
        Assert.Equal(topic, e.Topic);
        Assert.Contains(topic, e.Message, StringComparison.Ordinal);
        Assert.Equal(ConnectionState.Connected, requester.State);

        // Once served, the same topic answers.
        await using HeraldSubscription service = await responder.SubscribeAsync(topic, async m => await m.RespondAsync("here"));
        Assert.Equal("here", (await requester.RequestAsync(topic, "anyone?", TimeSpan.FromMinutes(1)).Within()).GetString());
    }

    [Fact]
    public async Task A_request_cancelled_by_its_caller_is_an_OperationCanceledException_not_a_timeout()
    {
        await using HeraldClient requester = fixture.Client(HeraldTransport.Tcp, o => o.EnableNoResponders = false); // nobody home: it waits
        await requester.ConnectAsync(Wait.Token());
        using var cancel = new CancellationTokenSource();

        Task<HeraldMessage> request = requester.RequestAsync(Topics.Unique("nobody.home"), "hello?", TimeSpan.FromMinutes(5), cancel.Token);
        await cancel.CancelAsync();

        Exception e = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => request);
        Assert.IsNotType<HeraldTimeoutException>(e);
    }

    [Fact]
    public async Task Responding_to_a_message_without_reply_to_is_an_InvalidOperationException()
    {
        string topic = Topics.Unique();
        await using HeraldClient client = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription subscription = await client.SubscribeAsync(topic);
        await client.PublishAsync(topic, "no reply wanted");

        HeraldMessage message = await subscription.ReadAsync(Wait.Token());

        await Assert.ThrowsAsync<InvalidOperationException>(async () => await message.RespondAsync("reply"));
    }
}
