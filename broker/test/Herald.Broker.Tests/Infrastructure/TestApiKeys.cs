using System.Net.Http.Headers;
using Herald.Broker.Api;
using Herald.Broker.Hosting;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>The server API keys the tests configure: one per scope, each with its hash in the broker's options.</summary>
public static class TestApiKeys
{
    public const string Admin = "test-admin-key-0123456789abcdef0123456789abcdef";
    public const string Publisher = "test-publish-key-0123456789abcdef0123456789abcdef";
    public const string Reader = "test-read-key-0123456789abcdef0123456789abcdef";

    /// <summary>Configures the three keys (names <c>admin</c>, <c>publisher</c>, <c>reader</c>) on an ephemeral API port.</summary>
    public static void Configure(HeraldOptions options)
    {
        options.Api.Keys =
        [
            new ApiKeyOptions { Name = "admin", Hash = ApiKeys.HashOf(Admin), Scope = "admin" },
            new ApiKeyOptions { Name = "publisher", Hash = ApiKeys.HashOf(Publisher), Scope = "publish" },
            new ApiKeyOptions { Name = "reader", Hash = ApiKeys.HashOf(Reader), Scope = "read" },
        ];
    }

    /// <summary>A request to the broker's API listener carrying <paramref name="key"/> (none when null).</summary>
    public static HttpRequestMessage Request(HttpMethod method, string path, string? key, HttpContent? content = null)
    {
        var request = new HttpRequestMessage(method, path) { Content = content };
        if (key is not null)
        {
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", key);
        }

        return request;
    }
}
