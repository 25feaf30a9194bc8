using System.Net;
using System.Net.Http.Headers;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests.Parity;

/// <summary>
/// Server-Sent Events: one stream is the client's session, and its subscriptions are fixed by its URL (sse §4),
/// so a subscribe (or resume) opens a stream naming every topic so far plus the new one, and only once the
/// broker accepted it closes the old one: a refusal (sse §1: the status and problem before any stream) leaves
/// the old stream as it was, as a refused SUBSCRIBE leaves a TCP session. Publishing goes through the
/// session-less <c>POST /poll/publish</c>, the way the spec tells a receive-only client to publish.
/// </summary>
internal sealed class SseTransportClient : TransportClient
{
    private readonly int _httpPort;
    private readonly string? _token;
    private readonly int? _receiveBuffer;
    private readonly HttpClient _publisher;
    private readonly List<(uint Sid, string Topic, string? Since, bool Join)> _topics = [];
    private SseClient? _stream;
    private ErrorCode? _endedWith;

    private SseTransportClient(TestBroker broker, string? token, int? receiveBuffer)
    {
        _httpPort = broker.HttpPort;
        _token = token;
        _receiveBuffer = receiveBuffer;
        _publisher = new HttpClient { BaseAddress = broker.Http.BaseAddress, Timeout = TimeSpan.FromSeconds(60) };
        if (token is not null)
        {
            _publisher.DefaultRequestHeaders.Authorization = new AuthenticationHeaderValue("Bearer", token);
        }
    }

    /// <summary>HTTP delimits each stream's open: a refused one fails alone, as a long-poll request does (sse §1).</summary>
    public override bool FatalErrorEndsSession => false;

    public static TransportClient Open(TestBroker broker, string? token, int? receiveBuffer) => new SseTransportClient(broker, token, receiveBuffer);

    /// <summary>A stream has no NoEcho: it publishes nothing of its own (tests that need it run on <see cref="TransportClient.TwoWayTransports"/>).</summary>
    public override Task<Answer> SubscribeAsync(uint sid, string pattern, bool noEcho = false) =>
        noEcho ? throw new NotSupportedException("An SSE stream publishes nothing, so it has no NoEcho (sse §4).") : ReopenWithAsync(sid, pattern, since: null);

    public override Task<Answer> ResumeAsync(uint sid, string topic, StreamPosition since) =>
        ReopenWithAsync(sid, topic, $"{since.Offset}:{since.Epoch}");

    public override Task<Answer> JoinAsync(uint sid, string topic) => ReopenWithAsync(sid, topic, since: null, join: true);

    public override Task<(Answer Answer, long Members)> OccupancyAsync(string topic) => OccupancyOverHttpAsync(_publisher, topic);

    public override Task<Answer> UnsubscribeAsync(uint sid) =>
        throw new NotSupportedException("An SSE stream's subscriptions are fixed by its URL: there is no UNSUBSCRIBE (sse §4).");

    public override async Task<Answer> PublishAsync(string topic, IReadOnlyList<byte[]> payloads, PayloadFlags flags = PayloadFlags.None, string? replyTo = null)
    {
        using ByteArrayContent content = PublishBody(topic, payloads, flags, replyTo);
        using HttpResponseMessage response = await _publisher.PostAsync("/poll/publish", content);
        return await AnswerOfAsync(response, () => Task.FromResult(false)); // a one-shot publish is a session of one request: the stream lives on
    }

    public override async Task<List<Frame>> ReceiveUntilAsync(string markerTopic)
    {
        var before = new List<Frame>();
        while (true)
        {
            Frame frame = await NextMessageAsync() ?? throw new Xunit.Sdk.XunitException($"The broker ended the stream ({_endedWith}) before the marker on '{markerTopic}'.");
            if (frame.Topic == markerTopic)
            {
                return before;
            }

            before.Add(frame);
        }
    }

    public override async Task<ErrorCode> EndedWithAsync()
    {
        while (await NextMessageAsync() is not null)
        {
        }

        return _endedWith ?? throw new Xunit.Sdk.XunitException("The stream ended without an error event.");
    }

    public override async ValueTask DisposeAsync()
    {
        if (_stream is not null)
        {
            await _stream.DisposeAsync();
        }

        _publisher.Dispose();
    }

    // Opens the stream of every topic so far plus this one (resumed ones with their Last-Event-ID entry, the
    // others '-'); the old stream is closed only once the new one is live.
    private async Task<Answer> ReopenWithAsync(uint sid, string topic, string? since, bool join = false)
    {
        List<(uint Sid, string Topic, string? Since, bool Join)> topics = [.. _topics, (sid, topic, since, join)];
        string query = string.Join('&', topics.Select(t => "topic=" + Uri.EscapeDataString(t.Topic) + (t.Join ? "&join=" + Uri.EscapeDataString(t.Topic) : ""))) + "&client=parity";
        string? lastEventId = topics.Any(t => t.Since is not null) ? string.Join(',', topics.Select(t => t.Since ?? "-")) : null;
        (SseClient? stream, HttpStatusCode _, JsonElement problem) = await SseClient.TryOpenAsync(_httpPort, query, lastEventId, _token, _receiveBuffer);
        if (stream is null)
        {
            return AnswerOf(problem, ended: false);
        }

        if (_stream is not null)
        {
            await _stream.DisposeAsync();
        }

        _stream = stream;
        _topics.Add((sid, topic, since, join));
        return Answer.Ok;
    }

    // The next message event as a MESSAGE frame (sid: the test's, from the stream's URL position); status
    // events are skipped, dropped events are notices, an error event ends the stream. Null at its end.
    private async Task<Frame?> NextMessageAsync()
    {
        if (_stream is null)
        {
            throw new InvalidOperationException("No stream: the client subscribed to nothing.");
        }

        while (await _stream.ReadEventOrEndAsync(HangBound) is { } e)
        {
            switch (e.Type)
            {
                case "message":
                    JsonElement m = e.Json;
                    return new Frame(FrameType.Message, _topics[m.GetProperty("sid").GetInt32() - 1].Sid, m.GetProperty("topic").GetString()!, m.GetProperty("replyTo").GetString(), m.GetProperty("payload").GetBytesFromBase64())
                    {
                        Headers = m.TryGetProperty("headers", out JsonElement h)
                            ? [.. h.EnumerateObject().Select(p => new KeyValuePair<string, string[]>(p.Name, [.. p.Value.EnumerateArray().Select(v => v.GetString()!)]))]
                            : null,
                    };
                case "status":
                    break;
                case "dropped":
                    Notice(ErrorCode.MessagesDropped, e.Json.GetProperty("dropped").GetUInt64());
                    break;
                case "error":
                    _endedWith = Enum.Parse<ErrorCode>(e.Json.GetProperty("code").GetString()!);
                    break;
                default:
                    throw new Xunit.Sdk.XunitException($"An event type sse §2 does not define: '{e.Type}'.");
            }
        }

        return null;
    }
}
