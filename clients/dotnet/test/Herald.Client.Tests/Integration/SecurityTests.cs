using System.Net;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;
using System.Text;
using Herald.Broker.Security;
using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;
using Herald.Testing;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// A broker with static-token authentication: alice may use <c>chat.&gt;</c> except <c>chat.admin.&gt;</c>; bob
/// may use everything; carol has two tokens, the newer one also granting <c>upgraded.&gt;</c>; dave has two,
/// the newer one no longer granting <c>revoked.&gt;</c>.
/// </summary>
public sealed class AuthBroker : IAsyncLifetime
{
    public const string Alice = "alice-token-0123456789";
    public const string Bob = "bob-token-0123456789";
    public const string CarolOld = "carol-old-token-0123456789";
    public const string CarolNew = "carol-new-token-0123456789";
    public const string DaveFull = "dave-full-token-0123456789";
    public const string DaveLess = "dave-less-token-0123456789";

    public TestBroker Broker { get; private set; } = null!;

    public async Task InitializeAsync() => Broker = await TestBroker.StartAsync(o =>
    {
        o.Security.Auth.Mode = AuthMode.Token;
        o.Security.Auth.FailureDelay = TimeSpan.FromMilliseconds(10);
        o.Security.Auth.Tokens.Add(new TokenOptions
        {
            Name = "alice",
            Sha256 = Sha256(Alice),
            Permissions = { Publish = { "chat.>" }, Subscribe = { "chat.>" }, DenyPublish = { "chat.admin.>" }, DenySubscribe = { "chat.admin.>" } },
        });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "bob", Sha256 = Sha256(Bob), Permissions = { Publish = { ">" }, Subscribe = { ">" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "carol", Sha256 = Sha256(CarolOld), Permissions = { Publish = { "refresh.>" }, Subscribe = { "refresh.>" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "carol", Sha256 = Sha256(CarolNew), Permissions = { Publish = { "refresh.>", "upgraded.>" }, Subscribe = { "refresh.>", "upgraded.>" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "dave", Sha256 = Sha256(DaveFull), Permissions = { Publish = { "kept.>", "revoked.>" }, Subscribe = { "kept.>", "revoked.>" } } });
        o.Security.Auth.Tokens.Add(new TokenOptions { Name = "dave", Sha256 = Sha256(DaveLess), Permissions = { Publish = { "kept.>" }, Subscribe = { "kept.>" } } });
    });

    public async Task DisposeAsync() => await Broker.DisposeAsync();

    private static string Sha256(string token) => Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(token)));
}

/// <summary>Authentication (HELLO's auth, a bearer token for long-poll), permissions (§10) and their refusals.</summary>
public class SecurityTests(AuthBroker fixture) : IClassFixture<AuthBroker>
{
    public static TheoryData<HeraldTransport> Transports => PubSubTests.Transports;

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_client_with_a_good_credential_works_within_its_permissions(HeraldTransport transport)
    {
        string topic = "chat." + Guid.NewGuid().ToString("N");
        await using var alice = new HeraldClient(fixture.Broker.Url(transport), new HeraldClientOptions { Credential = AuthBroker.Alice });
        await using var bob = new HeraldClient(fixture.Broker.TcpUrl, new HeraldClientOptions { CredentialProvider = _ => ValueTask.FromResult<string?>(AuthBroker.Bob) });
        await using HeraldSubscription subscription = await alice.SubscribeAsync(topic);
        await using HeraldSubscription service = await bob.SubscribeAsync("svc.whoami", async m => await m.RespondAsync("bob answers"));

        await bob.PublishAsync(topic, "hi alice");

        Assert.Equal("hi alice", (await subscription.ReadAsync(Wait.Token())).GetString());

        // Request/reply needs no grant on _INBOX (AllowInboxReplies): alice may not publish to svc.> though.
        await using HeraldSubscription inboxOnly = await bob.SubscribeAsync(topic + ".ask", async m => await m.RespondAsync("ok"));
        Assert.Equal("ok", (await alice.RequestAsync(topic + ".ask", "?", TimeSpan.FromSeconds(10))).GetString());
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_subscription_the_identity_is_not_granted_fails_with_PermissionDenied_and_the_connection_stays(HeraldTransport transport)
    {
        await using var alice = new HeraldClient(fixture.Broker.Url(transport), new HeraldClientOptions { Credential = AuthBroker.Alice });
        var watcher = new StateWatcher(alice);
        await using HeraldSubscription allowed = await alice.SubscribeAsync("chat.room.>");

        var denied = await Assert.ThrowsAsync<HeraldException>(() => alice.SubscribeAsync("chat.admin.>"));
        var wildcard = await Assert.ThrowsAsync<HeraldException>(() => alice.SubscribeAsync("chat.>")); // could match chat.admin.x
        var outside = await Assert.ThrowsAsync<HeraldException>(() => alice.SubscribeAsync("prices.>"));

        Assert.All([denied, wildcard, outside], e => Assert.Equal(ErrorCode.PermissionDenied, e.ErrorCode));
        Assert.All([denied, wildcard, outside], e => Assert.False(e.IsFatal));
        await alice.PublishAsync("chat.room.1", "still here");
        Assert.Equal("still here", (await allowed.ReadAsync(Wait.Token())).GetString());
        await watcher.WaitForAsync(ConnectionState.Connected);
        Assert.Equal([ConnectionState.Connecting, ConnectionState.Connected], watcher.History);
    }

    [Fact]
    public async Task A_publication_the_identity_is_not_granted_is_reported_through_Error()
    {
        await using var alice = new HeraldClient(fixture.Broker.TcpUrl, new HeraldClientOptions { Credential = AuthBroker.Alice });
        var reported = new TaskCompletionSource<HeraldException>(TaskCreationOptions.RunContinuationsAsynchronously);
        alice.Error += (_, e) => reported.TrySetResult(e.Exception);

        await alice.PublishAsync("chat.admin.reboot", "now"); // no acknowledgement for a PUBLISH: the refusal comes later
        await alice.FlushAsync(Wait.Token());

        HeraldException error = await reported.Task.Within();
        Assert.Equal(ErrorCode.PermissionDenied, error.ErrorCode);
        Assert.Equal(ConnectionState.Connected, alice.State);
    }

    [Theory]
    [InlineData(HeraldTransport.Tcp, "wrong-token")]
    [InlineData(HeraldTransport.Tcp, null)]
    [InlineData(HeraldTransport.LongPoll, "wrong-token")]
    [InlineData(HeraldTransport.LongPoll, null)]
    [InlineData(HeraldTransport.WebSocket, "wrong-token")]
    [InlineData(HeraldTransport.WebSocket, null)]
    public async Task A_missing_or_wrong_credential_fails_ConnectAsync_with_AuthenticationFailed(HeraldTransport transport, string? credential)
    {
        await using var client = new HeraldClient(fixture.Broker.Url(transport), new HeraldClientOptions { Credential = credential });

        var e = await Assert.ThrowsAsync<HeraldException>(() => client.ConnectAsync(Wait.Token()));

        Assert.Equal(ErrorCode.AuthenticationFailed, e.ErrorCode);
        Assert.DoesNotContain("wrong-token", e.Message, StringComparison.Ordinal);
        Assert.Equal(ConnectionState.Disconnected, client.State);
    }

    [Fact]
    public async Task RefreshCredentialAsync_presents_a_fresh_credential_and_the_connection_carries_on()
    {
        int asked = 0;
        await using var carol = new HeraldClient(fixture.Broker.TcpUrl, new HeraldClientOptions
        {
            CredentialProvider = _ => ValueTask.FromResult<string?>(Interlocked.Increment(ref asked) == 1 ? AuthBroker.CarolOld : AuthBroker.CarolNew),
        });
        string topic = "refresh." + Guid.NewGuid().ToString("N");
        string upgraded = "upgraded." + Guid.NewGuid().ToString("N");
        await using HeraldSubscription subscription = await carol.SubscribeAsync(topic);
        ulong? connection = carol.ServerInfo!.ConnectionId;
        var before = await Assert.ThrowsAsync<HeraldException>(() => carol.SubscribeAsync(upgraded)); // the old token does not grant it
        Assert.Equal(ErrorCode.PermissionDenied, before.ErrorCode);

        await carol.RefreshCredentialAsync(Wait.Token());

        Assert.Equal(2, asked);
        Assert.Equal(connection, carol.ServerInfo!.ConnectionId);

        // The broker now holds the new token's grants on the same connection: what was refused is allowed.
        await using HeraldSubscription granted = await carol.SubscribeAsync(upgraded);
        await carol.PublishAsync(upgraded, "granted now");
        Assert.Equal("granted now", (await granted.ReadAsync(Wait.Token())).GetString());
        await carol.PublishAsync(topic, "same connection");
        Assert.Equal("same connection", (await subscription.ReadAsync(Wait.Token())).GetString());
        Assert.Equal(connection, carol.ServerInfo!.ConnectionId);
        Assert.Equal(ConnectionState.Connected, carol.State);
    }

    [Theory]
    [MemberData(nameof(Transports))]
    public async Task A_restricted_responder_answers_a_request_and_each_identity_has_its_own_inbox_prefix(HeraldTransport transport)
    {
        string service = "chat." + Guid.NewGuid().ToString("N");
        await using var alice = new HeraldClient(fixture.Broker.Url(transport), new HeraldClientOptions { Credential = AuthBroker.Alice });
        await using var bob = new HeraldClient(fixture.Broker.TcpUrl, new HeraldClientOptions { Credential = AuthBroker.Bob });

        // alice may publish only to chat.>: her answer into bob's inbox is allowed because his request was delivered to her.
        await using HeraldSubscription responder = await alice.SubscribeAsync(service, async m => await m.RespondAsync("alice answers"));
        Assert.Equal("alice answers", (await bob.RequestAsync(service, "?", TimeSpan.FromSeconds(10))).GetString());

        Assert.StartsWith("_INBOX.", alice.ServerInfo!.InboxPrefix, StringComparison.Ordinal);
        Assert.StartsWith("_INBOX.", bob.ServerInfo!.InboxPrefix, StringComparison.Ordinal);
        Assert.NotEqual(alice.ServerInfo.InboxPrefix, bob.ServerInfo.InboxPrefix);
    }

    [Fact]
    public async Task Over_WebSocket_an_identity_cannot_subscribe_to_another_identitys_inbox_and_the_owner_still_gets_its_replies()
    {
        string service = "svc." + Guid.NewGuid().ToString("N");
        await using var bob = new HeraldClient(fixture.Broker.WebSocketUrl, new HeraldClientOptions { Credential = AuthBroker.Bob });
        await using var alice = new HeraldClient(fixture.Broker.WebSocketUrl, new HeraldClientOptions { Credential = AuthBroker.Alice });
        await using HeraldSubscription responder = await bob.SubscribeAsync(service, async m => await m.RespondAsync("for bob only"));
        await bob.ConnectAsync(Wait.Token());
        await alice.ConnectAsync(Wait.Token());
        string bobsInbox = bob.ServerInfo!.InboxPrefix!;
        Assert.NotEqual(alice.ServerInfo!.InboxPrefix, bobsInbox);

        // alice, authenticated over the same WebSocket endpoint, tries to listen where bob's replies arrive.
        var exact = await Assert.ThrowsAsync<HeraldException>(() => alice.SubscribeAsync(bobsInbox + ".>"));
        var everyInbox = await Assert.ThrowsAsync<HeraldException>(() => alice.SubscribeAsync("_INBOX.>"));
        var oneReply = await Assert.ThrowsAsync<HeraldException>(() => alice.SubscribeAsync(bobsInbox + ".abc.1"));

        Assert.All([exact, everyInbox, oneReply], e => Assert.Equal((ErrorCode.PermissionDenied, false), (e.ErrorCode, e.IsFatal)));
        Assert.Equal("for bob only", (await bob.RequestAsync(service, "?", TimeSpan.FromSeconds(10))).GetString()); // the reply reached its owner
        await alice.FlushAsync(Wait.Token());
        Assert.Equal((ConnectionState.Connected, HeraldTransport.WebSocket), (alice.State, alice.ServerInfo.Transport));
    }

    [Fact]
    public async Task A_refresh_to_fewer_rights_ends_the_subscription_it_no_longer_allows_and_says_why()
    {
        int asked = 0;
        await using var dave = new HeraldClient(fixture.Broker.TcpUrl, new HeraldClientOptions
        {
            CredentialProvider = _ => ValueTask.FromResult<string?>(Interlocked.Increment(ref asked) == 1 ? AuthBroker.DaveFull : AuthBroker.DaveLess),
        });
        var reported = new TaskCompletionSource<HeraldException>(TaskCreationOptions.RunContinuationsAsynchronously);
        dave.Error += (_, e) => reported.TrySetResult(e.Exception);
        string kept = "kept." + Guid.NewGuid().ToString("N");
        string revoked = "revoked." + Guid.NewGuid().ToString("N");
        await using HeraldSubscription keptSubscription = await dave.SubscribeAsync(kept);
        await using HeraldSubscription revokedSubscription = await dave.SubscribeAsync(revoked);

        await dave.RefreshCredentialAsync(Wait.Token());

        // The broker told the client which subscription ended (before the refresh completed): it ends with PermissionDenied.
        Assert.False(revokedSubscription.IsActive);
        var ended = await Assert.ThrowsAsync<HeraldException>(async () => await revokedSubscription.ReadAsync(Wait.Token()));
        Assert.Equal((ErrorCode.PermissionDenied, revokedSubscription.Sid), (ended.ErrorCode, ended.Sid));
        Assert.Equal(revokedSubscription.Sid, (await reported.Task.WaitAsync(Wait.Limit)).Sid);
        await dave.PublishAsync(kept, "still delivered");
        Assert.Equal("still delivered", (await keptSubscription.ReadAsync(Wait.Token())).GetString());
        Assert.True(keptSubscription.IsActive);
    }
}

/// <summary>TLS on the TCP port (<c>tls://</c>) and on HTTP (<c>https://</c>, <c>wss://</c>), with a self-signed certificate the client is told to trust.</summary>
public sealed class TlsTests : IAsyncLifetime
{
    private readonly string _pfx = Path.Combine(Path.GetTempPath(), $"herald-client-test-{Guid.NewGuid():N}.pfx");
    private string _thumbprint = "";
    private TestBroker _broker = null!;

    public async Task InitializeAsync()
    {
        using X509Certificate2 certificate = TestCertificates.SelfSigned();
        await File.WriteAllBytesAsync(_pfx, certificate.Export(X509ContentType.Pfx, "test"));
        _thumbprint = certificate.GetCertHashString();
        _broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Tls.CertificatePath = _pfx;
            o.Security.Tls.Password = "test";
            o.Security.Tls.TcpPorts = "all";
            o.Security.Tls.Http = true;
        });
    }

    public async Task DisposeAsync()
    {
        await _broker.DisposeAsync();
        File.Delete(_pfx);
    }

    [Fact]
    public async Task Tls_and_https_clients_publish_to_each_other_when_the_certificate_is_trusted()
    {
        var options = new HeraldClientOptions { ServerCertificateValidation = (_, certificate, _, _) => certificate?.GetCertHashString() == _thumbprint };
        await using var tcp = new HeraldClient($"tls://localhost:{_broker.TcpPort}", options);
        await using var https = new HeraldClient($"https://localhost:{_broker.HttpPort}", options);
        await using HeraldSubscription subscription = await https.SubscribeAsync("secure.>");

        await tcp.PublishAsync("secure.channel", "over TLS");

        Assert.Equal("over TLS", (await subscription.ReadAsync(Wait.Token())).GetString());
        Assert.Equal($"tls://localhost:{_broker.TcpPort}", tcp.Url);
    }

#if HERALD_CLIENT_NETSTANDARD
    [Fact]
    public void A_wss_client_with_a_trust_option_is_refused_at_construction_by_the_netstandard_build()
    {
        var options = new HeraldClientOptions { ServerCertificateValidation = (_, certificate, _, _) => certificate?.GetCertHashString() == _thumbprint };

        var e = Assert.Throws<PlatformNotSupportedException>(() => new HeraldClient($"wss://localhost:{_broker.HttpPort}", options));

        Assert.Contains("Use tls://", e.Message, StringComparison.Ordinal);
    }
#else
    [Fact]
    public async Task A_wss_client_with_the_same_trust_option_reaches_the_brokers_https_port()
    {
        var options = new HeraldClientOptions { ServerCertificateValidation = (_, certificate, _, _) => certificate?.GetCertHashString() == _thumbprint };
        await using var wss = new HeraldClient($"wss://localhost:{_broker.HttpPort}", options);
        await using var tcp = new HeraldClient($"tls://localhost:{_broker.TcpPort}", options);
        await using HeraldSubscription subscription = await wss.SubscribeAsync("secure.>");

        await tcp.PublishAsync("secure.ws", "over wss");

        Assert.Equal("over wss", (await subscription.ReadAsync(Wait.Token())).GetString());
        Assert.Equal($"wss://localhost:{_broker.HttpPort}/ws", wss.Url);
        Assert.Equal((HeraldTransport.WebSocket, _broker.HttpPort), (wss.ServerInfo!.Transport, wss.ServerInfo.Port));
    }
#endif

    [Theory]
    [InlineData("tls")]
    [InlineData("https")]
    [InlineData("wss")]
    public async Task An_untrusted_certificate_fails_the_connection(string scheme)
    {
        int port = scheme == "tls" ? _broker.TcpPort : _broker.HttpPort;
        await using var client = new HeraldClient($"{scheme}://localhost:{port}");

        var e = await Assert.ThrowsAsync<HeraldConnectionException>(() => client.ConnectAsync(Wait.Token()));

        // The certificate is why, not something else on the way (a refused port, a refused upgrade).
        Exception? cause = e;
        while (cause is not null and not System.Security.Authentication.AuthenticationException)
        {
            cause = cause.InnerException;
        }

        Assert.NotNull(cause);
    }
}
