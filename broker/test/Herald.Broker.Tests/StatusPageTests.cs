using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;
using System.Text.RegularExpressions;
using Herald.Broker.Monitoring;
using Herald.Broker.Telemetry;
using Herald.Broker.Tests.Infrastructure;
using Herald.Broker.Transports.LongPoll;
using Herald.Protocol;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// The live status page (<c>/</c> on the monitoring listener) and its data (<c>/statusz</c>), against the real
/// broker over real sockets and HTTP: what is served and with which headers, who may read it (the token as
/// a bearer or as the login cookie), that its numbers are this broker's traffic, and what it never serves.
/// The browser side (the page drawing those numbers) is clients/typescript/test/status-page.test.ts.
/// </summary>
public sealed class StatusPageTests(ITestOutputHelper output)
{
    private const string Token = "status-page-token-0123456789";

    private static readonly string[] Assets = ["assets/status.js", "assets/status.css", "assets/favicon.svg"];

    [Fact]
    public async Task The_page_and_its_assets_are_served_with_their_types_and_a_csp_that_allows_nothing_external_or_inline()
    {
        await using var broker = await TestBroker.StartAsync();
        using HttpClient http = Client(broker.MonitoringPort);

        using HttpResponseMessage page = await http.GetAsync("/");
        Assert.Equal(HttpStatusCode.OK, page.StatusCode);
        Assert.Equal("text/html", page.Content.Headers.ContentType?.MediaType);
        string csp = AssertLockedDown(page);
        Assert.Equal(
            ["base-uri 'none'", "connect-src 'self'", "default-src 'none'", "form-action 'self'", "frame-ancestors 'none'", "img-src 'self'", "script-src 'self'", "style-src 'self'"],
            csp.Split(';', StringSplitOptions.TrimEntries).Order(StringComparer.Ordinal));
        string html = await page.Content.ReadAsStringAsync();

        // Everything the page loads is one of its own assets, by a relative address: nothing from elsewhere,
        // no inline script, style or handler (the CSP would refuse them; the page must not need them).
        string[] references = [.. Regex.Matches(html, "(?:src|href|action)=\"([^\"]*)\"").Select(m => m.Groups[1].Value)];
        Assert.All(references, r => Assert.DoesNotMatch("^(?:[a-z][a-z0-9+.-]*:|//|/)", r));
        Assert.Equal(Assets.Order(StringComparer.Ordinal), references.Where(r => r.StartsWith("assets/", StringComparison.Ordinal)).Distinct().Order(StringComparer.Ordinal));
        Assert.DoesNotMatch("<script(?![^>]*\\ssrc=)", html);
        Assert.DoesNotMatch("\\sstyle=|<style|\\son[a-z]+=", html);

        foreach ((string asset, string type) in Assets.Zip(["text/javascript", "text/css", "image/svg+xml"]))
        {
            using HttpResponseMessage response = await http.GetAsync("/" + asset);
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            Assert.Equal(type, response.Content.Headers.ContentType?.MediaType);
            Assert.Equal(csp, AssertLockedDown(response));
            string body = await response.Content.ReadAsStringAsync();
            if (type != "image/svg+xml")
            {
                Assert.DoesNotContain("://", body, StringComparison.Ordinal); // no other origin named in the script or style sheet
                Assert.DoesNotContain("@import", body, StringComparison.Ordinal);
            }

            // Revalidated by its ETag: unchanged, 304 without a body.
            using var again = new HttpRequestMessage(HttpMethod.Get, "/" + asset);
            again.Headers.IfNoneMatch.Add(response.Headers.ETag!);
            using HttpResponseMessage cached = await http.SendAsync(again);
            Assert.Equal(HttpStatusCode.NotModified, cached.StatusCode);
        }

        Assert.DoesNotContain("fetch(\"http", await http.GetStringAsync("/assets/status.js"), StringComparison.Ordinal);
        using HttpResponseMessage missing = await http.GetAsync("/assets/nothing.js");
        Assert.Equal(HttpStatusCode.NotFound, missing.StatusCode);

        // Its data: compact JSON, not cached.
        using HttpResponseMessage statusz = await http.GetAsync("/statusz");
        Assert.Equal(HttpStatusCode.OK, statusz.StatusCode);
        Assert.Equal("application/json", statusz.Content.Headers.ContentType?.MediaType);
        Assert.True(statusz.Headers.CacheControl?.NoStore);
        string json = await statusz.Content.ReadAsStringAsync();
        Assert.DoesNotContain("\n", json, StringComparison.Ordinal);
        using JsonDocument document = JsonDocument.Parse(json);
        Assert.False(document.RootElement.GetProperty("token_required").GetBoolean());
        Assert.Equal(["longpoll", "sse", "tcp", "websocket"], document.RootElement.GetProperty("connections").EnumerateObject().Select(p => p.Name));
    }

