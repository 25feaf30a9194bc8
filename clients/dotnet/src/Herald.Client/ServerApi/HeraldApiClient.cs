using System.Net;
using System.Net.Http.Headers;
using System.Text;
using System.Text.Json;

namespace Herald.Client;

/// <summary>
/// The broker's server API (protocol-spec/server-api.yaml) from an application's backend: publish, broadcast and
/// batch publications, read a topic's history, presence and topics, and the node's information, over HTTP with an API
/// key (not a client token). Separate from <see cref="HeraldClient"/>: it holds no connection, subscribes to nothing,
/// and every call is one request. Thread-safe; one instance per broker address and key is enough.
/// </summary>
/// <example>
/// <code>
/// using var api = new HeraldApiClient(new Uri("http://127.0.0.1:8224"), Environment.GetEnvironmentVariable("HERALD_API_KEY")!);
/// bool duplicate = await api.PublishAsync("orders.42", "paid"u8.ToArray(), idempotencyKey: "order-42-paid");
/// </code>
/// </example>
public sealed partial class HeraldApiClient : IDisposable
{
    private readonly HttpClient _http;
    private readonly bool _ownsHttp;

    /// <param name="baseAddress">The API listener (<c>Herald:Api:Host</c>, <c>Herald:Api:Port</c>: http://127.0.0.1:8224 by default).</param>
    /// <param name="key">The API key; sent as a bearer on every request, never logged.</param>
    /// <param name="http">A client to send through (its handler, proxy, TLS); null: one of its own, disposed with this.</param>
    public HeraldApiClient(Uri baseAddress, string key, HttpClient? http = null)
    {
        ArgumentNullException.ThrowIfNull(baseAddress);
        ArgumentNullException.ThrowIfNull(key);
        BaseAddress = baseAddress;
        Key = key;
        _ownsHttp = http is null;
        _http = http ?? new HttpClient();
    }

    /// <summary>The API listener's address.</summary>
    public Uri BaseAddress { get; }

    private string Key { get; }

    /// <summary>
    /// Publishes one message. With <paramref name="idempotencyKey"/>, a repeat on the same topic within the broker's
    /// window is not delivered again: it returns true (a duplicate).
    /// </summary>
    public async Task<bool> PublishAsync(string topic, ReadOnlyMemory<byte> payload, IReadOnlyDictionary<string, string>? headers = null, string? idempotencyKey = null, CancellationToken cancellationToken = default)
    {
        using JsonDocument answer = await SendAsync(HttpMethod.Post, "publish", w => WritePublication(w, new HeraldApiPublication(topic, payload) { Headers = headers, IdempotencyKey = idempotencyKey }), cancellationToken).ConfigureAwait(false);
        return answer.RootElement.GetProperty("duplicate").GetBoolean();
    }

    /// <summary>Publishes one message to every topic of <paramref name="topics"/>; one result per topic, in order.</summary>
    public async Task<IReadOnlyList<HeraldApiResult>> BroadcastAsync(IEnumerable<string> topics, ReadOnlyMemory<byte> payload, IReadOnlyDictionary<string, string>? headers = null, string? idempotencyKey = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(topics);
        using JsonDocument answer = await SendAsync(HttpMethod.Post, "broadcast", w =>
        {
            w.WriteStartObject();
            w.WriteStartArray("topics");
            foreach (string topic in topics)
            {
                w.WriteStringValue(topic);
            }

            w.WriteEndArray();
            WriteBody(w, payload, headers, idempotencyKey);
            w.WriteEndObject();
        }, cancellationToken).ConfigureAwait(false);
        return Results(answer.RootElement);
    }

    /// <summary>Publishes <paramref name="publications"/> in order, in one request; one result per publication.</summary>
    public async Task<IReadOnlyList<HeraldApiResult>> BatchAsync(IEnumerable<HeraldApiPublication> publications, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(publications);
        using JsonDocument answer = await SendAsync(HttpMethod.Post, "batch", w =>
        {
            w.WriteStartObject();
            w.WriteStartArray("items");
            foreach (HeraldApiPublication publication in publications)
            {
                WritePublication(w, publication);
            }

            w.WriteEndArray();
            w.WriteEndObject();
        }, cancellationToken).ConfigureAwait(false);
        return Results(answer.RootElement);
    }

