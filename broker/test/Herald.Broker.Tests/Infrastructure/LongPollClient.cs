using System.Buffers;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>One poll's answer, decoded from the real HTTP response.</summary>
public sealed record PollResult(HttpStatusCode Status, long FirstSequence, int Count, long Dropped, List<Frame> Messages, JsonElement? Problem, JsonElement? Json)
{
    public long LastSequence => FirstSequence + Count - 1;

    public string? Code => Problem?.GetProperty("code").GetString();
}

/// <summary>A long-poll session driven over real HTTP (protocol-spec/longpoll.md).</summary>
public sealed class LongPollClient
{
    private readonly HttpClient _http;

    private LongPollClient(HttpClient http, string session)
    {
        _http = http;
        Session = session;
    }

    public string Session { get; }

    /// <summary>The client its requests go through (a node of a cluster, with its own credential).</summary>
    public HttpClient Http => _http;

    public string Base => $"/poll/sessions/{Session}";

    /// <summary>The create answer's body (longpoll §1.1): what was granted.</summary>
    public JsonElement Created { get; private init; }

    /// <summary>
    /// The same session (token) acted on through <paramref name="other"/>: another node of a cluster, or the same
    /// node with another credential (an <see cref="HttpClient"/> sends its own bearer). Sends nothing.
    /// </summary>
    public LongPollClient Via(HttpClient other) => new(other, Session) { Created = Created };

    /// <param name="request">The create body (longpoll §1.1), e.g. <c>new { headers = true }</c>; null sends none.</param>
    public static async Task<LongPollClient> CreateAsync(HttpClient http, object? request = null)
    {
        using HttpResponseMessage response = request is null ? await http.PostAsync("/poll/sessions", null) : await http.PostAsJsonAsync("/poll/sessions", request);
        Assert.Equal(HttpStatusCode.Created, response.StatusCode);
        JsonElement body = await response.Content.ReadFromJsonAsync<JsonElement>();
        return new LongPollClient(http, body.GetProperty("session").GetString()!) { Created = body };
    }

    /// <summary>A session the test made by other means than a create request, named by its token.</summary>
    public static LongPollClient Of(HttpClient http, string session) => new(http, session);

    public async Task SubscribeAsync(uint sid, string pattern, bool noEcho = false)
    {
        using HttpResponseMessage response = await _http.PostAsJsonAsync($"{Base}/subscriptions", new { sid, pattern, noEcho });
        Assert.True(response.StatusCode == HttpStatusCode.NoContent, $"subscribe {sid} {pattern}: {(int)response.StatusCode} {await response.Content.ReadAsStringAsync()}");
    }

    public Task<HttpResponseMessage> PublishAsync(string topic, string payload) =>
        _http.PostAsync($"{Base}/publish?topic={Uri.EscapeDataString(topic)}", new StringContent(payload));

    public async Task<PollResult> PollAsync(long ack, bool json = false, CancellationToken cancellationToken = default)
    {
        using var request = new HttpRequestMessage(HttpMethod.Get, $"{Base}/messages?ack={ack}");
        if (json)
        {
            request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
        }

        using HttpResponseMessage response = await _http.SendAsync(request, cancellationToken);
        return await ReadAsync(response);
    }

    public static async Task<PollResult> ReadAsync(HttpResponseMessage response)
    {
        byte[] body = await response.Content.ReadAsByteArrayAsync();
        if (!response.IsSuccessStatusCode)
        {
            Assert.Equal("application/problem+json", response.Content.Headers.ContentType?.MediaType);
            return new PollResult(response.StatusCode, 0, 0, 0, [], JsonDocument.Parse(body).RootElement.Clone(), null);
        }

        long first = long.Parse(response.Headers.GetValues("Herald-First-Sequence").Single());
        int count = int.Parse(response.Headers.GetValues("Herald-Count").Single());
        long dropped = long.Parse(response.Headers.GetValues("Herald-Dropped").Single());
        if (response.Content.Headers.ContentType?.MediaType == "application/json")
        {
            JsonElement json = JsonDocument.Parse(body).RootElement.Clone();
            var fromJson = json.GetProperty("messages").EnumerateArray()
                .Select(m => new Frame(FrameType.Message, m.GetProperty("sid").GetUInt32(), m.GetProperty("topic").GetString()!, m.GetProperty("replyTo").GetString(), m.GetProperty("payload").GetBytesFromBase64())
                {
                    Headers = m.TryGetProperty("headers", out JsonElement h)
                        ? [.. h.EnumerateObject().Select(p => new KeyValuePair<string, string[]>(p.Name, [.. p.Value.EnumerateArray().Select(v => v.GetString()!)]))]
                        : null,
                })
                .ToList();
            return new PollResult(response.StatusCode, first, count, dropped, fromJson, null, json);
        }

        Assert.Equal("application/vnd.herald.frames", response.Content.Headers.ContentType?.MediaType);
        var frames = new List<Frame>();
        var buffer = new ReadOnlySequence<byte>(body);
        while (FrameReader.TryReadFrame(ref buffer, int.MaxValue, out ReadOnlySequence<byte> frame))
        {
            var reader = new MessagePackReader(frame);
            Assert.Equal(FrameType.Message, FrameDecoder.ReadHeader(ref reader, out int n));
            PublishFrame m = FrameDecoder.ReadMessage(ref reader, n);
            frames.Add(new Frame(FrameType.Message, m.Sid, m.TopicString, m.ReplyToString, m.Payload.ToArray()) { Body = frame.ToArray(), Headers = m.HasHeaders ? HeaderBlock.Read(m.Headers) : null });
        }

        Assert.True(buffer.IsEmpty, "the poll body ends in a partial frame");
        Assert.Equal(count, frames.Count);
        return new PollResult(response.StatusCode, first, count, dropped, frames, null, null);
    }

    public static async Task<HttpResponseMessage> PublishOneShotAsync(HttpClient http, string topic, string payload) =>
        await http.PostAsync($"/poll/publish?topic={Uri.EscapeDataString(topic)}", new ByteArrayContent(Encoding.UTF8.GetBytes(payload)));
}
