using System.Buffers;
using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text;
using System.Text.Json;
using Herald.Protocol;

namespace Herald.Client.Transports.LongPoll;

/// <summary>
/// The HTTP long-poll transport (protocol-spec/longpoll.md): one session is one "connection". Creating
/// the session is the handshake; subscriptions are JSON requests; publications are PUBLISH frames POSTed
/// as a frames body (one POST per batch, split at <c>maxBodyBytes</c>); and one poll at a time fetches
/// the MESSAGE frames, binary, acknowledging what it received with the next poll's <c>ack</c>, so a
/// response lost on the way is sent again and nothing is lost or duplicated (longpoll §2).
/// </summary>
/// <remarks>
/// A poll that fails on the way (no answer) is tried again with the same <c>ack</c> (the session keeps the
/// messages): at once, then after <see cref="HeraldClientOptions.ReconnectDelay"/>, doubling up to
/// <see cref="HeraldClientOptions.MaxReconnectDelay"/>, for <see cref="MaxUnanswered"/> (and never past the
/// session's inactivity timeout since the last answer): in a cluster, a balancer may send the next poll to another
/// node, which serves the same session (cluster.md §10). A session the broker no longer knows (404, 410), a broker
/// shutting down (503), or polls unanswered for longer is a lost connection: the client creates a new session and
/// subscribes again.
/// </remarks>
internal sealed class LongPollConnection : BrokerConnection
{
    public const string FramesMediaType = "application/vnd.herald.frames";

    /// <summary>
    /// How long polls may go unanswered in a row (refused, reset, timed out) before the connection is lost: long
    /// enough for a balancer to send the next poll to another node of a cluster, short enough that a broker that
    /// is gone is noticed (state <see cref="ConnectionState.Reconnecting"/>, publications buffered) in seconds,
    /// not after the session's inactivity timeout (60 s by default).
    /// </summary>
    private static readonly TimeSpan MaxUnanswered = TimeSpan.FromSeconds(5);

    /// <summary>How much longer than the broker's poll timeout a held poll may take before it counts as failed.</summary>
    private static readonly TimeSpan PollGrace = TimeSpan.FromSeconds(10);

    private static readonly MediaTypeHeaderValue FramesContentType = new(FramesMediaType);

    private readonly HttpClient _http;
    private readonly Uri _base;
    private Uri? _session;
    private bool _serverSubscriptions; // granted at create (longpoll §1.4): notices are read from the poll answers
    private TimeSpan _pollTimeout;
    private TimeSpan _inactivityTimeout;
    private string? _credential;

    public LongPollConnection(HeraldClient client, HeraldClientOptions options, BrokerAddress address, HttpClient http)
        : base(client, options)
    {
        _http = http;
        _base = address.HttpBase!;
    }

    public override bool SubscribesInline => false;

    /// <summary>The first sid of the broker's half (spec §4.10): only its subscriptions' MESSAGEs may be notices.</summary>
    private const uint ServerSids = 0x8000_0000;

    /// <summary>
    /// A MESSAGE of a broker's sid whose header block carries <c>Herald-Subscribed</c> or <c>Herald-Unsubscribed</c>
    /// (longpoll §1.4): the subscription made, as TCP's SUBSCRIBED makes it, or ended, as an <c>Unsubscribed</c> ERROR naming
    /// it ends it. False for any other message (a presence event, a message with headers of its own).
    /// </summary>
    private bool ServerNotice(in PublishFrame message)
    {
        foreach (KeyValuePair<string, string[]> header in HeaderBlock.Read(message.Headers))
        {
            if (header.Key == ProtocolConstants.SubscribedHeader && header.Value is [string bits] && uint.TryParse(bits, NumberStyles.None, CultureInfo.InvariantCulture, out uint options))
            {
                Client.AcceptServerSubscription(new SubscribedFrame(message.Sid, message.TopicString, (SubscribeOptions)options), this);
                return true;
            }

            if (header.Key == ProtocolConstants.UnsubscribedHeader)
            {
                Client.Revoke(message.Sid, new HeraldException(ErrorCode.Unsubscribed, $"The broker ended subscription {message.Sid}: {string.Join(' ', header.Value)}") { Sid = message.Sid });
                return true;
            }
        }

        return false;
    }