    /// <summary>A history topic's kept messages with an offset above <paramref name="after"/>, oldest first (at most <paramref name="limit"/>).</summary>
    public async Task<HeraldApiHistoryPage> HistoryAsync(string topic, ulong after = 0, int limit = 100, CancellationToken cancellationToken = default)
    {
        using JsonDocument answer = await SendAsync(HttpMethod.Get, $"history?topic={Uri.EscapeDataString(topic)}&after={after}&limit={limit}", null, cancellationToken).ConfigureAwait(false);
        JsonElement root = answer.RootElement;
        var entries = new List<HeraldApiHistoryEntry>();
        foreach (JsonElement entry in root.GetProperty("entries").EnumerateArray())
        {
            var headers = new Dictionary<string, IReadOnlyList<string>>(StringComparer.Ordinal);
            if (entry.TryGetProperty("headers", out JsonElement block))
            {
                foreach (JsonProperty header in block.EnumerateObject())
                {
                    headers[header.Name] = [.. header.Value.EnumerateArray().Select(v => v.GetString() ?? "")];
                }
            }

            entries.Add(new HeraldApiHistoryEntry(entry.GetProperty("offset").GetUInt64(), Convert.FromBase64String(entry.GetProperty("data_base64").GetString() ?? ""), headers));
        }

        return new HeraldApiHistoryPage(root.GetProperty("epoch").GetString() ?? "", root.GetProperty("last").GetUInt64(), entries, root.TryGetProperty("next", out JsonElement next) ? next.GetUInt64() : null);
    }

    /// <summary>A topic's occupancy and a page of its members (ordered by client id, after <paramref name="cursor"/>).</summary>
    public async Task<HeraldApiPresencePage> PresenceAsync(string topic, int? limit = null, string? cursor = null, CancellationToken cancellationToken = default)
    {
        string query = $"presence?topic={Uri.EscapeDataString(topic)}" + (limit is { } l ? $"&limit={l}" : "") + (cursor is null ? "" : "&cursor=" + Uri.EscapeDataString(cursor));
        using JsonDocument answer = await SendAsync(HttpMethod.Get, query, null, cancellationToken).ConfigureAwait(false);
        JsonElement root = answer.RootElement;
        List<HeraldApiMember> members = [.. root.GetProperty("entries").EnumerateArray().Select(e => new HeraldApiMember(
            e.GetProperty("client").GetString() ?? "",
            e.GetProperty("identity").GetString() ?? "",
            e.TryGetProperty("info", out JsonElement info) ? info.GetString() : null))];
        return new HeraldApiPresencePage(root.GetProperty("members").GetInt64(), root.GetProperty("identities").GetInt64(), members, root.TryGetProperty("next", out JsonElement next) ? next.GetString() : null);
    }

    /// <summary>The patterns subscribed on every node with their subscribers added up, in ordinal order, paged by <paramref name="after"/>; <see cref="HeraldApiTopicsPage.Silent"/> names the nodes that did not answer.</summary>
    public async Task<HeraldApiTopicsPage> TopicsAsync(string? prefix = null, string? after = null, int? limit = null, CancellationToken cancellationToken = default)
    {
        string query = "topics?prefix=" + Uri.EscapeDataString(prefix ?? "") + "&after=" + Uri.EscapeDataString(after ?? "") + (limit is { } l ? $"&limit={l}" : "");
        using JsonDocument answer = await SendAsync(HttpMethod.Get, query, null, cancellationToken).ConfigureAwait(false);
        JsonElement root = answer.RootElement;
        List<HeraldApiTopic> topics = [.. root.GetProperty("entries").EnumerateArray().Select(e => new HeraldApiTopic(e.GetProperty("pattern").GetString() ?? "", e.GetProperty("subscribers").GetInt32()))];
        List<string> silent = root.TryGetProperty("silent", out JsonElement nodes) ? [.. nodes.EnumerateArray().Select(n => n.GetString() ?? "")] : [];
        return new HeraldApiTopicsPage(topics, root.TryGetProperty("next", out JsonElement next) ? next.GetString() : null, silent);
    }

