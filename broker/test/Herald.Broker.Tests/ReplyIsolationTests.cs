using System.IdentityModel.Tokens.Jwt;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Security.Claims;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.Time.Testing;
using Microsoft.IdentityModel.Tokens;

namespace Herald.Broker.Tests;

/// <summary>
/// Isolation of request/reply and credentials between identities (issue 12, points 1, 7 and 10), over real
/// sockets: every identity has its own inbox prefix, may answer only the requests delivered to it (as often
/// and as long as configured), may name as reply_to only what it may subscribe to; a refresh to fewer rights
/// ends what it no longer allows; JWTs are one identity per subject and must expire; a failed authentication
/// tells the client nothing but that. Bystanders carry on; "nothing arrived" is proved by a barrier.
/// </summary>
public sealed class ReplyIsolationTests
{
    private const string AliceToken = "alice-token-0123456789";
    private const string BobToken = "bob-token-0123456789";
    private const string CarolToken = "carol-token-0123456789";
    private const string DaveToken = "dave-token-0123456789";
    private const string RootToken = "root-token-0123456789";
    private const string Secret = "a-test-secret-of-at-least-thirty-two-bytes!";

    [Fact]
    public async Task Each_identity_is_told_its_own_inbox_prefix_on_both_transports_and_anonymous_clients_share_the_space()
    {
        await using (TestBroker open = await TestBroker.StartAsync())
        {
            await using ProtocolClient anonymous = await ProtocolClient.ConnectAsync(open.Port);
            Assert.Equal("_INBOX", (await anonymous.HelloAsync()).InboxPrefix);
            Assert.Equal("_INBOX", await CreateSessionPrefixAsync(open, token: null));
        }

        await using TestBroker broker = await StartAsync();
        string? alice = await WelcomePrefixAsync(broker, AliceToken);
        string? bob = await WelcomePrefixAsync(broker, BobToken);

        Assert.Equal(Identity.InboxPrefixOf("alice"), alice);
        Assert.Equal(Identity.InboxPrefixOf("bob"), bob);
        Assert.NotEqual(alice, bob);
        Assert.Matches("^_INBOX\\.[0-9a-f]{24}$", alice);
        Assert.Equal(alice, await WelcomePrefixAsync(broker, AliceToken)); // the same on every connection of the identity
        Assert.Equal(alice, await CreateSessionPrefixAsync(broker, AliceToken));
    }

