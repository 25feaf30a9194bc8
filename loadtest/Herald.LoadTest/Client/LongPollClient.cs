using System.Buffers;
using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Sockets;
using System.Text.Json;

namespace Herald.LoadTest.Client;

/// <summary>
/// An HTTP client for the long-poll transport (protocol-spec/longpoll.md), shared by many sessions.
/// <para>
/// A held poll occupies an HTTP/1.1 connection for up to the poll timeout, so M sessions need M
/// connections: the handler's <c>MaxConnectionsPerServer</c> is unlimited, pooled connections live for
/// ever (<c>PooledConnectionLifetime</c> infinite, so a run never pays for reconnects), and each new
/// connection is bound to the next source address of <see cref="SourceAddresses"/> in
/// <c>ConnectCallback</c>, since every connection goes to the one HTTP port (about 28,000 source ports
/// per source address). No proxy, no cookies, no decompression, no <c>Expect: 100-continue</c>.
/// </para>
/// <para>
/// Poll bodies (MESSAGE frames back to back, longpoll §2.1) are read into a pooled buffer that the
/// caller returns with <see cref="PollResult.Release"/>.
/// </para>
/// </summary>
internal sealed class LongPollClient : IDisposable
{
    public const string FramesMediaType = "application/vnd.herald.frames";

    private static readonly MediaTypeHeaderValue JsonType = new("application/json");
    private static readonly MediaTypeHeaderValue OctetType = new("application/octet-stream");
    private static readonly MediaTypeHeaderValue FramesType = new(FramesMediaType);

    private readonly HttpClient _http;
    private readonly Uri _base;
    private readonly SourceAddresses _sources;
    private long _connectionsOpened;

    /// <param name="maxConnectionsPerServer">Unlimited by default (many sessions share this client); a client
    /// serving one session needs only its held poll plus a publish and a subscribe in flight.</param>
    /// <param name="bearer">With authentication on, the credential sent as <c>Authorization: Bearer</c> on every
    /// request: session creation and every request on the session (longpoll §1.1).</param>
    public LongPollClient(IPAddress address, int port, SourceAddresses sources, TimeSpan connectTimeout, int maxConnectionsPerServer = int.MaxValue, string? bearer = null)
    {
        _sources = sources;
        _base = new Uri(string.Create(CultureInfo.InvariantCulture, $"http://{(address.AddressFamily == AddressFamily.InterNetworkV6 ? $"[{address}]" : address.ToString())}:{port}/poll/"));
        var handler = new SocketsHttpHandler
        {
            MaxConnectionsPerServer = maxConnectionsPerServer,
            PooledConnectionLifetime = Timeout.InfiniteTimeSpan,
            PooledConnectionIdleTimeout = TimeSpan.FromMinutes(2),
            ConnectTimeout = connectTimeout,
            UseProxy = false,
            UseCookies = false,
            AllowAutoRedirect = false,
            AutomaticDecompression = DecompressionMethods.None,
            ConnectCallback = ConnectAsync,
        };
        _http = new HttpClient(handler, disposeHandler: true)
        {
            Timeout = Timeout.InfiniteTimeSpan, // polls are held for the poll timeout; every call passes its own token
            DefaultRequestVersion = HttpVersion.Version11,
            DefaultVersionPolicy = HttpVersionPolicy.RequestVersionExact,
        };
        _http.DefaultRequestHeaders.ExpectContinue = false;
        if (bearer is not null)
        {
            _http.DefaultRequestHeaders.Authorization = new AuthenticationHeaderValue("Bearer", bearer);
        }
    }

    /// <summary>TCP connections the handler opened so far.</summary>
    public long ConnectionsOpened => Volatile.Read(ref _connectionsOpened);

