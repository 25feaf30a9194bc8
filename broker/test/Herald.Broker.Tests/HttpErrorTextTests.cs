using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using System.Text.RegularExpressions;
using Herald.Broker.Tests.Infrastructure;

namespace Herald.Broker.Tests;

/// <summary>
/// What the HTTP endpoints (long-poll, SSE, WebSocket upgrade) say when a request is wrong, over real HTTP:
/// a wrong-typed JSON field is named with the JSON type it takes (<c>'pattern' must be a string.</c>), under
/// the spec's code (400 <c>MalformedRequest</c>, longpoll §3), and no refusal's text names a .NET type or
/// carries the serializer's own wording.
/// </summary>
public sealed partial class HttpErrorTextTests
{
    [Theory]
    [InlineData("", """{"client": 5}""", "'client' must be a string.")]
    [InlineData("", """{"zstd": "yes"}""", "'zstd' must be a boolean (true or false).")]
    [InlineData("", """{"history": 1}""", "'history' must be a boolean (true or false).")]
    [InlineData("subscriptions", """{"sid": "one", "pattern": "a"}""", "'sid' must be an integer.")]
    [InlineData("subscriptions", """{"sid": 1.5, "pattern": "a"}""", "'sid' must be an integer.")]
    [InlineData("subscriptions", """{"sid": 1, "pattern": 5}""", "'pattern' must be a string.")]
    [InlineData("subscriptions", """{"sid": 1, "pattern": "a", "noEcho": "no"}""", "'noEcho' must be a boolean (true or false).")]
    [InlineData("subscriptions", """{"sid": 1, "pattern": "a", "queue": ["q"]}""", "'queue' must be a string.")]
    [InlineData("subscriptions", """{"sid": 1, "pattern": "a", "since": 7}""", "'since' must be a JSON object.")]
    [InlineData("subscriptions", """{"sid": 1, "pattern": "a", "since": {"offset": "7", "epoch": "e"}}""", "'since.offset' must be a non-negative integer.")]
    [InlineData("subscriptions", """{"sid": 1, "pattern": "a", "since": {"offset": -1, "epoch": "e"}}""", "'since.offset' must be a non-negative integer.")]
    [InlineData("subscriptions", """{"sid": 1, "pattern": "a", "since": {"offset": 7, "epoch": 3}}""", "'since.epoch' must be a string.")]
    [InlineData("subscriptions", """[{"sid": 1, "pattern": "a"}]""", "The body must be a JSON object.")]
    [InlineData("subscriptions", """{"sid": 1, "pattern": }""", "The body is not valid JSON (line 1, byte 23).")]
    public async Task A_wrong_typed_field_is_named_with_the_JSON_type_it_takes(string path, string body, string expected)
    {
        await using var broker = await TestBroker.StartAsync();
        string target = "/poll/sessions";
        if (path.Length > 0)
        {
            LongPollClient session = await LongPollClient.CreateAsync(broker.Http);
            target = $"{session.Base}/{path}";
        }

        using HttpResponseMessage refused = await broker.Http.PostAsync(target, new StringContent(body, Encoding.UTF8, "application/json"));
        (HttpStatusCode status, string code, string detail) = await ProblemOf(refused);
        Assert.Equal((HttpStatusCode.BadRequest, "MalformedRequest", expected), (status, code, detail));
    }

