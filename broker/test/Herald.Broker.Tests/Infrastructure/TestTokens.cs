using System.Security.Cryptography;
using System.Text;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>Static tokens for <c>Auth:Mode=Token</c> brokers in tests.</summary>
public static class TestTokens
{
    /// <summary>What <c>Herald:Security:Auth:Tokens</c> stores of a token: the hex of its SHA-256.</summary>
    public static string Sha256(string token) => Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(token)));
}
