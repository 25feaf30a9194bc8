using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Xunit.Abstractions;

namespace Herald.Broker.Tests.ServerApi;

/// <summary>
/// Server-made subscriptions over real HTTP and TCP: one that joins shows in presence and leaves when the backend ends it;
/// long-poll sessions and SSE streams that asked for them are told in their own form and receive the subscription's
/// messages; such a subscription is the client's, held to its subscription and pending limits; a client's credential
/// acts on nobody else's session.
/// </summary>
public sealed class ServerSubscriptionTests(ITestOutputHelper output)
{
    private const string AliceToken = "alice-token-server-subs-4a1e";
    private const string BobToken = "bob-token-server-subs-7c2f";

    [Fact]
    public async Task A_join_made_by_the_backend_shows_in_presence_and_its_leave_when_the_backend_unsubscribes()
    {
        await using TestBroker broker = await StartAsync();
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(broker.Port, "alice", capabilities: Capabilities.ServerSubscriptions | Capabilities.Headers | Capabilities.Presence, auth: AliceToken);
        await using ProtocolClient watcher = await ProtocolClient.OpenAsync(broker.Port, "watcher", capabilities: Capabilities.Headers | Capabilities.Presence, auth: BobToken);
        await watcher.SubscribeAsync(1, "room.1", SubscribeOptions.PresenceEvents);
        await watcher.PingPongAsync();
        string client = ClientIdOf(broker, "alice");

        uint sid = (await OkAsync(broker, new { client, pattern = "room.1", join = true, presence = true })).GetProperty("sid").GetUInt32();

        Frame subscribed = await alice.ReadAsync();
        Assert.Equal((FrameType.Subscribed, sid), (subscribed.Type, subscribed.Sid));
        Frame ownJoin = await alice.ReadMessageAsync(); // its own presence events come to the new sid, after SUBSCRIBED
        Assert.Equal((sid, "join"), (ownJoin.Sid, ownJoin.Header("Herald-Presence").Single()));
        Frame joined = await watcher.ReadMessageAsync();
        Assert.Equal(("join", client), (joined.Header("Herald-Presence").Single(), joined.Header("Herald-Client").Single()));
        JsonElement present = await GetAsync(broker, "/api/v1/presence?topic=room.1");
        Assert.Equal(client, Assert.Single(present.GetProperty("entries").EnumerateArray()).GetProperty("client").GetString());

        await OkAsync(broker, new { client, pattern = "room.1", reason = "Left the room." }, "/api/v1/clients/unsubscribe");

        Frame told = await alice.ReadAsync();
        while (told.Type == FrameType.Message)
        {
            Assert.Equal((sid, "leave"), (told.Sid, told.Header("Herald-Presence").Single())); // its own leave, while it still watched
            told = await alice.ReadAsync();
        }

        Assert.Equal((ErrorCode.Unsubscribed, sid), (told.Error!.Value.Code, told.Error.Value.Sid));
        Frame left = await watcher.ReadMessageAsync();
        Assert.Equal(("leave", client, "unsubscribe"), (left.Header("Herald-Presence").Single(), left.Header("Herald-Client").Single(), left.Header("Herald-Reason").Single()));
        Assert.Equal(0, (await GetAsync(broker, "/api/v1/presence?topic=room.1")).GetProperty("members").GetInt64());

        // SUBSCRIBE's presence rules: one topic, the identity allowed to join, presence granted. Nothing is made.
        await using ProtocolClient plain = await ProtocolClient.OpenAsync(broker.Port, "plain", capabilities: Capabilities.ServerSubscriptions, auth: AliceToken);
        Assert.Equal((HttpStatusCode.BadRequest, "InvalidTopic"), await RefusedAsync(broker, new { client, pattern = "room.*", join = true }));
        Assert.Equal((HttpStatusCode.Forbidden, "PermissionDenied"), await RefusedAsync(broker, new { client, pattern = "news", join = true, force = true }));
        Assert.Equal((HttpStatusCode.Conflict, "NotSupported"), await RefusedAsync(broker, new { client = ClientIdOf(broker, "plain"), pattern = "room.1", join = true }));
        Assert.Empty(await alice.PingPongAsync());
        Assert.Empty(await plain.PingPongAsync());
        Assert.Equal(0, (await GetAsync(broker, "/api/v1/presence?topic=room.1")).GetProperty("members").GetInt64());
    }

