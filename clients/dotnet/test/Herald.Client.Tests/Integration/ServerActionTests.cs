using System.Buffers;
using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// What the client does when the application's backend acts on it through the server API (spec §6.4, §8): a fatal
/// <c>Disconnected</c> or <c>Revoked</c> closes the client with the broker's reason and it does not reconnect; a
/// non-fatal <c>Unsubscribed</c> naming a sid ends that subscription with its reason and the connection stays.
/// </summary>
public class ServerActionTests
{
    [Theory]
    [InlineData(ErrorCode.Disconnected, "Banned for spam.")]
    [InlineData(ErrorCode.Revoked, "'alice' is revoked until 2026-12-01T00:00:00Z: account suspended")]
    public async Task A_client_the_backend_ended_is_closed_with_the_reason_and_does_not_reconnect(ErrorCode code, string reason)
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url, new HeraldClientOptions { ReconnectDelay = TimeSpan.FromMilliseconds(1) });
        var watcher = new StateWatcher(client);
        await using FakeConnection connection = await broker.ConnectAsync(client);

        await connection.SendAsync(w => FrameWriter.WriteError(w, code, fatal: true, reason));
        await connection.DisposeAsync(); // the broker writes nothing after a fatal ERROR and closes (spec §4.8)

        ConnectionStateChangedEventArgs closed = await watcher.WaitForAsync(ConnectionState.Closed);
        HeraldException error = Assert.IsType<HeraldException>(closed.Error);
        Assert.Equal(code, error.ErrorCode);
        Assert.Contains(reason, error.Message, StringComparison.Ordinal);
        Assert.DoesNotContain(ConnectionState.Reconnecting, watcher.History); // closed at once: no attempt was made
        HeraldConnectionException refused = await Assert.ThrowsAsync<HeraldConnectionException>(async () => await client.PublishAsync("news", "after"));
        Assert.Contains(reason, refused.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task An_Unsubscribed_error_ends_the_subscription_it_names_with_the_reason_and_the_connection_stays()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url);
        var watcher = new StateWatcher(client);
        await using FakeConnection connection = await broker.ConnectAsync(client);
        Task<HeraldSubscription> subscribing = client.SubscribeAsync("room.1");
        await connection.ExpectAsync(FrameType.Subscribe); // between two PINGs (a fenced SUBSCRIBE): each answered
        await connection.ExpectAsync(FrameType.Ping);
        await connection.SendAsync(FrameWriter.WritePong);
        await connection.SendAsync(FrameWriter.WritePong);
        await using HeraldSubscription subscription = await subscribing.Within();

        await connection.SendAsync(w => FrameWriter.WriteError(w, ErrorCode.Unsubscribed, fatal: false, "Moved to another room.", sid: subscription.Sid));

        HeraldException ended = await Assert.ThrowsAsync<HeraldException>(async () => await subscription.ReadAsync(Wait.Token()));
        Assert.Equal(ErrorCode.Unsubscribed, ended.ErrorCode);
        Assert.Contains("Moved to another room.", ended.Message, StringComparison.Ordinal);
        Assert.Equal([ConnectionState.Connecting, ConnectionState.Connected], watcher.History.Where(s => s != ConnectionState.Disconnected));
    }
    [Fact]
    public async Task A_subscription_the_server_made_ends_with_its_connection_and_is_not_made_again_on_the_reconnect()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url, new HeraldClientOptions { AcceptServerSubscriptions = true, ReconnectDelay = TimeSpan.FromMilliseconds(1) });
        var raised = new TaskCompletionSource<HeraldSubscription>(TaskCreationOptions.RunContinuationsAsynchronously);
        client.ServerSubscribed += (_, subscription) => raised.TrySetResult(subscription);
        FakeConnection first = await broker.ConnectAsync(client);
        Assert.Equal(Capabilities.ServerSubscriptions, first.Hello.Capabilities & Capabilities.ServerSubscriptions);
        Task<HeraldSubscription> subscribing = client.SubscribeAsync("own");
        await first.ExpectAsync(FrameType.Subscribe);
        await first.ExpectAsync(FrameType.Ping);
        await first.SendAsync(FrameWriter.WritePong);
        await first.SendAsync(FrameWriter.WritePong);
        await using HeraldSubscription own = await subscribing.Within();
        await first.SendAsync(w => FrameWriter.WriteSubscribed(w, 0x8000_0001, "news"));
        HeraldSubscription made = await raised.Task.Within();
        Assert.Equal((0x8000_0001u, "news"), (made.Sid, made.Pattern));

        await first.DisposeAsync();
        await Assert.ThrowsAsync<HeraldConnectionException>(async () => await made.ReadAsync(Wait.Token()));
        await using FakeConnection second = await broker.AcceptAsync();
        Assert.Equal(FrameType.Hello, await second.ReadAsync());
        await second.SendAsync(w => FrameWriter.WriteWelcome(w, "fake", 2, Capabilities.None, [new("max_frame", 65536), new("max_topic", 256)]));
        var subscribed = new List<string>();
        while (!subscribed.Contains("own"))
        {
            if (await second.ReadAsync(body => subscribed.Add(PatternOf(body))) == FrameType.Ping)
            {
                await second.SendAsync(FrameWriter.WritePong);
            }
        }

        Assert.Equal(["own"], subscribed.Where(p => p.Length > 0));
        Assert.False(made.IsActive);
        Assert.True(own.IsActive);
    }

    /// <summary>A SUBSCRIBE's pattern; "" for any other frame.</summary>
    private static string PatternOf(ReadOnlySequence<byte> body)
    {
        var reader = new MessagePack.MessagePackReader(body);
        return FrameDecoder.ReadHeader(ref reader, out int count) == FrameType.Subscribe ? FrameDecoder.ReadSubscribe(ref reader, count).PatternString : "";
    }
}