    /// <summary>Creates the session (longpoll §1.1); the credential goes as a bearer token, on this and on every request of the session.</summary>
    public override async Task OpenAsync(string? credential, CancellationToken cancellationToken)
    {
        _credential = credential;
        Capabilities asked = Options.Capabilities;
        var body = new CreateSessionRequest
        {
            Client = Options.ClientName,
            Zstd = (asked & Capabilities.Zstd) != 0,
            Headers = (asked & Capabilities.Headers) != 0,
            NoResponders = (asked & Capabilities.NoResponders) != 0,
            History = (asked & Capabilities.History) != 0,
            Info = Options.Info,
            ServerSubscriptions = (asked & Capabilities.ServerSubscriptions) != 0 && (asked & Capabilities.Headers) != 0,
            Deltas = (asked & Capabilities.Deltas) != 0,
        };
        using HttpResponseMessage response = await SendAsync(
            () =>
            {
                return new HttpRequestMessage(HttpMethod.Post, new Uri(_base, "poll/sessions")) { Content = JsonContent.Create(body, LongPollJsonContext.Default.CreateSessionRequest) };
            },
            "Creating a long-poll session",
            cancellationToken).ConfigureAwait(false);
        if (response.StatusCode != HttpStatusCode.Created)
        {
            throw await RefusedAsync(response, "creating a session", cancellationToken, creating: true).ConfigureAwait(false);
        }

        CreateSessionResponse session = await response.Content.ReadFromJsonAsync(LongPollJsonContext.Default.CreateSessionResponse, cancellationToken).ConfigureAwait(false)
            ?? throw new HeraldException("The broker answered the session creation with no body.");
        if (string.IsNullOrEmpty(session.Session))
        {
            throw new HeraldException("The broker answered the session creation without a session token.");
        }

        _session = new Uri(_base, $"poll/sessions/{Uri.EscapeDataString(session.Session)}/");
        _pollTimeout = TimeSpan.FromMilliseconds(Math.Max(session.PollTimeoutMs, 0));
        _inactivityTimeout = TimeSpan.FromMilliseconds(Math.Max(session.InactivityTimeoutMs, 0));
        MaxBody = session.MaxBodyBytes is > ProtocolConstants.LengthPrefixSize and <= int.MaxValue ? (int)session.MaxBodyBytes - ProtocolConstants.LengthPrefixSize : int.MaxValue;
        MaxTopic = session.MaxTopicLength is > 0 and <= int.MaxValue ? (int)session.MaxTopicLength : int.MaxValue;
        var limits = new Dictionary<string, ulong>(StringComparer.Ordinal)
        {
            ["pollTimeoutMs"] = (ulong)Math.Max(session.PollTimeoutMs, 0),
            ["inactivityTimeoutMs"] = (ulong)Math.Max(session.InactivityTimeoutMs, 0),
            ["maxMessagesPerPoll"] = (ulong)Math.Max(session.MaxMessagesPerPoll, 0),
            ["maxBytesPerPoll"] = (ulong)Math.Max(session.MaxBytesPerPoll, 0),
            ["maxPendingMessages"] = (ulong)Math.Max(session.MaxPendingMessages, 0),
            ["maxTopicLength"] = (ulong)Math.Max(session.MaxTopicLength, 0),
            ["maxBodyBytes"] = (ulong)Math.Max(session.MaxBodyBytes, 0),
            ["maxHeaders"] = (ulong)Math.Max(session.MaxHeaders, 0),
            ["maxHeaderBytes"] = (ulong)Math.Max(session.MaxHeaderBytes, 0),
        };
        bool headers = session.Headers && body.Headers;
        Info = new HeraldServerInfo(HeraldTransport.LongPoll, serverName: null, connectionId: null, port: null, session.Zstd && body.Zstd, limits, session.InboxPrefix, headers, headers && session.NoResponders && body.NoResponders, headers && session.History && body.History, session.QueueGroups, headers && session.Presence);
        _serverSubscriptions = headers && body.ServerSubscriptions && session.ServerSubscriptions;
        MaxHeaders = session.MaxHeaders is > 0 and <= int.MaxValue ? (int)session.MaxHeaders : int.MaxValue;
        MaxHeaderBytes = session.MaxHeaderBytes is > 0 and <= int.MaxValue ? (int)session.MaxHeaderBytes : int.MaxValue;

        StartWriter();
        _ = Task.Run(PollLoopAsync, CancellationToken.None);
    }

