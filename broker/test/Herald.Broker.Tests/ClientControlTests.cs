using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using Herald.Broker.Engines;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Time.Testing;

namespace Herald.Broker.Tests;

/// <summary>
/// The server API's actions on clients, through the seam every node serves (<see cref="IClientControl"/>), on real sockets:
/// disconnect by client id and by identity on TCP, WebSocket and long-poll, each client told why and a bystander carrying
/// on; revocation until a time (a fake clock) refusing HELLO, a refresh and a long-poll session's creation, then admitting
/// again; its table's bound; and subscriptions the server makes and ends on a connected client.
/// </summary>
public sealed class ClientControlTests
{
    private const string AliceToken = "alice-token-7d1e";
    private const string BobToken = "bob-token-44c9";
    private const string CarolToken = "carol-token-0b5f";

    [Fact]
    public async Task A_disconnect_by_client_id_ends_that_client_only_and_tells_it_the_reason()
    {
        await using TestBroker broker = await StartAsync();
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(broker.Port, "alice", auth: AliceToken);
        await using ProtocolClient aliceToo = await ProtocolClient.OpenAsync(broker.Port, "alice-2", auth: AliceToken);
        await using ProtocolClient bob = await ProtocolClient.OpenAsync(broker.Port, "bob", auth: BobToken);
        await bob.SubscribeAsync(1, "news");
        await bob.PingPongAsync();

        ClientActionOutcome outcome = await RunAsync(broker, new ClientAction(ClientActionKind.Disconnect) { Client = ClientIdOf(broker, "alice"), Reason = "Banned for spam." });

        Assert.Equal(1, outcome.Clients);
        ErrorFrame told = await alice.ExpectClosedWithAsync(ErrorCode.Disconnected);
        Assert.Equal("Banned for spam.", told.Message);
        await aliceToo.PublishAsync("news", "still here"); // the same identity's other client carries on
        Assert.Equal("still here", (await bob.ReadMessageAsync()).Text);
        Assert.Equal(0, (await RunAsync(broker, new ClientAction(ClientActionKind.Disconnect) { Client = ClientIdOf(0x7fff_0000) })).Clients); // unknown: nobody
    }

    [Fact]
    public async Task A_disconnect_by_identity_ends_its_tcp_websocket_and_long_poll_clients_and_a_bystander_carries_on()
    {
        await using TestBroker broker = await StartAsync();
        await using ProtocolClient tcp = await ProtocolClient.OpenAsync(broker.Port, "alice-tcp", auth: AliceToken);
        await using ProtocolClient web = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await web.HelloAsync("alice-web", auth: AliceToken);
        using HttpClient aliceHttp = TestTokens.HttpClientFor(broker, AliceToken);
        LongPollClient poll = await LongPollClient.CreateAsync(aliceHttp);
        await using ProtocolClient bob = await ProtocolClient.OpenAsync(broker.Port, "bob", auth: BobToken);
        await bob.SubscribeAsync(1, "news");
        await bob.PingPongAsync();

        ClientActionOutcome outcome = await RunAsync(broker, new ClientAction(ClientActionKind.Disconnect) { Identity = "alice", Reason = "Account closed." });

        Assert.Equal(3, outcome.Clients);
        Assert.Equal("Account closed.", (await tcp.ExpectClosedWithAsync(ErrorCode.Disconnected)).Message);
        Assert.Equal("Account closed.", (await web.ExpectClosedWithAsync(ErrorCode.Disconnected)).Message);
        PollResult ended = await poll.PollAsync(0);
        Assert.Equal(HttpStatusCode.Gone, ended.Status);
        Assert.Equal("Disconnected", ended.Problem!.Value.GetProperty("reason").GetString());
        await bob.PublishAsync("news", "after");
        Assert.Equal("after", (await bob.ReadMessageAsync()).Text);
        LongPollClient again = await LongPollClient.CreateAsync(aliceHttp); // a disconnect refuses nothing later
        Assert.NotNull(again.Session);
    }

