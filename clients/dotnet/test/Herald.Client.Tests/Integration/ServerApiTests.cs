using System.Security.Cryptography;
using System.Text;
using Herald.Broker.Api;
using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// <see cref="HeraldApiClient"/> against the real broker's server API: a publication reaches a <see cref="HeraldClient"/>
/// subscriber once though repeated with its idempotency key, a batch and a broadcast answer per item, history, presence
/// and topics are read, and a refusal is a <see cref="HeraldApiException"/> with the problem's code.
/// </summary>
public class ServerApiTests
{
    private const string Key = "sdk-test-admin-key-0123456789abcdef0123456789";
    private const string PublishKey = "sdk-test-publish-key-0123456789abcdef01234567";

    private static Task<TestBroker> StartAsync(bool monitoring = false) => TestBroker.StartAsync(o =>
    {
        o.Monitoring.Port = monitoring ? 0 : -1; // the connections' client ids, for the API's client actions
        o.Api.Host = "127.0.0.1";
        o.Api.Port = 0;
        o.Api.Keys =
        [
            new ApiKeyOptions { Name = "admin", Hash = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(Key))), Scope = "admin" },
            new ApiKeyOptions { Name = "publisher", Hash = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(PublishKey))), Scope = "publish" },
        ];
        o.History.Topics.Add(new Herald.Broker.History.HistoryRule { Pattern = "kept.>", MaxMessages = 10 });
    });

    [Fact]
    public async Task Publications_reach_a_subscriber_once_and_the_read_endpoints_answer()
    {
        await using TestBroker broker = await StartAsync();
        using var api = new HeraldApiClient(new Uri($"http://127.0.0.1:{broker.ApiPort}"), Key);
        await using var subscriber = new HeraldClient(broker.TcpUrl);
        HeraldSubscription subscription = await subscriber.SubscribeAsync("kept.>");

        Assert.False(await api.PublishAsync("kept.a", "one"u8.ToArray(), new Dictionary<string, string> { ["k"] = "v" }, idempotencyKey: "1"));
        Assert.True(await api.PublishAsync("kept.a", "one"u8.ToArray(), idempotencyKey: "1"));
        IReadOnlyList<HeraldApiResult> batch = await api.BatchAsync([new HeraldApiPublication("kept.a", "two"u8.ToArray()), new HeraldApiPublication("kept.*", "bad"u8.ToArray())]);
        Assert.Equal([200, 400], batch.Select(r => r.Status));
        Assert.NotNull(batch[1].Detail);
        IReadOnlyList<HeraldApiResult> broadcast = await api.BroadcastAsync(["kept.b", "kept.c"], "all"u8.ToArray());
        Assert.All(broadcast, r => Assert.True(r.Succeeded));

        var received = new List<string>();
        await foreach (HeraldMessage message in subscription.WithCancellation(Wait.Token()))
        {
            received.Add($"{message.Topic}={Encoding.UTF8.GetString(message.Payload.Span)}");
            if (received.Count == 4)
            {
                break;
            }
        }

        Assert.Equal(["kept.a=one", "kept.a=two", "kept.b=all", "kept.c=all"], received);

        HeraldApiHistoryPage history = await api.HistoryAsync("kept.a", after: 1);
        Assert.Equal((2ul, "two"), (history.Entries.Single().Offset, Encoding.UTF8.GetString(history.Entries.Single().Payload)));
        HeraldApiTopicsPage topics = await api.TopicsAsync(prefix: "kept");
        Assert.Equal(("kept.>", 1), (topics.Topics.Single().Pattern, topics.Topics.Single().Subscribers));
        HeraldApiPresencePage presence = await api.PresenceAsync("room.empty");
        Assert.Equal(0, presence.Members);
        using System.Text.Json.JsonDocument info = await api.InfoAsync();
        Assert.Equal(1, info.RootElement.GetProperty("connections").GetInt32());
    }

    [Theory]
    [InlineData(HeraldTransport.Tcp)]
    [InlineData(HeraldTransport.LongPoll)]
    public async Task A_subscription_the_backend_makes_is_raised_reads_its_publications_and_ends_when_the_backend_unsubscribes(HeraldTransport transport)
    {
        await using TestBroker broker = await StartAsync(monitoring: true);
        using var api = new HeraldApiClient(new Uri($"http://127.0.0.1:{broker.ApiPort}"), Key);
        await using var client = new HeraldClient(broker.Url(transport), new HeraldClientOptions { ClientName = "server-subscribed", AcceptServerSubscriptions = true });
        var raised = new TaskCompletionSource<HeraldSubscription>(TaskCreationOptions.RunContinuationsAsynchronously);
        client.ServerSubscribed += (_, subscription) => raised.TrySetResult(subscription);
        await using HeraldSubscription own = await client.SubscribeAsync("own");
        Assert.True(own.Sid < 1u << 31);

        using var http = new HttpClient();
        using System.Text.Json.JsonDocument connz = System.Text.Json.JsonDocument.Parse(await http.GetStringAsync(new Uri($"http://127.0.0.1:{broker.MonitoringPort}/connz"), Wait.Token()));
        string id = connz.RootElement.GetProperty("connections").EnumerateArray().Single(c => c.GetProperty("name").GetString() == "server-subscribed").GetProperty("client").GetString()!;
        uint sid = await api.SubscribeClientAsync(id, "news.>");

        HeraldSubscription made = await raised.Task.Within();
        Assert.Equal((sid, "news.>", true), (made.Sid, made.Pattern, made.IsActive));
        Assert.True(sid >= 1u << 31);
        await api.PublishAsync("news.today", "hello"u8.ToArray());
        HeraldMessage message = await made.ReadAsync(Wait.Token());
        Assert.Equal(("news.today", "hello"), (message.Topic, Encoding.UTF8.GetString(message.Payload.Span)));

        Assert.Equal(sid, await api.UnsubscribeClientAsync(id, "news.>", "Left the newsroom."));
        HeraldException ended = await Assert.ThrowsAsync<HeraldException>(async () => await made.ReadAsync(Wait.Token()));
        Assert.Equal(ErrorCode.Unsubscribed, ended.ErrorCode);
        Assert.Contains("Left the newsroom.", ended.Message, StringComparison.Ordinal);
        Assert.False(made.IsActive);
        Assert.True(own.IsActive);
    }

    [Fact]
    public async Task A_refusal_is_an_exception_with_the_problems_code()
    {
        await using TestBroker broker = await StartAsync();
        using var wrong = new HeraldApiClient(new Uri($"http://127.0.0.1:{broker.ApiPort}"), "not-a-key");
        HeraldApiException unauthorized = await Assert.ThrowsAsync<HeraldApiException>(() => wrong.PublishAsync("a", "x"u8.ToArray()));
        Assert.Equal((401, "Unauthorized"), (unauthorized.Status, unauthorized.Code));

        using var publisher = new HeraldApiClient(new Uri($"http://127.0.0.1:{broker.ApiPort}"), PublishKey);
        HeraldApiException forbidden = await Assert.ThrowsAsync<HeraldApiException>(() => publisher.HistoryAsync("kept.a"));
        Assert.Equal((403, "Forbidden"), (forbidden.Status, forbidden.Code));
        HeraldApiException invalid = await Assert.ThrowsAsync<HeraldApiException>(() => publisher.PublishAsync("a.*", "x"u8.ToArray()));
        Assert.Equal(400, invalid.Status);
    }

    [Theory]
    [InlineData(HeraldTransport.Tcp)]
    [InlineData(HeraldTransport.WebSocket)]
    [InlineData(HeraldTransport.LongPoll)]
    public async Task A_client_the_backend_disconnects_or_revokes_is_closed_with_the_reason_and_does_not_reconnect(HeraldTransport transport)
    {
        await using TestBroker broker = await StartAsync();
        using var api = new HeraldApiClient(new Uri($"http://127.0.0.1:{broker.ApiPort}"), Key);
        var fast = new HeraldClientOptions { ReconnectDelay = TimeSpan.FromMilliseconds(1) };
        await using var client = new HeraldClient(broker.Url(transport), fast);
        var watcher = new StateWatcher(client);
        await client.ConnectAsync(Wait.Token());

        HeraldApiReach reach = await api.DisconnectIdentityAsync("anonymous", "Maintenance.");

        Assert.Equal(1, reach.Clients);
        ConnectionStateChangedEventArgs closed = await watcher.WaitForAsync(ConnectionState.Closed);
        HeraldException told = Assert.IsType<HeraldException>(closed.Error);
        Assert.Equal(ErrorCode.Disconnected, told.ErrorCode);
        Assert.Contains("Maintenance.", told.Message, StringComparison.Ordinal);
        Assert.DoesNotContain(ConnectionState.Reconnecting, watcher.History);

        await api.RevokeAsync("anonymous", DateTimeOffset.UtcNow.AddMinutes(1), "Suspended.");
        await using var refused = new HeraldClient(broker.Url(transport), fast);
        HeraldException revoked = await Assert.ThrowsAnyAsync<HeraldException>(() => refused.ConnectAsync(Wait.Token()));
        Assert.Equal(ErrorCode.Revoked, revoked.ErrorCode);
        Assert.Equal(["anonymous"], (await api.RevocationsAsync()).Select(r => r.Identity));
        Assert.True(await api.UnrevokeAsync("anonymous"));
        await using var admitted = new HeraldClient(broker.Url(transport), fast);
        await admitted.ConnectAsync(Wait.Token());
    }
}
