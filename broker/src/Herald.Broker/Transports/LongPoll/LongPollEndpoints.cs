using System.Buffers;
using System.Diagnostics;
using System.Text;
using System.Text.Json;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using MessagePack;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// The HTTP long-poll transport (protocol-spec/longpoll.md): each handler parses its request, calls the
/// session's operation, and maps the answer onto HTTP (a status and an RFC 7807 problem). Every rule a
/// client is held to is the session's (<see cref="ProtocolSession"/>); poll responses carry the shared
/// MESSAGE bytes from the session's backlog.
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
        poll.MapDelete("/sessions/{session}", Close);
        poll.MapPost("/sessions/{session}/subscriptions", Subscribe);
        poll.MapDelete("/sessions/{session}/subscriptions/{sid}", Unsubscribe);
        poll.MapPost("/sessions/{session}/publish", PublishInSession);
        poll.MapGet("/sessions/{session}/messages", Poll);
        poll.MapPost("/publish", PublishOneShot);
    }

    private static Task Create(HttpContext context) => Handle(context, async store =>
    {
        PollSession session;
        store.BeginCreate();
        try
        {
            ReadOnlySequence<byte> body = await ReadBodyAsync(context, store.Options).ConfigureAwait(false);
            CreateSessionRequest? request = body.IsEmpty ? null : Deserialize(body, LongPollJsonContext.Default.CreateSessionRequest);
            Identity identity = await AuthenticateAsync(context, store.Broker).ConfigureAwait(false);
            session = store.Create(identity, request?.Client, request?.Zstd ?? false, RemoteOf(context));
        }
        finally
        {
            store.EndCreate();
        }

        LongPollOptions options = store.Options;
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
                session.Identity.InboxPrefix),
            LongPollJsonContext.Default.CreateSessionResponse).ConfigureAwait(false);
    });

    private static Task Close(HttpContext context, string session) => Handle(context, store =>
    {
        store.Get(session).Close(ErrorCode.None, "Closed by the client.");
        context.Response.StatusCode = StatusCodes.Status204NoContent;
        return Task.CompletedTask;
    });

    private static Task Subscribe(HttpContext context, string session) => InSession(context, session, async (owner, store) =>
    {
        ReadOnlySequence<byte> body = await ReadBodyAsync(context, store.Options).ConfigureAwait(false);
        SubscribeRequest request = Deserialize(body, LongPollJsonContext.Default.SubscribeRequest);
        if (request.Sid is not { } sid || sid is < 0 or > uint.MaxValue)
        {
            throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", "sid is required: an integer from 1 to 4294967295.");
        }

        if (request.Pattern is null)
        {
            throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", "pattern is required.");
        }

        Refusal refusal = owner.Subscribe((uint)sid, new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(request.Pattern)), request.NoEcho ?? false);
        await HoldAsync(context, owner).ConfigureAwait(false);
        Answer(context, refusal, StatusCodes.Status204NoContent);
    });

    private static Task Unsubscribe(HttpContext context, string session, string sid) => InSession(context, session, async (owner, store) =>
    {
        Refusal refusal = uint.TryParse(sid, out uint id)
            ? owner.Unsubscribe(id)
            : new Refusal(ErrorCode.UnknownSubscription, $"No live subscription with id {sid}.");
        await HoldAsync(context, owner).ConfigureAwait(false);
        Answer(context, refusal, StatusCodes.Status204NoContent);
    });

    /// <summary>Over one of the session's rates, the answer waits its <see cref="ProtocolSession.Throttle"/> (as TCP stops reading).</summary>
    private static async Task HoldAsync(HttpContext context, PollSession owner)
    {
        while (owner.Throttle is { Ticks: > 0 } pause) // again if a timer fired early: never before the debt is paid
        {
            await Task.Delay(pause, context.RequestAborted).ConfigureAwait(false);
        }
    }

    private static Task PublishInSession(HttpContext context, string session) => InSession(context, session, (owner, store) => PublishAsync(context, store, owner));

    private static Task PublishOneShot(HttpContext context) => Handle(context, async store =>
    {
        Identity identity = await AuthenticateAsync(context, store.Broker).ConfigureAwait(false);
        await PublishAsync(context, store, store.OneShot(identity, RemoteOf(context))).ConfigureAwait(false);
    });

    /// <summary>
    /// A raw payload (topic from the query) or a body of PUBLISH frames (longpoll §1.3), published by the
    /// session: all checked before any is routed. Over the session's publish rate, the answer waits the
    /// session's <see cref="ProtocolSession.Throttle"/> (as TCP stops reading) and carries the notice.
    /// </summary>
    private static async Task PublishAsync(HttpContext context, PollSessionStore store, PollSession owner)
    {
        ReadOnlySequence<byte> body = await ReadBodyAsync(context, store.Options).ConfigureAwait(false);
        ReadOnlySequence<byte> frames;
        if (IsFramesBody(context.Request))
        {
            frames = body;
        }
        else
        {
            string? topic = context.Request.Query["topic"];
            string? replyTo = context.Request.Query["replyTo"];
            if (topic is null)
            {
                throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", "The topic query parameter is required.");
            }

            var encoded = new ArrayBufferWriter<byte>((int)body.Length + topic.Length + 32);
            FrameWriter.WritePublish(encoded, Encoding.UTF8.GetBytes(topic), replyTo is null ? default : Encoding.UTF8.GetBytes(replyTo), PayloadFlags.None, body.IsSingleSegment ? body.FirstSpan : body.ToArray());
            frames = new ReadOnlySequence<byte>(encoded.WrittenMemory);
        }

        List<PublishFrame> publishes = ParsePublishes(frames, store.Broker.Limits.MaxFrameBytes);
        Refusal refusal;
        try
        {
            refusal = owner.PublishAll(publishes, store.Broker.Metrics.FanoutEnabled ? Stopwatch.GetTimestamp() : 0);
        }
        finally
        {
            owner.FlushTouched();
        }

        await HoldAsync(context, owner).ConfigureAwait(false);
        Answer(context, refusal, StatusCodes.Status202Accepted);
    }

    private static List<PublishFrame> ParsePublishes(ReadOnlySequence<byte> frames, int maxFrame)
    {
        var publishes = new List<PublishFrame>();
        while (FrameReader.TryReadFrame(ref frames, maxFrame, out ReadOnlySequence<byte> frame))
        {
            var reader = new MessagePackReader(frame);
            FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
            if (type != FrameType.Publish)
            {
                throw new ProtocolException(ErrorCode.UnexpectedFrame, $"Only PUBLISH frames may be posted here, not {type}.");
            }

            publishes.Add(FrameDecoder.ReadPublish(ref reader, count));
        }

        if (!frames.IsEmpty || publishes.Count == 0)
        {
            throw new ProtocolException(ErrorCode.MalformedFrame, frames.IsEmpty ? "The body holds no PUBLISH frame." : $"The body ends with {frames.Length} bytes of an incomplete frame.");
        }

        return publishes;
    }

    /// <summary>The long poll (longpoll §2): immediate when messages wait above <c>ack</c>, else held.</summary>
    private static Task Poll(HttpContext context, string session) => Handle(context, async store =>
    {
        PollSession owner = store.Get(session);
        BrokerMetrics metrics = store.Broker.Metrics;
        string? ackText = context.Request.Query["ack"];
        long ack = 0;
        if (ackText is not null && !long.TryParse(ackText, out ack))
        {
            throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", "ack must be an integer.");
        }

        store.BeginPoll();
        WindowTake take = default;
        try
        {
            if (!owner.TryTake(ack, out take, out Task<PollWake>? wait))
            {
                PollWake wake;
                try
                {
                    wake = await wait!.WaitAsync(store.Options.PollTimeout, context.RequestAborted).ConfigureAwait(false);
                }
                catch (TimeoutException)
                {
                    wake = PollWake.Messages; // nothing came: answer empty (or whatever slipped in just now)
                }
                catch (OperationCanceledException)
                {
                    owner.Release(wait!);
                    return; // the client went away
                }

                switch (wake)
                {
                    case PollWake.Replaced:
                        metrics.Poll("replaced");
                        throw new LongPollException(StatusCodes.Status409Conflict, "PollReplaced", "A newer poll on this session took over.");
                    case PollWake.ShuttingDown:
                        metrics.Poll("ended");
                        throw new LongPollException(StatusCodes.Status503ServiceUnavailable, "ShuttingDown", "The broker is shutting down.") { RetryAfter = TimeSpan.FromSeconds(5) };
                    case PollWake.Ended:
                        metrics.Poll("ended");
                        throw PollSessionStore.Ended(owner.CloseCode);
                }

                take = owner.TakeAfterWait(ack, wait!);
            }

            metrics.Poll(take.Count > 0 ? "messages" : "empty");
            if (take.Redelivery)
            {
                metrics.Redelivered();
            }

            metrics.Sent(PollSession.TransportName, take.Count, take.Bytes);
            if (WantsJson(context.Request))
            {
                await WriteJsonAsync(context.Response, take, ack, store.Broker.Limits.MaxFrameBytes).ConfigureAwait(false);
            }
            else
            {
                await WriteFramesAsync(context.Response, take).ConfigureAwait(false);
            }
        }
        finally
        {
            take.Release();
            store.EndPoll();
        }
    });

    /// <summary>The binary body: the shared MESSAGE frames, back to back, each sid stamped in (longpoll §2.1).</summary>
    private static async Task WriteFramesAsync(HttpResponse response, WindowTake batch)
    {
        response.ContentType = FramesMediaType;
        response.ContentLength = batch.Bytes;
        SetSequenceHeaders(response, batch);
        for (int i = 0; i < batch.Count; i++)
        {
            (MessageBuffer frame, uint sid) = batch.Frames[i];
            FrameCopy.Write(response.BodyWriter, frame.Span, sid);
        }

        await response.BodyWriter.FlushAsync().ConfigureAwait(false);
    }

    /// <summary>The JSON body, for debugging and curl (longpoll §2.2): decoded per session, so slower.</summary>
    private static async Task WriteJsonAsync(HttpResponse response, WindowTake batch, long ack, int maxFrame)
    {
        response.ContentType = "application/json";
        SetSequenceHeaders(response, batch);
        using var json = new Utf8JsonWriter(response.BodyWriter);
        json.WriteStartObject();
        json.WriteStartArray("messages");
        for (int i = 0; i < batch.Count; i++)
        {
            (MessageBuffer frame, uint sid) = batch.Frames[i];
            var reader = new MessagePackReader(frame.Span[ProtocolConstants.LengthPrefixSize..].ToArray());
            FrameDecoder.ReadHeader(ref reader, out int count);
            PublishFrame message = FrameDecoder.ReadMessage(ref reader, count);
            byte[] payload = PlainPayload(message, maxFrame);
            json.WriteStartObject();
            json.WriteNumber("seq", batch.FirstSequence + i);
            json.WriteNumber("sid", sid);
            json.WriteString("topic", message.TopicString);
            if (message.ReplyToString is { } replyTo)
            {
                json.WriteString("replyTo", replyTo);
            }
            else
            {
                json.WriteNull("replyTo");
            }

            json.WriteBase64String("payload", payload);
            if (System.Text.Unicode.Utf8.IsValid(payload))
            {
                json.WriteString("text", Encoding.UTF8.GetString(payload));
            }

            json.WriteEndObject();
        }

        json.WriteEndArray();
        json.WriteNumber("dropped", batch.Dropped);
        json.WriteNumber("ack", batch.Count > 0 ? batch.FirstSequence + batch.Count - 1 : ack);
        json.WriteEndObject();
        await json.FlushAsync().ConfigureAwait(false);
    }

    /// <summary>JSON readers get the payload as published: a Zstd one is decompressed (it was checked when published).</summary>
    private static byte[] PlainPayload(in PublishFrame message, int maxFrame)
    {
        if ((message.Flags & PayloadFlags.Zstd) == 0)
        {
            return message.Payload.ToArray();
        }

        int length = Zstd.Decompress(message.Payload, maxFrame, out byte[] rented);
        byte[] payload = rented.AsSpan(0, length).ToArray();
        ArrayPool<byte>.Shared.Return(rented);
        return payload;
    }

    private static void SetSequenceHeaders(HttpResponse response, WindowTake batch)
    {
        response.Headers["Herald-First-Sequence"] = batch.FirstSequence.ToString(System.Globalization.CultureInfo.InvariantCulture);
        response.Headers["Herald-Count"] = batch.Count.ToString(System.Globalization.CultureInfo.InvariantCulture);
        response.Headers["Herald-Dropped"] = batch.Dropped.ToString(System.Globalization.CultureInfo.InvariantCulture);
    }

    private static bool WantsJson(HttpRequest request) => request.Headers.Accept.ToString().Contains("application/json", StringComparison.OrdinalIgnoreCase);

    private static bool IsFramesBody(HttpRequest request) => request.ContentType?.StartsWith(FramesMediaType, StringComparison.OrdinalIgnoreCase) == true;

    /// <summary>Reads the whole body, refusing more than <c>MaxBodyBytes</c> with 413 (Kestrel enforces it too).</summary>
    private static async Task<ReadOnlySequence<byte>> ReadBodyAsync(HttpContext context, LongPollOptions options)
    {
        int max = options.MaxBodyBytes;
        if (context.Request.ContentLength > max)
        {
            throw TooLarge(max);
        }

        if (context.Features.Get<IHttpMaxRequestBodySizeFeature>() is { IsReadOnly: false } limit)
        {
            limit.MaxRequestBodySize = max;
        }

        var buffer = new ArrayBufferWriter<byte>();
        try
        {
            System.IO.Pipelines.PipeReader reader = context.Request.BodyReader;
            while (true)
            {
                System.IO.Pipelines.ReadResult result = await reader.ReadAsync(context.RequestAborted).ConfigureAwait(false);
                if (buffer.WrittenCount + result.Buffer.Length > max)
                {
                    throw TooLarge(max);
                }

                foreach (ReadOnlyMemory<byte> segment in result.Buffer)
                {
                    buffer.Write(segment.Span);
                }

                reader.AdvanceTo(result.Buffer.End);
                if (result.IsCompleted)
                {
                    break;
                }
            }
        }
        catch (BadHttpRequestException e) when (e.StatusCode == StatusCodes.Status413PayloadTooLarge)
        {
            throw TooLarge(max);
        }

        return new ReadOnlySequence<byte>(buffer.WrittenMemory);
    }

    /// <summary>The bearer token's identity (longpoll §1.1); a failure waits the configured delay, then 401.</summary>
    private static async Task<Identity> AuthenticateAsync(HttpContext context, BrokerCore broker)
    {
        string? header = context.Request.Headers.Authorization;
        string? credential = header is not null && header.StartsWith("Bearer ", StringComparison.OrdinalIgnoreCase) ? header["Bearer ".Length..].Trim() : null;
        try
        {
            return ProtocolSession.Authenticate(broker, credential, RemoteOf(context), PollSession.TransportName);
        }
        catch (ProtocolException e)
        {
            broker.Metrics.ProtocolError(ErrorCode.AuthenticationFailed);
            await Task.Delay(broker.Authenticator.FailureDelay, context.RequestAborted).ConfigureAwait(false);
            throw new LongPollException(StatusCodes.Status401Unauthorized, "AuthenticationFailed", e.Message);
        }
    }

    private static System.Net.IPEndPoint? RemoteOf(HttpContext context) =>
        context.Connection.RemoteIpAddress is { } address ? new System.Net.IPEndPoint(address, context.Connection.RemotePort) : null;

    /// <summary>
    /// Maps a session's answer onto HTTP (longpoll §3): none is <paramref name="status"/>; a notice
    /// (RateLimited) is <paramref name="status"/> with the <see cref="NoticeHeader"/>; a refusal is its problem.
    /// </summary>
    private static void Answer(HttpContext context, Refusal refusal, int status)
    {
        if (refusal.Code == ErrorCode.RateLimited)
        {
            context.Response.Headers[NoticeHeader] = nameof(ErrorCode.RateLimited);
        }
        else if (!refusal.IsNone)
        {
            throw new LongPollException(StatusOf(refusal.Code), refusal.Code.ToString(), refusal.Message!);
        }

        context.Response.StatusCode = status;
    }

    /// <summary>The HTTP status of a spec §8 code on long-poll (longpoll §3).</summary>
    private static int StatusOf(ErrorCode code) => code switch
    {
        ErrorCode.PermissionDenied => StatusCodes.Status403Forbidden,
        ErrorCode.UnknownSubscription => StatusCodes.Status404NotFound,
        ErrorCode.TooManyTopics => StatusCodes.Status409Conflict,
        ErrorCode.AuthenticationFailed => StatusCodes.Status401Unauthorized,
        ErrorCode.SlowConsumer or ErrorCode.StaleConnection => StatusCodes.Status410Gone,
        ErrorCode.ShuttingDown or ErrorCode.TooManyConnections => StatusCodes.Status503ServiceUnavailable,
        _ => StatusCodes.Status400BadRequest,
    };

    private static LongPollException TooLarge(int max) => new(StatusCodes.Status413PayloadTooLarge, "BodyTooLarge", $"The request body is over the limit of {max} bytes.");

    private static T Deserialize<T>(ReadOnlySequence<byte> body, System.Text.Json.Serialization.Metadata.JsonTypeInfo<T> type)
    {
        try
        {
            var reader = new Utf8JsonReader(body);
            return JsonSerializer.Deserialize(ref reader, type) ?? throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", "The body must be a JSON object.");
        }
        catch (JsonException e)
        {
            throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", $"The body is not valid JSON for this request: {e.Message}");
        }
    }

    /// <summary>
    /// Runs a request that changes a session, as the session's one caller (<see cref="PollSession.Requests"/>).
    /// A fatal error that ends a client by policy (PermissionDenied with <c>DisconnectOnPermissionDenied</c>)
    /// ends the session; other fatal codes only fail the request, since HTTP delimits each one (longpoll §3).
    /// </summary>
    private static Task InSession(HttpContext context, string token, Func<PollSession, PollSessionStore, Task> handler) => Handle(context, async store =>
    {
        PollSession owner = store.Get(token);
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

    /// <summary>Runs a handler and turns every refusal into an RFC 7807 problem with the spec's code (longpoll §3).</summary>
    private static async Task Handle(HttpContext context, Func<PollSessionStore, Task> handler)
    {
        try
        {
            await handler(context.RequestServices.GetRequiredService<PollSessionStore>()).ConfigureAwait(false);
        }
        catch (LongPollException e)
        {
            await ProblemAsync(context, e.Status, e.Code, e.Message, e.RetryAfter, e.Reason).ConfigureAwait(false);
        }
        catch (ProtocolException e)
        {
            string code = e.Code is ErrorCode.MalformedFrame or ErrorCode.FrameTooLarge or ErrorCode.UnknownFrameType or ErrorCode.UnexpectedFrame ? "MalformedRequest" : e.Code.ToString();
            await ProblemAsync(context, StatusOf(e.Code), code, e.Message, retryAfter: null).ConfigureAwait(false);
        }
    }

    private static async Task ProblemAsync(HttpContext context, int status, string code, string detail, TimeSpan? retryAfter, string? reason = null)
    {
        if (context.Response.HasStarted)
        {
            return;
        }

        context.Response.Clear();
        if (status == StatusCodes.Status401Unauthorized)
        {
            context.Response.Headers.WWWAuthenticate = "Bearer";
        }

        if (retryAfter is { } after)
        {
            context.Response.Headers.RetryAfter = ((int)Math.Ceiling(after.TotalSeconds)).ToString(System.Globalization.CultureInfo.InvariantCulture);
        }

        await Results.Problem(detail, statusCode: status, title: code, extensions: reason is null ? new Dictionary<string, object?> { ["code"] = code } : new Dictionary<string, object?> { ["code"] = code, ["reason"] = reason }).ExecuteAsync(context).ConfigureAwait(false);
    }
}
