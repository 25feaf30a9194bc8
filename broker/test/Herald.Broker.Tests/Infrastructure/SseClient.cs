using System.Net;
using System.Net.Http.Headers;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>One Server-Sent Event as a browser's <c>EventSource</c> dispatches it (type "message" when the stream names none).</summary>
public sealed record SseEvent(string Type, string Data, string? LastEventId)
{
    public JsonElement Json => JsonDocument.Parse(Data).RootElement;
}

/// <summary>
/// A test's <c>EventSource</c> over a real HTTP connection: reads the stream line by line as the HTML standard's
/// parser does (event, data, id, comments), and keeps the last event id a browser would send on reconnect.
/// </summary>
public sealed class SseClient : IAsyncDisposable
{
    private static readonly TimeSpan DefaultTimeout = TimeSpan.FromSeconds(30);

    private readonly HttpClient _http;
    private readonly StreamReader _reader;

    private SseClient(HttpClient http, HttpResponseMessage response, StreamReader reader)
    {
        _http = http;
        Response = response;
        _reader = reader;
    }

    public HttpResponseMessage Response { get; }

    /// <summary>The id a browser would send as <c>Last-Event-ID</c> now.</summary>
    public string? LastEventId { get; private set; }

    /// <summary>Comment lines seen so far (heartbeats).</summary>
    public int Comments { get; private set; }

    /// <summary>The request <c>GET /sse?<paramref name="query"/></c>, answered (headers read, body streaming).</summary>
    /// <param name="receiveBuffer">A small socket receive buffer, for a client that stalls.</param>
    public static async Task<HttpResponseMessage> SendAsync(int httpPort, string query, string? lastEventId = null, string? origin = null, string? bearer = null, int? receiveBuffer = null, HttpClient? http = null)
    {
        http ??= NewHttp(receiveBuffer);
        using var request = new HttpRequestMessage(HttpMethod.Get, $"http://127.0.0.1:{httpPort}/sse?{query}");
        request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("text/event-stream"));
        if (lastEventId is not null)
        {
            request.Headers.TryAddWithoutValidation("Last-Event-ID", lastEventId);
        }

        if (origin is not null)
        {
            request.Headers.TryAddWithoutValidation("Origin", origin);
        }

        if (bearer is not null)
        {
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", bearer);
        }

