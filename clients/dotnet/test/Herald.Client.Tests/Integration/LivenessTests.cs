using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Integration;

/// <summary>PING/PONG both ways (spec §4.7, §6.2) and the broker's ERROR frames (§4.8), against a scripted broker.</summary>
public class LivenessTests
{
    [Fact]
    public async Task The_client_answers_the_brokers_PING_with_PONG()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url);
        await using FakeConnection connection = await broker.ConnectAsync(client);
        HelloFrame hello = connection.Hello;

        await connection.SendAsync(FrameWriter.WritePing);

        Assert.Equal(FrameType.Pong, await connection.ReadAsync());
        Assert.Equal(1u, hello.Version);
        Assert.Equal(Capabilities.Zstd | Capabilities.Headers | Capabilities.NoResponders | Capabilities.History | Capabilities.QueueGroups | Capabilities.Presence | Capabilities.Deltas, hello.Capabilities); // asks for compression, headers, no-responders, history, queue groups, presence and deltas by default
    }

    [Fact]
    public async Task The_client_pings_a_silent_broker_and_reconnects_when_its_PINGs_go_unanswered()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url, new HeraldClientOptions { PingInterval = TimeSpan.FromMilliseconds(50), MaxPingsOutstanding = 2, ReconnectDelay = TimeSpan.FromMilliseconds(10) });
        var watcher = new StateWatcher(client);
        await using FakeConnection silent = await broker.ConnectAsync(client);

        await silent.ExpectAsync(FrameType.Ping); // the client noticed the silence; nobody answers

        ConnectionStateChangedEventArgs lost = await watcher.WaitForAsync(ConnectionState.Reconnecting);
        Assert.Equal(ErrorCode.StaleConnection, Assert.IsType<HeraldException>(lost.Error).ErrorCode);
        await using FakeConnection second = await broker.AcceptAsync();
        await second.HandshakeAsync();
        await watcher.WaitForAsync(ConnectionState.Connected, 2);
    }

    [Fact]
    public async Task A_non_fatal_ERROR_is_raised_as_an_Error_event_and_the_connection_stays()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url);
        var errors = new TaskCompletionSource<HeraldException>(TaskCreationOptions.RunContinuationsAsynchronously);
        client.Error += (_, e) => errors.TrySetResult(e.Exception);
        await using FakeConnection connection = await broker.ConnectAsync(client);

        await connection.SendAsync(w => FrameWriter.WriteError(w, ErrorCode.MessagesDropped, fatal: false, "Dropped 5 messages.", count: 5));

        HeraldException error = await errors.Task.Within();
        Assert.Equal(ErrorCode.MessagesDropped, error.ErrorCode);
        Assert.Equal(5UL, error.Count);
        Assert.False(error.IsFatal);
        Task flushing = client.FlushAsync(Wait.Token());
        await connection.ExpectAsync(FrameType.Ping);
        await connection.SendAsync(FrameWriter.WritePong);
        await flushing.Within();
        Assert.Equal(ConnectionState.Connected, client.State);
    }

    [Fact]
    public async Task An_ERROR_instead_of_WELCOME_fails_ConnectAsync_with_its_code()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url);
        Task connecting = client.ConnectAsync(Wait.Token());
        await using FakeConnection connection = await broker.AcceptAsync();
        Assert.Equal(FrameType.Hello, await connection.ReadAsync());

        await connection.SendAsync(w => FrameWriter.WriteError(w, ErrorCode.UnsupportedVersion, fatal: true, "Protocol version 1 is not supported."));

        var e = await Assert.ThrowsAsync<HeraldException>(() => connecting);
        Assert.Equal(ErrorCode.UnsupportedVersion, e.ErrorCode);
        Assert.True(e.IsFatal);
        Assert.Equal(ConnectionState.Disconnected, client.State);
    }

    [Fact]
    public async Task A_fatal_ERROR_after_the_handshake_makes_the_client_reconnect()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url, new HeraldClientOptions { ReconnectDelay = TimeSpan.FromMilliseconds(10) });
        var watcher = new StateWatcher(client);
        Task connecting = client.ConnectAsync(Wait.Token());
        await using (FakeConnection first = await broker.AcceptAsync())
        {
            await first.HandshakeAsync();
            await connecting.Within();
            await first.SendAsync(w => FrameWriter.WriteError(w, ErrorCode.InternalError, fatal: true, "Internal error; the connection is closed."));
        }

        ConnectionStateChangedEventArgs lost = await watcher.WaitForAsync(ConnectionState.Reconnecting);
        Assert.Equal(ErrorCode.InternalError, Assert.IsType<HeraldException>(lost.Error).ErrorCode);
        await using FakeConnection second = await broker.AcceptAsync();
        await second.HandshakeAsync();
        await watcher.WaitForAsync(ConnectionState.Connected, 2);
    }
}
