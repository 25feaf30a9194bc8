using System.IdentityModel.Tokens.Jwt;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Security.Claims;
using System.Security.Cryptography;
using System.Text;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.IdentityModel.Tokens;

namespace Herald.Broker.Tests;

public sealed class PermissionRulesTests
{
    [Theory]
    [InlineData(">", "a.b", true)]
    [InlineData("a.>", "a.*", true)]
    [InlineData("a.>", "a.>", true)]
    [InlineData("a.>", "a", false)]
    [InlineData("a.*", "a.b", true)]
    [InlineData("a.*", "a.*", true)]
    [InlineData("a.*", "a.>", false)]
    [InlineData("a.b", "a.*", false)]
    [InlineData("*.b", "x.b", true)]
    [InlineData("a.*.c", "a.b.c.d", false)]
    public void A_pattern_covers_another_only_if_everything_it_matches_is_matched(string general, string specific, bool covers) =>
        Assert.Equal(covers, Permissions.Covers(general, specific));

    [Theory]
    [InlineData("a.secret", "a.*", true)]
    [InlineData("a.secret", "a.>", true)]
    [InlineData("a.secret", ">", true)]
    [InlineData("a.secret", "b.*", false)]
    [InlineData("a.*.x", "a.b.*", true)]
    [InlineData("a.b", "a.b.c", false)]
    [InlineData("a.>", "*", false)]
    public void Patterns_intersect_when_one_topic_matches_both(string a, string b, bool intersect)
    {
        Assert.Equal(intersect, Permissions.Intersects(a, b));
        Assert.Equal(intersect, Permissions.Intersects(b, a));
    }

    [Fact]
    public void Deny_wins_over_allow_and_wildcards_cannot_reach_denied_topics()
    {
        var p = new Permissions(["public.>"], ["public.>"], ["public.admin.>"], ["public.secret"], inboxPrefix: "_INBOX.k3J9aZ01pQr7sT2u");

        Assert.True(p.CanPublish("public.news"));
        Assert.False(p.CanPublish("public.admin.reset"));
        Assert.False(p.CanPublish("private.x"));
        Assert.True(p.CanPublish("_INBOX.k3J9aZ01pQr7sT2u.1"));    // its own inbox
        Assert.False(p.CanPublish("_INBOX.abc.1"));                // another's: only as a granted reply (ProtocolSession)
        Assert.True(p.CanSubscribe("public.news"));
        Assert.False(p.CanSubscribe("public.secret"));
        Assert.False(p.CanSubscribe("public.*"));                   // could receive public.secret
        Assert.False(p.CanSubscribe(">"));                          // not covered by public.>
        Assert.True(p.CanSubscribe("_INBOX.k3J9aZ01pQr7sT2u.>"));   // its own inbox
        Assert.False(p.CanSubscribe("_INBOX.>"));                   // everyone's inboxes
        Assert.False(p.CanSubscribe("_INBOX.other0123456789ab.>")); // another's inbox
        Assert.False(p.CanSubscribe("_INBOX.k3J9aZ01pQr7sT2u"));    // the prefix itself is not under it
    }

    [Theory]
    [InlineData("public.news")]
    [InlineData("public.secret")]
    [InlineData("public.admin.reset")]
    [InlineData("private.x")]
    [InlineData("_INBOX.k3J9aZ01pQr7sT2u.c1")]
    [InlineData("_INBOX.k3J9aZ01pQr7sT2u")]
    [InlineData("_INBOX.other0123456789ab.c1")]
    public void A_reply_to_may_be_named_exactly_when_it_could_be_subscribed(string topic)
    {
        var p = new Permissions(["public.>"], ["public.>"], ["public.admin.>"], ["public.secret"], inboxPrefix: "_INBOX.k3J9aZ01pQr7sT2u");
        Assert.Equal(p.CanSubscribe(topic), p.CanReceive(topic));
    }

    [Fact]
    public void Checking_a_restricted_publish_and_spending_a_reply_permission_allocate_nothing()
    {
        var p = new Permissions(["bench.>"], ["bench.>"], ["bench.admin.>"], ["bench.secret"], inboxPrefix: "_INBOX.k3J9aZ01pQr7sT2u");
        var permits = new Herald.Broker.Routing.ReplyPermits(maxMessages: 1_000_000, TimeSpan.FromMinutes(2), maxPermits: 16, TimeProvider.System);
        var inbox = new System.Buffers.ReadOnlySequence<byte>("_INBOX.other0123456789ab.c1"u8.ToArray());
        permits.Grant(inbox); // the first grant of a reply topic keeps its name: the one allocation, per requester
        bool allowed = true;
        for (int round = 0; round < 2; round++) // the first round warms up (JIT, statics)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < 100; i++)
            {
                allowed &= p.CanPublish("bench.rpc.0".AsSpan());                          // a request
                allowed &= p.CanReceive("_INBOX.k3J9aZ01pQr7sT2u.c1".AsSpan());           // its reply_to
                permits.Grant(inbox);                                                     // delivered to a responder
                allowed &= !p.CanPublish("_INBOX.other0123456789ab.c1".AsSpan());         // whose reply is not granted...
                allowed &= permits.TryUse("_INBOX.other0123456789ab.c1".AsSpan());        // ...but asked for
            }

            if (round == 1)
            {
                Assert.Equal(0, GC.GetAllocatedBytesForCurrentThread() - before);
            }
        }