    [Fact]
    public async Task A_responder_answers_a_delivered_request_exactly_as_often_and_as_long_as_granted_and_a_bystander_carries_on()
    {
        TimeSpan expires = TimeSpan.FromSeconds(1);
        var time = new FakeTimeProvider(); // the broker's clock stands still until the test moves it: the grant's bound is exact
        await using TestBroker broker = await StartAsync(o =>
        {
            o.Security.Responses.MaxMessages = 2;
            o.Security.Responses.Expires = expires;
        }, time: time);
        await using ProtocolClient alice = await OpenAsync(broker, AliceToken);   // requester: may publish svc.>
        await using ProtocolClient bob = await OpenAsync(broker, BobToken);       // responder: may subscribe svc.>
        await using ProtocolClient carol = await OpenAsync(broker, CarolToken);   // bystander requester
        await using ProtocolClient dave = await OpenAsync(broker, DaveToken);     // bystander responder
        string aliceInbox = Identity.InboxPrefixOf("alice");
        string carolInbox = Identity.InboxPrefixOf("carol");
        await alice.SubscribeAsync(1, aliceInbox + ".r.>");
        await bob.SubscribeAsync(1, "svc.echo");
        await carol.SubscribeAsync(1, carolInbox + ".r.>");
        await dave.SubscribeAsync(1, "svc.time");
        await Task.WhenAll(alice.PingPongAsync(), bob.PingPongAsync(), carol.PingPongAsync(), dave.PingPongAsync());

        // Before any request: bob cannot forge a reply into alice's inbox, nor read it.
        await ExpectDeniedAsync(bob, w => FrameWriter.WritePublish(w, Encoding.UTF8.GetBytes(aliceInbox + ".r.1"), default, PayloadFlags.None, "forged"u8), aliceInbox + ".r.1");
        await ExpectDeniedAsync(bob, w => FrameWriter.WriteSubscribe(w, 2, Encoding.UTF8.GetBytes(aliceInbox + ".>")), aliceInbox + ".>");
        await ExpectDeniedAsync(bob, w => FrameWriter.WriteSubscribe(w, 3, "_INBOX.>"u8), "_INBOX.>");

        // The request grants two replies to its reply topic, and nothing else.
        await alice.PublishAsync("svc.echo", "ping", replyTo: aliceInbox + ".r.1");
        Frame request = await bob.ReadMessageAsync();
        Assert.Equal(aliceInbox + ".r.1", request.ReplyTo);
        await bob.PublishAsync(request.ReplyTo!, "reply 1");
        await bob.PublishAsync(request.ReplyTo!, "reply 2");
        Assert.Empty(await bob.PingPongAsync());
        await ExpectDeniedAsync(bob, w => FrameWriter.WritePublish(w, Encoding.UTF8.GetBytes(aliceInbox + ".r.1"), default, PayloadFlags.None, "reply 3"u8), aliceInbox + ".r.1");
        await ExpectDeniedAsync(bob, w => FrameWriter.WritePublish(w, Encoding.UTF8.GetBytes(aliceInbox + ".r.2"), default, PayloadFlags.None, "not asked"u8), aliceInbox + ".r.2");

        // A grant lasts exactly `expires`: answerable one tick before, no longer at it.
        await alice.PublishAsync("svc.echo", "in time", replyTo: aliceInbox + ".r.3");
        await alice.PublishAsync("svc.echo", "late", replyTo: aliceInbox + ".r.4");
        Frame inTime = await bob.ReadMessageAsync();
        Frame late = await bob.ReadMessageAsync();
        time.Advance(expires - TimeSpan.FromTicks(1));
        await bob.PublishAsync(inTime.ReplyTo!, "reply 3");
        Assert.Empty(await bob.PingPongAsync());
        time.Advance(TimeSpan.FromTicks(1));
        await ExpectDeniedAsync(bob, w => FrameWriter.WritePublish(w, Encoding.UTF8.GetBytes(late.ReplyTo!), default, PayloadFlags.None, "too late"u8), late.ReplyTo!);

        // Alice got exactly the granted replies; the bystanders' request/reply carried on throughout.
        Assert.Equal(["reply 1", "reply 2", "reply 3"], (await alice.PingPongAsync()).Select(f => f.Text));
        await carol.PublishAsync("svc.time", "now?", replyTo: carolInbox + ".r.1");
        Frame carolRequest = await dave.ReadMessageAsync();
        await dave.PublishAsync(carolRequest.ReplyTo!, "noon");
        Assert.Empty(await dave.PingPongAsync());
        Assert.Equal(["noon"], (await carol.PingPongAsync()).Select(f => f.Text));
        Assert.Empty(await bob.PingPongAsync()); // still connected after every refusal
    }

    [Fact]
    public async Task A_session_holds_at_most_MaxPerSession_reply_permissions_and_drops_the_oldest()
    {
        await using TestBroker broker = await StartAsync(o => o.Security.Responses.MaxPerSession = 2);
        await using ProtocolClient alice = await OpenAsync(broker, AliceToken);
        await using ProtocolClient bob = await OpenAsync(broker, BobToken);
        string inbox = Identity.InboxPrefixOf("alice") + ".r";
        await alice.SubscribeAsync(1, inbox + ".>");
        await bob.SubscribeAsync(1, "svc.echo");
        await Task.WhenAll(alice.PingPongAsync(), bob.PingPongAsync());

        foreach (int n in new[] { 1, 2, 3 })
        {
            await alice.PublishAsync("svc.echo", $"request {n}", replyTo: $"{inbox}.{n}");
        }

        foreach (int n in new[] { 1, 2, 3 })
        {
            Assert.Equal($"{inbox}.{n}", (await bob.ReadMessageAsync()).ReplyTo); // each delivery granted its reply
        }

        await ExpectDeniedAsync(bob, w => FrameWriter.WritePublish(w, Encoding.UTF8.GetBytes($"{inbox}.1"), default, PayloadFlags.None, "dropped"u8), $"{inbox}.1");
        await bob.PublishAsync($"{inbox}.2", "answer 2");
        await bob.PublishAsync($"{inbox}.3", "answer 3");
        Assert.Empty(await bob.PingPongAsync());
        Assert.Equal(["answer 2", "answer 3"], (await alice.PingPongAsync()).Select(f => f.Text));
    }

