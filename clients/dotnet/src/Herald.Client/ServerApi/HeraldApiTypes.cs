namespace Herald.Client;

/// <summary>One publication for <see cref="HeraldApiClient.BatchAsync"/>.</summary>
public sealed class HeraldApiPublication(string topic, ReadOnlyMemory<byte> payload)
{
    public string Topic { get; } = topic ?? throw new ArgumentNullException(nameof(topic));

    public ReadOnlyMemory<byte> Payload { get; } = payload;

    /// <summary>Headers, one value per key; none under <c>Herald-</c>.</summary>
    public IReadOnlyDictionary<string, string>? Headers { get; set; }

    /// <summary>A repeat on the same topic within the broker's idempotency window is not delivered again.</summary>
    public string? IdempotencyKey { get; set; }
}

/// <summary>One item's answer in a batch or broadcast: 200, or the status the item alone would have had, with the problem's code and detail.</summary>
public sealed class HeraldApiResult(int status, bool duplicate, string? code, string? detail)
{
    public int Status { get; } = status;

    public bool Duplicate { get; } = duplicate;

    public string? Code { get; } = code;

    public string? Detail { get; } = detail;

    public bool Succeeded => Status == 200;
}

/// <summary>A page of a topic's history: its epoch, last offset, the entries, and the offset to read after next (null: none).</summary>
public sealed class HeraldApiHistoryPage(string epoch, ulong last, IReadOnlyList<HeraldApiHistoryEntry> entries, ulong? next)
{
    public string Epoch { get; } = epoch;

    public ulong Last { get; } = last;

    public IReadOnlyList<HeraldApiHistoryEntry> Entries { get; } = entries;

    public ulong? Next { get; } = next;
}

/// <summary>A kept message: its offset, payload and headers (the broker's position headers included).</summary>
public sealed class HeraldApiHistoryEntry(ulong offset, byte[] payload, IReadOnlyDictionary<string, IReadOnlyList<string>> headers)
{
    public ulong Offset { get; } = offset;

    public byte[] Payload { get; } = payload;

    public IReadOnlyDictionary<string, IReadOnlyList<string>> Headers { get; } = headers;
}

/// <summary>A topic's occupancy and a page of its members, and the cursor of the next page (null: none).</summary>
public sealed class HeraldApiPresencePage(long members, long identities, IReadOnlyList<HeraldApiMember> entries, string? next)
{
    public long Members { get; } = members;

    public long Identities { get; } = identities;

    public IReadOnlyList<HeraldApiMember> Entries { get; } = entries;

    public string? Next { get; } = next;
}

/// <summary>A member of a topic: its client id, identity and the info it joined with.</summary>
public sealed class HeraldApiMember(string client, string identity, string? info)
{
    public string Client { get; } = client;

    public string Identity { get; } = identity;

    public string? Info { get; } = info;
}

/// <summary>
/// A page of subscribed patterns (every node's, subscribers added up), where the next starts (null: none), and the cluster
/// nodes that did not answer in time (their subscriptions not counted; empty on a single node).
/// </summary>
public sealed class HeraldApiTopicsPage(IReadOnlyList<HeraldApiTopic> topics, string? next, IReadOnlyList<string>? silent = null)
{
    public IReadOnlyList<HeraldApiTopic> Topics { get; } = topics;

    public string? Next { get; } = next;

    public IReadOnlyList<string> Silent { get; } = silent ?? [];
}

/// <summary>A subscribed pattern and its subscribers, added up over the nodes that answered.</summary>
public sealed class HeraldApiTopic(string pattern, int subscribers)
{
    public string Pattern { get; } = pattern;

    public int Subscribers { get; } = subscribers;
}

/// <summary>The server API refused a request: its HTTP status, the problem's <see cref="Code"/> (<c>Unauthorized</c>, <c>Forbidden</c>, <c>RateLimited</c> ...), and when to try again.</summary>
public sealed class HeraldApiException(int status, string code, string message) : Exception(message)
{
    public int Status { get; } = status;

    public string Code { get; } = code;

    /// <summary>The <c>Retry-After</c> of a 429 or 503.</summary>
    public TimeSpan? RetryAfter { get; init; }
}