    /// <summary>
    /// Creates a session (longpoll §1.1), with <paramref name="headers"/> one that reads and publishes header
    /// blocks (<c>{"headers": true}</c>). Throws <see cref="LongPollException"/> for any answer but 201.
    /// </summary>
    public async Task<LongPollSessionInfo> CreateSessionAsync(CancellationToken cancellationToken, bool headers = false)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, new Uri(_base, "sessions"));
        if (headers)
        {
            request.Content = new ByteArrayContent("{\"headers\":true}"u8.ToArray()) { Headers = { ContentType = new MediaTypeHeaderValue("application/json") } };
        }

        using HttpResponseMessage response = await _http.SendAsync(request, HttpCompletionOption.ResponseContentRead, cancellationToken);
        if (response.StatusCode != HttpStatusCode.Created)
        {
            throw await LongPollException.FromAsync(response, "create session", cancellationToken);
        }

        byte[] body = await response.Content.ReadAsByteArrayAsync(cancellationToken);
        using JsonDocument json = JsonDocument.Parse(body);
        JsonElement root = json.RootElement;
        string token = root.TryGetProperty("session", out JsonElement s) && s.GetString() is { Length: > 0 } t
            ? t
            : throw new LongPollException(response.StatusCode, "MalformedResponse", "create session: no \"session\" in the answer", null);
        long pollTimeoutMs = root.TryGetProperty("pollTimeoutMs", out JsonElement p) && p.TryGetInt64(out long ms) ? ms : 15_000;
        long maxPending = root.TryGetProperty("maxPendingMessages", out JsonElement m) && m.TryGetInt64(out long mp) ? mp : 0;
        long maxBody = root.TryGetProperty("maxBodyBytes", out JsonElement b) && b.TryGetInt64(out long mb) && mb > 0 ? mb : LongPollSessionInfo.DefaultMaxBodyBytes;
        string? inboxPrefix = root.TryGetProperty("inboxPrefix", out JsonElement i) && i.ValueKind == JsonValueKind.String ? i.GetString() : null;
        return new LongPollSessionInfo(token, TimeSpan.FromMilliseconds(pollTimeoutMs), maxPending, maxBody, inboxPrefix);
    }

    /// <summary>Subscribes a session (longpoll §1.2), in the queue group <paramref name="queue"/> when not null; the subscription is live when this returns.</summary>
    public async Task SubscribeAsync(string session, uint sid, string pattern, CancellationToken cancellationToken, string? queue = null)
    {
        var body = new ArrayBufferWriter<byte>(64 + pattern.Length);
        using (var json = new Utf8JsonWriter(body))
        {
            json.WriteStartObject();
            json.WriteNumber("sid", sid);
            json.WriteString("pattern", pattern);
            if (queue is not null)
            {
                json.WriteString("queue", queue);
            }

            json.WriteEndObject();
        }

        using var request = new HttpRequestMessage(HttpMethod.Post, new Uri(_base, $"sessions/{session}/subscriptions"))
        {
            Content = new ReadOnlyMemoryContent(body.WrittenMemory) { Headers = { ContentType = JsonType } },
        };
        using HttpResponseMessage response = await _http.SendAsync(request, HttpCompletionOption.ResponseContentRead, cancellationToken);
        if (response.StatusCode != HttpStatusCode.NoContent)
        {
            throw await LongPollException.FromAsync(response, "subscribe", cancellationToken);
        }
    }

    /// <summary>
    /// One long poll (longpoll §2): <c>GET sessions/{session}/messages?ack={ack}</c>, binary. A 200 body
    /// is read whole into a pooled buffer; any other status comes back with its problem details.
    /// </summary>
    public async Task<PollResult> PollAsync(string session, long ack, CancellationToken cancellationToken)
    {
        using var request = new HttpRequestMessage(HttpMethod.Get, new Uri(_base, string.Create(CultureInfo.InvariantCulture, $"sessions/{session}/messages?ack={ack}")));
        using HttpResponseMessage response = await _http.SendAsync(request, HttpCompletionOption.ResponseHeadersRead, cancellationToken);
        if (response.StatusCode != HttpStatusCode.OK)
        {
            string problem = await LongPollException.ReadProblemAsync(response, cancellationToken);
            return new PollResult((int)response.StatusCode, 0, 0, 0, null, 0, response.Headers.RetryAfter?.Delta, problem);
        }

        long first = Header(response, "Herald-First-Sequence");
        long count = Header(response, "Herald-Count");
        long dropped = Header(response, "Herald-Dropped");
        long? length = response.Content.Headers.ContentLength;
        byte[]? buffer = null;
        int read = 0;
        if (length is null or > 0)
        {
            await using Stream stream = await response.Content.ReadAsStreamAsync(cancellationToken);
            buffer = ArrayPool<byte>.Shared.Rent((int)Math.Clamp(length ?? 4096, 1, int.MaxValue));
            try
            {
                if (length is { } exact)
                {
                    await stream.ReadExactlyAsync(buffer.AsMemory(0, (int)exact), cancellationToken);
                    read = (int)exact;
                }
                else
                {
                    // chunked (the broker sets Content-Length, but do not depend on it)
                    while (true)
                    {
                        if (read == buffer.Length)
                        {
                            byte[] larger = ArrayPool<byte>.Shared.Rent(buffer.Length * 2);
                            buffer.AsSpan(0, read).CopyTo(larger);
                            ArrayPool<byte>.Shared.Return(buffer);
                            buffer = larger;
                        }

                        int n = await stream.ReadAsync(buffer.AsMemory(read), cancellationToken);
                        if (n == 0)
                        {
                            break;
                        }

                        read += n;
                    }
                }
            }
            catch
            {
                ArrayPool<byte>.Shared.Return(buffer);
                throw;
            }
        }

        return new PollResult(200, first, count, dropped, buffer, read, null, null);
    }

    /// <summary>Ends a session (longpoll §1); returns the status (204 expected, 404/410 when it was already gone).</summary>
    public async Task<int> DeleteSessionAsync(string session, CancellationToken cancellationToken)
    {
        using var request = new HttpRequestMessage(HttpMethod.Delete, new Uri(_base, $"sessions/{session}"));
        using HttpResponseMessage response = await _http.SendAsync(request, HttpCompletionOption.ResponseContentRead, cancellationToken);
        return (int)response.StatusCode;
    }

    /// <summary>Publishes a raw payload without a session (longpoll §1.3). Throws <see cref="LongPollException"/> for any answer but 202.</summary>
    public async Task PublishAsync(string topic, byte[] payload, CancellationToken cancellationToken)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, new Uri(_base, "publish?topic=" + Uri.EscapeDataString(topic)))
        {
            Content = new ByteArrayContent(payload) { Headers = { ContentType = OctetType } },
        };
        using HttpResponseMessage response = await _http.SendAsync(request, HttpCompletionOption.ResponseContentRead, cancellationToken);
        if (response.StatusCode != HttpStatusCode.Accepted)
        {
            throw await LongPollException.FromAsync(response, "publish", cancellationToken);
        }
    }

    /// <summary>
    /// Publishes in a session a body of PUBLISH frames, back to back (longpoll §1.3, <c>application/vnd.herald.frames</c>):
    /// all are routed in order, or none if one is invalid. Throws <see cref="LongPollException"/> for any answer but 202.
    /// </summary>
    public async Task PublishFramesAsync(string session, ReadOnlyMemory<byte> frames, CancellationToken cancellationToken)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, new Uri(_base, $"sessions/{session}/publish"))
        {
            Content = new ReadOnlyMemoryContent(frames) { Headers = { ContentType = FramesType } },
        };
        using HttpResponseMessage response = await _http.SendAsync(request, HttpCompletionOption.ResponseContentRead, cancellationToken);
        if (response.StatusCode != HttpStatusCode.Accepted)
        {
            throw await LongPollException.FromAsync(response, "publish", cancellationToken);
        }
    }

    public void Dispose() => _http.Dispose();

    /// <summary>A numeric response header, read without validation or allocation of a parsed form; -1 when absent.</summary>
    private static long Header(HttpResponseMessage response, string name) =>
        response.Headers.NonValidated.TryGetValues(name, out HeaderStringValues values)
        && values.Count == 1
        && long.TryParse(values.ToString(), NumberStyles.Integer, CultureInfo.InvariantCulture, out long value)
            ? value
            : -1;

    private async ValueTask<Stream> ConnectAsync(SocketsHttpConnectionContext context, CancellationToken cancellationToken)
    {
        var socket = new Socket(SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        try
        {
            SourceAddresses.Bind(socket, _sources.Next());
            EndPoint target = IPAddress.TryParse(context.DnsEndPoint.Host, out IPAddress? ip)
                ? new IPEndPoint(ip, context.DnsEndPoint.Port)
                : context.DnsEndPoint;
            await socket.ConnectAsync(target, cancellationToken);
            Interlocked.Increment(ref _connectionsOpened);
            return new NetworkStream(socket, ownsSocket: true);
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }
}

/// <summary>What session creation returned (longpoll §1.1); <see cref="InboxPrefix"/> is null from a broker that names none.</summary>
internal readonly record struct LongPollSessionInfo(string Token, TimeSpan PollTimeout, long MaxPendingMessages, long MaxBodyBytes = LongPollSessionInfo.DefaultMaxBodyBytes, string? InboxPrefix = null)
{
    /// <summary>The broker's default <c>maxBodyBytes</c>, assumed when the answer does not say.</summary>
    public const long DefaultMaxBodyBytes = 1024 * 1024;
}

/// <summary>
/// One poll's answer. For 200: the sequence headers (-1 when absent) and the body in
/// <see cref="Buffer"/>[0..<see cref="Length"/>), pooled: call <see cref="Release"/> once done.
/// Otherwise: the status, <c>Retry-After</c> and the problem details.
/// </summary>
internal readonly record struct PollResult(int Status, long FirstSequence, long Count, long Dropped, byte[]? Buffer, int Length, TimeSpan? RetryAfter, string? Problem)
{
    public ReadOnlyMemory<byte> Body => Buffer is null ? default : Buffer.AsMemory(0, Length);

    public void Release()
    {
        if (Buffer is not null)
        {
            ArrayPool<byte>.Shared.Return(Buffer);
        }
    }
}

/// <summary>The broker answered a long-poll request with an unexpected status (longpoll §3).</summary>
internal sealed class LongPollException : Exception
{
    public LongPollException() { }

    public LongPollException(string message) : base(message) { }

    public LongPollException(string message, Exception inner) : base(message, inner) { }

    public LongPollException(HttpStatusCode status, string code, string message, TimeSpan? retryAfter) : base(message)
    {
        Status = (int)status;
        Code = code;
        RetryAfter = retryAfter;
    }

    public int Status { get; }

    /// <summary>The problem's <c>code</c> member, e.g. <c>TooManySessions</c>.</summary>
    public string? Code { get; }

    public TimeSpan? RetryAfter { get; }

    /// <summary>
    /// 503 <c>TooManyPendingSessions</c>: too many creations at once, worth retrying after
    /// <see cref="RetryAfter"/>. (<c>TooManySessions</c> is a capacity limit: retrying does not help.)
    /// </summary>
    public bool Retryable => Status == 503 && Code == "TooManyPendingSessions";

    public static async Task<LongPollException> FromAsync(HttpResponseMessage response, string what, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(response);
        string problem = await ReadProblemAsync(response, cancellationToken);
        string code = "?";
        try
        {
            using JsonDocument json = JsonDocument.Parse(problem);
            if (json.RootElement.ValueKind == JsonValueKind.Object && json.RootElement.TryGetProperty("code", out JsonElement c))
            {
                code = c.GetString() ?? "?";
            }
        }
        catch (JsonException)
        {
            // not problem details
        }

        return new LongPollException(response.StatusCode, code, $"{what}: HTTP {(int)response.StatusCode} {code}: {problem}", response.Headers.RetryAfter?.Delta);
    }

    /// <summary>The body of an error answer, cut to 300 characters.</summary>
    public static async Task<string> ReadProblemAsync(HttpResponseMessage response, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(response);
        string text = await response.Content.ReadAsStringAsync(cancellationToken);
        return text.Length > 300 ? text[..300] + "..." : text;
    }
}
