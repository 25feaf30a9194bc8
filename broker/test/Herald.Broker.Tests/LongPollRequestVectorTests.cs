using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;

namespace Herald.Broker.Tests;

/// <summary>
/// One broker for the replay of the spec's vectors, run with the one configuration they all assume:
/// <c>protocol-spec/vectors/limits.json</c> (<c>max_frame</c>, <c>max_topic</c>; <c>max_payload</c> follows).
/// </summary>
public sealed class VectorBroker : IAsyncLifetime
{
    private static readonly Lazy<JsonElement> Limits = new(() => VectorFiles.Load("limits.json"));

    public static int MaxFrame => Limits.Value.GetProperty("max_frame").GetInt32();

    public static int MaxTopic => Limits.Value.GetProperty("max_topic").GetInt32();

    public static int MaxPayload => Limits.Value.GetProperty("max_payload").GetInt32();

    public static int MaxHeaders => Limits.Value.GetProperty("max_headers").GetInt32();

    public static int MaxHeaderBytes => Limits.Value.GetProperty("max_header_bytes").GetInt32();

    public TestBroker Broker { get; private set; } = null!;

    public async Task InitializeAsync() => Broker = await TestBroker.StartAsync(o =>
        (o.Limits.MaxFrameBytes, o.Limits.MaxTopicLength, o.Limits.MaxHeaders, o.Limits.MaxHeaderBytes) = (MaxFrame, MaxTopic, MaxHeaders, MaxHeaderBytes));

    public async Task DisposeAsync() => await Broker.DisposeAsync();
}

/// <summary>The <c>protocol-spec/vectors</c> files, copied next to the test assembly.</summary>
internal static class VectorFiles
{
    public static JsonElement Load(string file)
    {
        using JsonDocument doc = JsonDocument.Parse(File.ReadAllBytes(Path.Combine(AppContext.BaseDirectory, "vectors", file)));
        return doc.RootElement.Clone();
    }
}

/// <summary>
/// The <c>requests</c> cases of <c>protocol-spec/vectors/longpoll.json</c> (longpoll.md §1.1, §1.2, §3)
/// replayed over real HTTP against the real broker, as the frame vectors are replayed over TCP: each request
/// sent as the file writes it (method, path, content type, body; a subscribe case on a session of its own,
/// after the subscriptions it is <c>given</c>), and the status and problem <c>code</c> the file states checked.
/// </summary>
public sealed class LongPollRequestVectorTests(VectorBroker fixture) : IClassFixture<VectorBroker>
{
    private static readonly Lazy<JsonElement> Root = new(() => VectorFiles.Load("longpoll.json"));

    public static TheoryData<string> Requests
    {
        get
        {
            var data = new TheoryData<string>();
            foreach (JsonElement c in Root.Value.GetProperty("requests").EnumerateArray())
            {
                data.Add(c.GetProperty("name").GetString()!);
            }

            return data;
        }
    }

    [Theory]
    [MemberData(nameof(Requests))]
    public async Task Request_gets_the_status_and_code_the_spec_states(string name)
    {
        JsonElement c = Root.Value.GetProperty("requests").EnumerateArray().Single(r => r.GetProperty("name").GetString() == name);
        HttpClient http = fixture.Broker.Http;
        string path = c.GetProperty("path").GetString()!;
        if (path.Contains("{session}", StringComparison.Ordinal))
        {
            LongPollClient session = await LongPollClient.CreateAsync(http);
            path = path.Replace("{session}", session.Session, StringComparison.Ordinal);
            foreach (JsonElement given in c.TryGetProperty("given", out JsonElement g) ? g.EnumerateArray() : default(JsonElement.ArrayEnumerator))
            {
                using HttpResponseMessage accepted = await SendAsync(http, "POST", path, "application/json", given.GetString()!);
                Assert.Equal(HttpStatusCode.NoContent, accepted.StatusCode);
            }
        }

        using HttpResponseMessage response = await SendAsync(http, c.GetProperty("method").GetString()!, path, c.GetProperty("contentType").GetString(), c.GetProperty("body").GetString()!);

        string body = await response.Content.ReadAsStringAsync();
        Assert.True((int)response.StatusCode == c.GetProperty("status").GetInt32(), $"{name}: {(int)response.StatusCode} {body}");
        if (c.GetProperty("code").GetString() is { } code)
        {
            Assert.Equal("application/problem+json", response.Content.Headers.ContentType?.MediaType);
            Assert.Equal(code, JsonDocument.Parse(body).RootElement.GetProperty("code").GetString());
        }
        else if (response.StatusCode == HttpStatusCode.Created)
        {
            // A created session is a live one: it takes a subscription.
            string session = JsonDocument.Parse(body).RootElement.GetProperty("session").GetString()!;
            using HttpResponseMessage subscribed = await http.PostAsJsonAsync($"/poll/sessions/{session}/subscriptions", new { sid = 1, pattern = "vectors.>" });
            Assert.Equal(HttpStatusCode.NoContent, subscribed.StatusCode);
        }
    }

    /// <summary>Sends the body exactly as the file writes it: no content type (and no body) when it has none, the content type alone otherwise (no charset added).</summary>
    private static Task<HttpResponseMessage> SendAsync(HttpClient http, string method, string path, string? contentType, string body)
    {
        var request = new HttpRequestMessage(new HttpMethod(method), path);
        if (contentType is not null || body.Length > 0)
        {
            request.Content = new ByteArrayContent(Encoding.UTF8.GetBytes(body));
            if (contentType is not null)
            {
                request.Content.Headers.ContentType = new MediaTypeHeaderValue(contentType);
            }
        }

        return http.SendAsync(request);
    }
}
