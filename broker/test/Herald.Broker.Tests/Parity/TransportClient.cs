using System.Buffers;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests.Parity;

/// <summary>What the broker told a client about one operation: nothing (<see cref="ErrorCode.None"/>), a refusal, or a fatal error.</summary>
public readonly record struct Answer(ErrorCode Code, bool SessionEnded)
{
    public static Answer Ok => default;

    public override string ToString() => Code == ErrorCode.None ? "ok" : $"{Code}{(SessionEnded ? " (session ended)" : "")}";
}

/// <summary>
/// One client of the transport-parity suite: the session-level operations every transport offers, each
/// returning what the broker told the client in that transport's medium, so one test body runs against
/// every transport. An adapter only translates; it decides nothing. A new transport joins the suite by
/// adding its adapter to <see cref="Transports"/>.
/// </summary>
public abstract class TransportClient : IAsyncDisposable
{
    public const string Tcp = "tcp";

    /// <summary>A generous upper bound on a hang (a marker that never comes, a session that never ends): never evidence, only a way to fail instead of waiting forever.</summary>
    public static readonly TimeSpan HangBound = TimeSpan.FromSeconds(30);
    public const string LongPoll = "longpoll";

    /// <summary>WebSocket at /ws: the TCP frames over binary messages, so the TCP adapter over a WebSocket stream.</summary>
    public const string WebSocket = "websocket";

    /// <summary>Server-Sent Events at /sse: receives only, so it publishes through the session-less <c>POST /poll/publish</c> (sse §4).</summary>
    public const string Sse = "sse";

    public static TheoryData<string> Transports => [Tcp, LongPoll, WebSocket, Sse];

    /// <summary>The transports whose session publishes, unsubscribes and negotiates: all but SSE, whose stream only receives what its URL named (sse §4).</summary>
    public static TheoryData<string> TwoWayTransports => [Tcp, LongPoll, WebSocket];

    /// <summary>
    /// The bystander a test runs beside <paramref name="transport"/>: another transport each time (TCP beside
    /// long-poll, WebSocket beside TCP and SSE, long-poll beside WebSocket), so an attack on one transport is
    /// shown to leave clients of the others unharmed, each transport being the bystander of one run.
    /// </summary>
    public static string BystanderOf(string transport) => transport switch
    {
        Tcp => WebSocket,
        WebSocket => LongPoll,
        LongPoll => Tcp,
        Sse => WebSocket,
        _ => throw new ArgumentOutOfRangeException(nameof(transport)),
    };

    /// <summary>The inbox prefix the broker told this client (TCP: WELCOME; long-poll: the create response), spec §7.</summary>
    public string? InboxPrefix { get; protected init; }

    /// <summary>Non-fatal notices received (RateLimited, MessagesDropped), in order.</summary>
    public List<ErrorCode> Notices { get; } = [];

    /// <summary>
    /// Non-fatal errors the broker sent that were neither an operation's answer nor a notice: an ERROR between
    /// messages, a second ERROR for one operation, a notice no transport defines. A test asserts this is empty
    /// (see <see cref="AssertNoneUnexpected"/>), so a broker that reports a refusal nobody asked for fails it.
    /// </summary>
    public List<ErrorCode> Unexpected { get; } = [];

    /// <summary>Asserts that no client got an error it was not answered with, nor a notice (pass only clients the test expects no notice for).</summary>
    public static void AssertNoneUnexpected(params TransportClient[] clients)
    {
        foreach (TransportClient client in clients)
        {
            Assert.True(client.Unexpected.Count == 0, $"{client.GetType().Name} got errors no operation was answered with: {string.Join(", ", client.Unexpected)}");
            Assert.True(client.Notices.Count == 0, $"{client.GetType().Name} got notices the test did not expect: {string.Join(", ", client.Notices)}");
        }
    }

    /// <summary>Messages the broker said were dropped for this client (TCP: MessagesDropped counts; long-poll: Herald-Dropped).</summary>
    public long Dropped { get; protected set; }

    /// <summary>
    /// Whether a fatal protocol error (a bad topic, a duplicate sid) ends the session on this transport.
    /// TCP: yes (the byte stream cannot be trusted after it). Long-poll: no, HTTP delimits each request and
    /// only that request fails (protocol-spec/longpoll.md §3). Errors that end a client by policy
    /// (SlowConsumer, PermissionDenied when so configured, expiry, shutdown) end it on every transport.
    /// </summary>
    public abstract bool FatalErrorEndsSession { get; }

