using System.Net;
using Herald.Broker.Tests.Infrastructure;
using Xunit;

namespace Herald.Broker.Tests.ServerApi;

/// <summary>
/// Who reaches the server API, over real HTTP: its own listener only, a configured key on every request (401 with an
/// empty body otherwise, whatever the path), the key's scope (403), the per-key rate limit (429 with Retry-After) that
/// leaves another key's requests alone, and no API at all without keys.
/// </summary>
public sealed class ServerApiAccessTests
{
    [Fact]
    public async Task A_missing_or_wrong_key_is_told_401_and_nothing_more_on_any_path()
    {
        await using TestBroker broker = await TestBroker.StartAsync(TestApiKeys.Configure);
        foreach ((string path, string? key) in new[] { ("/api/v1/info", null), ("/api/v1/info", "wrong"), ("/api/v1/info", TestApiKeys.Admin + "x"), ("/api/v1/nothing-here", null), ("/poll/sessions", "wrong") })
        {
            using HttpResponseMessage response = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, path, key));
            Assert.Equal(HttpStatusCode.Unauthorized, response.StatusCode);
            Assert.Empty(await response.Content.ReadAsByteArrayAsync());
        }
    }

    [Fact]
    public async Task The_api_is_on_its_listener_only_and_its_listener_serves_nothing_else()
    {
        await using TestBroker broker = await TestBroker.StartAsync(TestApiKeys.Configure);
        Assert.NotEqual(0, broker.ApiPort);
        using HttpResponseMessage info = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/info", TestApiKeys.Admin));
        Assert.Equal(HttpStatusCode.OK, info.StatusCode);
        Assert.False(info.Headers.Contains("Access-Control-Allow-Origin"));

        using HttpResponseMessage onHttpPort = await broker.Http.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/info", TestApiKeys.Admin));
        Assert.Equal(HttpStatusCode.NotFound, onHttpPort.StatusCode);
        using HttpResponseMessage onMonitoring = await broker.Monitoring.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/info", TestApiKeys.Admin));
        Assert.Equal(HttpStatusCode.NotFound, onMonitoring.StatusCode);
        using HttpResponseMessage longPollOnApi = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Post, "/poll/publish?topic=a", TestApiKeys.Admin, new StringContent("x")));
        Assert.Equal(HttpStatusCode.NotFound, longPollOnApi.StatusCode);
        using HttpResponseMessage varzOnApi = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/varz", TestApiKeys.Admin));
        Assert.Equal(HttpStatusCode.NotFound, varzOnApi.StatusCode);
    }

    [Fact]
    public async Task Without_keys_there_is_no_api_listener()
    {
        await using TestBroker broker = await TestBroker.StartAsync();
        Assert.Equal(0, broker.ApiPort);
        using HttpResponseMessage onHttpPort = await broker.Http.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/info", TestApiKeys.Admin));
        Assert.Equal(HttpStatusCode.NotFound, onHttpPort.StatusCode);
    }

    [Fact]
    public async Task A_key_without_the_scope_is_refused_403()
    {
        await using TestBroker broker = await TestBroker.StartAsync(TestApiKeys.Configure);
        using HttpResponseMessage asPublisher = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/info", TestApiKeys.Publisher));
        Assert.Equal(HttpStatusCode.Forbidden, asPublisher.StatusCode);
        Assert.Contains("'read'", await asPublisher.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        using HttpResponseMessage asReader = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/info", TestApiKeys.Reader));
        Assert.Equal(HttpStatusCode.OK, asReader.StatusCode);
    }

    [Fact]
    public async Task A_key_over_its_rate_is_answered_429_while_another_key_carries_on()
    {
        await using TestBroker broker = await TestBroker.StartAsync(options =>
        {
            TestApiKeys.Configure(options);
            options.Api.Keys[2].RequestsPerSecond = 1; // the reader: one a second, a burst of 3
            options.Api.RequestBurst = 3;
        });
        HttpStatusCode[] statuses = new HttpStatusCode[12];
        HttpResponseMessage? limited = null;
        for (int i = 0; i < statuses.Length; i++)
        {
            HttpResponseMessage response = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/info", TestApiKeys.Reader));
            statuses[i] = response.StatusCode;
            if (response.StatusCode == HttpStatusCode.TooManyRequests)
            {
                limited ??= response;
            }
        }

        // The reader's bucket is empty; another key's (the same burst) is its own.
        for (int i = 0; i < 2; i++)
        {
            using HttpResponseMessage bystander = await broker.Api.SendAsync(TestApiKeys.Request(HttpMethod.Get, "/api/v1/info", TestApiKeys.Admin));
            Assert.Equal(HttpStatusCode.OK, bystander.StatusCode);
        }

        Assert.NotNull(limited);
        Assert.True(int.Parse(limited.Headers.GetValues("Retry-After").Single(), System.Globalization.CultureInfo.InvariantCulture) >= 1);
        Assert.Contains("RateLimited", await limited.Content.ReadAsStringAsync(), StringComparison.Ordinal);
        Assert.Equal(HttpStatusCode.OK, statuses[0]);
    }
}