    /// <summary>The answering node's information (<c>GET /api/v1/info</c>) as the broker sent it; the caller disposes it.</summary>
    public Task<JsonDocument> InfoAsync(CancellationToken cancellationToken = default) => SendAsync(HttpMethod.Get, "info", null, cancellationToken);

    public void Dispose()
    {
        if (_ownsHttp)
        {
            _http.Dispose();
        }
    }

    private static IReadOnlyList<HeraldApiResult> Results(JsonElement root) =>
        [.. root.GetProperty("results").EnumerateArray().Select(r => new HeraldApiResult(
            r.GetProperty("status").GetInt32(),
            r.TryGetProperty("duplicate", out JsonElement duplicate) && duplicate.GetBoolean(),
            r.TryGetProperty("code", out JsonElement code) ? code.GetString() : null,
            r.TryGetProperty("detail", out JsonElement detail) ? detail.GetString() : null))];

    private static void WritePublication(Utf8JsonWriter w, HeraldApiPublication publication)
    {
        ArgumentNullException.ThrowIfNull(publication);
        w.WriteStartObject();
        w.WriteString("topic", publication.Topic);
        WriteBody(w, publication.Payload, publication.Headers, publication.IdempotencyKey);
        w.WriteEndObject();
    }

    private static void WriteBody(Utf8JsonWriter w, ReadOnlyMemory<byte> payload, IReadOnlyDictionary<string, string>? headers, string? idempotencyKey)
    {
        w.WriteBase64String("data_base64", payload.Span);
        if (headers is { Count: > 0 })
        {
            w.WriteStartObject("headers");
            foreach (KeyValuePair<string, string> header in headers)
            {
                w.WriteString(header.Key, header.Value);
            }

            w.WriteEndObject();
        }

        if (idempotencyKey is not null)
        {
            w.WriteString("idempotency_key", idempotencyKey);
        }
    }

    /// <summary>One request; a refusal becomes a <see cref="HeraldApiException"/> with the problem's code.</summary>
    private async Task<JsonDocument> SendAsync(HttpMethod method, string path, Action<Utf8JsonWriter>? body, CancellationToken cancellationToken)
    {
        using var request = new HttpRequestMessage(method, new Uri(BaseAddress, "/api/v1/" + path));
        request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", Key);
        if (body is not null)
        {
            using var buffer = new MemoryStream();
            using (var writer = new Utf8JsonWriter(buffer))
            {
                body(writer);
            }

            request.Content = new ByteArrayContent(buffer.ToArray());
            request.Content.Headers.ContentType = new MediaTypeHeaderValue("application/json");
        }

        using HttpResponseMessage response = await _http.SendAsync(request, cancellationToken).ConfigureAwait(false);
        byte[] answer = await response.Content.ReadAsByteArrayAsync(CancellationToken.None).ConfigureAwait(false);
        if (response.IsSuccessStatusCode)
        {
            return JsonDocument.Parse(answer.Length == 0 ? "{}"u8.ToArray() : answer); // 204: no body
        }

        string code = response.StatusCode == HttpStatusCode.Unauthorized ? "Unauthorized" : response.ReasonPhrase ?? "";
        string detail = $"The server API answered {(int)response.StatusCode}.";
        try
        {
            using JsonDocument problem = JsonDocument.Parse(answer);
            code = problem.RootElement.TryGetProperty("code", out JsonElement c) ? c.GetString() ?? code : code;
            detail = problem.RootElement.TryGetProperty("detail", out JsonElement d) ? d.GetString() ?? detail : detail;
        }
        catch (JsonException)
        {
            // 401's empty body, or a proxy's page: the status says it.
        }

        TimeSpan? retryAfter = response.Headers.RetryAfter?.Delta;
        throw new HeraldApiException((int)response.StatusCode, code, detail) { RetryAfter = retryAfter };
    }
}
