using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Protocol;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// The HTTP long-poll transport (protocol-spec/longpoll.md): each handler parses its request, calls the
/// session's operation, and maps the answer onto HTTP (<see cref="HttpExchange"/>). Every rule a client is
/// held to is the session's (<see cref="ProtocolSession"/>); poll responses stream the shared MESSAGE bytes
/// (or their JSON form) from the session's backlog, within <c>MaxBytesPerPoll</c> as written.
/// </summary>
internal static class LongPollEndpoints
{
    public const string FramesMediaType = "application/vnd.herald.frames";

    /// <summary>A non-fatal notice the session raised while carrying the request out (longpoll §3), e.g. <c>RateLimited</c>.</summary>
    public const string NoticeHeader = "Herald-Notice";

    public static void MapLongPoll(this IEndpointRouteBuilder app)
    {
        RouteGroupBuilder poll = app.MapGroup("/poll");
        poll.MapPost("/sessions", Create);
        poll.MapDelete("/sessions/{session}", (HttpContext c, string session) => InSession(c, session, (owner, _) =>
        {
            owner.Leave();
            c.Response.StatusCode = StatusCodes.Status204NoContent;
            return Task.CompletedTask;
        }));
        poll.MapPost("/sessions/{session}/subscriptions", Subscribe);
        poll.MapDelete("/sessions/{session}/subscriptions/{sid}", (HttpContext c, string session, string sid) => InSession(c, session, async (owner, _) =>
        {
            Refusal refusal = uint.TryParse(sid, out uint id) ? owner.Unsubscribe(id) : new Refusal(ErrorCode.UnknownSubscription, $"No live subscription with id {sid}.");
            await HoldAsync(c, owner).ConfigureAwait(false);
            HttpExchange.Answer(c, refusal, StatusCodes.Status204NoContent, NoticeHeader);
        }));
        poll.MapPost("/sessions/{session}/publish", (HttpContext c, string session) => InSession(c, session, (owner, store) => PublishAsync(c, store, owner)));
        poll.MapGet("/sessions/{session}/messages", Poll);
        poll.MapPost("/publish", PublishOneShot);
    }