    /// <param name="headers">Negotiate headers (HELLO's capability, long-poll's <c>"headers": true</c>): needed to resume (spec §13).</param>
    public static async Task<TransportClient> OpenAsync(string transport, TestBroker broker, string? token = null, bool zstd = false, int? receiveBufferSize = null, bool headers = false) => transport switch
    {
        Tcp => await TcpTransportClient.OpenAsync(broker, token, zstd, receiveBufferSize, headers: headers),
        WebSocket => await TcpTransportClient.OpenAsync(broker, token, zstd, receiveBufferSize, overWebSocket: true, headers: headers),
        LongPoll => await LongPollTransportClient.OpenAsync(broker, token, zstd, headers),
        Sse => SseTransportClient.Open(broker, token, receiveBufferSize),
        _ => throw new ArgumentOutOfRangeException(nameof(transport)),
    };

    public abstract Task<Answer> SubscribeAsync(uint sid, string pattern, bool noEcho = false);

    /// <summary>A SUBSCRIBE resuming <paramref name="topic"/>'s history after <paramref name="since"/> (spec §13); the client must have opened with headers.</summary>
    public abstract Task<Answer> ResumeAsync(uint sid, string topic, StreamPosition since);

    public abstract Task<Answer> UnsubscribeAsync(uint sid);

    /// <summary>Publishes <paramref name="payloads"/> to <paramref name="topic"/> in one batch (one write on TCP, one frames body on long-poll).</summary>
    public abstract Task<Answer> PublishAsync(string topic, IReadOnlyList<byte[]> payloads, PayloadFlags flags = PayloadFlags.None, string? replyTo = null);

    public Task<Answer> PublishAsync(string topic, string payload, string? replyTo = null) => PublishAsync(topic, [Encoding.UTF8.GetBytes(payload)], replyTo: replyTo);

    /// <summary>The barrier: reads messages until one on <paramref name="markerTopic"/> arrives, and returns those before it.</summary>
    public abstract Task<List<Frame>> ReceiveUntilAsync(string markerTopic);

    /// <summary>Waits for the broker to end this client, and returns the reason it gave (TCP: the fatal ERROR; long-poll: the 410's reason).</summary>
    public abstract Task<ErrorCode> EndedWithAsync();

    public abstract ValueTask DisposeAsync();

    /// <summary>Subscribes to <paramref name="topic"/> as a member (spec §15.1: SUBSCRIBE's join bit, long-poll's <c>"join"</c>, SSE's <c>join=</c>); needs a client opened with headers.</summary>
    public abstract Task<Answer> JoinAsync(uint sid, string topic);

    /// <summary>The topic's number of members (spec §15.3 with limit 0: PRESENCE on a framed transport, <c>GET /presence</c> over HTTP), or the refusal with 0.</summary>
    public abstract Task<(Answer Answer, long Members)> OccupancyAsync(string topic);

    /// <summary><c>GET /presence?topic=T&amp;limit=0</c> (longpoll §6) with the client's own credential: the members, or the problem's code and 0.</summary>
    protected async Task<(Answer Answer, long Members)> OccupancyOverHttpAsync(HttpClient http, string topic)
    {
        using HttpResponseMessage response = await http.GetAsync($"/presence?topic={Uri.EscapeDataString(topic)}&limit=0");
        using JsonDocument body = JsonDocument.Parse(await response.Content.ReadAsStringAsync());
        if (!response.IsSuccessStatusCode)
        {
            return (AnswerOf(body.RootElement, ended: false), body.RootElement.TryGetProperty("members", out _) ? -1 : 0); // a refusal tells no count
        }

        return (await AnswerOfAsync(response, () => Task.FromResult(false)), body.RootElement.GetProperty("members").GetInt64()); // its notices noted
    }

    /// <summary>
    /// The answer to an HTTP operation (long-poll's session requests, the one-shot <c>POST /poll/publish</c>,
    /// an SSE stream's open): success, or the problem's code (<c>MalformedRequest</c> read as TCP's
    /// <c>MalformedFrame</c>), with whether the session still lives asked of <paramref name="ended"/>; a
    /// <c>Herald-Notice</c> is a notice when it names one (longpoll §3), otherwise unexpected.
    /// </summary>
    protected async Task<Answer> AnswerOfAsync(HttpResponseMessage response, Func<Task<bool>> ended)
    {
        if (response.Headers.TryGetValues("Herald-Notice", out IEnumerable<string>? notices))
        {
            foreach (string notice in notices)
            {
                ErrorCode code = Enum.Parse<ErrorCode>(notice);
                if (code == ErrorCode.RateLimited)
                {
                    Notice(code, 0);
                }
                else
                {
                    Unexpected.Add(code);
                }
            }
        }

        if (response.IsSuccessStatusCode)
        {
            return Answer.Ok;
        }

        JsonElement problem = await response.Content.ReadFromJsonAsync<JsonElement>();
        return AnswerOf(problem, await ended());
    }

