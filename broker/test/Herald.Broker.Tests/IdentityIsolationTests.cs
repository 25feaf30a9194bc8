using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Identity against identity (static tokens, per-token permissions): mallory, granted only <c>mallory.&gt;</c>,
/// goes after alice's topics over TCP and over long-poll. Every attempt is refused with PermissionDenied and
/// counted; alice, subscribed over both transports, receives nothing forged and keeps receiving, proven by a
/// message of her own that arrives after the refusals, on the same path a forged one would have taken.
/// </summary>
public sealed class IdentityIsolationTests
{
    private const string Alice = "alice-token-0123456789";
    private const string Mallory = "mallory-token-0123456789";

    [Fact]
    public async Task A_second_identity_can_neither_subscribe_to_nor_publish_on_another_identitys_topics()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(Alice), Permissions = { Publish = { "alice.>" }, Subscribe = { "alice.>" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "mallory", Sha256 = TestTokens.Sha256(Mallory), Permissions = { Publish = { "mallory.>" }, Subscribe = { "mallory.>" } } });
        });
        using MetricsProbe metrics = broker.Metrics();

        // alice: a TCP subscriber, a long-poll subscriber and a TCP publisher.
        await using var aliceTcp = await OpenAsync(broker, "alice", Alice);
        await aliceTcp.SubscribeAsync(1, "alice.inbox");
        await aliceTcp.PingPongAsync();
        string alicePoll = await CreateSessionAsync(broker, Alice);
        using HttpClient aliceHttp = TestTokens.HttpClientFor(broker, Alice); // a session's requests carry its owner's credential
        using (HttpResponseMessage r = await aliceHttp.PostAsJsonAsync($"/poll/sessions/{alicePoll}/subscriptions", new { sid = 1, pattern = "alice.inbox" }))
        {
            Assert.Equal(HttpStatusCode.NoContent, r.StatusCode);
        }

        await using var alicePublisher = await OpenAsync(broker, "alice-publisher", Alice);

        // mallory over TCP: each refusal is told, not fatal; the connection stays.
        await using var malloryTcp = await OpenAsync(broker, "mallory", Mallory);
        await ExpectDeniedAsync(malloryTcp, w => FrameWriter.WriteSubscribe(w, 1, "alice.inbox"u8), "alice.inbox");
        await ExpectDeniedAsync(malloryTcp, w => FrameWriter.WriteSubscribe(w, 2, ">"u8), ">");
        await ExpectDeniedAsync(malloryTcp, w => FrameWriter.WritePublish(w, "alice.inbox"u8, default, PayloadFlags.None, "forged over tcp"u8), "alice.inbox");
        await malloryTcp.SubscribeAsync(3, "mallory.own");
        await malloryTcp.PublishAsync("mallory.own", "still connected");
        Assert.Equal(["still connected"], (await malloryTcp.PingPongAsync()).Select(f => f.Text));

        // mallory over long-poll: a session of her own, then a subscription, an in-session and a one-shot publish on alice's topic.
        string mallorySession = await CreateSessionAsync(broker, Mallory);
        using HttpClient malloryHttp = TestTokens.HttpClientFor(broker, Mallory);
        using (HttpResponseMessage subscribe = await malloryHttp.PostAsJsonAsync($"/poll/sessions/{mallorySession}/subscriptions", new { sid = 1, pattern = "alice.>" }))
        {
            await ExpectDeniedAsync(subscribe, "alice.>");
        }

        using (HttpResponseMessage publish = await malloryHttp.PostAsync($"/poll/sessions/{mallorySession}/publish?topic=alice.inbox", new StringContent("forged in session")))
        {
            await ExpectDeniedAsync(publish, "alice.inbox");
        }

        using (var oneShot = new HttpRequestMessage(HttpMethod.Post, "/poll/publish?topic=alice.inbox") { Content = new StringContent("forged one-shot") })
        {
            oneShot.Headers.Authorization = new AuthenticationHeaderValue("Bearer", Mallory);
            using HttpResponseMessage publish = await broker.Http.SendAsync(oneShot);
            await ExpectDeniedAsync(publish, "alice.inbox");
        }

        // alice's own message, sent after every refusal, is the first and only one she gets on either transport.
        await alicePublisher.PublishAsync("alice.inbox", "after the refusals");
        await alicePublisher.PingPongAsync();
        Assert.Equal(["after the refusals"], (await aliceTcp.PingPongAsync()).Select(f => f.Text));
        PollResult poll = await LongPollClient.ReadAsync(await aliceHttp.GetAsync($"/poll/sessions/{alicePoll}/messages?ack=0"));
        Assert.Equal(["after the refusals"], poll.Messages.Select(m => m.Text));

        Assert.Equal(6, metrics["herald.protocol.errors", "error.type", nameof(ErrorCode.PermissionDenied)]);
        Assert.Equal(6, metrics["herald.protocol.errors"]);
    }

    private static async Task<ProtocolClient> OpenAsync(TestBroker broker, string name, string token)
    {
        ProtocolClient client = await ProtocolClient.ConnectAsync(broker.Port);
        await client.SendAsync(w => FrameWriter.WriteHello(w, name, Capabilities.None, token));
        Assert.Equal(FrameType.Welcome, (await client.ReadAsync()).Type);
        return client;
    }

    private static async Task<string> CreateSessionAsync(TestBroker broker, string token)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/poll/sessions");
        request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", token);
        using HttpResponseMessage created = await broker.Http.SendAsync(request);
        Assert.Equal(HttpStatusCode.Created, created.StatusCode);
        return (await created.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("session").GetString()!;
    }

    /// <summary>Sends one frame and a PING: a non-fatal PermissionDenied naming <paramref name="topic"/> must come before the PONG, and nothing else.</summary>
    internal static async Task ExpectDeniedAsync(ProtocolClient client, Action<System.Buffers.IBufferWriter<byte>> frame, string topic)
    {
        await client.SendAsync(w =>
        {
            frame(w);
            FrameWriter.WritePing(w);
        });
        var before = new List<Frame>();
        for (Frame f = await client.ReadAsync(); f.Type != FrameType.Pong; f = await client.ReadAsync())
        {
            before.Add(f);
        }

        Frame refused = Assert.Single(before);
        Assert.True(refused.Type == FrameType.Error, $"Expected ERROR PermissionDenied before PONG, got {refused}");
        Assert.Equal((ErrorCode.PermissionDenied, false), (refused.Error!.Value.Code, refused.Error.Value.Fatal));
        Assert.Contains($"'{topic}'", refused.Error.Value.Message, StringComparison.Ordinal);
    }

    private static async Task ExpectDeniedAsync(HttpResponseMessage response, string topic)
    {
        Assert.Equal(HttpStatusCode.Forbidden, response.StatusCode);
        JsonElement problem = await response.Content.ReadFromJsonAsync<JsonElement>();
        Assert.Equal(nameof(ErrorCode.PermissionDenied), problem.GetProperty("code").GetString());
        Assert.Contains($"'{topic}'", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
    }
}
