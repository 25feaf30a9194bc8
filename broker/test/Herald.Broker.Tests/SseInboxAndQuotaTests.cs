using System.Net;
using System.Text.Json;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Server-Sent Events held to what the other transports are held to: a stream reads only its own identity's
/// reply inbox, and its connection and subscriptions count against its identity's quotas (README §8) with
/// TCP's and long-poll's, each refusal the quota's own code and message, while another identity carries on.
/// </summary>
public sealed class SseInboxAndQuotaTests
{
    private const string Alice = "alice-token-0123456789";
    private const string Bob = "bob-token-0123456789";

    [Fact]
    public async Task A_stream_of_another_identity_cannot_read_a_reply_inbox_and_the_reply_reaches_only_its_owner()
    {
        await using TestBroker broker = await StartAsync();
        string aliceInbox = Identity.InboxPrefixOf("alice");
        string bobInbox = Identity.InboxPrefixOf("bob");

        foreach (string stolen in new[] { $"{aliceInbox}.>", $"{aliceInbox}.r1", "_INBOX.>", "_INBOX.*.r1" })
        {
            (SseClient? stream, HttpStatusCode status, JsonElement problem) = await SseClient.TryOpenAsync(broker.HttpPort, $"topic={Uri.EscapeDataString(stolen)}", bearer: Bob);
            Assert.Null(stream);
            Assert.Equal((HttpStatusCode.Forbidden, "PermissionDenied"), (status, problem.GetProperty("code").GetString()));
        }

        // alice asks over TCP and reads her inbox over SSE; bob serves over TCP and reads his own inbox over SSE.
        await using SseClient aliceReplies = await SseClient.OpenAsync(broker.HttpPort, $"topic={Uri.EscapeDataString(aliceInbox + ".>")}", bearer: Alice);
        await using SseClient bobReplies = await SseClient.OpenAsync(broker.HttpPort, $"topic={Uri.EscapeDataString(bobInbox + ".>")}", bearer: Bob);
        await using var alice = await ProtocolClient.OpenAsync(broker.Port, "alice", auth: Alice);
        await using var bob = await ProtocolClient.OpenAsync(broker.Port, "bob", auth: Bob);
        await bob.SubscribeAsync(1, "svc.echo");
        await bob.PingPongAsync();

        await alice.SendAsync(w => FrameWriter.WritePublish(w, "svc.echo"u8, System.Text.Encoding.UTF8.GetBytes(aliceInbox + ".r1"), PayloadFlags.None, "ping"u8));
        Frame request = await bob.ReadMessageAsync();
        Assert.Equal(aliceInbox + ".r1", request.ReplyTo);
        await bob.PublishAsync(request.ReplyTo!, "pong");

        SseEvent reply = await aliceReplies.ReadEventAsync();
        Assert.Equal(("pong", aliceInbox + ".r1"), (reply.Json.GetProperty("text").GetString(), reply.Json.GetProperty("topic").GetString()));

        // The reply was routed before this marker, so bob's stream would hold it first had it reached him.
        await bob.PublishAsync(bobInbox + ".end", "marker");
        SseEvent first = await bobReplies.ReadEventAsync();
        Assert.Equal("marker", first.Json.GetProperty("text").GetString());
        Assert.Empty(await bob.PingPongAsync()); // no refusal for bob's own inbox
    }