    /// <summary>A long-poll publish body (longpoll §1.3): the PUBLISH frames of <paramref name="payloads"/>, back to back.</summary>
    protected static ByteArrayContent PublishBody(string topic, IReadOnlyList<byte[]> payloads, PayloadFlags flags, string? replyTo)
    {
        var frames = new ArrayBufferWriter<byte>();
        foreach (byte[] payload in payloads)
        {
            FrameWriter.WritePublish(frames, Encoding.UTF8.GetBytes(topic), replyTo is null ? default : Encoding.UTF8.GetBytes(replyTo), flags, payload);
        }

        var content = new ByteArrayContent(frames.WrittenMemory.ToArray());
        content.Headers.ContentType = new MediaTypeHeaderValue("application/vnd.herald.frames");
        return content;
    }

    protected static Answer AnswerOf(JsonElement problem, bool ended)
    {
        string code = problem.GetProperty("code").GetString()!;
        return new Answer(code == "MalformedRequest" ? ErrorCode.MalformedFrame : Enum.Parse<ErrorCode>(code), ended);
    }

    protected void Notice(ErrorCode code, ulong count)
    {
        Notices.Add(code);
        if (code == ErrorCode.MessagesDropped)
        {
            Dropped += (long)count;
        }
    }
}

/// <summary>TCP: operations are frames; what the broker says comes back as frames before the PONG of a PING sent after them.</summary>
internal sealed class TcpTransportClient : TransportClient
{
    private readonly ProtocolClient _client;
    private readonly Queue<Frame> _inbox = new();
    private ErrorCode? _endedWith;
    private uint _presenceRequests;

    private TcpTransportClient(ProtocolClient client) => _client = client;

    public override bool FatalErrorEndsSession => true;

