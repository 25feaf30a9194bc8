using System.Net;
using System.Net.Http.Headers;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;

namespace Herald.Broker.Tests;

/// <summary>
/// Issue 12.6: monitoring is not public. The operations endpoints live on their own listener; the client
/// HTTP port serves them only when configured (the probes) or to the bearer of the monitoring token, and
/// never under the client CORS policy. Each test also drives a long-poll client on the HTTP port, which
/// carries on with its CORS answers as before.
/// </summary>
public sealed class MonitoringAccessTests
{
    private const string Token = "monitoring-token-0123456789";
    private const string Origin = "http://attacker.example";

    private static readonly string[] Operations = ["/varz", "/connz", "/subsz", "/metrics", "/healthz", "/readyz"];

    [Fact]
    public async Task The_client_port_serves_no_monitoring_to_anyone_and_no_cors_for_it()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, "secret-client-name");
        await subscriber.SubscribeAsync(1, "_INBOX.secret.>");
        await subscriber.PingPongAsync();

        foreach (string path in Operations)
        {
            using HttpResponseMessage response = await SendAsync(broker.Http, HttpMethod.Get, path);
            Assert.Equal(HttpStatusCode.NotFound, response.StatusCode);
            Assert.False(response.Headers.Contains("Access-Control-Allow-Origin"), path);
            Assert.DoesNotContain("secret", await response.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        }

        // A browser's preflight for a monitoring path gets no CORS grant either.
        using (HttpResponseMessage preflight = await PreflightAsync(broker.Http, "/connz"))
        {
            Assert.False(preflight.Headers.Contains("Access-Control-Allow-Origin"));
        }

        // Naming the monitoring listener in the Host header changes nothing: the listener is the socket's.
        using (var spoofed = new HttpRequestMessage(HttpMethod.Get, "/connz"))
        {
            spoofed.Headers.Host = $"127.0.0.1:{broker.MonitoringPort}";
            using HttpResponseMessage response = await broker.Http.SendAsync(spoofed);
            Assert.Equal(HttpStatusCode.NotFound, response.StatusCode);
        }

        // The monitoring listener answers, without CORS headers, and serves no client endpoints.
        using (HttpResponseMessage connz = await SendAsync(broker.Monitoring, HttpMethod.Get, "/connz"))
        {
            Assert.Equal(HttpStatusCode.OK, connz.StatusCode);
            Assert.False(connz.Headers.Contains("Access-Control-Allow-Origin"));
            Assert.Contains("secret-client-name", await connz.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        }

        using (HttpResponseMessage create = await broker.Monitoring.PostAsync("/poll/sessions", null))
        {
            Assert.Equal(HttpStatusCode.NotFound, create.StatusCode);
        }

        using (HttpResponseMessage policy = await broker.Monitoring.GetAsync("/clientaccesspolicy.xml"))
        {
            Assert.Equal(HttpStatusCode.NotFound, policy.StatusCode);
        }

        await ClientsKeepTheirCorsAsync(broker);
    }

    [Fact]
    public async Task With_a_token_the_client_port_serves_monitoring_to_its_bearer_only_and_without_cors()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Monitoring.Token = Token);

        foreach (string path in new[] { "/varz", "/connz", "/subsz", "/metrics" })
        {
            foreach (HttpClient listener in new[] { broker.Http, broker.Monitoring })
            {
                using HttpResponseMessage anonymous = await SendAsync(listener, HttpMethod.Get, path);
                using HttpResponseMessage wrong = await SendAsync(listener, HttpMethod.Get, path, Token + "x");
                using HttpResponseMessage bearer = await SendAsync(listener, HttpMethod.Get, path, Token);

                Assert.Equal(HttpStatusCode.Unauthorized, anonymous.StatusCode);
                Assert.Equal("Bearer", anonymous.Headers.WwwAuthenticate.Single().Scheme);
                Assert.Equal(HttpStatusCode.Unauthorized, wrong.StatusCode);
                Assert.Equal(HttpStatusCode.OK, bearer.StatusCode);
                Assert.False(bearer.Headers.Contains("Access-Control-Allow-Origin"), path);
            }
        }

        // The probes need no token on the monitoring listener (kubelets send none), and stay off the client port.
        using (HttpResponseMessage ready = await broker.Monitoring.GetAsync("/readyz"))
        using (HttpResponseMessage onClientPort = await broker.Http.GetAsync("/readyz"))
        {
            Assert.Equal(HttpStatusCode.OK, ready.StatusCode);
            Assert.Equal(HttpStatusCode.NotFound, onClientPort.StatusCode);
        }

        await ClientsKeepTheirCorsAsync(broker);
    }

    [Fact]
    public async Task Probes_answer_on_the_client_port_when_asked_and_the_monitoring_listener_can_be_off()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Monitoring.Port = -1;
            o.Monitoring.ProbesOnHttpPort = true;
        });

        Assert.Equal(0, broker.MonitoringPort);
        using (HttpResponseMessage ready = await SendAsync(broker.Http, HttpMethod.Get, "/readyz"))
        {
            Assert.Equal(HttpStatusCode.OK, ready.StatusCode);
            Assert.False(ready.Headers.Contains("Access-Control-Allow-Origin"));
            using JsonDocument body = JsonDocument.Parse(await ready.Content.ReadAsStringAsync());
            Assert.Equal("ready", body.RootElement.GetProperty("status").GetString());
        }

        foreach (string path in new[] { "/varz", "/connz", "/subsz", "/metrics" })
        {
            using HttpResponseMessage response = await broker.Http.GetAsync(path);
            Assert.Equal(HttpStatusCode.NotFound, response.StatusCode);
        }

        await ClientsKeepTheirCorsAsync(broker);
    }

    /// <summary>The bystander: a browser client's long-poll session on the HTTP port still gets its CORS answers.</summary>
    [Fact]
    public async Task The_monitoring_listener_answers_only_its_own_names_so_a_rebinding_page_reads_nothing()
    {
        await using var open = await TestBroker.StartAsync(o => o.Monitoring.AllowedHosts = ["mon.internal"]);
        await using var guarded = await TestBroker.StartAsync(o => o.Monitoring.Token = Token);
        await using var subscriber = await ProtocolClient.OpenAsync(open.Port, "secret-client-name");
        await subscriber.PingPongAsync();

        // A DNS-rebinding page names its own domain: refused (421) on every data and page route, whatever the port.
        foreach (string path in new[] { "/connz", "/varz", "/subsz", "/statusz", "/metrics", "/" })
        {
            foreach (string host in new[] { $"evil.example:{open.MonitoringPort}", "evil.example", "localhost.evil.example" })
            {
                using HttpResponseMessage refused = await GetWithHostAsync(open.Monitoring, path, host);
                Assert.Equal(HttpStatusCode.MisdirectedRequest, refused.StatusCode);
                Assert.DoesNotContain("secret", await refused.Content.ReadAsStringAsync(), StringComparison.Ordinal);
            }
        }

        // Its own names: loopback names, IP addresses, the configured ones (any case).
        foreach (string host in new[] { $"localhost:{open.MonitoringPort}", $"127.0.0.1:{open.MonitoringPort}", $"[::1]:{open.MonitoringPort}", "MON.internal" })
        {
            using HttpResponseMessage connz = await GetWithHostAsync(open.Monitoring, "/connz", host);
            Assert.Equal(HttpStatusCode.OK, connz.StatusCode);
            Assert.Contains("secret-client-name", await connz.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        }

        // The probes answer any name (a kubelet names the pod's address, a HEALTHCHECK what it likes).
        using (HttpResponseMessage healthz = await GetWithHostAsync(open.Monitoring, "/healthz", "evil.example"))
        {
            Assert.Equal(HttpStatusCode.OK, healthz.StatusCode);
        }

        // With a token, its bearer may name the listener as it likes (a rebinding page cannot carry it); without it, 421.
        using (var bearer = new HttpRequestMessage(HttpMethod.Get, "/varz"))
        {
            bearer.Headers.Host = "herald-1";
            bearer.Headers.Authorization = new AuthenticationHeaderValue("Bearer", Token);
            using HttpResponseMessage varz = await guarded.Monitoring.SendAsync(bearer);
            Assert.Equal(HttpStatusCode.OK, varz.StatusCode);
        }

        using (HttpResponseMessage refused = await GetWithHostAsync(guarded.Monitoring, "/varz", "herald-1"))
        {
            Assert.Equal(HttpStatusCode.MisdirectedRequest, refused.StatusCode);
        }

        await subscriber.PingPongAsync(); // the client carries on
        await ClientsKeepTheirCorsAsync(open);
    }

    [Fact]
    public async Task A_wrong_monitoring_token_delays_that_sources_next_try_and_no_other_source()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Monitoring.Token = Token;
            o.Monitoring.FailureDelay = TimeSpan.FromMinutes(10); // longer than the test: a try that waits is still waiting at the end
        });
        using HttpClient guesser = ClientFrom(broker.MonitoringPort, IPAddress.Parse("127.0.0.1"));
        using HttpClient other = ClientFrom(broker.MonitoringPort, IPAddress.Parse("127.0.0.2"));

        using (HttpResponseMessage first = await SendAsync(guesser, HttpMethod.Get, "/varz", Token + "x"))
        {
            Assert.Equal(HttpStatusCode.Unauthorized, first.StatusCode); // its first guess is answered at once
        }

        // Its next try waits its turn, even with the right token; the status page's login form too.
        using var pending = new CancellationTokenSource();
        Task<HttpResponseMessage> second = guesser.SendAsync(Bearer(HttpMethod.Get, "/varz", Token), pending.Token);
        using var login = new HttpRequestMessage(HttpMethod.Post, "/login") { Content = new FormUrlEncodedContent([new("token", Token + "y")]) };
        login.Headers.Add("Origin", $"http://127.0.0.1:{broker.MonitoringPort}");
        Task<HttpResponseMessage> guess = guesser.SendAsync(login, pending.Token);

        // Another address is answered at once meanwhile, right and then wrong.
        using (HttpResponseMessage right = await SendAsync(other, HttpMethod.Get, "/varz", Token))
        {
            Assert.Equal(HttpStatusCode.OK, right.StatusCode);
        }

        using (HttpResponseMessage wrong = await SendAsync(other, HttpMethod.Get, "/connz", Token + "z"))
        {
            Assert.Equal(HttpStatusCode.Unauthorized, wrong.StatusCode);
        }

        Assert.False(second.IsCompleted, "the guesser's second try was answered without waiting its turn");
        Assert.False(guess.IsCompleted, "the guesser's login try was answered without waiting its turn");
        await pending.CancelAsync();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => second);
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => guess);
    }

    private static HttpRequestMessage Bearer(HttpMethod method, string path, string token)
    {
        var request = new HttpRequestMessage(method, path);
        request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", token);
        return request;
    }

    /// <summary>A client whose connections come from <paramref name="local"/> (any 127.x.y.z on Linux loopback): another source address for the broker.</summary>
    private static HttpClient ClientFrom(int port, IPAddress local) => new(new SocketsHttpHandler
    {
        UseCookies = false,
        ConnectCallback = async (context, cancellationToken) =>
        {
            var socket = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.InterNetwork, System.Net.Sockets.SocketType.Stream, System.Net.Sockets.ProtocolType.Tcp);
            socket.Bind(new IPEndPoint(local, 0));
            await socket.ConnectAsync(new IPEndPoint(IPAddress.Loopback, context.DnsEndPoint.Port), cancellationToken);
            return new System.Net.Sockets.NetworkStream(socket, ownsSocket: true);
        },
    })
    {
        BaseAddress = new Uri($"http://127.0.0.1:{port}"),
        Timeout = Timeout.InfiniteTimeSpan,
    };

    private static Task<HttpResponseMessage> GetWithHostAsync(HttpClient http, string path, string host)
    {
        var request = new HttpRequestMessage(HttpMethod.Get, path);
        request.Headers.Host = host;
        return SendAndDisposeAsync(http, request);
    }

    private static async Task ClientsKeepTheirCorsAsync(TestBroker broker)
    {
        using (HttpResponseMessage preflight = await PreflightAsync(broker.Http, "/poll/sessions"))
        {
            Assert.True(preflight.IsSuccessStatusCode, preflight.StatusCode.ToString());
            Assert.Equal("*", preflight.Headers.GetValues("Access-Control-Allow-Origin").Single());
        }

        using HttpResponseMessage created = await SendAsync(broker.Http, HttpMethod.Post, "/poll/sessions");
        Assert.Equal(HttpStatusCode.Created, created.StatusCode);
        Assert.Equal("*", created.Headers.GetValues("Access-Control-Allow-Origin").Single());
    }

    private static Task<HttpResponseMessage> SendAsync(HttpClient http, HttpMethod method, string path, string? token = null)
    {
        var request = new HttpRequestMessage(method, path);
        request.Headers.Add("Origin", Origin);
        if (token is not null)
        {
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", token);
        }

        return SendAndDisposeAsync(http, request);
    }

    private static Task<HttpResponseMessage> PreflightAsync(HttpClient http, string path)
    {
        var request = new HttpRequestMessage(HttpMethod.Options, path);
        request.Headers.Add("Origin", Origin);
        request.Headers.Add("Access-Control-Request-Method", path.StartsWith("/poll", StringComparison.Ordinal) ? "POST" : "GET");
        request.Headers.Add("Access-Control-Request-Headers", "authorization");
        return SendAndDisposeAsync(http, request);
    }

    private static async Task<HttpResponseMessage> SendAndDisposeAsync(HttpClient http, HttpRequestMessage request)
    {
        using (request)
        {
            return await http.SendAsync(request);
        }
    }
}