    [Fact]
    public async Task A_revocation_ends_what_the_identity_holds_and_refuses_hello_refresh_and_long_poll_until_its_time_then_admits_again()
    {
        var time = new FakeTimeProvider(DateTimeOffset.Parse("2026-11-29T12:00:00Z", CultureInfo.InvariantCulture));
        await using TestBroker broker = await StartAsync(time: time);
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(broker.Port, "alice", auth: AliceToken);
        await using ProtocolClient bob = await ProtocolClient.OpenAsync(broker.Port, "bob", auth: BobToken);
        await bob.SubscribeAsync(1, "news");
        await bob.PingPongAsync();
        DateTimeOffset until = time.GetUtcNow().AddHours(1);

        ClientActionOutcome outcome = await RunAsync(broker, new ClientAction(ClientActionKind.Revoke) { Identity = "alice", Until = until, Reason = "Suspended." });

        Assert.Equal(1, outcome.Clients);
        Assert.Contains("Suspended.", (await alice.ExpectClosedWithAsync(ErrorCode.Revoked)).Message);
        await using (ProtocolClient again = await ProtocolClient.ConnectAsync(broker.Port))
        {
            await again.SendAsync(w => FrameWriter.WriteHello(w, "alice", Capabilities.None, AliceToken));
            Assert.Contains("until 2026-11-29T13:00:00Z", (await again.ExpectClosedWithAsync(ErrorCode.Revoked)).Message);
        }

        using HttpClient aliceHttp = TestTokens.HttpClientFor(broker, AliceToken);
        using (HttpResponseMessage refused = await aliceHttp.PostAsync("/poll/sessions", null))
        {
            Assert.Equal(HttpStatusCode.Forbidden, refused.StatusCode);
            Assert.Equal("Revoked", (await refused.Content.ReadFromJsonAsync<System.Text.Json.JsonElement>()).GetProperty("code").GetString());
        }

        await bob.PublishAsync("news", "bob carries on");
        Assert.Equal("bob carries on", (await bob.ReadMessageAsync()).Text);

        // A client that holds a connection when its identity is revoked elsewhere (a node that missed the broadcast) is refused at its refresh.
        await using ProtocolClient carol = await ProtocolClient.OpenAsync(broker.Port, "carol", auth: CarolToken);
        Assert.True(broker.Services.GetRequiredService<BrokerCore>().Revocations.Set(new Revocation("carol", until, "")));
        await carol.SendAsync(w => FrameWriter.WriteHello(w, "carol", Capabilities.None, CarolToken));
        await carol.ExpectClosedWithAsync(ErrorCode.Revoked);

        time.Advance(TimeSpan.FromHours(1) - TimeSpan.FromTicks(1));
        await using (ProtocolClient stillRefused = await ProtocolClient.ConnectAsync(broker.Port))
        {
            await stillRefused.SendAsync(w => FrameWriter.WriteHello(w, "alice", Capabilities.None, AliceToken));
            await stillRefused.ExpectClosedWithAsync(ErrorCode.Revoked);
        }

        time.Advance(TimeSpan.FromTicks(1));
        await using ProtocolClient admitted = await ProtocolClient.OpenAsync(broker.Port, "alice", auth: AliceToken);
        Assert.NotNull(await LongPollClient.CreateAsync(aliceHttp));
        Assert.Equal(1, broker.Services.GetRequiredService<BrokerCore>().Revocations.Count); // carol's; alice's dropped when it ended
    }

    [Fact]
    public async Task The_revocation_table_holds_its_bound_and_refuses_past_it_until_one_ends()
    {
        var time = new FakeTimeProvider(DateTimeOffset.Parse("2026-11-29T12:00:00Z", CultureInfo.InvariantCulture));
        await using TestBroker broker = await StartAsync(o => o.Security.MaxRevocations = 2, time);
        DateTimeOffset now = time.GetUtcNow();

        Assert.Null((await RunAsync(broker, new ClientAction(ClientActionKind.Revoke) { Identity = "a", Until = now.AddMinutes(1) })).Code);
        Assert.Null((await RunAsync(broker, new ClientAction(ClientActionKind.Revoke) { Identity = "b", Until = now.AddMinutes(2) })).Code);
        Assert.Equal("TooManyRevocations", (await RunAsync(broker, new ClientAction(ClientActionKind.Revoke) { Identity = "c", Until = now.AddMinutes(3) })).Code);
        Assert.Null((await RunAsync(broker, new ClientAction(ClientActionKind.Revoke) { Identity = "a", Until = now.AddMinutes(5) })).Code); // a held one is replaced

        time.Advance(TimeSpan.FromMinutes(2));
        Assert.Null((await RunAsync(broker, new ClientAction(ClientActionKind.Revoke) { Identity = "c", Until = now.AddMinutes(3) })).Code); // b ended: room again
        Revocations table = broker.Services.GetRequiredService<BrokerCore>().Revocations;
        Assert.Equal(2, table.Count);
        Assert.Equal(["c", "a"], table.InForce().Select(r => r.Identity));
        Assert.Null((await RunAsync(broker, new ClientAction(ClientActionKind.Unrevoke) { Identity = "a" })).Code);
        Assert.Null(table.Find("a"));
    }

