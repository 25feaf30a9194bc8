using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using System.Text;
using Herald.Broker.Engines;
using Herald.Broker.Engines.PollSharing;
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

    /// <summary>The sids that may have lost messages just before a poll's first one, how many unknown (longpoll §2.1).</summary>
    public const string GapsHeader = "Herald-Gaps";

    public static void MapLongPoll(this IEndpointRouteBuilder app)
    {
        RouteGroupBuilder poll = app.MapGroup("/poll");
        poll.MapPost("/sessions", Create);
        poll.MapDelete("/sessions/{session}", (HttpContext c, string session) => InSession(c, session, (_, _) => Task.FromResult(new SessionCommand { Op = Ops.End })));
        poll.MapPost("/sessions/{session}/subscriptions", (HttpContext c, string session) => InSession(c, session, ReadSubscribeAsync));
        poll.MapDelete("/sessions/{session}/subscriptions/{sid}", (HttpContext c, string session, string sid) => InSession(c, session, (_, _) =>
            uint.TryParse(sid, out uint id) ? Task.FromResult(new SessionCommand { Op = Ops.Unsubscribe, Sid = id }) : throw new HttpProblem(StatusCodes.Status404NotFound, nameof(ErrorCode.UnknownSubscription), $"No live subscription with id {sid}.")));
        poll.MapPost("/sessions/{session}/publish", (HttpContext c, string session) => InSession(c, session, ReadPublishAsync));
        poll.MapGet("/sessions/{session}/messages", Poll);
        poll.MapPost("/publish", PublishOneShot);
        app.MapPresence(); // GET /presence: for every HTTP client, with its own credential (longpoll §6)
    }

    /// <summary>Create (longpoll §1.1): the credential from the headers first; only then a pending slot and the body.</summary>
    private static Task Create(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        PollSessionStore store = StoreOf(context);
        Identity identity = await HttpExchange.AuthenticateAsync(context, store.Broker, PollSession.TransportName).ConfigureAwait(false);
        LongPollOptions options = store.Options;
        CreateSessionRequest? request;
        using (store.Admission.Admit(context, creating: true))
        {
            request = await HttpExchange.ReadJsonAsync(context, options.MaxBodyBytes, LongPollJsonContext.Default.CreateSessionRequest).ConfigureAwait(false);
        }

        string? info = ProtocolSession.CheckedInfo(store.Broker, request?.Info); // over the limit: 400, nothing made

        // The admission bounds bodies being read; a cluster's Redis round trip (making the session's state) comes after it.
        Capabilities requested = (request?.Zstd == true ? Capabilities.Zstd : Capabilities.None)
            | (request?.Headers == true ? Capabilities.Headers : Capabilities.None)
            | (request?.NoResponders == true ? Capabilities.NoResponders : Capabilities.None)
            | (request?.History == true ? Capabilities.History : Capabilities.None)
            | Capabilities.QueueGroups // a session's subscribe may always name one (longpoll §1.2); the answer says so
            | Capabilities.Presence // granted with headers (spec §4.1 bit 5); the answer says so
            | (request?.ServerSubscriptions == true ? Capabilities.ServerSubscriptions : Capabilities.None) // granted with headers (longpoll §1.4)
            | (request?.Deltas == true ? Capabilities.Deltas : Capabilities.None);
        PollSession session = await store.CreateAsync(identity, request?.Client, requested, HttpExchange.RemoteOf(context), info).ConfigureAwait(false);

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
                session.GrantsHistory,
                session.GrantsQueueGroups,
                session.GrantsPresence,
                store.Broker.Presence.Options.MaxInfoBytes,
                session.PresenceClient,
                request?.ServerSubscriptions == true ? session.GrantsServerSubscriptions : null,
                request?.Deltas == true ? session.GrantsDeltas : null),
            LongPollJsonContext.Default.CreateSessionResponse).ConfigureAwait(false);
    });

    /// <summary>A subscribe request's body (longpoll §1.2), checked here, carried out by the session's owner.</summary>
    private static async Task<SessionCommand> ReadSubscribeAsync(HttpContext context, PollSessionStore store)
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
        return new SessionCommand { Op = Ops.Subscribe, Sid = (uint)sid, Pattern = pattern, NoEcho = request.NoEcho ?? false, SinceOffset = since?.Offset, SinceEpoch = since?.Epoch, Queue = request.Queue is { Length: > 0 } queue ? queue : null, Join = request.Join ?? false, PresenceEvents = request.Presence ?? false, Delta = request.Delta ?? false };
    }

    /// <summary>A publish request's body (longpoll §1.3) as PUBLISH frames: a raw payload (topic from the query) is framed here.</summary>
    private static async Task<SessionCommand> ReadPublishAsync(HttpContext context, PollSessionStore store) =>
        new() { Op = Ops.Publish, Frames = (await ReadFramesAsync(context, store).ConfigureAwait(false)).ToArray() };

    /// <summary>
    /// Carries out a request on the session, as its one caller (<see cref="PollSession.Requests"/>): here, or on
    /// this node for a request another node received (spec cluster.md §10). A fatal error that ends a client by
    /// policy (PermissionDenied with <c>DisconnectOnPermissionDenied</c>) ends the session; others only fail the
    /// request (longpoll §3). In a cluster a subscription is recorded in the session's state before it is answered.
    /// </summary>
    public static async Task<SessionReply> RunAsync(PollSession owner, PollSessionStore store, SessionCommand command, CancellationToken cancellation)
    {
        if (!await owner.Requests.WaitAsync(WaitFor(command), cancellation).ConfigureAwait(false))
        {
            throw PollProblems.OwnerUnavailable(); // past the sender's deadline: it has answered 503, and the client tries again
        }

        try
        {
            owner.Touch();
            Refusal refusal;
            int status;
            switch (command.Op)
            {
                case Ops.End:
                    owner.Leave();
                    await owner.SharedEnd.ConfigureAwait(false); // every node answers 410 once this is answered
                    return new SessionReply { Status = StatusCodes.Status204NoContent };
                case Ops.Subscribe:
                    StreamPosition? since = command.SinceOffset is { } offset ? new StreamPosition(offset, command.SinceEpoch ?? "") : null;
                    SubscribeOptions presence = (command.Join ? SubscribeOptions.Join : SubscribeOptions.None) | (command.PresenceEvents ? SubscribeOptions.PresenceEvents : SubscribeOptions.None)
                        | (command.Delta ? SubscribeOptions.Delta : SubscribeOptions.None);
                    var pattern = new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(command.Pattern ?? ""));
                    refusal = await owner.DecidedAsync(() => owner.Subscribe(command.Sid, pattern, command.NoEcho, since, command.Queue, presence), cancellation).ConfigureAwait(false);
                    owner.FlushTouched(); // a resume queued its status and what was missed: a held poll takes them now
                    status = StatusCodes.Status204NoContent;
                    if (command.Join && refusal.Code is ErrorCode.None or ErrorCode.RateLimited && await owner.JoinDecidedAsync(command.Sid).WaitAsync(cancellation).ConfigureAwait(false) is { IsNone: false } late)
                    {
                        refusal = late; // a cluster refused the join after the subscription was made: ended, nothing subscribed
                        break;
                    }

                    if (owner.Shared is { IsShared: true } shared && refusal.Code is ErrorCode.None or ErrorCode.RateLimited)
                    {
                        await Recorded(owner, shared.SubscriptionAsync(owner.Token, command.Sid, command.Pattern, presence | (command.NoEcho ? SubscribeOptions.NoEcho : SubscribeOptions.None), since is { } at ? $"{at.Offset} {at.Epoch}" : null, command.Queue)).ConfigureAwait(false);
                    }

                    break;
                case Ops.Unsubscribe:
                    refusal = owner.Unsubscribe(command.Sid);
                    status = StatusCodes.Status204NoContent;
                    if (owner.Shared is { IsShared: true } sharing && refusal.Code is ErrorCode.None or ErrorCode.RateLimited)
                    {
                        await Recorded(owner, sharing.SubscriptionAsync(owner.Token, command.Sid, null, SubscribeOptions.None)).ConfigureAwait(false);
                    }

                    break;
                case Ops.Publish:
                    var frames = new ReadOnlySequence<byte>(command.Frames ?? []);
                    refusal = await owner.DecidedAsync(() => Publish(store, owner, frames), cancellation).ConfigureAwait(false);
                    status = StatusCodes.Status202Accepted;
                    break;
                default:
                    throw HttpProblem.Malformed($"Unknown operation '{command.Op}'.");
            }

            await HoldAsync(owner, cancellation).ConfigureAwait(false); // a refusal waits out the rate's debt too
            (int Status, string? Notice) outcome = HttpExchange.Outcome(refusal, status);
            return new SessionReply { Status = outcome.Status, Notice = outcome.Notice };
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
    }

    /// <summary>
    /// A subscription change in the shared session's state. Refused when another node took the session over
    /// meanwhile (this node's lease expired): the session is let go here, and the client, told to try again,
    /// reaches the node that has it.
    /// </summary>
    private static async Task Recorded(PollSession owner, Task<bool> write)
    {
        bool held;
        try
        {
            held = await write.ConfigureAwait(false);
        }
        catch (ClusterUnavailableException e)
        {
            throw PollProblems.ClusterUnavailable(e);
        }

        if (!held)
        {
            owner.Moved();
            throw HttpProblem.Unavailable("OwnerUnavailable", "The session moved to another node meanwhile; try again.", 1);
        }
    }

    /// <summary>
    /// Over one of the session's rates, the answer waits its <see cref="ProtocolSession.Throttle"/> (as TCP stops
    /// reading); in a cluster, a subscription change is answered once Redis has it (as TCP's PONG).
    /// </summary>
    internal static async Task HoldAsync(PollSession owner, CancellationToken cancellation)
    {
        while (owner.Throttle is { Ticks: > 0 } pause) // again if a timer fired early: never before the debt is paid
        {
            await Task.Delay(pause, cancellation).ConfigureAwait(false);
        }

        owner.ThrottleServed();

        if (owner.AwaitsInterest)
        {
            await owner.InterestSettledAsync().WaitAsync(cancellation).ConfigureAwait(false);
        }
    }

    /// <summary>One-shot publish: a session of one request, sharing the rate bucket of its identity (auth on) or address.</summary>
    private static Task PublishOneShot(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        PollSessionStore store = StoreOf(context);
        Identity identity = await HttpExchange.AuthenticateAsync(context, store.Broker, PollSession.TransportName).ConfigureAwait(false);
        PollSession owner = store.OneShots.Of(identity, HttpExchange.RemoteOf(context));
        await owner.Requests.WaitAsync(context.RequestAborted).ConfigureAwait(false);
        try
        {
            owner.Open(identity, clientName: null, Capabilities.Headers); // this request's credential, the bucket its owner's; headers may be published (longpoll §1.3)
            owner.Touch();
            ReadOnlySequence<byte> frames = await ReadFramesAsync(context, store).ConfigureAwait(false);
            (int status, string? notice) = HttpExchange.Outcome(await owner.DecidedAsync(() => Publish(store, owner, frames), context.RequestAborted).ConfigureAwait(false), StatusCodes.Status202Accepted);
            await HoldAsync(owner, context.RequestAborted).ConfigureAwait(false);
            Write(context, new SessionReply { Status = status, Notice = notice });
        }
        finally
        {
            owner.Requests.Release();
        }
    });

    /// <summary>A raw payload (topic from the query) or a body of PUBLISH frames (longpoll §1.3), as PUBLISH frames.</summary>
    private static async Task<ReadOnlySequence<byte>> ReadFramesAsync(HttpContext context, PollSessionStore store)
    {
        LongPollOptions options = store.Options;
        ReadOnlySequence<byte> frames;
        using (store.Admission.Admit(context, creating: false))
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

        return frames;
    }

    /// <summary>
    /// Publishes the frames as the session: all checked before any is routed. Over the session's publish rate,
    /// the answer waits the session's <see cref="ProtocolSession.Throttle"/> (as TCP stops reading) and carries the notice.
    /// </summary>
    private static Refusal Publish(PollSessionStore store, PollSession owner, ReadOnlySequence<byte> frames)
    {
        if (!owner.Input.TryEnter())
        {
            throw HttpProblem.Unavailable("ShuttingDown", "The broker is shutting down.", 5); // nothing of it was routed
        }

        try
        {
            return owner.PublishAll(frames, store.Broker.Metrics.FanoutEnabled ? Stopwatch.GetTimestamp() : 0, store.Options.MaxDecompressedBytesPerBody);
        }
        finally
        {
            owner.FlushTouched();
            owner.Input.Exit();
        }
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
        PollSessionStore.Located at = !store.Shared.IsShared ? new(await store.OwnedAsync(context, session).ConfigureAwait(false), null, null) : await store.LocateAsync(context, session).ConfigureAwait(false);
        bool json = context.Request.Headers.Accept.ToString().Contains("application/json", StringComparison.OrdinalIgnoreCase);
        long ack = 0;
        if (context.Request.Query["ack"].ToString() is { Length: > 0 } ackText && !long.TryParse(ackText, out ack))
        {
            throw HttpProblem.Malformed("ack must be an integer.");
        }

        store.Admission.BeginPoll();
        WindowTake take = default;
        try
        {
            take = !store.Shared.IsShared ? await at.Local!.PollAsync(ack, context.RequestAborted).ConfigureAwait(false) : await store.SharedPolls.PollAsync(at, session, ack, context.RequestAborted).ConfigureAwait(false);
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
            store.Admission.EndPoll();
        }
    });

    /// <summary>The binary body's headers (longpoll §2.1): the shared MESSAGE frames, back to back, each sid stamped in.</summary>
    private static (int Count, long Bytes) FramesHeaders(HttpResponse response, WindowTake take)
    {
        response.ContentType = FramesMediaType;
        response.ContentLength = take.Bytes;
        SetSequenceHeaders(response, take, take.Count);
        return (take.Count, take.Bytes);
    }

    /// <summary>The JSON body's headers (longpoll §2.2): as many messages as fit <c>MaxBytesPerPoll</c> as written (at least one); the others come next poll.</summary>
    private static (int Count, long Bytes) JsonHeaders(HttpResponse response, WindowTake take, long ack, int maxBytes)
    {
        int count = MessageJson.Fit(take, ack, maxBytes, out long length);
        response.ContentType = "application/json";
        response.ContentLength = length;
        SetSequenceHeaders(response, take, count);
        return (count, length);
    }

    /// <summary>The sequence headers (longpoll §2.1); <c>Herald-Gaps</c> only when a subscription may have lost messages, how many unknown.</summary>
    private static void SetSequenceHeaders(HttpResponse response, WindowTake take, int count)
    {
        response.Headers["Herald-First-Sequence"] = take.FirstSequence.ToString(CultureInfo.InvariantCulture);
        response.Headers["Herald-Count"] = count.ToString(CultureInfo.InvariantCulture);
        response.Headers["Herald-Dropped"] = take.Dropped.ToString(CultureInfo.InvariantCulture);
        if (take.Gaps is { Length: > 0 } gaps)
        {
            response.Headers[GapsHeader] = string.Join(',', gaps);
        }
    }

    /// <summary>
    /// A request on a session: its owner's credential checked first, then its body read, then carried out
    /// (<see cref="RunAsync"/>) here, or, in a cluster, by the node that owns the session (spec cluster.md §10).
    /// </summary>
    private static Task InSession(HttpContext context, string token, Func<HttpContext, PollSessionStore, Task<SessionCommand>> read) => HttpExchange.Handle(context, async () =>
    {
        PollSessionStore store = StoreOf(context);
        PollSessionStore.Located at = await store.LocateAsync(context, token).ConfigureAwait(false);
        SessionCommand command = await read(context, store).ConfigureAwait(false);
        command.Token = token;
        Write(context, at.Local is { } local ? await RunAsync(local, store, command, context.RequestAborted).ConfigureAwait(false) : await store.Commands.ForwardAsync(at, command, context).ConfigureAwait(false));
    });

    /// <summary>An answer onto HTTP: a problem is thrown (and written by <see cref="HttpExchange.Handle"/>); else the status and any notice.</summary>
    private static void Write(HttpContext context, SessionReply reply)
    {
        if (reply.Status >= StatusCodes.Status400BadRequest)
        {
            throw new HttpProblem(reply.Status, reply.Code ?? "Unavailable", reply.Message ?? "")
            {
                Reason = reply.Reason,
                RetryAfter = reply.RetryAfter is { } after ? TimeSpan.FromSeconds(after) : null,
            };
        }

        if (reply.Notice is { } notice)
        {
            context.Response.Headers[NoticeHeader] = notice;
        }

        context.Response.StatusCode = reply.Status;
    }

    /// <summary>How long a request may wait for its session: until the deadline another node's command carries (spec cluster.md §10), else without end.</summary>
    private static TimeSpan WaitFor(SessionCommand command) =>
        command.Deadline == 0 ? Timeout.InfiniteTimeSpan : TimeSpan.FromMilliseconds(Math.Max(0, command.Deadline - DateTimeOffset.UtcNow.ToUnixTimeMilliseconds()));

    /// <summary>The operations a session request carries out (<see cref="SessionCommand.Op"/>).</summary>
    internal static class Ops
    {
        public const string Subscribe = "subscribe";
        public const string Unsubscribe = "unsubscribe";
        public const string Publish = "publish";
        public const string End = "end";
    }

    private static PollSessionStore StoreOf(HttpContext context) => context.RequestServices.GetRequiredService<PollSessionStore>();
}