    public override async Task SubscribeAsync(HeraldSubscription subscription, CancellationToken cancellationToken)
    {
        if (Refusal(subscription) is { } refused)
        {
            throw refused; // never sent as a plain subscription
        }

        // A queue group member never resumes (SinceFor gives it no position): the two never travel together (spec §4.3).
        var body = new SubscribeRequest
        {
            Sid = subscription.Sid,
            Pattern = subscription.Pattern,
            NoEcho = (subscription.WireOptions & SubscribeOptions.NoEcho) != 0,
            Since = subscription.SinceFor(Info.History) is { } since ? new SinceBody { Offset = since.Offset, Epoch = since.Epoch } : null,
            Queue = subscription.Queue,
            Join = (subscription.WireOptions & SubscribeOptions.Join) != 0,
            Presence = (subscription.WireOptions & SubscribeOptions.PresenceEvents) != 0,
            Delta = (subscription.WireOptions & SubscribeOptions.Delta) != 0,
        };
        if (body.Since is not null && body.Queue is not null)
        {
            throw new HeraldException(ErrorCode.MalformedFrame, $"The subscription to '{subscription.Pattern}' would carry both a queue group and a history position (spec §4.3); it was not sent.");
        }

        using HttpResponseMessage response = await SendAsync(
            () => new HttpRequestMessage(HttpMethod.Post, new Uri(_session!, "subscriptions")) { Content = JsonContent.Create(body, LongPollJsonContext.Default.SubscribeRequest) },
            "Subscribing",
            cancellationToken).ConfigureAwait(false);
        if (response.StatusCode != HttpStatusCode.NoContent)
        {
            throw await RefusedAsync(response, $"the subscription to '{subscription.Pattern}'", cancellationToken).ConfigureAwait(false);
        }
    }