    /// <summary>Create (longpoll §1.1): the credential from the headers first; only then a pending slot and the body.</summary>
    private static Task Create(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        PollSessionStore store = StoreOf(context);
        Identity identity = await HttpExchange.AuthenticateAsync(context, store.Broker, PollSession.TransportName).ConfigureAwait(false);
        LongPollOptions options = store.Options;
        PollSession session;
        using (store.Admit(context, creating: true))
        {
            CreateSessionRequest? request = await HttpExchange.ReadJsonAsync(context, options.MaxBodyBytes, LongPollJsonContext.Default.CreateSessionRequest).ConfigureAwait(false);
            Capabilities requested = (request?.Zstd == true ? Capabilities.Zstd : Capabilities.None)
                | (request?.Headers == true ? Capabilities.Headers : Capabilities.None)
                | (request?.NoResponders == true ? Capabilities.NoResponders : Capabilities.None)
                | (request?.History == true ? Capabilities.History : Capabilities.None);
            session = store.Create(identity, request?.Client, requested, HttpExchange.RemoteOf(context));
        }

        context.Response.StatusCode = StatusCodes.Status201Created;
        context.Response.Headers.Location = $"/poll/sessions/{session.Token}";
        await context.Response.WriteAsJsonAsync(
            new CreateSessionResponse(
                session.Token,
                (long)options.PollTimeout.TotalMilliseconds,
                (long)options.InactivityTimeout.TotalMilliseconds,
                options.MaxMessagesPerPoll,
                options.MaxBytesPerPoll,
                options.MaxPendingMessagesPerSession,
                store.Broker.Limits.MaxTopicLength,
                options.MaxBodyBytes,
                session.Backlog.AcceptsZstd,
                session.Identity.InboxPrefix,
                session.Backlog.AcceptsHeaders,
                session.GrantsNoResponders,
                store.Broker.Limits.MaxHeaders,
                store.Broker.Limits.MaxHeaderBytes,
                session.GrantsHistory),
            LongPollJsonContext.Default.CreateSessionResponse).ConfigureAwait(false);
    });

    private static Task Subscribe(HttpContext context, string session) => InSession(context, session, async (owner, store) =>
    {
        SubscribeRequest request = await HttpExchange.ReadJsonAsync(context, store.Options.MaxBodyBytes, LongPollJsonContext.Default.SubscribeRequest).ConfigureAwait(false)
            ?? throw HttpProblem.Malformed("The body must be a JSON object.");
        if (request.Sid is not { } sid || sid is < 0 or > uint.MaxValue)
        {
            throw HttpProblem.Malformed("sid is required: an integer from 1 to 4294967295.");
        }

        string pattern = request.Pattern ?? throw HttpProblem.Malformed("pattern is required.");
        StreamPosition? since = request.Since switch
        {
            null => null,
            { Offset: { } offset, Epoch: { } epoch } when Encoding.UTF8.GetByteCount(epoch) <= StreamPosition.MaxEpochBytes => new StreamPosition(offset, epoch),
            _ => throw HttpProblem.Malformed($"since must be {{\"offset\": <unsigned integer>, \"epoch\": <string of at most {StreamPosition.MaxEpochBytes} bytes>}}."),
        };
        Refusal refusal = owner.Subscribe((uint)sid, new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(pattern)), request.NoEcho ?? false, since);
        owner.FlushTouched(); // a resume queued its status and what was missed: a held poll takes them now
        await HoldAsync(context, owner).ConfigureAwait(false);
        HttpExchange.Answer(context, refusal, StatusCodes.Status204NoContent, NoticeHeader);
    });

    /// <summary>
    /// Over one of the session's rates, the answer waits its <see cref="ProtocolSession.Throttle"/> (as TCP stops
    /// reading); in a cluster, a subscription change is answered once Redis has it (as TCP's PONG).
    /// </summary>
    private static async Task HoldAsync(HttpContext context, PollSession owner)
    {
        while (owner.Throttle is { Ticks: > 0 } pause) // again if a timer fired early: never before the debt is paid
        {
            await Task.Delay(pause, context.RequestAborted).ConfigureAwait(false);
        }

        if (owner.AwaitsInterest)
        {
            await owner.InterestSettledAsync().WaitAsync(context.RequestAborted).ConfigureAwait(false);
        }
    }

    /// <summary>One-shot publish: a session of one request, sharing the rate bucket of its identity (auth on) or address.</summary>
    private static Task PublishOneShot(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        PollSessionStore store = StoreOf(context);
        Identity identity = await HttpExchange.AuthenticateAsync(context, store.Broker, PollSession.TransportName).ConfigureAwait(false);
        PollSession owner = store.OneShot(identity, HttpExchange.RemoteOf(context));
        await owner.Requests.WaitAsync(context.RequestAborted).ConfigureAwait(false);
        try
        {
            owner.Open(identity, clientName: null, Capabilities.Headers); // this request's credential, the bucket its owner's; headers may be published (longpoll §1.3)
            owner.Touch();
            await PublishAsync(context, store, owner).ConfigureAwait(false);
        }
        finally
        {
            owner.Requests.Release();
        }
    });

    /// <summary>
    /// A raw payload (topic from the query) or a body of PUBLISH frames (longpoll §1.3), published by the
    /// session: all checked before any is routed. Over the session's publish rate, the answer waits the
    /// session's <see cref="ProtocolSession.Throttle"/> (as TCP stops reading) and carries the notice.
    /// </summary>
    private static async Task PublishAsync(HttpContext context, PollSessionStore store, PollSession owner)
    {
        LongPollOptions options = store.Options;
        ReadOnlySequence<byte> frames;
        using (store.Admit(context, creating: false))
        {
            frames = await HttpExchange.ReadBodyAsync(context, options.MaxBodyBytes).ConfigureAwait(false);
        }

        if (context.Request.ContentType?.StartsWith(FramesMediaType, StringComparison.OrdinalIgnoreCase) != true)
        {
            string topic = context.Request.Query["topic"].FirstOrDefault() ?? throw HttpProblem.Malformed("The topic query parameter is required.");
            string? replyTo = context.Request.Query["replyTo"];
            byte[] headers = RawHeaders(context.Request.Query["header"]);
            var encoded = new ArrayBufferWriter<byte>((int)frames.Length + topic.Length + headers.Length + 32);
            FrameWriter.WritePublish(encoded, Encoding.UTF8.GetBytes(topic), replyTo is null ? default : Encoding.UTF8.GetBytes(replyTo), PayloadFlags.None, frames.FirstSpan, headers);
            frames = new ReadOnlySequence<byte>(encoded.WrittenMemory);
        }

        if (!owner.Input.TryEnter())
        {
            throw HttpProblem.Unavailable("ShuttingDown", "The broker is shutting down.", 5); // nothing of it was routed
        }

        Refusal refusal;
        try
        {
            refusal = owner.PublishAll(frames, store.Broker.Metrics.FanoutEnabled ? Stopwatch.GetTimestamp() : 0, options.MaxDecompressedBytesPerBody);
        }
        finally
        {
            owner.FlushTouched();
            owner.Input.Exit();
        }

        await HoldAsync(context, owner).ConfigureAwait(false);
        HttpExchange.Answer(context, refusal, StatusCodes.Status202Accepted, NoticeHeader);
    }

    /// <summary>
    /// A raw publish's headers (longpoll §1.3): each <c>header=Key:Value</c> of the query, in order; values of
    /// keys equal ignoring ASCII case join the first key's spelling. Judged by the session as a PUBLISH's
    /// header block is (a bad key or value: 400 MalformedRequest). None: an empty array (no block).
    /// </summary>
    private static byte[] RawHeaders(Microsoft.Extensions.Primitives.StringValues query)
    {
        if (query.Count == 0)
        {
            return [];
        }

        var headers = new List<KeyValuePair<string, List<string>>>();
        foreach (string? item in query)
        {
            int colon = item?.IndexOf(':', StringComparison.Ordinal) ?? -1;
            if (colon < 0)
            {
                throw HttpProblem.Malformed("A header query parameter is Key:Value.");
            }

            string key = item![..colon];
            int at = headers.FindIndex(h => string.Equals(h.Key, key, StringComparison.OrdinalIgnoreCase));
            if (at < 0)
            {
                headers.Add(new(key, []));
                at = headers.Count - 1;
            }

            headers[at].Value.Add(item[(colon + 1)..]);
        }

        return HeaderBlock.Encode(headers.Select(h => new KeyValuePair<string, string[]>(h.Key, [.. h.Value])));
    }

    /// <summary>The long poll (longpoll §2): immediate when messages wait above <c>ack</c>, else held.</summary>
    private static Task Poll(HttpContext context, string session) => HttpExchange.Handle(context, async () =>
    {
        PollSessionStore store = StoreOf(context);
        PollSession owner = await store.OwnedAsync(context, session).ConfigureAwait(false);
        bool json = context.Request.Headers.Accept.ToString().Contains("application/json", StringComparison.OrdinalIgnoreCase);
        long ack = 0;
        if (context.Request.Query["ack"].ToString() is { Length: > 0 } ackText && !long.TryParse(ackText, out ack))
        {
            throw HttpProblem.Malformed("ack must be an integer.");
        }

        store.BeginPoll();
        WindowTake take = default;
        try
        {
            take = await owner.PollAsync(ack, context.RequestAborted).ConfigureAwait(false);
            if (context.RequestAborted.IsCancellationRequested)
            {
                return; // the client went away
            }

            (int count, long bytes) = json ? JsonHeaders(context.Response, take, ack, store.Options.MaxBytesPerPoll) : FramesHeaders(context.Response, take);
            store.Broker.Metrics.Sent(PollSession.TransportName, count, bytes);
            await (json ? MessageJson.WriteAsync(context.Response.BodyWriter, take, count, ack) : FrameCopy.WriteAllAsync(context.Response.BodyWriter, take)).ConfigureAwait(false);
        }
        finally
        {
            take.Release();
            store.EndPoll();
        }
    });

    /// <summary>The binary body's headers (longpoll §2.1): the shared MESSAGE frames, back to back, each sid stamped in.</summary>
    private static (int Count, long Bytes) FramesHeaders(HttpResponse response, WindowTake take)
    {
        response.ContentType = FramesMediaType;
        response.ContentLength = take.Bytes;
        SetSequenceHeaders(response, take.FirstSequence, take.Count, take.Dropped);
        return (take.Count, take.Bytes);
    }

    /// <summary>The JSON body's headers (longpoll §2.2): as many messages as fit <c>MaxBytesPerPoll</c> as written (at least one); the others come next poll.</summary>
    private static (int Count, long Bytes) JsonHeaders(HttpResponse response, WindowTake take, long ack, int maxBytes)
    {
        int count = MessageJson.Fit(take, ack, maxBytes, out long length);
        response.ContentType = "application/json";
        response.ContentLength = length;
        SetSequenceHeaders(response, take.FirstSequence, count, take.Dropped);
        return (count, length);
    }

    private static void SetSequenceHeaders(HttpResponse response, long firstSequence, int count, long dropped)
    {
        response.Headers["Herald-First-Sequence"] = firstSequence.ToString(CultureInfo.InvariantCulture);
        response.Headers["Herald-Count"] = count.ToString(CultureInfo.InvariantCulture);
        response.Headers["Herald-Dropped"] = dropped.ToString(CultureInfo.InvariantCulture);
    }

    /// <summary>
    /// Runs a request on a session as its one caller (<see cref="PollSession.Requests"/>), after checking the
    /// owner's credential. A fatal error that ends a client by policy (PermissionDenied with
    /// <c>DisconnectOnPermissionDenied</c>) ends the session; others only fail the request (longpoll §3).
    /// </summary>
    private static Task InSession(HttpContext context, string token, Func<PollSession, PollSessionStore, Task> handler) => HttpExchange.Handle(context, async () =>
    {
        PollSessionStore store = StoreOf(context);
        PollSession owner = await store.OwnedAsync(context, token).ConfigureAwait(false);
        await owner.Requests.WaitAsync(context.RequestAborted).ConfigureAwait(false);
        try
        {
            await handler(owner, store).ConfigureAwait(false);
        }
        catch (ProtocolException e) when (e.Code == ErrorCode.PermissionDenied)
        {
            owner.Close(e.Code, e.Message);
            throw;
        }
        finally
        {
            owner.Requests.Release();
        }
    });

    private static PollSessionStore StoreOf(HttpContext context) => context.RequestServices.GetRequiredService<PollSessionStore>();
}