    [Fact]
    public async Task With_a_token_the_page_and_its_data_need_it_as_a_bearer_or_as_the_login_cookie_and_the_token_is_never_logged()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Monitoring.Token = Token, ["--Logging:LogLevel:Default=Debug", "--Logging:LogLevel:Herald=Debug", "--Logging:LogLevel:Microsoft.AspNetCore=Debug", "--Logging:LogLevel:Microsoft.AspNetCore.Hosting.Diagnostics=Debug"]);
        using LogCapture logs = LogCapture.Attach(broker);
        using HttpClient http = Client(broker.MonitoringPort);

        // Anonymous or wrong: 401. The page answers with its login form (and no data), the data with nothing.
        foreach (string? bearer in new[] { null, Token + "x", "" })
        {
            using HttpResponseMessage page = await GetAsync(http, "/", bearer);
            using HttpResponseMessage data = await GetAsync(http, "/statusz", bearer);
            Assert.Equal(HttpStatusCode.Unauthorized, page.StatusCode);
            Assert.Equal(HttpStatusCode.Unauthorized, data.StatusCode);
            Assert.Equal("Bearer", page.Headers.WwwAuthenticate.Single().Scheme);
            string form = await page.Content.ReadAsStringAsync();
            Assert.Contains("<form", form, StringComparison.Ordinal);
            Assert.Contains("name=\"token\"", form, StringComparison.Ordinal);
            Assert.DoesNotContain("status.js", form, StringComparison.Ordinal);
            AssertLockedDown(page);
            Assert.Empty(await data.Content.ReadAsByteArrayAsync());
        }

        // The bearer, as curl sends it.
        using (HttpResponseMessage page = await GetAsync(http, "/", Token))
        using (HttpResponseMessage data = await GetAsync(http, "/statusz", Token))
        {
            Assert.Equal(HttpStatusCode.OK, page.StatusCode);
            Assert.Contains("assets/status.js", await page.Content.ReadAsStringAsync(), StringComparison.Ordinal);
            Assert.Equal(HttpStatusCode.OK, data.StatusCode);
            Assert.True((await data.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("token_required").GetBoolean());
        }

        // The static files carry no data: served without the token (the login form needs its style sheet).
        using (HttpResponseMessage css = await http.GetAsync("/assets/status.css"))
        {
            Assert.Equal(HttpStatusCode.OK, css.StatusCode);
        }

        // A wrong token at the login form: the form again, with its error, and no cookie.
        using (HttpResponseMessage wrong = await LoginAsync(http, Token + "x"))
        {
            Assert.Equal(HttpStatusCode.Unauthorized, wrong.StatusCode);
            Assert.False(wrong.Headers.Contains("Set-Cookie"));
            Assert.Contains("<p class=\"error\">", await wrong.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        }

        // The right one: back to the page with a session cookie that holds no token, scripts cannot read and other sites do not send.
        string cookie;
        using (HttpResponseMessage login = await LoginAsync(http, Token))
        {
            Assert.Equal(HttpStatusCode.SeeOther, login.StatusCode);
            Assert.Equal("./", login.Headers.Location?.OriginalString);
            string setCookie = login.Headers.GetValues("Set-Cookie").Single();
            string[] attributes = setCookie.Split(';', StringSplitOptions.TrimEntries);
            Assert.StartsWith(MonitoringLogin.CookieName(broker.MonitoringPort) + "=", attributes[0], StringComparison.Ordinal);
            Assert.Contains("httponly", attributes, StringComparer.OrdinalIgnoreCase);
            Assert.Contains("samesite=strict", attributes, StringComparer.OrdinalIgnoreCase);
            Assert.Contains("path=/", attributes, StringComparer.OrdinalIgnoreCase);
            Assert.DoesNotContain(Token, setCookie, StringComparison.Ordinal);
            cookie = attributes[0];
        }

        foreach (string path in new[] { "/", "/statusz", "/varz" })
        {
            using HttpResponseMessage withCookie = await GetAsync(http, path, bearer: null, cookie);
            Assert.Equal(HttpStatusCode.OK, withCookie.StatusCode);
        }

        // A cookie changed in any character, or of another listener's name, is no login.
        string name = cookie[..cookie.IndexOf('=', StringComparison.Ordinal)];
        string value = cookie[(name.Length + 1)..];
        string[] forged =
        [
            $"{name}={value[..^1]}{(value[^1] == 'A' ? 'B' : 'A')}",
            $"{name}={value[..^1]}B", // a last character whose unused bits are set (43 characters carry 258 bits, 256 used):
            $"{name}={value[..^1]}C", // base64url that the decoder throws on rather than refusing, never a canonical
            $"{name}={value[..^1]}D", // signature, so always a forgery
            $"{name}={long.Parse(value[..value.IndexOf('.', StringComparison.Ordinal)], System.Globalization.CultureInfo.InvariantCulture) + 3600}{value[value.IndexOf('.', StringComparison.Ordinal)..]}", // a later expiry
            $"{name}=0{value[value.IndexOf('.', StringComparison.Ordinal)..]}",
            $"{MonitoringLogin.CookieName(broker.MonitoringPort + 1)}={value}",
            $"{name}={Token}",
        ];
        foreach (string attempt in forged)
        {
            using HttpResponseMessage refused = await GetAsync(http, "/statusz", bearer: null, attempt);
            Assert.Equal(HttpStatusCode.Unauthorized, refused.StatusCode);
        }

        // The cookie is the monitoring listener's: the client port (same host, so the browser sends it there too) ignores it.
        using (HttpClient clientPort = Client(broker.HttpPort))
        using (HttpResponseMessage there = await GetAsync(clientPort, "/statusz", bearer: null, cookie))
        {
            Assert.Equal(HttpStatusCode.Unauthorized, there.StatusCode);
        }

        // Another site (or a sandboxed frame, Origin: null) cannot log a browser in.
        foreach ((string header, string claim) in new[] { ("Origin", "http://attacker.example"), ("Origin", "null"), ("Sec-Fetch-Site", "cross-site") })
        {
            using var foreign = new HttpRequestMessage(HttpMethod.Post, "/login") { Content = new FormUrlEncodedContent([new("token", Token)]) };
            foreign.Headers.Add(header, claim);
            using HttpResponseMessage response = await http.SendAsync(foreign);
            Assert.Equal(HttpStatusCode.Forbidden, response.StatusCode);
            Assert.False(response.Headers.Contains("Set-Cookie"));
        }

        // Logging out clears the cookie.
        using (var logout = new HttpRequestMessage(HttpMethod.Post, "/logout"))
        {
            logout.Headers.Add("Cookie", cookie);
            using HttpResponseMessage response = await http.SendAsync(logout);
            Assert.Equal(HttpStatusCode.SeeOther, response.StatusCode);
            Assert.Matches("^" + Regex.Escape(name) + "=;.*max-age=0", response.Headers.GetValues("Set-Cookie").Single());
        }

        // ...and ends its session on the broker: a copy of the cookie kept (or stolen) before is no login any more.
        using (HttpResponseMessage kept = await GetAsync(http, "/statusz", bearer: null, cookie))
        {
            Assert.Equal(HttpStatusCode.Unauthorized, kept.StatusCode);
        }

        Assert.Contains(logs.Lines, line => line.Contains("/login", StringComparison.Ordinal)); // the capture sees every request, its path and query
        Assert.DoesNotContain(logs.Lines, line => line.Contains(Token, StringComparison.Ordinal));
    }

    [Fact]
    public async Task Statusz_counts_this_brokers_real_traffic_connections_by_transport_rates_and_the_top_topic()
    {
        await using var broker = await TestBroker.StartAsync();
        using HttpClient http = Client(broker.MonitoringPort);
        JsonElement before = await StatuszAsync(http); // the sample the rates below are measured from
        Assert.Equal(0, before.GetProperty("totals").GetProperty("published").GetInt64());

        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, "status-subscriber");
        await using var first = await ProtocolClient.OpenAsync(broker.Port, "status-publisher-1");
        await using var second = await ProtocolClient.OpenAsync(broker.Port, "status-publisher-2");
        await using var socket = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await socket.HelloAsync("status-websocket");
        LongPollClient poller = await LongPollClient.CreateAsync(broker.Http, new { client = "status-poller" });
        await subscriber.SubscribeAsync(1, "status.>");
        await subscriber.PingPongAsync();

        for (int i = 0; i < 3; i++)
        {
            await first.PublishAsync("status.cold", "c");
        }

        for (int i = 0; i < 15; i++)
        {
            await first.PublishAsync("status.hot", "h");
            await second.PublishAsync("status.hot", "h");
        }

        await first.PingPongAsync(); // the broker routed all 33 before it answered each PING
        await second.PingPongAsync();

        // The next sample (at most every half second) covers all of them, and only them.
        JsonElement now = await EventuallyAsync(http, s => s.GetProperty("totals").GetProperty("published").GetInt64() > 0);
        JsonElement totals = now.GetProperty("totals");
        Assert.Equal(33, totals.GetProperty("published").GetInt64());
        Assert.Equal(33, totals.GetProperty("delivered").GetInt64());
        double interval = now.GetProperty("interval_seconds").GetDouble();
        Assert.Equal(33, now.GetProperty("rates").GetProperty("published").GetDouble() * interval, 0.5);

        JsonElement connections = now.GetProperty("connections");
        Assert.Equal((3, 1, 1), (connections.GetProperty("tcp").GetInt32(), connections.GetProperty("websocket").GetInt32(), connections.GetProperty("longpoll").GetInt32()));
        Assert.Equal(1, now.GetProperty("subscriptions").GetInt32());
        JsonElement polls = now.GetProperty("long_poll");
        Assert.Equal(1, polls.GetProperty("sessions").GetInt32());
        Assert.Equal("status-poller", Assert.Single(polls.GetProperty("listed").EnumerateArray()).GetProperty("name").GetString());

        JsonElement topTopics = now.GetProperty("top_topics");
        Assert.Equal(2, topTopics.GetProperty("tracked").GetInt32());
        Assert.Equal(TopicTraffic.Slots, topTopics.GetProperty("max_tracked").GetInt32());
        JsonElement[] top = [.. topTopics.GetProperty("topics").EnumerateArray()];
        Assert.Equal(["status.hot", "status.cold"], top.Select(t => t.GetProperty("topic").GetString()));
        Assert.Equal([30L, 3L], top.Select(t => t.GetProperty("published").GetInt64()));
        Assert.Equal(30, top[0].GetProperty("published_per_second").GetDouble() * interval, 0.5);
        Assert.Equal(30, top[0].GetProperty("delivered_per_second").GetDouble() * interval, 0.5);

        // Later samples: nothing more happened, so the rates fall to 0 and the ranking keeps the totals.
        JsonElement quiet = await EventuallyAsync(http, s => s.GetProperty("now").GetString() != now.GetProperty("now").GetString());
        Assert.Equal(0, quiet.GetProperty("rates").GetProperty("published").GetDouble());
        Assert.Equal("status.hot", quiet.GetProperty("top_topics").GetProperty("topics")[0].GetProperty("topic").GetString());
        Assert.Equal(0, quiet.GetProperty("top_topics").GetProperty("topics")[0].GetProperty("published_per_second").GetDouble());

        // A client that leaves is no longer counted.
        await second.DisposeAsync();
        await EventuallyAsync(http, s => s.GetProperty("connections").GetProperty("tcp").GetInt32() == 2);
    }

    [Fact]
    public async Task Statusz_never_names_a_reply_inbox_among_its_top_topics()
    {
        await using var broker = await TestBroker.StartAsync();
        using HttpClient http = Client(broker.MonitoringPort);
        await using var requester = await ProtocolClient.OpenAsync(broker.Port, "requester");
        await requester.SubscribeAsync(1, "_INBOX.requester-secret.>");
        await requester.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
        for (int i = 0; i < 20; i++)
        {
            await publisher.PublishAsync("_INBOX.requester-secret.1", "reply"); // the busiest topic by far
        }

        await publisher.PublishAsync("status.plain", "one");
        await publisher.PingPongAsync();

        JsonElement status = await EventuallyAsync(http, s => s.GetProperty("top_topics").GetProperty("topics").EnumerateArray().Any(t => t.GetProperty("topic").GetString() == "status.plain"));
        Assert.DoesNotContain("_INBOX.", status.GetRawText(), StringComparison.Ordinal);
        Assert.Equal("reply", (await requester.ReadMessageAsync()).Text); // the requester got its replies
    }

    [Fact]
    public async Task Statusz_and_varz_rank_the_ten_topics_with_the_most_members_beside_the_presence_counts_and_never_an_inbox()
    {
        await using var broker = await TestBroker.StartAsync();
        using HttpClient http = Client(broker.MonitoringPort);
        const Capabilities presence = Capabilities.Headers | Capabilities.Presence;
        await using var a = await ProtocolClient.OpenAsync(broker.Port, "a", capabilities: presence);
        await using var b = await ProtocolClient.OpenAsync(broker.Port, "b", capabilities: presence);
        await using var c = await ProtocolClient.OpenAsync(broker.Port, "c", capabilities: presence);
        await using var d = await ProtocolClient.OpenAsync(broker.Port, "d", capabilities: presence);
        (ProtocolClient Client, string[] Topics)[] joins =
        [
            (a, ["room.big", "room.mid", .. Enumerable.Range(0, 12).Select(i => $"spread.{i:D2}"), "_INBOX.secret.1"]),
            (b, ["room.big", "room.mid", "_INBOX.secret.1"]),
            (c, ["room.big", "_INBOX.secret.1"]),
            (d, ["_INBOX.secret.1"]), // the most members of all, but an inbox's name is its owner's reply address
        ];
        uint sid = 0;
        foreach ((ProtocolClient client, string[] topics) in joins)
        {
            foreach (string topic in topics)
            {
                await client.SubscribeAsync(++sid, topic, SubscribeOptions.Join);
            }

            Assert.DoesNotContain((await client.PingPongAsync()).Select(f => f.Type), t => t == FrameType.Error); // every join taken
        }

        JsonElement status = await EventuallyAsync(http, s => s.TryGetProperty("presence", out JsonElement p) && p.GetProperty("members").GetInt64() == 21);
        string[] expected = ["room.big", "room.mid", .. Enumerable.Range(0, 8).Select(i => $"spread.{i:D2}")]; // ten at most, ties by name
        using HttpResponseMessage varzResponse = await http.GetAsync("/varz");
        using JsonDocument varz = JsonDocument.Parse(await varzResponse.Content.ReadAsStringAsync());
        foreach (JsonElement counts in new[] { status.GetProperty("presence"), varz.RootElement.GetProperty("presence") })
        {
            JsonElement[] busiest = [.. counts.GetProperty("busiest").EnumerateArray()];
            output.WriteLine(string.Join(", ", busiest.Select(t => $"{t.GetProperty("topic").GetString()}={t.GetProperty("members").GetInt64()}")));
            Assert.Equal(expected, busiest.Select(t => t.GetProperty("topic").GetString()));
            Assert.Equal([3L, 2L, .. Enumerable.Repeat(1L, 8)], busiest.Select(t => t.GetProperty("members").GetInt64()));
            Assert.All(busiest, t => Assert.Equal(1, t.GetProperty("identities").GetInt64())); // authentication off: every member is ""
            Assert.Equal(21, counts.GetProperty("members").GetInt64());
            Assert.Equal(15, counts.GetProperty("topics").GetInt64());
        }

        Assert.DoesNotContain("_INBOX.", status.GetRawText(), StringComparison.Ordinal);
        Assert.DoesNotContain("secret", varz.RootElement.GetProperty("presence").GetRawText(), StringComparison.Ordinal);

        // A member that leaves is no longer counted: the ranking is made when asked.
        await a.DisposeAsync();
        JsonElement after = await EventuallyAsync(http, s => s.GetProperty("presence").GetProperty("members").GetInt64() == 6);
        Assert.Equal(["room.big", "room.mid"], after.GetProperty("presence").GetProperty("busiest").EnumerateArray().Select(t => t.GetProperty("topic").GetString()));
    }

    [Fact]
    public async Task Statusz_names_a_subscriber_that_falls_behind_and_the_compression_of_a_topic()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.LongPoll.SlowConsumerPolicy = Delivery.SlowConsumerPolicy.DropOldest;
            o.LongPoll.MaxPendingMessagesPerSession = 4;
        });
        using HttpClient http = Client(broker.MonitoringPort);

        // A long-poll session that never polls: 10 publications for a queue of 4.
        LongPollClient stalled = await LongPollClient.CreateAsync(broker.Http, new { client = "never-polls" });
        await stalled.SubscribeAsync(1, "slow.feed");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
        for (int i = 0; i < 10; i++)
        {
            await publisher.PublishAsync("slow.feed", "m");
        }

        // A Zstd subscriber of compressible payloads above the size limit.
        await using var zstd = await ProtocolClient.OpenAsync(broker.Port, "zstd", capabilities: Capabilities.Zstd);
        await zstd.SubscribeAsync(1, "zip.feed");
        await zstd.PingPongAsync();
        byte[] payload = Payloads.Simple(20_000);
        for (int i = 0; i < 5; i++)
        {
            await publisher.PublishAsync("zip.feed", payload);
        }

        await publisher.PingPongAsync();

        JsonElement status = await EventuallyAsync(http, s => s.GetProperty("slow_consumers").GetArrayLength() > 0 && s.GetProperty("compression").GetProperty("topics").GetArrayLength() > 0);
        JsonElement slow = Assert.Single(status.GetProperty("slow_consumers").EnumerateArray());
        Assert.Equal("never-polls", slow.GetProperty("name").GetString());
        Assert.Equal("longpoll", slow.GetProperty("transport").GetString());
        Assert.Equal(4, slow.GetProperty("pending_messages").GetInt64());
        Assert.Equal(6, slow.GetProperty("dropped").GetInt64());
        Assert.Equal(1.0, slow.GetProperty("fill").GetDouble());
        Assert.Equal("DropOldest", slow.GetProperty("policy").GetString());

        JsonElement compressed = Assert.Single(status.GetProperty("compression").GetProperty("topics").EnumerateArray());
        Assert.Equal("zip.feed", compressed.GetProperty("topic").GetString());
        Assert.Equal(5, compressed.GetProperty("samples").GetInt64());
        Assert.InRange(compressed.GetProperty("ratio").GetDouble(), 0.001, 0.2);
        Assert.True(compressed.GetProperty("compressing").GetBoolean());
        JsonElement overall = status.GetProperty("compression");
        Assert.True(overall.GetProperty("bytes_out").GetInt64() < overall.GetProperty("bytes_in").GetInt64() / 5);
    }

    [Fact]
    public async Task On_a_cluster_statusz_lists_every_node_this_node_knows()
    {
        await using TestCluster cluster = await TestCluster.StartAsync(nodes: 2, o => o.Cluster.HeartbeatInterval = TimeSpan.FromMilliseconds(200));
        using HttpClient http = Client(cluster[0].MonitoringPort);

        JsonElement status = await EventuallyAsync(http, s => s.GetProperty("cluster").GetProperty("nodes").GetArrayLength() == 2, TimeSpan.FromSeconds(60));
        JsonElement nodes = status.GetProperty("cluster").GetProperty("nodes");
        Assert.Equal(2, nodes.GetArrayLength());
        Assert.Single(nodes.EnumerateArray(), n => n.GetProperty("self").GetBoolean());
        Assert.Equal(status.GetProperty("cluster").GetProperty("node").GetString(), nodes.EnumerateArray().Single(n => n.GetProperty("self").GetBoolean()).GetProperty("id").GetString());
    }

    [Fact]
    public async Task The_page_is_never_served_on_the_client_port_and_no_spelling_of_its_routes_reaches_a_file()
    {
        await using var open = await TestBroker.StartAsync();
        await using var guarded = await TestBroker.StartAsync(o => o.Monitoring.Token = Token);

        // The client port: no page, no files, no login, whoever asks; /statusz only as /varz is, to the bearer when a token is set.
        foreach ((TestBroker broker, string? bearer) in new[] { (open, (string?)null), (guarded, null), (guarded, Token) })
        {
            using HttpClient clientPort = Client(broker.HttpPort);
            foreach (string path in new[] { "/", "/assets/status.js", "/assets/status.css", "/assets/favicon.svg" })
            {
                using HttpResponseMessage response = await GetAsync(clientPort, path, bearer);
                Assert.Equal(HttpStatusCode.NotFound, response.StatusCode);
            }

            using (var login = new HttpRequestMessage(HttpMethod.Post, "/login") { Content = new FormUrlEncodedContent([new("token", Token)]) })
            using (HttpResponseMessage response = await clientPort.SendAsync(login))
            {
                Assert.Equal(HttpStatusCode.NotFound, response.StatusCode);
                Assert.False(response.Headers.Contains("Set-Cookie"));
            }

            using HttpResponseMessage statusz = await GetAsync(clientPort, "/statusz", bearer);
            Assert.Equal(broker == open ? HttpStatusCode.NotFound : bearer is null ? HttpStatusCode.Unauthorized : HttpStatusCode.OK, statusz.StatusCode);
        }

        // Raw request targets, as an attacker sends them (no client-side normalisation), with and without the token.
        string[] targets =
        [
            "/..%2f..%2fappsettings.json",
            "/%2e%2e/",
            "/%2e%2e/appsettings.json",
            "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
            "/%2E%2E/Herald.Broker.dll",
            "/assets/..%2f..%2fappsettings.json",
            "/assets/..%2fHerald.Broker.dll",
            "/assets/%2e%2e/%2e%2e/appsettings.json",
            "/assets/../appsettings.json",
            "/assets/..\\appsettings.json",
            "/assets/%5c..%5cappsettings.json",
            "/assets/status.js/..",
            "/assets/./status.js",
            "/assets/status%2ejs",
            "/assets/STATUS.JS",
            "/assets/status.js%00",
            "/assets/index.html",
            "/assets/login.html",
            "/assets/",
            "//assets/status.js",
            "/./",
            "/index.html",
            "/appsettings.json",
            "/Herald.Broker.dll",
            "/Monitoring/StatusPage/status.js",
        ];
        foreach (TestBroker broker in new[] { open, guarded })
        {
            foreach (string target in targets)
            {
                foreach (string? bearer in new[] { null, Token })
                {
                    (int status, string body) = await RawGetAsync(broker.MonitoringPort, target, bearer);
                    Assert.True(status is 400 or 404, $"GET {target} answered {status}");
                    Assert.DoesNotContain("Herald", body, StringComparison.Ordinal);
                    Assert.DoesNotContain("root:", body, StringComparison.Ordinal);
                }
            }

            // The plain spellings still work (the refusals above are not a broken route).
            (int ok, _) = await RawGetAsync(broker.MonitoringPort, "/assets/status.js", null);
            Assert.Equal(200, ok);
        }
    }

    /// <summary>Checks the headers every page answer carries and returns its CSP.</summary>
    private static string AssertLockedDown(HttpResponseMessage response)
    {
        string csp = response.Headers.GetValues("Content-Security-Policy").Single();
        Assert.DoesNotContain("unsafe", csp, StringComparison.Ordinal);
        Assert.DoesNotContain("http", csp, StringComparison.Ordinal);
        Assert.DoesNotContain("*", csp, StringComparison.Ordinal);
        Assert.Equal("nosniff", response.Headers.GetValues("X-Content-Type-Options").Single());
        Assert.Equal("DENY", response.Headers.GetValues("X-Frame-Options").Single());
        Assert.Equal("same-origin", response.Headers.GetValues("Referrer-Policy").Single());
        Assert.False(response.Headers.Contains("Access-Control-Allow-Origin"));
        return csp;
    }

    /// <summary>A client of its own: no cookie jar (the test sets Cookie itself), no redirects followed.</summary>
    private static HttpClient Client(int port) => new(new SocketsHttpHandler { UseCookies = false, AllowAutoRedirect = false })
    {
        BaseAddress = new Uri($"http://127.0.0.1:{port}"),
        Timeout = TimeSpan.FromSeconds(60),
    };

    private static Task<HttpResponseMessage> GetAsync(HttpClient http, string path, string? bearer, string? cookie = null)
    {
        var request = new HttpRequestMessage(HttpMethod.Get, path);
        if (bearer is not null)
        {
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", bearer);
        }

        if (cookie is not null)
        {
            request.Headers.Add("Cookie", cookie);
        }

        return http.SendAsync(request);
    }

    /// <summary>The login form's POST, as a browser on the page sends it (its own origin).</summary>
    private static Task<HttpResponseMessage> LoginAsync(HttpClient http, string token)
    {
        var request = new HttpRequestMessage(HttpMethod.Post, "/login") { Content = new FormUrlEncodedContent([new("token", token)]) };
        request.Headers.Add("Origin", http.BaseAddress!.GetLeftPart(UriPartial.Authority));
        return http.SendAsync(request);
    }

    private static async Task<JsonElement> StatuszAsync(HttpClient http)
    {
        using HttpResponseMessage response = await http.GetAsync("/statusz");
        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        return await response.Content.ReadFromJsonAsync<JsonElement>();
    }

    /// <summary>Polls <c>/statusz</c> until <paramref name="condition"/> holds; the deadline only turns a hang into a failure.</summary>
    private static Task<JsonElement> EventuallyAsync(HttpClient http, Func<JsonElement, bool> condition, TimeSpan? within = null) =>
        Until.Value(() => StatuszAsync(http), condition, "/statusz meets the condition", within);

    /// <summary>One HTTP/1.1 GET with the request target exactly as given: status code and body.</summary>
    private static async Task<(int Status, string Body)> RawGetAsync(int port, string target, string? bearer)
    {
        using var client = new TcpClient();
        await client.ConnectAsync(IPAddress.Loopback, port);
        await using NetworkStream stream = client.GetStream();
        string request = $"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n" + (bearer is null ? "" : $"Authorization: Bearer {bearer}\r\n") + "\r\n";
        await stream.WriteAsync(Encoding.ASCII.GetBytes(request));
        using var reader = new StreamReader(stream, Encoding.UTF8);
        string response = await reader.ReadToEndAsync().WaitAsync(TimeSpan.FromSeconds(30));
        Match status = Regex.Match(response, "^HTTP/1\\.1 (\\d{3})");
        Assert.True(status.Success, $"GET {target}: not an HTTP answer: {response}");
        int bodyStart = response.IndexOf("\r\n\r\n", StringComparison.Ordinal);
        return (int.Parse(status.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture), bodyStart < 0 ? "" : response[(bodyStart + 4)..]);
    }
}
