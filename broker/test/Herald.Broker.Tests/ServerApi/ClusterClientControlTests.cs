using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Time.Testing;
using StackExchange.Redis;
using Xunit.Abstractions;

namespace Herald.Broker.Tests.ServerApi;

/// <summary>
/// The server API's actions on clients across a three-node cluster on a real redis-server with a cluster secret: an action
/// sent to node A reaches a client on node C (disconnect, server-made subscription), an identity's clients on every node; a
/// revocation made on node A refuses a HELLO on node B and on a node started afterwards, until its time; control messages
/// forged on the Redis channel (untagged, mis-tagged, a real one replayed) are refused and counted, and the client they
/// name carries on.
/// </summary>
public sealed class ClusterClientControlTests(ITestOutputHelper output)
{
    private const string Secret = "client-control-cluster-secret";
    private const string AliceToken = "alice-token-cluster-3f7a";
    private const string BobToken = "bob-token-cluster-88d1";

    [Fact]
    public async Task An_action_sent_to_node_A_reaches_the_client_on_node_C_and_an_identity_on_every_node()
    {
        await using TestCluster cluster = await StartAsync();
        await using ProtocolClient aliceOnC = await ProtocolClient.OpenAsync(cluster[2].Port, "alice-c", capabilities: Capabilities.ServerSubscriptions, auth: AliceToken);
        await using ProtocolClient aliceOnB = await ProtocolClient.OpenAsync(cluster[1].Port, "alice-b", auth: AliceToken);
        await using ProtocolClient bobOnB = await ProtocolClient.OpenAsync(cluster[1].Port, "bob-b", auth: BobToken);
        await bobOnB.SubscribeAsync(1, "news");
        await bobOnB.PingPongAsync();
        string client = ClientIdOf(cluster[2], "alice-c");

        uint sid = (await OkAsync(cluster[0], "/api/v1/clients/subscribe", new { client, pattern = "news" })).GetProperty("sid").GetUInt32();
        Frame subscribed = await aliceOnC.ReadAsync();
        Assert.Equal((FrameType.Subscribed, sid), (subscribed.Type, subscribed.Sid));
        await bobOnB.PublishAsync("news", "from B"); // the subscription was live on every node before the API answered
        Assert.Equal("from B", (await bobOnB.ReadMessageAsync()).Text);
        Frame fromB = await aliceOnC.ReadMessageAsync();
        Assert.Equal((sid, "from B"), (fromB.Sid, fromB.Text));
        await OkAsync(cluster[0], "/api/v1/clients/unsubscribe", new { client, pattern = "news" });
        Assert.Equal(ErrorCode.Unsubscribed, (await aliceOnC.ReadAsync()).Error!.Value.Code);
        await bobOnB.PublishAsync("news", "after the unsubscribe");
        Assert.Equal("after the unsubscribe", (await bobOnB.ReadMessageAsync()).Text); // routed everywhere by now: C's bridge comes through Redis, B's own is local
        Assert.Empty(await aliceOnC.PingPongAsync()); // nothing for the ended sid (its node routes no more to it)

        JsonElement one = await OkAsync(cluster[0], "/api/v1/clients/disconnect", new { client, reason = "Moved to node B." });
        Assert.Equal(1, one.GetProperty("clients").GetInt32());
        Assert.Equal("Moved to node B.", (await aliceOnC.ExpectClosedWithAsync(ErrorCode.Disconnected)).Message);

        await using ProtocolClient aliceOnA = await ProtocolClient.OpenAsync(cluster[0].Port, "alice-a", auth: AliceToken);
        JsonElement every = await OkAsync(cluster[2], "/api/v1/clients/disconnect", new { identity = "alice", reason = "Signed out everywhere." });
        Assert.Equal((2, 3, 3), (every.GetProperty("clients").GetInt32(), every.GetProperty("nodes").GetInt32(), every.GetProperty("nodes_asked").GetInt32()));
        await aliceOnA.ExpectClosedWithAsync(ErrorCode.Disconnected);
        await aliceOnB.ExpectClosedWithAsync(ErrorCode.Disconnected);
        await bobOnB.PublishAsync("news", "bob carries on");
        Assert.Equal("bob carries on", (await bobOnB.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task A_revocation_made_on_node_A_refuses_a_hello_on_node_B_and_on_a_node_started_later_until_its_time()
    {
        var time = new FakeTimeProvider(DateTimeOffset.Parse("2026-11-29T12:00:00Z", CultureInfo.InvariantCulture));
        await using TestCluster cluster = await StartAsync(time);
        await using ProtocolClient aliceOnB = await ProtocolClient.OpenAsync(cluster[1].Port, "alice-b", auth: AliceToken);

        JsonElement done = await OkAsync(cluster[0], "/api/v1/revocations", new { identity = "alice", until = "2026-11-29T13:00:00Z", reason = "Suspended." });

        Assert.Equal(1, done.GetProperty("clients").GetInt32());
        await aliceOnB.ExpectClosedWithAsync(ErrorCode.Revoked);
        await ExpectRefusedAsync(cluster[1].Port);
        await using (TestBroker later = await TestBroker.StartAsync(o => Configure(o, cluster.Redis.Configuration), time: time))
        {
            await Until.True(() => later.Services.GetRequiredService<BrokerCore>().Revocations.Find("alice") is not null, "the later node loaded the revocation");
            await ExpectRefusedAsync(later.Port);
        }

        await using (ProtocolClient bob = await ProtocolClient.OpenAsync(cluster[1].Port, "bob", auth: BobToken))
        {
            await bob.PingPongAsync(); // another identity is admitted meanwhile
        }

        time.Advance(TimeSpan.FromHours(1));
        await using ProtocolClient admitted = await ProtocolClient.OpenAsync(cluster[1].Port, "alice-again", auth: AliceToken);
        await admitted.PingPongAsync();
    }

    [Fact]
    public async Task Control_messages_forged_on_the_redis_channel_are_refused_and_counted_and_the_client_carries_on()
    {
        await using TestCluster cluster = await StartAsync();
        await using ProtocolClient alice = await ProtocolClient.OpenAsync(cluster[1].Port, "alice", auth: AliceToken);
        await using ProtocolClient bob = await ProtocolClient.OpenAsync(cluster[1].Port, "bob", auth: BobToken);
        await alice.SubscribeAsync(1, "news");
        await alice.PingPongAsync();
        string prefix = cluster[0].Engine().Shards.First.Prefix;
        await using ConnectionMultiplexer redis = await ConnectionMultiplexer.ConnectAsync(cluster.Redis.Configuration);
        ISubscriber subscriber = redis.GetSubscriber();
        var captured = new TaskCompletionSource<byte[]>(TaskCreationOptions.RunContinuationsAsynchronously);
        await subscriber.SubscribeAsync(RedisChannel.Literal(prefix + ".ctl"), (_, body) => captured.TrySetResult((byte[])body!));
        long before = cluster[1].Engine().Control.Refused;

        // A real action (node A's, on a client nobody holds), captured off the channel, then sent again: a replay.
        using (HttpResponseMessage nobody = await cluster[0].Api.SendAsync(TestApiKeys.Request(HttpMethod.Post, "/api/v1/clients/disconnect", TestApiKeys.Admin, JsonContent.Create(new { identity = "nobody" }))))
        {
            Assert.Equal(HttpStatusCode.OK, nobody.StatusCode);
        }

        byte[] real = await captured.Task.WaitAsync(TimeSpan.FromSeconds(15));
        string json = Encoding.UTF8.GetString(real.AsSpan(16)).Replace("\"nobody\"", "\"alice\"", StringComparison.Ordinal);
        byte[] untagged = Encoding.UTF8.GetBytes(json);
        byte[] misTagged = [.. RandomNumberGenerator.GetBytes(16), .. untagged];
        foreach (byte[] forged in (byte[][])[untagged, misTagged, real])
        {
            await subscriber.PublishAsync(RedisChannel.Literal(prefix + ".ctl"), forged);
        }

        await Until.True(() => cluster[1].Engine().Control.Refused - before >= 3, "node B refused the three forged messages");
        output.WriteLine($"node B refused {cluster[1].Engine().Control.Refused - before} control messages; node C {cluster[2].Engine().Control.Refused}");
        Assert.Equal(3, cluster[1].Engine().Control.Refused - before);
        await bob.PublishAsync("news", "alice is still here");
        Assert.Equal("alice is still here", (await alice.ReadMessageAsync()).Text);
        Assert.Empty(await alice.PingPongAsync());
    }

    private static async Task ExpectRefusedAsync(int port)
    {
        await using ProtocolClient client = await ProtocolClient.ConnectAsync(port);
        await client.SendAsync(w => FrameWriter.WriteHello(w, "alice", Capabilities.None, AliceToken));
        Assert.Contains("until 2026-11-29T13:00:00Z", (await client.ExpectClosedWithAsync(ErrorCode.Revoked)).Message);
    }

    private static async Task<TestCluster> StartAsync(TimeProvider? time = null)
    {
        TestCluster cluster = await TestCluster.StartAsync(nodes: 3, configure: o => Configure(o, redis: null), time: time);
        foreach (TestBroker node in cluster.Nodes)
        {
            await Until.True(() => node.Engine().Nodes.Known.Count == 3, "every node knows the other two");
        }

        return cluster;
    }

    private static void Configure(Hosting.HeraldOptions o, string? redis)
    {
        if (redis is not null)
        {
            o.Cluster.Redis = redis;
        }

        o.Cluster.Secret = Secret;
        o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(200);
        o.Cluster.ControlReplyTimeout = TimeSpan.FromSeconds(15); // the wait ends at the last answer: long costs nothing, and a loaded machine's node is still counted
        TestApiKeys.Configure(o);
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Publish = { "news" }, Subscribe = { "news" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "bob", Sha256 = TestTokens.Sha256(BobToken), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
    }

    private static async Task<JsonElement> OkAsync(TestBroker node, string path, object body)
    {
        using HttpResponseMessage response = await node.Api.SendAsync(TestApiKeys.Request(HttpMethod.Post, path, TestApiKeys.Admin, JsonContent.Create(body)));
        string text = await response.Content.ReadAsStringAsync();
        Assert.True(response.StatusCode == HttpStatusCode.OK, $"{path}: {(int)response.StatusCode} {text}");
        return JsonDocument.Parse(text).RootElement.Clone();
    }

    private static string ClientIdOf(TestBroker node, string name) =>
        node.Services.GetRequiredService<SessionRegistry>().Sessions.Single(s => s.ClientName == name && s.IsOpen).PresenceClient;
}
