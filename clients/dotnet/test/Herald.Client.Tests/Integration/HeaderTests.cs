using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Integration;

/// <summary>Headers (spec §4.9) through the real broker: carried as published, negotiated, checked before they are sent.</summary>
public class HeaderTests(BrokerFixture fixture) : IClassFixture<BrokerFixture>
{
    public static TheoryData<HeraldTransport, HeraldTransport> TransportPairs => PubSubTests.TransportPairs;

    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    [Theory]
    [MemberData(nameof(TransportPairs))]
    public async Task Headers_arrive_as_published_multi_valued_non_ASCII_and_empty(HeraldTransport publisherTransport, HeraldTransport subscriberTransport)
    {
        string topic = Topics.Unique("hdr");
        await using HeraldClient subscriber = fixture.Client(subscriberTransport);
        await using HeraldClient publisher = fixture.Client(publisherTransport);
        await using HeraldSubscription subscription = await subscriber.SubscribeAsync(topic);
        HeraldHeaders headers = HeraldHeaders.Empty
            .Add("Content-Type", "application/json")
            .Add("X-Tag", "a")
            .Add("x-tag", "b")
            .Add("X-Greeting", "Grüße, 世界 🌍")
            .Add("X-Empty", "");

        await publisher.PublishAsync(topic, "{}", headers);
        await publisher.PublishAsync(topic, "plain");

        HeraldMessage withHeaders = await subscription.ReadAsync(Wait.Token());
        HeraldMessage without = await subscription.ReadAsync(Wait.Token());
        Assert.True(subscriber.ServerInfo!.Headers);
        Assert.Equal("{}", withHeaders.GetString());
        Assert.Equal(["Content-Type", "X-Tag", "X-Greeting", "X-Empty"], withHeaders.Headers.Keys); // order and first spelling kept
        Assert.Equal(["a", "b"], withHeaders.Headers["X-TAG"]);
        Assert.Equal("Grüße, 世界 🌍", withHeaders.Headers.GetFirstValue("x-greeting"));
        Assert.Equal([""], withHeaders.Headers["X-Empty"]);
        Assert.NotNull(without.Headers);
        Assert.Empty(without.Headers);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_client_that_turned_headers_off_receives_the_message_without_them_and_cannot_publish_them(HeraldTransport transport)
    {
        string topic = Topics.Unique("hdr.off");
        await using HeraldClient old = fixture.Client(transport, o => o.EnableHeaders = false);
        await using HeraldClient publisher = fixture.Client(HeraldTransport.Tcp);
        await using HeraldSubscription subscription = await old.SubscribeAsync(topic);

        await publisher.PublishAsync(topic, "for everyone", HeraldHeaders.Empty.Add("X-Tag", "a"));
        HeraldMessage message = await subscription.ReadAsync(Wait.Token());
        var refused = await Assert.ThrowsAsync<HeraldException>(async () => await old.PublishAsync(topic, "mine", HeraldHeaders.Empty.Add("X-Tag", "b")));

        Assert.False(old.ServerInfo!.Headers);
        Assert.False(old.ServerInfo.NoResponders);
        Assert.Equal("for everyone", message.GetString());
        Assert.Empty(message.Headers);
        Assert.Equal(ErrorCode.MalformedFrame, refused.ErrorCode);
        Assert.Contains("EnableHeaders", refused.Message, StringComparison.Ordinal);

        // Nothing of the refused publication left the client: the barrier's PONG comes, and only the next one arrives.
        await old.FlushAsync(Wait.Token());
        await old.PublishAsync(topic, "after");
        Assert.Equal("after", (await subscription.ReadAsync(Wait.Token())).GetString());
        Assert.Equal(ConnectionState.Connected, old.State);
    }

    [Fact]
    public async Task Against_a_broker_before_headers_HELLO_asks_for_them_and_a_publication_with_headers_is_refused_before_it_is_sent()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url);
        await using FakeConnection connection = await broker.ConnectAsync(client); // WELCOME grants nothing, as a broker before headers does

        var refused = await Assert.ThrowsAsync<HeraldException>(async () => await client.PublishAsync("t.old", "x", HeraldHeaders.Empty.Add("X-Tag", "a")));
        Task flushed = client.FlushAsync(Wait.Token());

