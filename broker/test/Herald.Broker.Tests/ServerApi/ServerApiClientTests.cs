using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Time.Testing;

namespace Herald.Broker.Tests.ServerApi;

/// <summary>
/// The server API's actions on clients over real HTTP (scope admin): disconnect, revoke and its listing and lifting,
/// subscribe and unsubscribe, each against real TCP, WebSocket and long-poll clients; what a key without the admin scope
/// is told; the problems each refusal is answered with.
/// </summary>
public sealed class ServerApiClientTests
{
    private const string AliceToken = "alice-token-api-51c0";
    private const string BobToken = "bob-token-api-9e2d";

    [Fact]
    public async Task Only_an_admin_key_acts_on_clients_and_a_client_disconnected_by_id_is_told_why_while_a_bystander_carries_on()
    {
        await using TestBroker broker = await StartAsync();
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(broker.Port, "alice", auth: AliceToken);
        await using ProtocolClient bob = await ProtocolClient.OpenAsync(broker.Port, "bob", auth: BobToken);
        await bob.SubscribeAsync(1, "news");
        await bob.PingPongAsync();
        string client = ClientIdOf(broker, "alice");

        using (HttpResponseMessage publisher = await PostAsync(broker, "/api/v1/clients/disconnect", new { client }, TestApiKeys.Publisher))
        {
            Assert.Equal(HttpStatusCode.Forbidden, publisher.StatusCode);
        }

        using (HttpResponseMessage reader = await PostAsync(broker, "/api/v1/revocations", new { identity = "alice", until = "2099-01-01T00:00:00Z" }, TestApiKeys.Reader))
        {
            Assert.Equal(HttpStatusCode.Forbidden, reader.StatusCode);
        }

        await alice.PublishAsync("news", "alice is still connected"); // the refused keys changed nothing
        Assert.Equal("alice is still connected", (await bob.ReadMessageAsync()).Text);

        JsonElement done = await OkAsync(broker, "/api/v1/clients/disconnect", new { client, reason = "Banned for spam." });

        Assert.Equal((1, 1, 1), (done.GetProperty("clients").GetInt32(), done.GetProperty("nodes").GetInt32(), done.GetProperty("nodes_asked").GetInt32()));
        Assert.Equal("Banned for spam.", (await alice.ExpectClosedWithAsync(ErrorCode.Disconnected)).Message);
        await bob.PublishAsync("news", "bob carries on");
        Assert.Equal("bob carries on", (await bob.ReadMessageAsync()).Text);
        using HttpResponseMessage gone = await PostAsync(broker, "/api/v1/clients/disconnect", new { client });
        Assert.Equal((HttpStatusCode.NotFound, "ClientNotFound"), (gone.StatusCode, await CodeOf(gone)));
        using HttpResponseMessage both = await PostAsync(broker, "/api/v1/clients/disconnect", new { client, identity = "alice" });
        Assert.Equal(HttpStatusCode.BadRequest, both.StatusCode);
    }