    [Fact]
    public async Task No_refusal_on_the_HTTP_endpoints_names_a_NET_type()
    {
        await using var broker = await TestBroker.StartAsync();
        LongPollClient session = await LongPollClient.CreateAsync(broker.Http);
        string[] bodies =
        [
            """{"sid": "1"}""", """{"sid": true}""", """{"sid": 99999999999999999999}""", """{"sid": {}}""", """{"sid": 1, "pattern": null, "since": []}""",
            """{"sid": 1, "pattern": "a", "since": {"offset": 1e3}}""", "5", "\"text\"", "null", "{", "{\"sid\": 1 2}", "\uFEFF{}x",
        ];
        var requests = new List<HttpRequestMessage>();
        foreach (string body in bodies)
        {
            requests.Add(new HttpRequestMessage(HttpMethod.Post, $"{session.Base}/subscriptions") { Content = new StringContent(body, Encoding.UTF8, "application/json") });
        }

        foreach (string body in new[] { """{"client": 1}""", """{"zstd": "true"}""", """{"headers": 0}""", """{"noResponders": []}""", """{"history": {}}""", "5", "{", "null" })
        {
            requests.Add(new HttpRequestMessage(HttpMethod.Post, "/poll/sessions") { Content = new StringContent(body, Encoding.UTF8, "application/json") });
        }

        foreach (string query in new[] { "ack=x", "ack=-5", "ack=99", "ack=1e3", "ack=99999999999999999999" })
        {
            requests.Add(new HttpRequestMessage(HttpMethod.Get, $"{session.Base}/messages?{query}"));
        }

        requests.Add(new HttpRequestMessage(HttpMethod.Delete, $"{session.Base}/subscriptions/abc"));
        requests.Add(new HttpRequestMessage(HttpMethod.Delete, $"{session.Base}/subscriptions/99999999999"));
        requests.Add(new HttpRequestMessage(HttpMethod.Post, $"{session.Base}/publish") { Content = new StringContent("x") });
        requests.Add(new HttpRequestMessage(HttpMethod.Post, $"{session.Base}/publish?topic=a&header=nocolon") { Content = new StringContent("x") });
        requests.Add(new HttpRequestMessage(HttpMethod.Post, "/poll/publish?topic=") { Content = new StringContent("x") });
        requests.Add(new HttpRequestMessage(HttpMethod.Post, "/poll/publish?topic=a..b") { Content = new StringContent("x") });
        requests.Add(new HttpRequestMessage(HttpMethod.Post, "/poll/sessions/no-such-session/subscriptions") { Content = new StringContent("{}", Encoding.UTF8, "application/json") });
        requests.Add(new HttpRequestMessage(HttpMethod.Get, "/sse"));
        requests.Add(new HttpRequestMessage(HttpMethod.Get, "/sse?topic=a&format=xml"));
        requests.Add(new HttpRequestMessage(HttpMethod.Get, "/sse?topic=a..b"));
        var resume = new HttpRequestMessage(HttpMethod.Get, "/sse?topic=a");
        resume.Headers.TryAddWithoutValidation("Last-Event-ID", "x:y:z,1");
        requests.Add(resume);
        requests.Add(new HttpRequestMessage(HttpMethod.Get, "/ws"));

        var refusals = new List<string>();
        foreach (HttpRequestMessage request in requests)
        {
            using (request)
            {
                if (request.RequestUri!.OriginalString.Contains("/messages", StringComparison.Ordinal))
                {
                    request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
                }

                using HttpResponseMessage response = await broker.Http.SendAsync(request);
                Assert.True(response.StatusCode >= HttpStatusCode.BadRequest, $"{request.Method} {request.RequestUri} was answered {(int)response.StatusCode}");
                refusals.Add($"{request.Method} {request.RequestUri} -> {(int)response.StatusCode} {await response.Content.ReadAsStringAsync()}");
            }
        }

        Assert.All(refusals, refusal => Assert.DoesNotMatch(InternalText(), refusal));
    }

    private static async Task<(HttpStatusCode Status, string Code, string Detail)> ProblemOf(HttpResponseMessage response)
    {
        JsonElement problem = await response.Content.ReadFromJsonAsync<JsonElement>();
        return (response.StatusCode, problem.GetProperty("title").GetString()!, problem.GetProperty("detail").GetString()!);
    }

    /// <summary>.NET type names and the serializer's or an argument exception's own wording.</summary>
    [GeneratedRegex(@"System\.|Microsoft\.|Herald\.|Nullable|\b(U?Int(16|32|64)|Boolean|Double|Decimal|JsonElement|JsonException)\b|`1|Path: \$|LineNumber|BytePositionInLine|\(Parameter '")]
    private static partial Regex InternalText();
}
