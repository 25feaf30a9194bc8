using System.Security.Cryptography;
using System.Text;

namespace Herald.Broker.Api;

/// <summary>What an API key may do. <see cref="Admin"/> holds the other two.</summary>
[Flags]
internal enum ApiScope
{
    None = 0,

    /// <summary>Publish, broadcast, batch.</summary>
    Publish = 1,

    /// <summary>History, presence, topics, node info.</summary>
    Read = 2,

    /// <summary>Everything: the two above and acting on clients (disconnect, revoke, subscribe).</summary>
    Admin = 4 | Publish | Read,
}

/// <summary>A configured API key, as the requests it authenticates carry it: its name and scope, never the key.</summary>
internal sealed class ApiKey(string name, ApiScope scope, int? requestsPerSecond, byte[] hash)
{
    /// <summary>The name logs and rate-limit partitions use.</summary>
    public string Name { get; } = name;

    public ApiScope Scope { get; } = scope;

    public int? RequestsPerSecond { get; } = requestsPerSecond;

    /// <summary>SHA-256 of the key.</summary>
    public byte[] Hash { get; } = hash;

    /// <summary>Whether this key holds every scope of <paramref name="needed"/>.</summary>
    public bool Allows(ApiScope needed) => (Scope & needed) == needed;
}

/// <summary>
/// The configured API keys (<c>Herald:Api:Keys</c>), kept as SHA-256 hashes only. A presented key is hashed once and
/// compared with every configured hash in constant time (<see cref="CryptographicOperations.FixedTimeEquals"/>), all of
/// them every time, so neither which key nor how much of one matched shows in the answer's timing. Keys are random
/// secrets of at least 128 bits (the CLI makes 256), so a fast unsalted hash is enough: there is nothing to guess a
/// dictionary word from, and a slow password hash would make every request pay for it.
/// </summary>
internal sealed class ApiKeys
{
    private readonly ApiKey[] _keys;

    public ApiKeys(ApiOptions options)
    {
        _keys = [.. options.Keys.Select(k => new ApiKey(k.Name, ParseScope(k.Scope, out _), k.RequestsPerSecond, Convert.FromHexString(k.Hash)))];
    }

    /// <summary>The key <paramref name="presented"/> is, or null.</summary>
    public ApiKey? Find(ReadOnlySpan<char> presented)
    {
        if (presented.IsEmpty || presented.Length > MaxKeyChars)
        {
            return null;
        }

        Span<byte> utf8 = stackalloc byte[Encoding.UTF8.GetMaxByteCount(MaxKeyChars)];
        int length = Encoding.UTF8.GetBytes(presented, utf8);
        Span<byte> hash = stackalloc byte[SHA256.HashSizeInBytes];
        SHA256.HashData(utf8[..length], hash);
        ApiKey? found = null;
        foreach (ApiKey key in _keys)
        {
            if (CryptographicOperations.FixedTimeEquals(hash, key.Hash))
            {
                found = key; // no early exit: every key is compared
            }
        }

        return found;
    }

    /// <summary>The longest key looked at; longer is refused without hashing.</summary>
    public const int MaxKeyChars = 256;

    /// <summary>The SHA-256 of a key, as <c>Herald:Api:Keys:N:Hash</c> takes it (lower-case hex).</summary>
    public static string HashOf(string key) => Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(key)));

    /// <summary>A scope as configured: <c>publish</c>, <c>read</c>, <c>admin</c>, or several joined by commas; <paramref name="error"/> names a word that is none of them.</summary>
    public static ApiScope ParseScope(string? text, out string? error)
    {
        error = null;
        ApiScope scope = ApiScope.None;
        foreach (string word in (text ?? "").Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries))
        {
            ApiScope one = word.ToLowerInvariant() switch
            {
                "publish" => ApiScope.Publish,
                "read" => ApiScope.Read,
                "admin" => ApiScope.Admin,
                _ => ApiScope.None,
            };
            if (one == ApiScope.None)
            {
                error = $"'{word}' is not a scope (publish, read, admin)";
                return ApiScope.None;
            }

            scope |= one;
        }

        if (scope == ApiScope.None)
        {
            error = "no scope given (publish, read, admin)";
        }

        return scope;
    }
}