    [Fact]
    public async Task A_reply_to_the_publisher_may_not_subscribe_to_is_refused_and_the_publisher_and_responder_stay()
    {
        await using TestBroker broker = await StartAsync();
        await using ProtocolClient alice = await OpenAsync(broker, AliceToken);
        await using ProtocolClient bob = await OpenAsync(broker, BobToken);
        await using ProtocolClient root = await OpenAsync(broker, RootToken); // may do everything
        await bob.SubscribeAsync(1, "svc.echo");
        await bob.PingPongAsync();

        // Naming another's inbox, a topic outside its rights, or a reserved topic (where no responder may publish).
        await ExpectDeniedAsync(alice, w => FrameWriter.WritePublish(w, "svc.echo"u8, Encoding.UTF8.GetBytes(Identity.InboxPrefixOf("bob") + ".x"), PayloadFlags.None, "steal"u8), Identity.InboxPrefixOf("bob") + ".x");
        await ExpectDeniedAsync(alice, w => FrameWriter.WritePublish(w, "svc.echo"u8, "svc.other"u8, PayloadFlags.None, "redirect"u8), "svc.other");
        await ExpectDeniedAsync(alice, w => FrameWriter.WritePublish(w, "svc.echo"u8, "$SYS.x"u8, PayloadFlags.None, "reserved"u8), "$SYS.x");
        await ExpectDeniedAsync(root, w => FrameWriter.WritePublish(w, "svc.echo"u8, "$SYS.x"u8, PayloadFlags.None, "reserved"u8), "$SYS.x");

        // None of them reached the responder; a good request after them does, and is answered.
        await alice.SubscribeAsync(1, Identity.InboxPrefixOf("alice") + ".r.>");
        await alice.PublishAsync("svc.echo", "good", replyTo: Identity.InboxPrefixOf("alice") + ".r.1");
        Frame request = await bob.ReadMessageAsync();
        Assert.Equal("good", request.Text);
        await bob.PublishAsync(request.ReplyTo!, "answer");
        Assert.Empty(await bob.PingPongAsync());
        Assert.Equal(["answer"], (await alice.PingPongAsync()).Select(f => f.Text));
    }

    [Fact]
    public async Task A_refresh_to_fewer_rights_ends_the_subscriptions_it_no_longer_allows_and_tells_the_client_which()
    {
        await using TestBroker broker = await JwtBrokerAsync();
        await using ProtocolClient admin = await OpenAsync(broker, Jwt("admin", pub: [">"], sub: [">"]));
        await using ProtocolClient client = await OpenAsync(broker, Jwt("user-1", sub: ["public.>", "private.>"]));
        await client.SubscribeAsync(1, "public.news");
        await client.SubscribeAsync(2, "private.x");
        await client.SubscribeAsync(3, "private.>");
        Assert.Empty(await client.PingPongAsync());

        await client.SendAsync(w => FrameWriter.WriteHello(w, "user-1", Capabilities.None, Jwt("user-1", sub: ["public.>"])));
        var told = new List<ErrorFrame>();
        Frame frame;
        while ((frame = await client.ReadAsync()).Type == FrameType.Error)
        {
            told.Add(frame.Error!.Value);
        }

        Assert.Equal(FrameType.Welcome, frame.Type); // every revocation is told before the refresh's WELCOME
        Assert.Equal([2u, 3u], told.Select(e => e.Sid).Order());
        Assert.All(told, e => Assert.Equal((ErrorCode.PermissionDenied, false), (e.Code, e.Fatal)));

        await admin.PublishAsync("private.x", "revoked");
        await admin.PublishAsync("public.news", "kept");
        await admin.PingPongAsync();
        Assert.Equal(["public.news"], (await client.PingPongAsync()).Select(f => f.Topic));
    }

    [Fact]
    public async Task A_refresh_that_takes_away_publishing_to_a_topic_refuses_the_next_publication_to_that_very_topic()
    {
        // The broker remembers the last topic a connection published to as checked: a refresh must not keep it granted.
        await using TestBroker broker = await JwtBrokerAsync();
        await using ProtocolClient watcher = await OpenAsync(broker, Jwt("watcher", sub: [">"]));
        await using ProtocolClient client = await OpenAsync(broker, Jwt("user-1", pub: ["orders.>"]));
        await watcher.SubscribeAsync(1, "orders.>");
        await watcher.PingPongAsync();
        await client.PublishAsync("orders.eu", "first");
        await client.PublishAsync("orders.eu", "second"); // the same topic again: granted as remembered
        Assert.Empty(await client.PingPongAsync());

        await client.SendAsync(w => FrameWriter.WriteHello(w, "user-1", Capabilities.None, Jwt("user-1", pub: ["returns.>"])));
        Assert.Equal(FrameType.Welcome, (await client.ReadAsync()).Type);
        await ExpectDeniedAsync(client, w => FrameWriter.WritePublish(w, "orders.eu"u8, default, PayloadFlags.None, "after the refresh"u8), "orders.eu");

        Assert.Equal(["first", "second"], (await watcher.PingPongAsync()).Select(f => f.Text));
    }