    [Fact]
    public async Task A_revocation_over_the_api_ends_every_transport_refuses_until_its_time_is_listed_and_lifted()
    {
        var time = new FakeTimeProvider(DateTimeOffset.Parse("2026-11-29T12:00:00Z", CultureInfo.InvariantCulture));
        await using TestBroker broker = await StartAsync(o => o.Security.MaxRevocations = 1, time);
        await using ProtocolClient tcp = await ProtocolClient.OpenAsync(broker.Port, "alice-tcp", auth: AliceToken);
        await using ProtocolClient web = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await web.HelloAsync("alice-web", auth: AliceToken);
        using HttpClient aliceHttp = TestTokens.HttpClientFor(broker, AliceToken);
        LongPollClient poll = await LongPollClient.CreateAsync(aliceHttp);
        await using ProtocolClient bob = await ProtocolClient.OpenAsync(broker.Port, "bob", auth: BobToken);

        JsonElement done = await OkAsync(broker, "/api/v1/revocations", new { identity = "alice", until = "2026-11-29T13:00:00Z", reason = "Suspended." });

        Assert.Equal(3, done.GetProperty("clients").GetInt32());
        Assert.Contains("Suspended.", (await tcp.ExpectClosedWithAsync(ErrorCode.Revoked)).Message);
        Assert.Contains("until 2026-11-29T13:00:00Z", (await web.ExpectClosedWithAsync(ErrorCode.Revoked)).Message);
        PollResult ended = await poll.PollAsync(0);
        Assert.Equal((HttpStatusCode.Gone, "Revoked"), (ended.Status, ended.Problem!.Value.GetProperty("reason").GetString()));
        using (HttpResponseMessage refused = await aliceHttp.PostAsync("/poll/sessions", null))
        {
            Assert.Equal((HttpStatusCode.Forbidden, "Revoked"), (refused.StatusCode, await CodeOf(refused)));
        }

        JsonElement listed = await GetAsync(broker, "/api/v1/revocations");
        Assert.Equal(1, listed.GetProperty("max").GetInt32());
        JsonElement entry = Assert.Single(listed.GetProperty("entries").EnumerateArray());
        Assert.Equal(("alice", "Suspended."), (entry.GetProperty("identity").GetString(), entry.GetProperty("reason").GetString()));
        using (HttpResponseMessage full = await PostAsync(broker, "/api/v1/revocations", new { identity = "carol", until = "2026-11-29T13:00:00Z" }))
        {
            Assert.Equal((HttpStatusCode.Conflict, "TooManyRevocations"), (full.StatusCode, await CodeOf(full)));
        }

        using (HttpResponseMessage past = await PostAsync(broker, "/api/v1/revocations", new { identity = "carol", until = "2026-11-29T11:00:00Z" }))
        {
            Assert.Equal(HttpStatusCode.BadRequest, past.StatusCode);
        }

        await bob.PingPongAsync(); // the bystander's connection was never touched

        using (HttpResponseMessage lifted = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Delete, "/api/v1/revocations/alice", TestApiKeys.Admin)))
        {
            Assert.Equal(HttpStatusCode.NoContent, lifted.StatusCode);
        }

        await using ProtocolClient again = await ProtocolClient.OpenAsync(broker.Port, "alice-again", auth: AliceToken);
        Assert.Empty((await GetAsync(broker, "/api/v1/revocations")).GetProperty("entries").EnumerateArray());
    }

    [Fact]
    public async Task A_server_subscription_over_the_api_delivers_to_its_sid_until_the_api_ends_it()
    {
        await using TestBroker broker = await StartAsync();
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(broker.Port, "alice", capabilities: Capabilities.ServerSubscriptions, auth: AliceToken);
        await using ProtocolClient bob = await ProtocolClient.OpenAsync(broker.Port, "bob", auth: BobToken);
        string client = ClientIdOf(broker, "alice");

        uint sid = (await OkAsync(broker, "/api/v1/clients/subscribe", new { client, pattern = "news" })).GetProperty("sid").GetUInt32();

        Frame subscribed = await alice.ReadAsync();
        Assert.Equal((FrameType.Subscribed, sid, "news"), (subscribed.Type, subscribed.Sid, subscribed.Topic));
        await bob.PublishAsync("news", "one");
        Frame one = await alice.ReadMessageAsync();
        Assert.Equal((sid, "one"), (one.Sid, one.Text));
        using (HttpResponseMessage denied = await PostAsync(broker, "/api/v1/clients/subscribe", new { client, pattern = "secret" }))
        {
            Assert.Equal((HttpStatusCode.Forbidden, "PermissionDenied"), (denied.StatusCode, await CodeOf(denied)));
        }

        using (HttpResponseMessage notAsked = await PostAsync(broker, "/api/v1/clients/subscribe", new { client = ClientIdOf(broker, "bob"), pattern = "news" }))
        {
            Assert.Equal((HttpStatusCode.Conflict, "NotSupported"), (notAsked.StatusCode, await CodeOf(notAsked)));
        }

        Assert.Equal(sid, (await OkAsync(broker, "/api/v1/clients/unsubscribe", new { client, pattern = "news", reason = "Left." })).GetProperty("sid").GetUInt32());

        Frame told = await alice.ReadAsync();
        Assert.Equal((ErrorCode.Unsubscribed, sid), (told.Error!.Value.Code, told.Error.Value.Sid));
        await bob.PublishAsync("news", "two");
        await bob.PingPongAsync();
        Assert.Empty(await alice.PingPongAsync());
        using HttpResponseMessage again = await PostAsync(broker, "/api/v1/clients/unsubscribe", new { client, pattern = "news" });
        Assert.Equal((HttpStatusCode.NotFound, "UnknownSubscription"), (again.StatusCode, await CodeOf(again)));
    }

    private static Task<TestBroker> StartAsync(Action<Hosting.HeraldOptions>? configure = null, TimeProvider? time = null) =>
        TestBroker.StartAsync(o =>
        {
            TestApiKeys.Configure(o);
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Publish = { "news" }, Subscribe = { "news" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "bob", Sha256 = TestTokens.Sha256(BobToken), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
            configure?.Invoke(o);
        }, time: time);

    private static async Task<HttpResponseMessage> PostAsync(TestBroker broker, string path, object body, string key = TestApiKeys.Admin) =>
        await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Post, path, key, JsonContent.Create(body)));

    private static async Task<JsonElement> OkAsync(TestBroker broker, string path, object body)
    {
        using HttpResponseMessage response = await PostAsync(broker, path, body);
        string text = await response.Content.ReadAsStringAsync();
        Assert.True(response.StatusCode == HttpStatusCode.OK, $"{path}: {(int)response.StatusCode} {text}");
        return JsonDocument.Parse(text).RootElement.Clone();
    }

    private static async Task<JsonElement> GetAsync(TestBroker broker, string path)
    {
        using HttpResponseMessage response = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, path, TestApiKeys.Admin));
        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        return (await response.Content.ReadFromJsonAsync<JsonElement>()).Clone();
    }

    private static async Task<string?> CodeOf(HttpResponseMessage response) =>
        (await response.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString();

    private static string ClientIdOf(TestBroker broker, string name) =>
        broker.Services.GetRequiredService<SessionRegistry>().Sessions.Single(s => s.ClientName == name && s.IsOpen).PresenceClient;
}