    [Fact]
    public async Task A_server_subscription_is_told_delivers_to_its_sid_and_an_unsubscribe_stops_it()
    {
        await using TestBroker broker = await StartAsync(o => o.Limits.MaxSubscriptionsPerConnection = 2);
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(broker.Port, "alice", capabilities: Capabilities.ServerSubscriptions, auth: AliceToken);
        await using ProtocolClient bob = await ProtocolClient.OpenAsync(broker.Port, "bob", auth: BobToken);
        string client = ClientIdOf(broker, "alice");

        ClientActionOutcome made = await RunAsync(broker, new ClientAction(ClientActionKind.Subscribe) { Client = client, Pattern = "news" });

        Assert.Equal(1, made.Clients);
        Assert.True(made.Sid >= ProtocolSession.FirstServerSid);
        Frame subscribed = await alice.ReadAsync();
        Assert.Equal(FrameType.Subscribed, subscribed.Type);
        Assert.Equal(made.Sid, subscribed.Sid);
        Assert.Equal("news", subscribed.Topic);
        await bob.PublishAsync("news", "one");
        Frame one = await alice.ReadMessageAsync();
        Assert.Equal((made.Sid, "one"), (one.Sid, one.Text));

        // Alice may not subscribe to 'secret': refused unless the backend forces it; past her limit, refused whatever.
        Assert.Equal("PermissionDenied", (await RunAsync(broker, new ClientAction(ClientActionKind.Subscribe) { Client = client, Pattern = "secret" })).Code);
        ClientActionOutcome forced = await RunAsync(broker, new ClientAction(ClientActionKind.Subscribe) { Client = client, Pattern = "secret", Force = true });
        Assert.Equal(1, forced.Clients);
        Assert.Equal("TooManySubscriptions", (await RunAsync(broker, new ClientAction(ClientActionKind.Subscribe) { Client = client, Pattern = "more" })).Code);
        Assert.Equal(FrameType.Subscribed, (await alice.ReadAsync()).Type);

        ClientActionOutcome ended = await RunAsync(broker, new ClientAction(ClientActionKind.Unsubscribe) { Client = client, Pattern = "news", Reason = "Left the room." });

        Assert.Equal(made.Sid, ended.Sid);
        Frame told = await alice.ReadAsync();
        Assert.Equal((ErrorCode.Unsubscribed, false, made.Sid, "Left the room."), (told.Error!.Value.Code, told.Error.Value.Fatal, told.Error.Value.Sid, told.Error.Value.Message));
        await bob.PublishAsync("news", "two");
        await bob.PingPongAsync();
        Assert.Empty(await alice.PingPongAsync()); // the barrier: nothing for the ended sid
        Assert.Equal("UnknownSubscription", (await RunAsync(broker, new ClientAction(ClientActionKind.Unsubscribe) { Client = client, Pattern = "news" })).Code);

        // A client that did not ask for them is not given server subscriptions (it could not read SUBSCRIBED).
        Assert.Equal("NotSupported", (await RunAsync(broker, new ClientAction(ClientActionKind.Subscribe) { Client = ClientIdOf(broker, "bob"), Pattern = "news" })).Code);
    }

    private static Task<TestBroker> StartAsync(Action<Hosting.HeraldOptions>? configure = null, TimeProvider? time = null) =>
        TestBroker.StartAsync(o =>
        {
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Publish = { "news", "chat.>" }, Subscribe = { "news", "more", "chat.>" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "bob", Sha256 = TestTokens.Sha256(BobToken), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "carol", Sha256 = TestTokens.Sha256(CarolToken), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
            configure?.Invoke(o);
        }, time: time);

    private static Task<ClientActionOutcome> RunAsync(TestBroker broker, ClientAction action) =>
        broker.Services.GetRequiredService<BrokerCore>().ClientControl.RunAsync(action, CancellationToken.None);

    /// <summary>The client id (spec §15.1) of the open session named <paramref name="name"/>, as <c>/connz</c> lists it.</summary>
    private static string ClientIdOf(TestBroker broker, string name) =>
        broker.Services.GetRequiredService<SessionRegistry>().Sessions.Single(s => s.ClientName == name && s.IsOpen).PresenceClient;

    private static string ClientIdOf(long id) => id.ToString("x16", CultureInfo.InvariantCulture);
}