    [Fact]
    public async Task A_jwt_without_sub_or_exp_is_refused_and_a_refresh_must_keep_the_subject()
    {
        await using TestBroker broker = await JwtBrokerAsync();
        foreach (string token in new[] { Jwt(subject: null), Jwt("user-1", expires: false) })
        {
            await using ProtocolClient refused = await ProtocolClient.ConnectAsync(broker.Port);
            await refused.SendAsync(w => FrameWriter.WriteHello(w, "jwt", Capabilities.None, token));
            Assert.Equal(ProtocolSessionMessage, (await refused.ExpectClosedWithAsync(ErrorCode.AuthenticationFailed)).Message);
        }

        await using ProtocolClient client = await OpenAsync(broker, Jwt("user-1", name: "shared-name"));
        await client.SendAsync(w => FrameWriter.WriteHello(w, "jwt", Capabilities.None, Jwt("user-2", name: "shared-name")));
        Assert.Equal(ProtocolSessionMessage, (await client.ExpectClosedWithAsync(ErrorCode.AuthenticationFailed)).Message);

        await using TestBroker lenient = await JwtBrokerAsync(o => o.Security.Auth.Jwt.RequireExpiration = false);
        await using ProtocolClient accepted = await OpenAsync(lenient, Jwt("user-1", expires: false));
    }

    [Fact]
    public async Task A_failed_authentication_tells_the_client_only_that_and_logs_why_with_the_address_never_the_credential()
    {
        await using TestBroker broker = await StartAsync(args: ["--Logging:LogLevel:Herald=Warning"]);
        LogCapture log = LogCapture.Attach(broker);

        await using ProtocolClient tcp = await ProtocolClient.ConnectAsync(broker.Port);
        await tcp.SendAsync(w => FrameWriter.WriteHello(w, "bad", Capabilities.None, "wrong-secret-credential"));
        Assert.Equal(ProtocolSessionMessage, (await tcp.ExpectClosedWithAsync(ErrorCode.AuthenticationFailed)).Message);

        using var create = new HttpRequestMessage(HttpMethod.Post, "/poll/sessions");
        create.Headers.Authorization = new AuthenticationHeaderValue("Bearer", "wrong-http-credential");
        using HttpResponseMessage refused = await broker.Http.SendAsync(create);
        Assert.Equal(HttpStatusCode.Unauthorized, refused.StatusCode);
        JsonElement problem = await refused.Content.ReadFromJsonAsync<JsonElement>();
        Assert.Equal(("AuthenticationFailed", ProtocolSessionMessage), (problem.GetProperty("code").GetString(), problem.GetProperty("detail").GetString()));

        string[] failures = [.. log.Lines.Where(l => l.Contains("Authentication failed (", StringComparison.Ordinal))];
        Assert.Contains(failures, l => l.Contains("(tcp)", StringComparison.Ordinal) && l.Contains("127.0.0.1", StringComparison.Ordinal) && l.Contains("token is not valid", StringComparison.Ordinal));
        Assert.Contains(failures, l => l.Contains("(longpoll)", StringComparison.Ordinal) && l.Contains("127.0.0.1", StringComparison.Ordinal) && l.Contains("token is not valid", StringComparison.Ordinal));
        Assert.DoesNotContain(log.Lines, l => l.Contains("wrong-secret-credential", StringComparison.Ordinal) || l.Contains("wrong-http-credential", StringComparison.Ordinal));
    }

    [Fact]
    public async Task Subsz_counts_inbox_patterns_and_never_names_them()
    {
        await using TestBroker broker = await StartAsync();
        await using ProtocolClient alice = await OpenAsync(broker, AliceToken);
        await using ProtocolClient bob = await OpenAsync(broker, BobToken);
        await alice.SubscribeAsync(1, Identity.InboxPrefixOf("alice") + ".r.>");
        await bob.SubscribeAsync(1, "svc.visible");
        Assert.Empty(await alice.PingPongAsync());
        Assert.Empty(await bob.PingPongAsync());

        string subsz = await broker.Monitoring.GetStringAsync($"/subsz?topic={Identity.InboxPrefixOf("alice")}.r.1");
        string all = await broker.Monitoring.GetStringAsync("/subsz");

        JsonElement filtered = JsonDocument.Parse(subsz).RootElement;
        Assert.Equal((0, 0), (filtered.GetProperty("total").GetInt32(), filtered.GetProperty("patterns").GetArrayLength())); // asking by the inbox's name finds nothing
        Assert.DoesNotContain("_INBOX", all, StringComparison.Ordinal);
        Assert.Contains("svc.visible", all, StringComparison.Ordinal);
        Assert.Equal(1, JsonDocument.Parse(all).RootElement.GetProperty("num_inbox_patterns").GetInt32());
    }