    public static async Task<TransportClient> OpenAsync(TestBroker broker, string? token, bool zstd, int? receiveBufferSize, bool overWebSocket = false, bool headers = false)
    {
        ProtocolClient client = overWebSocket ? await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort) : await ProtocolClient.ConnectAsync(broker.Port, receiveBufferSize);
        Capabilities capabilities = (zstd ? Capabilities.Zstd : Capabilities.None) | (headers ? Capabilities.Headers | Capabilities.Presence : Capabilities.None);
        await client.SendAsync(w => FrameWriter.WriteHello(w, "parity", capabilities, token));
        Frame welcome = await client.ReadAsync();
        Assert.True(welcome.Type == FrameType.Welcome, $"Expected WELCOME, got {welcome}");
        return new TcpTransportClient(client) { InboxPrefix = welcome.Welcome?.InboxPrefix };
    }

    public override Task<Answer> SubscribeAsync(uint sid, string pattern, bool noEcho = false) =>
        SendAndBarrierAsync(w => FrameWriter.WriteSubscribe(w, sid, Encoding.UTF8.GetBytes(pattern), noEcho ? SubscribeOptions.NoEcho : SubscribeOptions.None));

    public override Task<Answer> ResumeAsync(uint sid, string topic, StreamPosition since) =>
        SendAndBarrierAsync(w => FrameWriter.WriteSubscribe(w, sid, Encoding.UTF8.GetBytes(topic), since: since));

    public override Task<Answer> UnsubscribeAsync(uint sid) => SendAndBarrierAsync(w => FrameWriter.WriteUnsubscribe(w, sid));

    public override Task<Answer> JoinAsync(uint sid, string topic) =>
        SendAndBarrierAsync(w => FrameWriter.WriteSubscribe(w, sid, Encoding.UTF8.GetBytes(topic), SubscribeOptions.Join));

    public override async Task<(Answer Answer, long Members)> OccupancyAsync(string topic)
    {
        uint request = ++_presenceRequests;
        await _client.SendAsync(w => FrameWriter.WritePresence(w, request, Encoding.UTF8.GetBytes(topic), 0));
        while (await NextAsync() is { } frame)
        {
            if (frame is { Type: FrameType.PresenceReply, Reply: { } reply } && reply.RequestId == request)
            {
                return (reply.Code == ErrorCode.None ? Answer.Ok : new Answer(reply.Code, SessionEnded: false), (long)reply.Members);
            }

            if (frame.Type == FrameType.Message)
            {
                _inbox.Enqueue(frame);
            }
            else
            {
                NoteStray(frame);
            }
        }

        return (new Answer(_endedWith ?? ErrorCode.None, SessionEnded: true), 0);
    }

    public override Task<Answer> PublishAsync(string topic, IReadOnlyList<byte[]> payloads, PayloadFlags flags = PayloadFlags.None, string? replyTo = null) =>
        SendAndBarrierAsync(w =>
        {
            foreach (byte[] payload in payloads)
            {
                FrameWriter.WritePublish(w, Encoding.UTF8.GetBytes(topic), replyTo is null ? default : Encoding.UTF8.GetBytes(replyTo), flags, payload);
            }
        });

    public override async Task<List<Frame>> ReceiveUntilAsync(string markerTopic)
    {
        var before = new List<Frame>();
        while (true)
        {
            Frame frame = _inbox.Count > 0 ? _inbox.Dequeue() : await NextAsync() ?? throw new Xunit.Sdk.XunitException($"The broker ended the connection ({_endedWith}) before the marker on '{markerTopic}'.");
            if (frame.Type != FrameType.Message)
            {
                NoteStray(frame);
                continue;
            }

            if (frame.Topic == markerTopic)
            {
                return before;
            }

            before.Add(frame);
        }
    }

    public override async Task<ErrorCode> EndedWithAsync()
    {
        while (_endedWith is null && await NextAsync() is { } frame)
        {
            NoteStray(frame);
        }

        return _endedWith ?? throw new Xunit.Sdk.XunitException("The connection closed without a fatal ERROR.");
    }

    public override ValueTask DisposeAsync() => _client.DisposeAsync();

    // Sends the operation and a PING in one write; the frames before the PONG say what became of it.
    private async Task<Answer> SendAndBarrierAsync(Action<IBufferWriter<byte>> write)
    {
        await _client.SendAsync(w =>
        {
            write(w);
            FrameWriter.WritePing(w);
        });
        Answer answer = Answer.Ok;
        while (await NextAsync() is { } frame)
        {
            switch (frame.Type)
            {
                case FrameType.Pong:
                    return answer;
                case FrameType.Message:
                    _inbox.Enqueue(frame);
                    break;
                case FrameType.Error when answer == Answer.Ok && IsRefusal(frame):
                    answer = new Answer(frame.Error!.Value.Code, SessionEnded: false);
                    break;
                default:
                    NoteStray(frame);
                    break;
            }
        }

        return new Answer(_endedWith ?? ErrorCode.None, SessionEnded: true);
    }

    // A non-fatal ERROR that is not a notice: a refusal (of the operation it answers, else unexpected).
    private static bool IsRefusal(Frame frame) => frame is { Type: FrameType.Error, Error: { Fatal: false } error } && error.Code is not (ErrorCode.RateLimited or ErrorCode.MessagesDropped);

    // A frame no operation was waiting for: a refusal there is unexpected (notices and the fatal ERROR are noted by NextAsync).
    private void NoteStray(Frame frame)
    {
        if (IsRefusal(frame))
        {
            Unexpected.Add(frame.Error!.Value.Code);
        }
    }

    // The next frame, with notices and the fatal ERROR noted; null once the broker closed the connection.
    private async Task<Frame?> NextAsync()
    {
        Frame? frame = await _client.TryReadAsync();
        if (frame is { Type: FrameType.Error, Error: { } error })
        {
            if (error.Fatal)
            {
                _endedWith = error.Code;
            }
            else if (error.Code is ErrorCode.RateLimited or ErrorCode.MessagesDropped)
            {
                Notice(error.Code, error.Count);
            }
        }

        return frame;
    }
}

/// <summary>Long-poll: operations are HTTP requests; the answer is the status and problem (longpoll §3); messages come by polling with acks.</summary>
internal sealed class LongPollTransportClient : TransportClient
{
    private readonly HttpClient _http;
    private readonly string _base;
    private readonly Queue<Frame> _inbox = new();
    private long _ack;

    private LongPollTransportClient(HttpClient http, string session)
    {
        _http = http;
        _base = $"/poll/sessions/{session}";
    }

    public override bool FatalErrorEndsSession => false;

    public static async Task<TransportClient> OpenAsync(TestBroker broker, string? token, bool zstd, bool headers = false)
    {
        var http = new HttpClient { BaseAddress = broker.Http.BaseAddress, Timeout = TimeSpan.FromSeconds(60) };
        if (token is not null)
        {
            http.DefaultRequestHeaders.Authorization = new AuthenticationHeaderValue("Bearer", token);
        }

        using HttpResponseMessage created = await http.PostAsJsonAsync("/poll/sessions", new { client = "parity", zstd, headers });
        Assert.Equal(HttpStatusCode.Created, created.StatusCode);
        JsonElement body = await created.Content.ReadFromJsonAsync<JsonElement>();
        return new LongPollTransportClient(http, body.GetProperty("session").GetString()!) { InboxPrefix = body.GetProperty("inboxPrefix").GetString() };
    }

