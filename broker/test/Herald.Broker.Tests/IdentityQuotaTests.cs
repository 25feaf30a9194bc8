using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text.Json;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Per-identity quotas (issue 12.5): one identity filling its connections and subscriptions, over TCP and
/// long-poll together, is refused with a clear error while another identity still connects and subscribes;
/// what it gives back can be taken again. Without authentication the quota is per remote address.
/// </summary>
public sealed class IdentityQuotaTests
{
    private const string Alice = "alice-token-0123456789";
    private const string Bob = "bob-token-0123456789";

    [Fact]
    public async Task One_identity_at_its_quotas_is_refused_and_another_connects_and_subscribes()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(Alice), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "bob", Sha256 = TestTokens.Sha256(Bob), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
            o.Limits.MaxConnectionsPerIdentity = 2;
            o.Limits.MaxSubscriptionsPerIdentity = 3;
        });

        // alice: one TCP connection and one long-poll session fill her connections.
        await using var aliceTcp = await ProtocolClient.OpenAsync(broker.Port, "alice-1", auth: Alice);
        string alicePoll = (await CreateSessionAsync(broker, Alice, HttpStatusCode.Created))!;
        using HttpClient aliceHttp = TestTokens.HttpClientFor(broker, Alice); // every request on a session carries its owner's credential
        await using (var third = await ProtocolClient.ConnectAsync(broker.Port))
        {
            await third.SendAsync(w => FrameWriter.WriteHello(w, "alice-3", Capabilities.None, Alice));
            ErrorFrame refused = await third.ExpectClosedWithAsync(ErrorCode.TooManyConnections);
            Assert.Contains("alice", refused.Message);
        }

        await CreateSessionAsync(broker, Alice, HttpStatusCode.ServiceUnavailable, "TooManyConnections");

        // Her subscriptions, counted across both: two on TCP, one on long-poll; the fourth is refused, not fatal.
        await aliceTcp.SubscribeAsync(1, "a.one");
        await aliceTcp.SubscribeAsync(2, "a.two");
        using (HttpResponseMessage r = await aliceHttp.PostAsJsonAsync($"/poll/sessions/{alicePoll}/subscriptions", new { sid = 1, pattern = "a.three" }))
        {
            Assert.Equal(HttpStatusCode.NoContent, r.StatusCode);
        }

        await aliceTcp.SubscribeAsync(3, "a.four");
        Frame over = await aliceTcp.ReadAsync();
        Assert.Equal((ErrorCode.TooManyTopics, false), (over.Error!.Value.Code, over.Error.Value.Fatal));
        Assert.Contains("alice", over.Error.Value.Message);
        using (HttpResponseMessage r = await aliceHttp.PostAsJsonAsync($"/poll/sessions/{alicePoll}/subscriptions", new { sid = 2, pattern = "a.five" }))
        {
            Assert.Equal(HttpStatusCode.Conflict, r.StatusCode);
        }

        // bob is untouched by alice's quotas: he connects on both transports and subscribes.
        await using var bobTcp = await ProtocolClient.OpenAsync(broker.Port, "bob-1", auth: Bob);
        await CreateSessionAsync(broker, Bob, HttpStatusCode.Created);
        for (uint sid = 1; sid <= 3; sid++)
        {
            await bobTcp.SubscribeAsync(sid, $"b.{sid}");
        }

        await bobTcp.PublishAsync("b.3", "bob's");
        Assert.Equal(["bob's"], (await bobTcp.PingPongAsync()).Select(f => f.Text));

        // What alice gives back she can take again: a subscription, then a connection.
        await aliceTcp.UnsubscribeAsync(1);
        await aliceTcp.SubscribeAsync(3, "a.four");
        await aliceTcp.PublishAsync("a.four", "alice's");
        Assert.Equal(["alice's"], (await aliceTcp.PingPongAsync()).Select(f => f.Text));
        using (HttpResponseMessage closed = await aliceHttp.DeleteAsync($"/poll/sessions/{alicePoll}"))
        {
            Assert.Equal(HttpStatusCode.NoContent, closed.StatusCode);
        }

        await using var aliceAgain = await ProtocolClient.OpenAsync(broker.Port, "alice-again", auth: Alice);
        await aliceAgain.SubscribeAsync(1, "a.again"); // her long-poll subscription was given back with its session
        Assert.Empty(await aliceAgain.PingPongAsync());
    }

    [Fact]
    public async Task Without_authentication_the_quota_is_per_remote_address()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.MaxConnectionsPerIdentity = 1);
        await using var first = await ProtocolClient.OpenAsync(broker.Port, "first");

        await using (var second = await ProtocolClient.ConnectAsync(broker.Port))
        {
            await second.SendAsync(w => FrameWriter.WriteHello(w, "second", Capabilities.None));
            ErrorFrame refused = await second.ExpectClosedWithAsync(ErrorCode.TooManyConnections);
            Assert.Contains("127.0.0.1", refused.Message);
        }

        // Another address is another quota.
        await using var elsewhere = await ProtocolClient.ConnectAsync(broker.Port, localAddress: IPAddress.Parse("127.0.0.2"));
        await elsewhere.HelloAsync("elsewhere");
        await elsewhere.SubscribeAsync(1, "x");
        await elsewhere.PingPongAsync(); // subscribed
        await first.PublishAsync("x", "across");
        await first.PingPongAsync(); // routed
        Assert.Equal(["across"], (await elsewhere.PingPongAsync()).Select(f => f.Text));
    }

    private static async Task<string?> CreateSessionAsync(TestBroker broker, string token, HttpStatusCode expected, string? code = null)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/poll/sessions");
        request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", token);
        using HttpResponseMessage response = await broker.Http.SendAsync(request);
        Assert.Equal(expected, response.StatusCode);
        JsonElement body = await response.Content.ReadFromJsonAsync<JsonElement>();
        if (code is not null)
        {
            Assert.Equal(code, body.GetProperty("code").GetString());
        }

        return expected == HttpStatusCode.Created ? body.GetProperty("session").GetString() : null;
    }
}