        return await http.SendAsync(request, HttpCompletionOption.ResponseHeadersRead);
    }

    /// <summary>Opens a stream and checks it was accepted (200, <c>text/event-stream</c>): every subscription is live when this returns.</summary>
    public static async Task<SseClient> OpenAsync(int httpPort, string query, string? lastEventId = null, string? bearer = null, int? receiveBuffer = null)
    {
        HttpClient http = NewHttp(receiveBuffer);
        HttpResponseMessage response = await SendAsync(httpPort, query, lastEventId, bearer: bearer, http: http);
        string body = response.StatusCode == HttpStatusCode.OK ? "" : await response.Content.ReadAsStringAsync();
        Assert.True(response.StatusCode == HttpStatusCode.OK, $"GET /sse?{query}: {(int)response.StatusCode} {body}");
        Assert.Equal("text/event-stream", response.Content.Headers.ContentType?.MediaType);
        var reader = new StreamReader(await response.Content.ReadAsStreamAsync(), Encoding.UTF8);
        return new SseClient(http, response, reader) { LastEventId = lastEventId };
    }

    /// <summary>
    /// Opens a stream, or returns the refusal: a stream when the broker answered 200 <c>text/event-stream</c>,
    /// otherwise null with the status and RFC 7807 problem body it answered instead (sse §1).
    /// </summary>
    public static async Task<(SseClient? Stream, HttpStatusCode Status, JsonElement Problem)> TryOpenAsync(int httpPort, string query, string? lastEventId = null, string? bearer = null, int? receiveBuffer = null)
    {
        HttpClient http = NewHttp(receiveBuffer);
        HttpResponseMessage response = await SendAsync(httpPort, query, lastEventId, bearer: bearer, http: http);
        if (response.StatusCode != HttpStatusCode.OK)
        {
            using (response)
            using (http)
            {
                return (null, response.StatusCode, JsonDocument.Parse(await response.Content.ReadAsStringAsync()).RootElement.Clone());
            }
        }

        Assert.Equal("text/event-stream", response.Content.Headers.ContentType?.MediaType);
        var reader = new StreamReader(await response.Content.ReadAsStreamAsync(), Encoding.UTF8);
        return (new SseClient(http, response, reader) { LastEventId = lastEventId }, HttpStatusCode.OK, default);
    }

    /// <summary>The next event (comments skipped, counted); fails at the end of the stream or after the timeout.</summary>
    public async Task<SseEvent> ReadEventAsync(TimeSpan? timeout = null) =>
        await ReadEventOrEndAsync(timeout) ?? throw new Xunit.Sdk.XunitException("The event stream ended.");

    /// <summary>The next event, or null when the broker ended the stream.</summary>
    public async Task<SseEvent?> ReadEventOrEndAsync(TimeSpan? timeout = null)
    {
        using var cancel = new CancellationTokenSource(timeout ?? DefaultTimeout);
        string type = "";
        var data = new StringBuilder();
        bool hasData = false;
        while (true)
        {
            string? line = await _reader.ReadLineAsync(cancel.Token);
            if (line is null)
            {
                return null;
            }

            if (line.Length == 0)
            {
                if (hasData)
                {
                    return new SseEvent(type.Length == 0 ? "message" : type, data.ToString(), LastEventId);
                }

                type = "";
                continue;
            }

            if (line[0] == ':')
            {
                Comments++;
                continue;
            }

            int colon = line.IndexOf(':', StringComparison.Ordinal);
            string field = colon < 0 ? line : line[..colon];
            string value = colon < 0 ? "" : line[(colon + 1)..].TrimStart(' ');
            switch (field)
            {
                case "event":
                    type = value;
                    break;
                case "data":
                    if (hasData)
                    {
                        data.Append('\n');
                    }

                    data.Append(value);
                    hasData = true;
                    break;
                case "id":
                    LastEventId = value;
                    break;
            }
        }
    }

    /// <summary>Reads until <paramref name="count"/> comment lines in all were seen; fails if an event or the end comes first.</summary>
    public async Task ReadCommentsAsync(int count, TimeSpan? timeout = null)
    {
        using var cancel = new CancellationTokenSource(timeout ?? DefaultTimeout);
        while (Comments < count)
        {
            string? line = await _reader.ReadLineAsync(cancel.Token);
            Assert.True(line is not null, "The event stream ended.");
            if (line.StartsWith(':'))
            {
                Comments++;
            }
            else
            {
                Assert.True(line.Length == 0, $"An event came before the comments: {line}");
            }
        }
    }

    /// <summary>Reads until the broker ends the stream: every event left.</summary>
    public async Task<List<SseEvent>> ReadToEndAsync(TimeSpan? timeout = null)
    {
        var events = new List<SseEvent>();
        while (await ReadEventOrEndAsync(timeout) is { } e)
        {
            events.Add(e);
        }

        return events;
    }

    public ValueTask DisposeAsync()
    {
        _reader.Dispose();
        Response.Dispose();
        _http.Dispose();
        return ValueTask.CompletedTask;
    }

    private static HttpClient NewHttp(int? receiveBuffer)
    {
        var handler = new SocketsHttpHandler { PooledConnectionLifetime = TimeSpan.Zero };
        if (receiveBuffer is { } size)
        {
            handler.ConnectCallback = async (context, cancellation) =>
            {
                var socket = new Socket(SocketType.Stream, ProtocolType.Tcp) { ReceiveBufferSize = size, NoDelay = true };
                try
                {
                    await socket.ConnectAsync(context.DnsEndPoint, cancellation);
                    return new NetworkStream(socket, ownsSocket: true);
                }
                catch
                {
                    socket.Dispose();
                    throw;
                }
            };
        }

        return new HttpClient(handler) { Timeout = Timeout.InfiniteTimeSpan };
    }
}