    public override async Task<Answer> SubscribeAsync(uint sid, string pattern, bool noEcho = false)
    {
        using HttpResponseMessage response = await _http.PostAsJsonAsync($"{_base}/subscriptions", new { sid, pattern, noEcho });
        return await AnswerOfAsync(response);
    }

    public override async Task<Answer> ResumeAsync(uint sid, string topic, StreamPosition since)
    {
        using HttpResponseMessage response = await _http.PostAsJsonAsync($"{_base}/subscriptions", new { sid, pattern = topic, since = new { offset = since.Offset, epoch = since.Epoch } });
        return await AnswerOfAsync(response);
    }

    public override async Task<Answer> UnsubscribeAsync(uint sid)
    {
        using HttpResponseMessage response = await _http.DeleteAsync($"{_base}/subscriptions/{sid}");
        return await AnswerOfAsync(response);
    }

    public override async Task<Answer> JoinAsync(uint sid, string topic)
    {
        using HttpResponseMessage response = await _http.PostAsJsonAsync($"{_base}/subscriptions", new { sid, pattern = topic, join = true });
        return await AnswerOfAsync(response);
    }

    public override Task<(Answer Answer, long Members)> OccupancyAsync(string topic) => OccupancyOverHttpAsync(_http, topic);

    public override async Task<Answer> PublishAsync(string topic, IReadOnlyList<byte[]> payloads, PayloadFlags flags = PayloadFlags.None, string? replyTo = null)
    {
        using ByteArrayContent content = PublishBody(topic, payloads, flags, replyTo);
        using HttpResponseMessage response = await _http.PostAsync($"{_base}/publish", content);
        return await AnswerOfAsync(response);
    }

    public override async Task<List<Frame>> ReceiveUntilAsync(string markerTopic)
    {
        var before = new List<Frame>();
        using var hang = new CancellationTokenSource(HangBound);
        while (true)
        {
            if (_inbox.Count == 0)
            {
                Assert.False(hang.IsCancellationRequested, $"Hang bound: no marker on '{markerTopic}' within {HangBound}.");
                PollResult poll = await PollAsync();
                if (poll.Status != HttpStatusCode.OK)
                {
                    throw new Xunit.Sdk.XunitException($"The poll before the marker on '{markerTopic}' was answered {(int)poll.Status} {poll.Code}.");
                }

                continue;
            }

            Frame frame = _inbox.Dequeue();
            if (frame.Topic == markerTopic)
            {
                return before;
            }

            before.Add(frame);
        }
    }

    public override async Task<ErrorCode> EndedWithAsync()
    {
        using var hang = new CancellationTokenSource(HangBound);
        while (true)
        {
            Assert.False(hang.IsCancellationRequested, $"Hang bound: the session did not end within {HangBound}.");
            PollResult poll = await PollAsync();
            if (poll.Status == HttpStatusCode.Gone)
            {
                Assert.Equal("SessionExpired", poll.Code);
                return Enum.Parse<ErrorCode>(poll.Problem!.Value.GetProperty("reason").GetString()!);
            }

            Assert.Equal(HttpStatusCode.OK, poll.Status);
        }
    }

    public override ValueTask DisposeAsync()
    {
        _http.Dispose();
        return ValueTask.CompletedTask;
    }

    private async Task<PollResult> PollAsync()
    {
        using HttpResponseMessage response = await _http.GetAsync($"{_base}/messages?ack={_ack}");
        PollResult poll = await LongPollClient.ReadAsync(response);
        if (poll.Status == HttpStatusCode.OK)
        {
            Dropped += poll.Dropped;
            if (poll.Dropped > 0)
            {
                Notices.Add(ErrorCode.MessagesDropped);
            }

            foreach (Frame message in poll.Messages)
            {
                _inbox.Enqueue(message);
            }

            if (poll.Count > 0)
            {
                _ack = poll.LastSequence;
            }
        }

        return poll;
    }

    // A refusal is its problem's code; whether the session lives on is asked of the broker (a 410 says it ended).
    private Task<Answer> AnswerOfAsync(HttpResponseMessage response) => AnswerOfAsync(response, async () =>
    {
        using HttpResponseMessage probe = await _http.DeleteAsync($"{_base}/subscriptions/4294967295");
        return probe.StatusCode == HttpStatusCode.Gone;
    });
}