    public override async Task UnsubscribeAsync(uint sid, CancellationToken cancellationToken)
    {
        using HttpResponseMessage response = await SendAsync(
            () => new HttpRequestMessage(HttpMethod.Delete, new Uri(_session!, $"subscriptions/{sid.ToString(CultureInfo.InvariantCulture)}")),
            "Unsubscribing",
            cancellationToken).ConfigureAwait(false);
        if (response.StatusCode is not (HttpStatusCode.NoContent or HttpStatusCode.NotFound))
        {
            throw await RefusedAsync(response, $"unsubscribing sid {sid}", cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>
    /// A topic's presence over HTTP (longpoll §6): <c>GET /presence</c> with the session's credential, answered as the
    /// PRESENCE_REPLY it stands for. Its refusals (403 <c>PermissionDenied</c>, 400 <c>InvalidTopic</c>, 503
    /// <c>PresenceUnavailable</c>) become the reply's code, as on TCP; any other failure is thrown.
    /// </summary>
    public override async Task<PresenceReplyFrame> PresenceAsync(byte[] topic, ulong limit, string? cursor, CancellationToken cancellationToken)
    {
        string name = Encoding.UTF8.GetString(topic);
        if (!Info.Presence)
        {
            throw new HeraldException(ErrorCode.UnexpectedFrame, $"Asking who is on '{name}' needs presence, and {PresenceNotGranted("long-poll session")} Nothing was sent.");
        }

        string query = $"presence?topic={Uri.EscapeDataString(name)}&limit={limit.ToString(CultureInfo.InvariantCulture)}" + (cursor is null ? "" : "&cursor=" + Uri.EscapeDataString(cursor));
        using HttpResponseMessage response = await SendAsync(() => new HttpRequestMessage(HttpMethod.Get, new Uri(_base, query)), $"Asking who is on '{name}'", cancellationToken).ConfigureAwait(false);
        if (response.StatusCode != HttpStatusCode.OK)
        {
            HeraldException refused = await RefusedAsync(response, $"the presence query of '{name}'", cancellationToken).ConfigureAwait(false);
            ErrorCode code = refused.ProblemCode switch
            {
                "PermissionDenied" => ErrorCode.PermissionDenied,
                "InvalidTopic" => ErrorCode.InvalidTopic,
                "PresenceUnavailable" => ErrorCode.PresenceUnavailable,
                _ => throw refused,
            };
            return new PresenceReplyFrame(0, code, 0, 0, [], null);
        }

        PresenceAnswer answer = await response.Content.ReadFromJsonAsync(LongPollJsonContext.Default.PresenceAnswer, cancellationToken).ConfigureAwait(false)
            ?? throw new HeraldException($"The broker answered the presence query of '{name}' with no body.");
        var entries = new List<PresenceEntry>(answer.Entries?.Count ?? 0);
        foreach (PresenceAnswerEntry entry in answer.Entries ?? [])
        {
            entries.Add(new PresenceEntry(entry.Client ?? "", entry.Identity ?? "", entry.Info));
        }

        return new PresenceReplyFrame(0, ErrorCode.None, answer.Members, answer.Identities, entries, answer.Next);
    }

    /// <summary>A publish request is answered once its frames are routed: waiting for the writer is a flush.</summary>
    public override Task FlushAsync(CancellationToken cancellationToken) => Outbound.WhenWrittenAsync().WaitAsync(cancellationToken);

    /// <summary>POSTs a batch of PUBLISH frames as one or more frames bodies of at most <c>maxBodyBytes</c> (longpoll §1.3).</summary>
    protected override async ValueTask WriteAsync(ReadOnlyMemory<byte> frames, CancellationToken cancellationToken)
    {
        int maxBody = MaxBody == int.MaxValue ? int.MaxValue : MaxBody + ProtocolConstants.LengthPrefixSize;
        while (!frames.IsEmpty)
        {
            int length = ChunkLength(frames.Span, maxBody);
            await PostFramesAsync(frames[..length], cancellationToken).ConfigureAwait(false);
            frames = frames[length..];
        }
    }

    protected override async ValueTask CloseAsync()
    {
        if (_session is null)
        {
            return;
        }

        // Ending the session at once frees its subscriptions instead of waiting for the inactivity timeout.
        try
        {
            using var timeout = new CancellationTokenSource(Options.CloseTimeout);
            using var request = new HttpRequestMessage(HttpMethod.Delete, _session);
            Own(request);
            using HttpResponseMessage response = await _http.SendAsync(request, timeout.Token).ConfigureAwait(false);
        }
        catch (Exception e) when (e is HttpRequestException or OperationCanceledException)
        {
            // The broker is gone or slow: the session ends by itself.
        }
    }

    private async Task PostFramesAsync(ReadOnlyMemory<byte> body, CancellationToken cancellationToken)
    {
        using HttpResponseMessage response = await SendAsync(
            () => new HttpRequestMessage(HttpMethod.Post, new Uri(_session!, "publish")) { Content = new ReadOnlyMemoryContent(body) { Headers = { ContentType = FramesContentType } } },
            "Publishing",
            cancellationToken).ConfigureAwait(false);
        if (response.StatusCode == HttpStatusCode.Accepted)
        {
            return;
        }

        HeraldException refused = await RefusedAsync(response, "a batch of publications", cancellationToken).ConfigureAwait(false);
        if (refused is HeraldConnectionException)
        {
            throw refused; // the session is gone: the connection is lost
        }

        // All or none (longpoll §1.3): this batch was not routed; the session carries on.
        Client.ReportError(refused);
    }

    /// <summary>
    /// The poll loop (longpoll §2): one poll at a time, binary, each acknowledging what the previous
    /// returned. Messages are handed to their subscriptions before the next poll acknowledges them.
    /// </summary>
    private async Task PollLoopAsync()
    {
        CancellationToken lifetime = Lifetime;
        long ack = 0;
        int failures = 0;
        long answered = Environment.TickCount64; // the last time the broker answered a poll
        long failingSince = 0; // when the polls in a row that got no answer began
        var messages = new List<HeraldMessage>();
        try
        {
            while (true)
            {
                HttpResponseMessage response;
                using (var timeout = CancellationTokenSource.CreateLinkedTokenSource(lifetime))
                {
                    timeout.CancelAfter(_pollTimeout + PollGrace);
                    try
                    {
                        using var request = new HttpRequestMessage(HttpMethod.Get, new Uri(_session!, $"messages?ack={ack.ToString(CultureInfo.InvariantCulture)}"));
                        request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue(FramesMediaType));
                        Own(request);
                        response = await _http.SendAsync(request, HttpCompletionOption.ResponseContentRead, timeout.Token).ConfigureAwait(false);
                    }
                    catch (Exception e) when ((e is HttpRequestException or OperationCanceledException) && !lifetime.IsCancellationRequested)
                    {
                        long now = Environment.TickCount64;
                        failingSince = failures == 0 ? now : Math.Max(failingSince, answered); // an answer in between starts a new streak
                        if (now - answered > (long)_inactivityTimeout.TotalMilliseconds || now - failingSince > (long)MaxUnanswered.TotalMilliseconds)
                        {
                            Fail(new HeraldConnectionException($"Polling the broker failed for {TimeSpan.FromMilliseconds(now - failingSince).TotalSeconds:0.###} s (the client keeps its session through {MaxUnanswered.TotalSeconds:0} s of failed polls, within the session's inactivity timeout of {_inactivityTimeout.TotalSeconds:0.###} s): {e.Message}", e));
                            return;
                        }

                        if (++failures > 1)
                        {
                            await Task.Delay(RetryDelay(failures - 1), lifetime).ConfigureAwait(false);
                        }

                        continue; // the session still holds every message above ack (on whichever node answers next): ask again
                    }
                }

                answered = Environment.TickCount64;

                using (response)
                {
                    if (response.StatusCode == HttpStatusCode.OK)
                    {
                        failures = 0;
                        PollPage page = PollPage.FromHeaders(response.Headers);
                        byte[] body = await response.Content.ReadAsByteArrayAsync(lifetime).ConfigureAwait(false);
                        messages.Clear();
                        PollBody.Read(new ReadOnlySequence<byte>(body), page, Options.MaxIncomingFrameBytes, (long _, in PublishFrame message) =>
                        {
                            if (_serverSubscriptions && message.Sid >= ServerSids && message.HasHeaders && ServerNotice(message))
                            {
                                return; // the backend made or ended a subscription (longpoll §1.4): not a message
                            }

                            if (Materialize(message) is { } m)
                            {
                                messages.Add(m);
                            }
                        });
                        foreach (uint sid in page.Gaps)
                        {
                            Client.FindSubscription(sid)?.ReportGap(); // told as a resume that did not recover (spec §13's 410)
                        }

                        if (page.Dropped > 0)
                        {
                            Client.ReportError(new HeraldException(ErrorCode.MessagesDropped, $"The broker dropped {page.Dropped} messages of this session (its slow-consumer policy, or shed on their way in from another cluster node).") { Count = (ulong)page.Dropped });
                        }

                        foreach (HeraldMessage message in messages)
                        {
                            await DeliverAsync(message, lifetime).ConfigureAwait(false);
                        }

                        ack = page.NextAck(ack);
                        continue;
                    }

                    if (response.StatusCode == HttpStatusCode.Conflict)
                    {
                        continue; // PollReplaced: a poll of ours the broker had not yet seen end; this one carries on
                    }

                    HeraldException refused = await RefusedAsync(response, "a poll", lifetime).ConfigureAwait(false);
                    if (IsTransient(refused.ProblemCode))
                    {
                        await Task.Delay(RetryAfter(response), lifetime).ConfigureAwait(false); // over capacity, or a cluster moving the session: the session waits
                        continue;
                    }

                    if (refused is HeraldConnectionException || ++failures >= 2)
                    {
                        Fail(refused);
                        return;
                    }
                }
            }
        }
        catch (OperationCanceledException) when (lifetime.IsCancellationRequested)
        {
            // Lost or closed.
        }
        catch (ProtocolException e)
        {
            Fail(new HeraldException(e.Code, $"The broker sent an invalid poll response: {e.Message}", e));
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Fail(LostBecause("Polling the broker failed", e));
        }
    }

    /// <summary>Adds the credential (longpoll §1.1): with authentication on, a session's requests carry its owner's.</summary>
    private void Own(HttpRequestMessage request)
    {
        if (_credential is not null)
        {
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", _credential);
        }
    }

    /// <summary>Sends a request; a transport failure is a <see cref="HeraldConnectionException"/>.</summary>
    private async Task<HttpResponseMessage> SendAsync(Func<HttpRequestMessage> create, string what, CancellationToken cancellationToken)
    {
        using HttpRequestMessage request = create();
        Own(request);
        try
        {
            return await _http.SendAsync(request, HttpCompletionOption.ResponseContentRead, cancellationToken).ConfigureAwait(false);
        }
        catch (HttpRequestException e)
        {
            throw new HeraldConnectionException($"{what} failed: {e.Message}", e);
        }
    }

    /// <summary>
    /// The exception for a refusal (longpoll §3): the problem's <c>code</c> as an <see cref="ErrorCode"/>
    /// where the protocol has one; a <see cref="HeraldConnectionException"/> when the session is gone (404,
    /// 410) or the broker is stopping or full (503), which the client answers by reconnecting. A 503
    /// <c>PresenceUnavailable</c> refuses the one request (a join, a presence query), not the session.
    /// </summary>
    /// <param name="creating">The answer to creating the session: a 400 there (say, a client info over the broker's bound) is the request's own fault, which no reconnect fixes.</param>
    private static async Task<HeraldException> RefusedAsync(HttpResponseMessage response, string what, CancellationToken cancellationToken, bool creating = false)
    {
        Problem? problem = null;
        try
        {
            if (response.Content.Headers.ContentType?.MediaType is { } type && type.Contains("json", StringComparison.OrdinalIgnoreCase))
            {
                problem = await response.Content.ReadFromJsonAsync(LongPollJsonContext.Default.Problem, cancellationToken).ConfigureAwait(false);
            }
        }
        catch (JsonException)
        {
            // Not a problem document: the status says enough.
        }

        int status = (int)response.StatusCode;
        string code = problem?.Code ?? problem?.Title ?? response.StatusCode.ToString();
        string message = $"The broker refused {what}: {status} {code}{(problem?.Detail is { Length: > 0 } detail ? ": " + detail : "")}";
        if (response.StatusCode == HttpStatusCode.Gone && problem?.Reason is nameof(ErrorCode.Disconnected) or nameof(ErrorCode.Revoked))
        {
            // The application's backend ended the session (spec §8): told as the fatal ERROR would be on TCP, never reconnected.
            return new HeraldException(Enum.Parse<ErrorCode>(problem.Reason), message) { ProblemCode = code, HttpStatus = status, IsFatal = true };
        }

        if (!IsTransient(code) && code != "PresenceUnavailable" && response.StatusCode is HttpStatusCode.NotFound or HttpStatusCode.Gone or HttpStatusCode.ServiceUnavailable)
        {
            return new HeraldConnectionException(message) { ProblemCode = code, HttpStatus = status };
        }

        ErrorCode errorCode = Enum.TryParse(code, ignoreCase: false, out ErrorCode parsed) && Enum.IsDefined(parsed) && !int.TryParse(code, out _) ? parsed : ErrorCode.None;
        return new HeraldException(errorCode, message) { ProblemCode = code, HttpStatus = status, RefusedHello = creating && status == 400 };
    }

    /// <summary>The pause before the <paramref name="attempt"/>-th retry of a poll: the reconnect delay, doubling, capped, jittered (half to all).</summary>
    private TimeSpan RetryDelay(int attempt)
    {
        double ms = Math.Min(Options.MaxReconnectDelay.TotalMilliseconds, Options.ReconnectDelay.TotalMilliseconds * Math.Pow(2, Math.Min(attempt - 1, 20)));
        return TimeSpan.FromMilliseconds(ms * (0.5 + (Random.Shared.NextDouble() / 2)));
    }

    /// <summary>
    /// A 503 after which the session is still there (longpoll §3): too many polls held, or, in a cluster, Redis or the
    /// node owning the session not answering for now (cluster.md §10). Tried again after <c>Retry-After</c>.
    /// </summary>
    private static bool IsTransient(string? code) => code is "TooManyPolls" or "ClusterUnavailable" or "OwnerUnavailable";

    private static TimeSpan RetryAfter(HttpResponseMessage response) =>
        response.Headers.RetryAfter?.Delta is { } delta && delta > TimeSpan.Zero ? TimeSpan.FromTicks(Math.Min(delta.Ticks, TimeSpan.FromSeconds(30).Ticks)) : TimeSpan.FromSeconds(1);

    /// <summary>Bytes of the longest run of whole frames at the front of <paramref name="frames"/> that fits in <paramref name="maxBody"/> (at least one frame).</summary>
    private static int ChunkLength(ReadOnlySpan<byte> frames, int maxBody)
    {
        int length = 0;
        while (length < frames.Length)
        {
            int next = ProtocolConstants.LengthPrefixSize + (int)System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(frames[length..]);
            if (length > 0 && (long)length + next > maxBody)
            {
                break;
            }

            length += next;
        }

        return length;
    }
}