        Assert.Equal(Capabilities.Zstd | Capabilities.Headers | Capabilities.NoResponders | Capabilities.History | Capabilities.QueueGroups | Capabilities.Presence | Capabilities.Deltas, connection.Hello.Capabilities);
        Assert.False(client.ServerInfo!.Headers);
        Assert.Equal(ErrorCode.MalformedFrame, refused.ErrorCode);
        Assert.Equal(FrameType.Ping, await connection.ReadAsync()); // the flush's PING is the next frame: no PUBLISH went out
        await connection.SendAsync(FrameWriter.WritePong);
        await flushed.Within();
    }

    [Fact]
    public void Keys_and_values_the_spec_forbids_are_ArgumentExceptions_at_once()
    {
        Assert.Throws<ArgumentException>(() => HeraldHeaders.Empty.Add("", "v"));
        Assert.Throws<ArgumentException>(() => HeraldHeaders.Empty.Add("Bad Key", "v"));
        Assert.Throws<ArgumentException>(() => HeraldHeaders.Empty.Add("Clé", "v"));
        Assert.Throws<ArgumentException>(() => HeraldHeaders.Empty.Add(new string('k', 257), "v"));
        Assert.Throws<ArgumentException>(() => HeraldHeaders.Empty.Add("X-Line", "a\r\nInjected: yes"));
        Assert.Throws<ArgumentException>(() => HeraldHeaders.Empty.Add("herald-status", "200"));
        Assert.Throws<ArgumentException>(() => HeraldHeaders.Empty.Set("Herald-Description", "mine"));

        HeraldHeaders one = HeraldHeaders.Empty.Add("X-Tag", "a");
        HeraldHeaders two = one.Add("X-Tag", "b").Set("Content-Type", "text/plain");
        Assert.Equal(["a"], one["X-Tag"]); // immutable: the first is unchanged
        Assert.Equal(["a", "b"], two["x-tag"]);
        Assert.Equal(3, two.ValueCount);
        Assert.Equal(["application/json"], two.Set("content-type", "application/json")["Content-Type"]);
        Assert.Equal(["text/plain"], two["Content-Type"]);
        Assert.False(two.Remove("x-tag").ContainsKey("X-Tag"));
        Assert.Throws<KeyNotFoundException>(() => one["Missing"]);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task Headers_over_the_brokers_limits_are_an_ArgumentException_and_the_connection_carries_on(HeraldTransport transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxHeaders = 3;
            o.Limits.MaxHeaderBytes = 64;
        });
        string topic = Topics.Unique("hdr.limits");
        await using var client = new HeraldClient(broker.Url(transport));
        await using HeraldSubscription subscription = await client.SubscribeAsync(topic);

        var tooMany = await Assert.ThrowsAsync<ArgumentException>(async () => await client.PublishAsync(topic, "x", HeraldHeaders.Empty.Add("A", "1").Add("A", "2").Add("B", "3").Add("C", "4")));
        var tooBig = await Assert.ThrowsAsync<ArgumentException>(async () => await client.PublishAsync(topic, "x", HeraldHeaders.Empty.Add("Big", new string('v', 64))));
        await client.PublishAsync(topic, "fits", HeraldHeaders.Empty.Add("A", "1").Add("A", "2").Add("B", "3"));

        Assert.Contains("max_headers of 3", tooMany.Message, StringComparison.Ordinal);
        Assert.Contains("max_header_bytes of 64", tooBig.Message, StringComparison.Ordinal);
        HeraldMessage message = await subscription.ReadAsync(Wait.Token());
        Assert.Equal("fits", message.GetString());
        Assert.Equal(3, message.Headers.ValueCount);
        Assert.Equal(ConnectionState.Connected, client.State);
    }

    [Theory]
    [MemberData(nameof(TransportPairs))]
    public async Task A_request_and_its_reply_carry_headers(HeraldTransport requesterTransport, HeraldTransport responderTransport)
    {
        string topic = Topics.Unique("svc.hdr");
        await using HeraldClient responder = fixture.Client(responderTransport);
        await using HeraldClient requester = fixture.Client(requesterTransport);
        await using HeraldSubscription service = await responder.SubscribeAsync(topic, async m =>
            await m.RespondAsync("ok"u8.ToArray(), HeraldHeaders.Empty.Add("X-Request-Id", m.Headers.GetFirstValue("X-Request-Id") ?? "none")));

        HeraldMessage reply = await requester.RequestAsync(topic, "?", HeraldHeaders.Empty.Add("X-Request-Id", "r-42"), TimeSpan.FromSeconds(30), Wait.Token());

        Assert.Equal("ok", reply.GetString());
        Assert.Equal("r-42", reply.Headers.GetFirstValue("x-request-id"));
    }
}