    [Fact]
    public async Task A_stream_counts_against_its_identitys_connections_and_subscriptions_with_tcp_and_long_poll()
    {
        await using TestBroker broker = await StartAsync(o =>
        {
            o.Limits.MaxConnectionsPerIdentity = 2;
            o.Limits.MaxSubscriptionsPerIdentity = 3;
        });

        // alice: a stream of two topics, then a TCP connection: her two connections and, with a.three, her three subscriptions.
        await using SseClient aliceStream = await SseClient.OpenAsync(broker.HttpPort, "topic=a.one&topic=a.two", bearer: Alice);
        await using var aliceTcp = await ProtocolClient.OpenAsync(broker.Port, "alice-tcp", auth: Alice);
        await aliceTcp.SubscribeAsync(1, "a.three");
        Assert.Empty(await aliceTcp.PingPongAsync());
        await aliceTcp.SubscribeAsync(2, "a.four");
        Frame over = await aliceTcp.ReadAsync();
        Assert.Equal((ErrorCode.TooManyTopics, false, "'alice' holds its maximum of 3 subscriptions across its connections."), (over.Error!.Value.Code, over.Error.Value.Fatal, over.Error.Value.Message));

        await AssertRefusedAsync(broker, "topic=a.five", HttpStatusCode.ServiceUnavailable, "TooManyConnections", "'alice' holds its maximum of 2 connections.");
        using HttpClient aliceHttp = TestTokens.HttpClientFor(broker, Alice);
        using (HttpResponseMessage session = await aliceHttp.PostAsync("/poll/sessions", null))
        {
            Assert.Equal(HttpStatusCode.ServiceUnavailable, session.StatusCode);
        }

        // bob is untouched: a stream of three topics gets what is published to them.
        await using SseClient bobStream = await SseClient.OpenAsync(broker.HttpPort, "topic=b.one&topic=b.two&topic=b.three", bearer: Bob);
        await aliceTcp.PublishAsync("b.three", "for bob");
        Assert.Equal("for bob", (await bobStream.ReadEventAsync()).Json.GetProperty("text").GetString());

        // The stream's end gives back its connection and two subscriptions: a stream of two opens again.
        await aliceStream.DisposeAsync();
        await Until.True(async () =>
        {
            (SseClient? again, HttpStatusCode _, JsonElement _) = await SseClient.TryOpenAsync(broker.HttpPort, "topic=a.five&topic=a.six", bearer: Alice);
            if (again is null)
            {
                return false;
            }

            await again.DisposeAsync();
            return true;
        }, "alice's closed stream gave back its connection and subscriptions");
    }

    [Fact]
    public async Task A_stream_counts_against_its_identitys_wildcard_patterns_and_a_refused_stream_gives_its_share_back()
    {
        await using TestBroker broker = await StartAsync(o => o.Limits.MaxWildcardPatternsPerIdentity = 2);
        const string WildcardsFull = "'alice' holds its maximum of 2 wildcard patterns across its connections (those under its reply inbox included).";
        await using var aliceTcp = await ProtocolClient.OpenAsync(broker.Port, "alice-tcp", auth: Alice);
        await aliceTcp.SubscribeAsync(1, "a.*");
        Assert.Empty(await aliceTcp.PingPongAsync());

        // Two more wildcards in one stream: the second is over, so the whole stream is refused (sse §1) ...
        await AssertRefusedAsync(broker, "topic=b.>&topic=c.*", HttpStatusCode.Conflict, "TooManyTopics", WildcardsFull);

        // ... and holds none: one wildcard in a stream is taken, the next one over TCP is refused with the same message.
        await using SseClient aliceStream = await SseClient.OpenAsync(broker.HttpPort, "topic=b.>&topic=exact.topic", bearer: Alice);
        await aliceTcp.SubscribeAsync(2, "d.*");
        Frame over = await aliceTcp.ReadAsync();
        Assert.Equal((ErrorCode.TooManyTopics, false, WildcardsFull), (over.Error!.Value.Code, over.Error.Value.Fatal, over.Error.Value.Message));

        // bob's wildcards are his own: the same two alice holds are his to take too.
        await using SseClient bobStream = await SseClient.OpenAsync(broker.HttpPort, "topic=a.*&topic=b.>", bearer: Bob);
        await aliceTcp.PublishAsync("b.x", "to both");
        Assert.Equal("to both", (await bobStream.ReadEventAsync()).Json.GetProperty("text").GetString());
        Assert.Equal("to both", (await aliceStream.ReadEventAsync()).Json.GetProperty("text").GetString());
    }

    private static async Task AssertRefusedAsync(TestBroker broker, string query, HttpStatusCode status, string code, string detail)
    {
        (SseClient? stream, HttpStatusCode answered, JsonElement problem) = await SseClient.TryOpenAsync(broker.HttpPort, query, bearer: Alice);
        Assert.Null(stream);
        Assert.Equal((status, code, detail), (answered, problem.GetProperty("code").GetString(), problem.GetProperty("detail").GetString()));
    }

    private static Task<TestBroker> StartAsync(Action<HeraldOptions>? also = null) => TestBroker.StartAsync(o =>
    {
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.Zero;
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(Alice), Permissions = { Publish = { ">" }, Subscribe = { "a.>", "b.>", "c.>", "d.>", "exact.>" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "bob", Sha256 = TestTokens.Sha256(Bob), Permissions = { Publish = { ">" }, Subscribe = { "a.>", "b.>", "c.>", "svc.>" } } });
        also?.Invoke(o);
    });
}
