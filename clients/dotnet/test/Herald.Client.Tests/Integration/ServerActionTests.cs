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
}
