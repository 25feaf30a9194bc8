using System.Net.Http.Headers;
using System.Security.Cryptography;
using System.Text;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>Static tokens for <c>Auth:Mode=Token</c> brokers in tests.</summary>
public static class TestTokens
{
    /// <summary>What <c>Herald:Security:Auth:Tokens</c> stores of a token: the hex of its SHA-256.</summary>
    public static string Sha256(string token) => Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(token)));

    /// <summary>An HTTP client of <paramref name="broker"/>'s HTTP port that sends <paramref name="token"/> as its bearer on every request (long-poll session requests need their owner's).</summary>
    public static HttpClient HttpClientFor(TestBroker broker, string token)
    {
        var http = new HttpClient { BaseAddress = broker.Http.BaseAddress };
        http.DefaultRequestHeaders.Authorization = new AuthenticationHeaderValue("Bearer", token);
        return http;
    }
}