        Assert.True(allowed);
    }
}

public sealed class SecurityTests
{
    private const string Secret = "a-test-secret-of-at-least-thirty-two-bytes!";

    [Fact]
    public async Task Static_tokens_let_the_right_client_in_and_refuse_others_after_a_delay()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.FailureDelay = TimeSpan.FromMilliseconds(100);
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256("alice-token"), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
        });

        await using var good = await ProtocolClient.ConnectAsync(broker.Port);
        await good.SendAsync(w => FrameWriter.WriteHello(w, "good", Capabilities.None, "alice-token"));
        Assert.Equal(FrameType.Welcome, (await good.ReadAsync()).Type);

        foreach (string? wrong in new[] { "bob-token", null, "" })
        {
            await using var bad = await ProtocolClient.ConnectAsync(broker.Port);
            await bad.SendAsync(w => FrameWriter.WriteHello(w, "bad", Capabilities.None, wrong));
            ErrorFrame error = await bad.ExpectClosedWithAsync(ErrorCode.AuthenticationFailed);
            Assert.Equal("Authentication failed.", error.Message); // never which check failed, never the credential
        }
    }

    [Theory]
    [InlineData("valid", null)]
    [InlineData("bad-signature", "signature")]
    [InlineData("expired", "expired")]
    [InlineData("not-yet", "not valid yet")]
    [InlineData("wrong-audience", "audience")]
    [InlineData("wrong-issuer", "issuer")]
    public async Task Jwt_signature_audience_issuer_and_lifetime_are_checked(string kind, string? failure)
    {
        await using var broker = await JwtBroker(args: ["--Logging:LogLevel:Herald=Warning"]);
        LogCapture log = LogCapture.Attach(broker);
        DateTime now = DateTime.UtcNow;
        string token = kind switch
        {
            "bad-signature" => Jwt(now, signingSecret: "another-secret-of-at-least-thirty-two-bytes"),
            "expired" => Jwt(now.AddHours(-2), lifetime: TimeSpan.FromHours(1)),
            "not-yet" => Jwt(now.AddHours(1)),
            "wrong-audience" => Jwt(now, audience: "someone-else"),
            "wrong-issuer" => Jwt(now, issuer: "mallory"),
            _ => Jwt(now),
        };
        await using var client = await ProtocolClient.ConnectAsync(broker.Port);

        await client.SendAsync(w => FrameWriter.WriteHello(w, "jwt", Capabilities.None, token));

        if (failure is null)
        {
            Assert.Equal(FrameType.Welcome, (await client.ReadAsync()).Type);
        }
        else
        {
            Assert.Equal("Authentication failed.", (await client.ExpectClosedWithAsync(ErrorCode.AuthenticationFailed)).Message); // the client is told only that
            Assert.Contains(log.Lines, l => l.Contains("Authentication failed (tcp)", StringComparison.Ordinal) && l.Contains(failure, StringComparison.OrdinalIgnoreCase)); // the log says why
        }
    }

    [Fact]
    public async Task A_client_cannot_receive_a_single_message_from_a_topic_it_was_not_granted_over_either_transport()
    {
        await using var broker = await JwtBroker();
        await using var admin = await ProtocolClient.ConnectAsync(broker.Port);
        await admin.SendAsync(w => FrameWriter.WriteHello(w, "admin", Capabilities.None, Jwt(DateTime.UtcNow, pub: [">"], sub: [">"])));
        await admin.ReadAsync();
        string restricted = Jwt(DateTime.UtcNow, pub: ["public.>"], sub: ["public.>"], denySub: ["public.secret"]);
        await using var tcp = await ProtocolClient.ConnectAsync(broker.Port);
        await tcp.SendAsync(w => FrameWriter.WriteHello(w, "restricted", Capabilities.None, restricted));
        await tcp.ReadAsync();

        // Refused subscriptions: told, counted, the connection stays.
        foreach (string pattern in new[] { "secret.x", ">", "public.*", "public.secret" })
        {
            await tcp.SubscribeAsync(9, pattern);
            Frame refused = await tcp.ReadAsync();
            Assert.Equal((ErrorCode.PermissionDenied, false), (refused.Error!.Value.Code, refused.Error.Value.Fatal));
            Assert.Contains(pattern, refused.Error.Value.Message, StringComparison.Ordinal);
        }

        await tcp.SubscribeAsync(1, "public.news");
        await tcp.SubscribeAsync(2, "public.end");
        await tcp.PingPongAsync();
        using var http = new HttpRequestMessage(HttpMethod.Post, "/poll/sessions");
        http.Headers.Authorization = new AuthenticationHeaderValue("Bearer", restricted);
        using HttpResponseMessage created = await broker.Http.SendAsync(http);
        string session = (await created.Content.ReadFromJsonAsync<System.Text.Json.JsonElement>()).GetProperty("session").GetString()!;
        using var owner = new HttpClient { BaseAddress = broker.Http.BaseAddress }; // every request on the session carries its owner's credential
        owner.DefaultRequestHeaders.Authorization = new AuthenticationHeaderValue("Bearer", restricted);
        using (HttpResponseMessage denied = await owner.PostAsJsonAsync($"/poll/sessions/{session}/subscriptions", new { sid = 1, pattern = "public.*" }))
        {
            Assert.Equal(HttpStatusCode.Forbidden, denied.StatusCode);
        }

        using (HttpResponseMessage ok = await owner.PostAsJsonAsync($"/poll/sessions/{session}/subscriptions", new { sid = 1, pattern = "public.>" }))
        {
            Assert.Equal(HttpStatusCode.Forbidden, ok.StatusCode); // public.> intersects the denied public.secret too
        }

        using (await owner.PostAsJsonAsync($"/poll/sessions/{session}/subscriptions", new { sid = 2, pattern = "public.end" }))
        {
        }

        foreach (string topic in new[] { "secret.x", "public.secret", "public.news", "public.end" })
        {
            await admin.PublishAsync(topic, topic);
        }

        Assert.Equal(("public.news", "public.end"), ((await tcp.ReadMessageAsync()).Topic, (await tcp.ReadMessageAsync()).Topic));
        PollResult poll = await LongPollClient.ReadAsync(await owner.GetAsync($"/poll/sessions/{session}/messages?ack=0"));
        Assert.Equal(["public.end"], poll.Messages.Select(m => m.Topic));

        // Publishing where not granted is refused the same way and reaches nobody.
        await tcp.PublishAsync("secret.x", "sneaky");
        Frame publishRefused = await tcp.ReadAsync();
        Assert.Equal(ErrorCode.PermissionDenied, publishRefused.Error!.Value.Code);
        await admin.SubscribeAsync(5, "secret.x");
        await admin.PingPongAsync();
        await tcp.PublishAsync("secret.x", "sneaky again");
        await tcp.ReadAsync();
        Assert.Empty(await admin.PingPongAsync());
    }

    [Fact]
    public async Task Long_poll_needs_a_bearer_token_to_create_a_session_or_publish_without_one()
    {
        await using var broker = await JwtBroker();

        using HttpResponseMessage noToken = await broker.Http.PostAsync("/poll/sessions", null);
        using HttpResponseMessage oneShot = await broker.Http.PostAsync("/poll/publish?topic=public.x", new StringContent("x"));

        Assert.Equal(HttpStatusCode.Unauthorized, noToken.StatusCode);
        Assert.Equal("Bearer", noToken.Headers.WwwAuthenticate.Single().Scheme);
        Assert.Equal(HttpStatusCode.Unauthorized, oneShot.StatusCode);
    }

    [Fact]
    public async Task An_expiring_token_closes_the_connection_unless_refreshed_by_a_new_hello()
    {
        await using var broker = await JwtBroker(); // the liveness sweep runs every second: it notices the expiry
        DateTime now = DateTime.UtcNow;
        await using var lapsing = await ProtocolClient.ConnectAsync(broker.Port);
        await using var refreshed = await ProtocolClient.ConnectAsync(broker.Port);
        await lapsing.SendAsync(w => FrameWriter.WriteHello(w, "lapsing", Capabilities.None, Jwt(now, lifetime: TimeSpan.FromSeconds(2))));
        await refreshed.SendAsync(w => FrameWriter.WriteHello(w, "refreshed", Capabilities.None, Jwt(now, lifetime: TimeSpan.FromSeconds(2))));
        await lapsing.ReadAsync();
        await refreshed.ReadAsync();

        await refreshed.SendAsync(w => FrameWriter.WriteHello(w, "refreshed", Capabilities.None, Jwt(now, lifetime: TimeSpan.FromHours(1))));
        Assert.Equal(FrameType.Welcome, (await ReadSkippingPings(refreshed)).Type);

        ErrorFrame expired = await lapsing.ExpectClosedWithAsync(ErrorCode.AuthenticationFailed);
        Assert.Contains("expired", expired.Message, StringComparison.Ordinal);
        await refreshed.SendAsync(FrameWriter.WritePing);
        Assert.Equal(FrameType.Pong, (await ReadSkippingPings(refreshed)).Type); // still connected after the first token's expiry

        static async Task<Frame> ReadSkippingPings(ProtocolClient c)
        {
            Frame f;
            do
            {
                f = await c.ReadAsync();
                if (f.Type == FrameType.Ping)
                {
                    await c.SendAsync(FrameWriter.WritePong);
                }
            }
            while (f.Type == FrameType.Ping);
            return f;
        }
    }

    [Fact]
    public async Task Jwt_keys_can_come_from_a_jwks_file()
    {
        using var rsa = RSA.Create(2048);
        var key = new RsaSecurityKey(rsa) { KeyId = "key-1" };
        JsonWebKey jwk = JsonWebKeyConverter.ConvertFromRSASecurityKey(new RsaSecurityKey(rsa.ExportParameters(false)) { KeyId = "key-1" });
        string jwks = Path.Combine(Path.GetTempPath(), $"herald-{Guid.NewGuid():N}.jwks.json");
        File.WriteAllText(jwks, System.Text.Json.JsonSerializer.Serialize(new { keys = new[] { new { kty = jwk.Kty, kid = jwk.Kid, n = jwk.N, e = jwk.E, use = "sig" } } }));
        try
        {
            await using var broker = await TestBroker.StartAsync(o =>
            {
                o.Security.Auth.Mode = AuthMode.Jwt;
                o.Security.Auth.Jwt.JwksFile = jwks;
            });
            var token = new JwtSecurityToken("any", "any", [new Claim("sub", "rsa-user"), new Claim("herald_pub", ">"), new Claim("herald_sub", ">")],
                DateTime.UtcNow, DateTime.UtcNow.AddHours(1), new SigningCredentials(key, SecurityAlgorithms.RsaSha256));
            await using var client = await ProtocolClient.ConnectAsync(broker.Port);

            await client.SendAsync(w => FrameWriter.WriteHello(w, "rsa", Capabilities.None, new JwtSecurityTokenHandler().WriteToken(token)));

            Assert.Equal(FrameType.Welcome, (await client.ReadAsync()).Type);
        }
        finally
        {
            File.Delete(jwks);
        }
    }

    [Fact]
    public async Task A_refused_operation_can_be_configured_to_close_the_connection()
    {
        await using var broker = await JwtBroker(o => o.Security.DisconnectOnPermissionDenied = true);
        await using var client = await ProtocolClient.ConnectAsync(broker.Port);
        await client.SendAsync(w => FrameWriter.WriteHello(w, "strict", Capabilities.None, Jwt(DateTime.UtcNow)));
        await client.ReadAsync();

        await client.SubscribeAsync(1, "secret.x");

        Assert.Contains("secret.x", (await client.ExpectClosedWithAsync(ErrorCode.PermissionDenied)).Message, StringComparison.Ordinal);
    }

    private static Task<TestBroker> JwtBroker(Action<Hosting.HeraldOptions>? more = null, string[]? args = null) => TestBroker.StartAsync(o =>
    {
        o.Security.Auth.Mode = AuthMode.Jwt;
        o.Security.Auth.FailureDelay = TimeSpan.FromMilliseconds(50);
        o.Security.Auth.Jwt.HmacSecret = Secret;
        o.Security.Auth.Jwt.Issuer = "herald-tests";
        o.Security.Auth.Jwt.Audience = "herald";
        o.Security.Auth.Jwt.ClockSkew = TimeSpan.Zero;
        more?.Invoke(o);
    }, args);

    private static string Jwt(DateTime notBefore, TimeSpan? lifetime = null, string signingSecret = Secret, string audience = "herald", string issuer = "herald-tests",
        string[]? pub = null, string[]? sub = null, string[]? denySub = null)
    {
        var claims = new List<Claim> { new("sub", "user-1") };
        claims.AddRange((pub ?? ["public.>"]).Select(p => new Claim("herald_pub", p)));
        claims.AddRange((sub ?? ["public.>"]).Select(p => new Claim("herald_sub", p)));
        claims.AddRange((denySub ?? []).Select(p => new Claim("herald_deny_sub", p)));
        var token = new JwtSecurityToken(issuer, audience, claims, notBefore, notBefore + (lifetime ?? TimeSpan.FromHours(1)),
            new SigningCredentials(new SymmetricSecurityKey(Encoding.UTF8.GetBytes(signingSecret)), SecurityAlgorithms.HmacSha256));
        return new JwtSecurityTokenHandler().WriteToken(token);
    }
}