    [Fact]
    public async Task A_long_poll_session_and_an_sse_stream_that_asked_are_told_and_receive_the_messages_of_a_server_made_subscription()
    {
        await using TestBroker broker = await StartAsync();
        using HttpClient aliceHttp = TestTokens.HttpClientFor(broker, AliceToken);
        LongPollClient poll = await LongPollClient.CreateAsync(aliceHttp, new { headers = true, serverSubscriptions = true });
        Assert.True(poll.Created.GetProperty("serverSubscriptions").GetBoolean());
        LongPollClient notAsked = await LongPollClient.CreateAsync(aliceHttp, new { headers = true });
        await using SseClient sse = await SseClient.OpenAsync(broker.HttpPort, "topic=room.9&client=alice-sse&server_subscriptions=true", bearer: AliceToken);
        await using ProtocolClient bob = await ProtocolClient.OpenAsync(broker.Port, "bob", auth: BobToken);
        string pollClient = poll.Created.GetProperty("client").GetString()!;

        uint pollSid = (await OkAsync(broker, new { client = pollClient, pattern = "news", force = true })).GetProperty("sid").GetUInt32();
        uint sseSid = (await OkAsync(broker, new { client = ClientIdOf(broker, "alice-sse"), pattern = "news", force = true })).GetProperty("sid").GetUInt32();
        Assert.Equal((HttpStatusCode.Conflict, "NotSupported"), await RefusedAsync(broker, new { client = notAsked.Created.GetProperty("client").GetString(), pattern = "news" }));
        await bob.PublishAsync("news", "hello");
        await bob.PingPongAsync();

        PollResult first = await PollUntilAsync(poll, 0, 2);
        Assert.Equal((pollSid, "news", "0"), (first.Messages[0].Sid, first.Messages[0].Topic, first.Messages[0].Header(ProtocolConstants.SubscribedHeader).Single()));
        Assert.Equal((pollSid, "hello"), (first.Messages[1].Sid, first.Messages[1].Text));
        SseEvent told = await sse.ReadEventAsync();
        Assert.Equal(("subscribed", sseSid, "news"), (told.Type, told.Json.GetProperty("sid").GetUInt32(), told.Json.GetProperty("topic").GetString()));
        SseEvent hello = await sse.ReadEventAsync();
        Assert.Equal((sseSid, "hello"), (hello.Json.GetProperty("sid").GetUInt32(), hello.Json.GetProperty("text").GetString()));

        await OkAsync(broker, new { client = pollClient, pattern = "news", reason = "Done." }, "/api/v1/clients/unsubscribe");
        await OkAsync(broker, new { client = ClientIdOf(broker, "alice-sse"), pattern = "news", reason = "Done." }, "/api/v1/clients/unsubscribe");
        PollResult ended = await PollUntilAsync(poll, first.LastSequence, 1);
        Assert.Equal((pollSid, "Done."), (ended.Messages[0].Sid, ended.Messages[0].Header(ProtocolConstants.UnsubscribedHeader).Single()));
        SseEvent unsubscribed = await sse.ReadEventAsync();
        Assert.Equal(("unsubscribed", sseSid, "Done."), (unsubscribed.Type, unsubscribed.Json.GetProperty("sid").GetUInt32(), unsubscribed.Json.GetProperty("message").GetString()));
        output.WriteLine($"long-poll notice: {first.Messages[0].Topic} sid {pollSid}; sse: {told.Data}");
    }