    private const string ProtocolSessionMessage = "Authentication failed.";

    private static Task<TestBroker> StartAsync(Action<HeraldOptions>? configure = null, string[]? args = null, TimeProvider? time = null) => TestBroker.StartAsync(o =>
    {
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.Zero;
        o.Security.Auth.Tokens.Add(Token("alice", AliceToken, publish: ["svc.>"], subscribe: []));
        o.Security.Auth.Tokens.Add(Token("bob", BobToken, publish: [], subscribe: ["svc.>"]));
        o.Security.Auth.Tokens.Add(Token("carol", CarolToken, publish: ["svc.time"], subscribe: []));
        o.Security.Auth.Tokens.Add(Token("dave", DaveToken, publish: [], subscribe: ["svc.time"]));
        o.Security.Auth.Tokens.Add(Token("root", RootToken, publish: [">"], subscribe: [">"]));
        configure?.Invoke(o);
    }, args, time);

    private static TokenOptions Token(string name, string token, string[] publish, string[] subscribe)
    {
        var options = new TokenOptions { Name = name, Sha256 = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(token))) };
        options.Permissions.Publish.AddRange(publish);
        options.Permissions.Subscribe.AddRange(subscribe);
        return options;
    }

    private static Task<TestBroker> JwtBrokerAsync(Action<HeraldOptions>? more = null) => TestBroker.StartAsync(o =>
    {
        o.Security.Auth.Mode = AuthMode.Jwt;
        o.Security.Auth.FailureDelay = TimeSpan.Zero;
        o.Security.Auth.Jwt.HmacSecret = Secret;
        more?.Invoke(o);
    });

    private static string Jwt(string? subject, string[]? pub = null, string[]? sub = null, bool expires = true, string? name = null)
    {
        var claims = new List<Claim>();
        if (subject is not null)
        {
            claims.Add(new Claim("sub", subject));
        }

        if (name is not null)
        {
            claims.Add(new Claim("name", name));
        }

        claims.AddRange((pub ?? ["public.>"]).Select(p => new Claim("herald_pub", p)));
        claims.AddRange((sub ?? ["public.>"]).Select(p => new Claim("herald_sub", p)));
        DateTime now = DateTime.UtcNow;
        var token = new JwtSecurityToken(null, null, claims, now.AddMinutes(-1), expires ? now.AddHours(1) : null,
            new SigningCredentials(new SymmetricSecurityKey(Encoding.UTF8.GetBytes(Secret)), SecurityAlgorithms.HmacSha256));
        return new JwtSecurityTokenHandler().WriteToken(token);
    }

    private static async Task<ProtocolClient> OpenAsync(TestBroker broker, string token)
    {
        ProtocolClient client = await ProtocolClient.ConnectAsync(broker.Port);
        await client.SendAsync(w => FrameWriter.WriteHello(w, "isolation", Capabilities.None, token));
        Frame welcome = await client.ReadAsync();
        Assert.True(welcome.Type == FrameType.Welcome, $"Expected WELCOME, got {welcome}");
        return client;
    }

    private static async Task<string?> WelcomePrefixAsync(TestBroker broker, string token)
    {
        await using ProtocolClient client = await ProtocolClient.ConnectAsync(broker.Port);
        await client.SendAsync(w => FrameWriter.WriteHello(w, "isolation", Capabilities.None, token));
        return (await client.ReadAsync()).Welcome?.InboxPrefix;
    }

    private static async Task<string?> CreateSessionPrefixAsync(TestBroker broker, string? token)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/poll/sessions");
        if (token is not null)
        {
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", token);
        }

        using HttpResponseMessage created = await broker.Http.SendAsync(request);
        Assert.Equal(HttpStatusCode.Created, created.StatusCode);
        return (await created.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("inboxPrefix").GetString();
    }

    private static Task ExpectDeniedAsync(ProtocolClient client, Action<System.Buffers.IBufferWriter<byte>> frame, string topic) =>
        IdentityIsolationTests.ExpectDeniedAsync(client, frame, topic);
}