    [Fact]
    public async Task A_server_made_subscription_counts_against_the_sessions_limits_and_a_clients_credential_targets_no_other_session()
    {
        await using TestBroker broker = await StartAsync(o =>
        {
            o.Limits.MaxSubscriptionsPerConnection = 2;
            o.LongPoll.MaxPendingMessagesPerSession = 5;
        });
        using HttpClient aliceHttp = TestTokens.HttpClientFor(broker, AliceToken);
        using HttpClient bobHttp = TestTokens.HttpClientFor(broker, BobToken);
        LongPollClient alice = await LongPollClient.CreateAsync(aliceHttp, new { headers = true, serverSubscriptions = true });
        LongPollClient bobSession = await LongPollClient.CreateAsync(bobHttp, new { headers = true, serverSubscriptions = true });
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander", auth: BobToken);
        await bystander.SubscribeAsync(1, "news");
        await bystander.PingPongAsync();
        string aliceClient = alice.Created.GetProperty("client").GetString()!;
        await alice.SubscribeAsync(1, "room.1");
        await alice.SubscribeAsync(2, "room.2");

        // max_subscriptions: the server's subscription is one more of the session's.
        Assert.Equal((HttpStatusCode.Conflict, "TooManySubscriptions"), await RefusedAsync(broker, new { client = aliceClient, pattern = "news", force = true }));

        // A client's credential is not an API key, and acts on no session but its own.
        using (HttpResponseMessage withToken = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Post, "/api/v1/clients/subscribe", AliceToken, JsonContent.Create(new { client = bobSession.Created.GetProperty("client").GetString(), pattern = "news" }))))
        {
            Assert.Equal(HttpStatusCode.Unauthorized, withToken.StatusCode);
        }

        using (HttpResponseMessage intoBob = await aliceHttp.PostAsJsonAsync($"{bobSession.Base}/subscriptions", new { sid = 9, pattern = "news" }))
        {
            Assert.Equal(HttpStatusCode.Unauthorized, intoBob.StatusCode);
        }

        // The pending limit: what the server's subscription brings fills the session's backlog like its own.
        using (HttpResponseMessage freed = await aliceHttp.DeleteAsync($"{alice.Base}/subscriptions/2"))
        {
            Assert.Equal(HttpStatusCode.NoContent, freed.StatusCode);
        }

        await OkAsync(broker, new { client = aliceClient, pattern = "news", force = true }); // alice may not subscribe to news herself
        for (int i = 0; i < 10; i++)
        {
            await bystander.PublishAsync("news", $"m{i}");
        }

        for (int i = 0; i < 10; i++)
        {
            Assert.Equal($"m{i}", (await bystander.ReadMessageAsync()).Text); // the bystander gets every one
        }

        PollResult gone = await alice.PollAsync(0);
        output.WriteLine($"alice's session after 10 publications past its 5 pending: {(int)gone.Status} {gone.Problem}");
        Assert.Equal((HttpStatusCode.Gone, "SlowConsumer"), (gone.Status, gone.Problem!.Value.GetProperty("reason").GetString()));

        await bobSession.SubscribeAsync(1, "marker");
        await bystander.PublishAsync("marker", "barrier");
        PollResult bobs = await PollUntilAsync(bobSession, 0, 1);
        Assert.Equal(["barrier"], bobs.Messages.Select(m => m.Text)); // nothing of alice's attempts reached bob's session
    }

    private static async Task<PollResult> PollUntilAsync(LongPollClient poll, long ack, int count)
    {
        PollResult result = await poll.PollAsync(ack);
        Assert.True(result.Status == HttpStatusCode.OK && result.Count >= count, $"{(int)result.Status} {result.Count} messages {result.Problem}");
        return result;
    }

    private static Task<TestBroker> StartAsync(Action<Hosting.HeraldOptions>? configure = null) =>
        TestBroker.StartAsync(o =>
        {
            TestApiKeys.Configure(o);
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Subscribe = { "room.>" }, Join = { "room.>" }, Presence = { "room.>" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "bob", Sha256 = TestTokens.Sha256(BobToken), Permissions = { Publish = { ">" }, Subscribe = { ">" }, Presence = { ">" } } });
            configure?.Invoke(o);
        });

    private static async Task<JsonElement> OkAsync(TestBroker broker, object body, string path = "/api/v1/clients/subscribe")
    {
        using HttpResponseMessage response = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Post, path, TestApiKeys.Admin, JsonContent.Create(body)));
        string text = await response.Content.ReadAsStringAsync();
        Assert.True(response.StatusCode == HttpStatusCode.OK, $"{path}: {(int)response.StatusCode} {text}");
        return JsonDocument.Parse(text).RootElement.Clone();
    }

    private static async Task<(HttpStatusCode, string?)> RefusedAsync(TestBroker broker, object body)
    {
        using HttpResponseMessage response = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Post, "/api/v1/clients/subscribe", TestApiKeys.Admin, JsonContent.Create(body)));
        return (response.StatusCode, (await response.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());
    }

    private static async Task<JsonElement> GetAsync(TestBroker broker, string path)
    {
        using HttpResponseMessage response = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, path, TestApiKeys.Admin));
        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        return (await response.Content.ReadFromJsonAsync<JsonElement>()).Clone();
    }

    private static string ClientIdOf(TestBroker broker, string name) =>
        broker.Services.GetRequiredService<SessionRegistry>().Sessions.Single(s => s.ClientName == name && s.IsOpen).PresenceClient;
}
