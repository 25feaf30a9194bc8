using System.Buffers;
using System.Text;
using System.Text.Json;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Routing;
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
/// The HTTP long-poll transport (protocol-spec/longpoll.md): thin handlers that parse the request and
/// call the same router, sessions and frame copy as TCP. Poll responses carry the shared MESSAGE bytes.
/// </summary>
internal static class LongPollEndpoints
{
    public const string FramesMediaType = "application/vnd.herald.frames";

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

    private static Task Create(HttpContext context) => Handle(context, async (store, broker) =>
    {
        PollSession session;
        store.BeginCreate();
        try
        {
            ReadOnlySequence<byte> body = await ReadBodyAsync(context, broker).ConfigureAwait(false);
            CreateSessionRequest? request = body.IsEmpty ? null : Deserialize(body, LongPollJsonContext.Default.CreateSessionRequest);
            Identity identity = await AuthenticateAsync(context, broker).ConfigureAwait(false);
            session = store.Create(zstd: request?.Zstd ?? false, request?.Client, identity);
        }
        finally
        {
            store.EndCreate();
        }

        var options = broker.Options;
        context.Response.StatusCode = StatusCodes.Status201Created;
        context.Response.Headers.Location = $"/poll/sessions/{session.Token}";
        await context.Response.WriteAsJsonAsync(
            new CreateSessionResponse(
                session.Token,
                (long)options.LongPoll.PollTimeout.TotalMilliseconds,
                (long)options.LongPoll.InactivityTimeout.TotalMilliseconds,
                options.LongPoll.MaxMessagesPerPoll,
                options.LongPoll.MaxBytesPerPoll,
                options.LongPoll.MaxPendingMessagesPerSession,
                options.Limits.MaxTopicLength,
                options.LongPoll.MaxBodyBytes,
                session.AcceptsZstd),
            LongPollJsonContext.Default.CreateSessionResponse).ConfigureAwait(false);
    });

    private static Task Close(HttpContext context, string session) => Handle(context, (store, broker) =>
    {
        store.End(store.Get(session), DisconnectReason.ClientClose);
        context.Response.StatusCode = StatusCodes.Status204NoContent;
        return Task.CompletedTask;
    });

    private static Task Subscribe(HttpContext context, string session) => Handle(context, async (store, broker) =>
    {
        PollSession owner = store.Get(session);
        ReadOnlySequence<byte> body = await ReadBodyAsync(context, broker).ConfigureAwait(false);
        SubscribeRequest request = Deserialize(body, LongPollJsonContext.Default.SubscribeRequest);
        if (request.Sid is not { } sid || sid is < 0 or > uint.MaxValue)
        {
            throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", "sid is required: an integer from 1 to 4294967295.");
        }

        if (sid == 0)
        {
            throw new ProtocolException(ErrorCode.DuplicateSubscription, "Subscription id 0 is not allowed.");
        }

        if (request.Pattern is null)
        {
            throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", "pattern is required.");
        }

        string pattern = TopicRules.CheckPattern(new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(request.Pattern)), broker.Options.Limits.MaxTopicLength);
        if (!owner.Identity.Permissions.CanSubscribe(pattern))
        {
            throw Denied(broker, $"Subscribing to '{pattern}' is not permitted for '{owner.Identity.Name}'.");
        }

        owner.Subscribe(new Subscription(owner, (uint)sid, pattern, request.NoEcho ?? false), broker.Options.Limits.MaxSubscriptionsPerConnection, broker.Router);
        context.Response.StatusCode = StatusCodes.Status204NoContent;
    });

    private static Task Unsubscribe(HttpContext context, string session, string sid) => Handle(context, (store, broker) =>
    {
        PollSession owner = store.Get(session);
        if (!uint.TryParse(sid, out uint id) || !owner.Unsubscribe(id, broker.Router))
        {
            throw new LongPollException(StatusCodes.Status404NotFound, "UnknownSubscription", $"No live subscription with id {sid}.");
        }

        context.Response.StatusCode = StatusCodes.Status204NoContent;
        return Task.CompletedTask;
    });

    private static Task PublishInSession(HttpContext context, string session) => Handle(context, (store, broker) =>
    {
        PollSession owner = store.Get(session);
        return PublishAsync(context, broker, owner, owner.Identity);
    });

    private static Task PublishOneShot(HttpContext context) => Handle(context, async (store, broker) =>
    {
        Identity identity = await AuthenticateAsync(context, broker).ConfigureAwait(false);
        await PublishAsync(context, broker, origin: null, identity).ConfigureAwait(false);
    });

    /// <summary>
    /// Routes a raw payload (topic from the query) or a body of PUBLISH frames (longpoll §1.3). Frames are
    /// all checked before any is routed.
    /// </summary>
    private static async Task PublishAsync(HttpContext context, BrokerCore broker, PollSession? origin, Identity identity)
    {
        ReadOnlySequence<byte> body = await ReadBodyAsync(context, broker).ConfigureAwait(false);
        int maxTopic = broker.Options.Limits.MaxTopicLength;
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

        List<PublishFrame> publishes = ParsePublishes(frames, broker.Options.Limits.MaxFrameBytes);
        foreach (PublishFrame publish in publishes)
        {
            TopicRules.CheckName(publish.Topic, maxTopic);
            if (!identity.Permissions.IsAllowAll && !identity.Permissions.CanPublish(publish.TopicString))
            {
                throw Denied(broker, $"Publishing to '{publish.TopicString}' is not permitted for '{identity.Name}'.");
            }

            if (publish.ReplyTo is { } r)
            {
                TopicRules.CheckName(r, maxTopic, isReplyTo: true);
            }
        }

        // Compressed payloads are all checked (bounded) before anything is routed.
        var plain = new (byte[] Bytes, int Length)[publishes.Count];
        var toFlush = new List<IMessageSink>();
        try
        {
            for (int i = 0; i < publishes.Count; i++)
            {
                if ((publishes[i].Flags & PayloadFlags.Zstd) != 0)
                {
                    plain[i].Length = Zstd.Decompress(publishes[i].Payload, broker.Options.Limits.MaxFrameBytes, out plain[i].Bytes);
                }
            }

            for (int i = 0; i < publishes.Count; i++)
            {
                long receivedAt = broker.Metrics.FanoutEnabled ? System.Diagnostics.Stopwatch.GetTimestamp() : 0;
                int deliveries = broker.Router.Publish(publishes[i], origin, toFlush, broker.Encoder, plain[i].Bytes is null ? default : plain[i].Bytes.AsSpan(0, plain[i].Length), receivedAt);
                broker.Metrics.Published(PollSessionStore.Transport, deliveries, ProtocolConstants.MessageHeaderSize + (int)publishes[i].Envelope.Length);
            }
        }
        finally
        {
            foreach ((byte[] bytes, _) in plain)
            {
                if (bytes is { Length: > 0 })
                {
                    ArrayPool<byte>.Shared.Return(bytes);
                }
            }
        }

        foreach (IMessageSink sink in toFlush)
        {
            sink.ScheduleFlush();
        }

        context.Response.StatusCode = StatusCodes.Status202Accepted;
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
    private static Task Poll(HttpContext context, string session) => Handle(context, async (store, broker) =>
    {
        PollSession owner = store.Get(session);
        string? ackText = context.Request.Query["ack"];
        long ack = 0;
        if (ackText is not null && !long.TryParse(ackText, out ack))
        {
            throw new LongPollException(StatusCodes.Status400BadRequest, "MalformedRequest", "ack must be an integer.");
        }

        store.BeginPoll();
        PollBatch batch = default;
        try
        {
            if (!owner.TryTake(ack, out batch, out Task<PollWake>? wait))
            {
                PollWake wake;
                try
                {
                    wake = await wait!.WaitAsync(broker.Options.LongPoll.PollTimeout, context.RequestAborted).ConfigureAwait(false);
                }
                catch (TimeoutException)
                {
                    wake = PollWake.Messages; // nothing came: answer empty (or whatever slipped in just now)
                }
                catch (OperationCanceledException)
                {
                    owner.Abandon(wait!);
                    return; // the client went away
                }

                switch (wake)
                {
                    case PollWake.Replaced:
                        broker.Metrics.Poll("replaced");
                        throw new LongPollException(StatusCodes.Status409Conflict, "PollReplaced", "A newer poll on this session took over.");
                    case PollWake.ShuttingDown:
                        broker.Metrics.Poll("ended");
                        throw new LongPollException(StatusCodes.Status503ServiceUnavailable, "ShuttingDown", "The broker is shutting down.") { RetryAfter = TimeSpan.FromSeconds(5) };
                    case PollWake.Ended:
                        broker.Metrics.Poll("ended");
                        throw new LongPollException(StatusCodes.Status410Gone, "SessionExpired", "The session has ended.");
                }

                batch = owner.TakeAfterWait(ack, wait!);
            }

            broker.Metrics.Poll(batch.Count > 0 ? "messages" : "empty");
            if (batch.Redelivery)
            {
                broker.Metrics.Redelivered();
            }

            broker.Metrics.Sent(PollSessionStore.Transport, batch.Count, batch.Bytes);
            if (WantsJson(context.Request))
            {
                await WriteJsonAsync(context.Response, batch, ack, broker.Options.Limits.MaxFrameBytes).ConfigureAwait(false);
            }
            else
            {
                await WriteFramesAsync(context.Response, batch).ConfigureAwait(false);
            }
        }
        finally
        {
            batch.Release();
            store.EndPoll();
        }
    });

    /// <summary>The binary body: the shared MESSAGE frames, back to back, each sid stamped in (longpoll §2.1).</summary>
    private static async Task WriteFramesAsync(HttpResponse response, PollBatch batch)
    {
        response.ContentType = FramesMediaType;
        response.ContentLength = batch.Bytes;
        SetSequenceHeaders(response, batch);
        for (int i = 0; i < batch.Count; i++)
        {
            (MessageBuffer frame, uint sid) = batch.Messages[i];
            FrameCopy.Write(response.BodyWriter, frame.Span, sid);
        }

        await response.BodyWriter.FlushAsync().ConfigureAwait(false);
    }

    /// <summary>The JSON body, for debugging and curl (longpoll §2.2): decoded per session, so slower.</summary>
    private static async Task WriteJsonAsync(HttpResponse response, PollBatch batch, long ack, int maxFrame)
    {
        response.ContentType = "application/json";
        SetSequenceHeaders(response, batch);
        using var json = new Utf8JsonWriter(response.BodyWriter);
        json.WriteStartObject();
        json.WriteStartArray("messages");
        for (int i = 0; i < batch.Count; i++)
        {
            (MessageBuffer frame, uint sid) = batch.Messages[i];
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

    private static void SetSequenceHeaders(HttpResponse response, PollBatch batch)
    {
        response.Headers["Herald-First-Sequence"] = batch.FirstSequence.ToString(System.Globalization.CultureInfo.InvariantCulture);
        response.Headers["Herald-Count"] = batch.Count.ToString(System.Globalization.CultureInfo.InvariantCulture);
        response.Headers["Herald-Dropped"] = batch.Dropped.ToString(System.Globalization.CultureInfo.InvariantCulture);
    }

    private static bool WantsJson(HttpRequest request) => request.Headers.Accept.ToString().Contains("application/json", StringComparison.OrdinalIgnoreCase);

    private static bool IsFramesBody(HttpRequest request) => request.ContentType?.StartsWith(FramesMediaType, StringComparison.OrdinalIgnoreCase) == true;

    /// <summary>Reads the whole body, refusing more than <c>MaxBodyBytes</c> with 413 (Kestrel enforces it too).</summary>
    private static async Task<ReadOnlySequence<byte>> ReadBodyAsync(HttpContext context, BrokerCore broker)
    {
        int max = broker.Options.LongPoll.MaxBodyBytes;
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
            await foreach (ReadOnlyMemory<byte> chunk in ReadChunksAsync(context.Request.BodyReader, context.RequestAborted).ConfigureAwait(false))
            {
                if (buffer.WrittenCount + chunk.Length > max)
                {
                    throw TooLarge(max);
                }

                buffer.Write(chunk.Span);
            }
        }
        catch (BadHttpRequestException e) when (e.StatusCode == StatusCodes.Status413PayloadTooLarge)
        {
            throw TooLarge(max);
        }

        return new ReadOnlySequence<byte>(buffer.WrittenMemory);
    }

    private static async IAsyncEnumerable<ReadOnlyMemory<byte>> ReadChunksAsync(System.IO.Pipelines.PipeReader reader, [System.Runtime.CompilerServices.EnumeratorCancellation] CancellationToken cancellationToken)
    {
        while (true)
        {
            System.IO.Pipelines.ReadResult result = await reader.ReadAsync(cancellationToken).ConfigureAwait(false);
            foreach (ReadOnlyMemory<byte> segment in result.Buffer)
            {
                yield return segment;
            }

            reader.AdvanceTo(result.Buffer.End);
            if (result.IsCompleted)
            {
                yield break;
            }
        }
    }

    /// <summary>The bearer token's identity (longpoll §1); a failure waits the configured delay, then 401.</summary>
    private static async Task<Identity> AuthenticateAsync(HttpContext context, BrokerCore broker)
    {
        string? header = context.Request.Headers.Authorization;
        string? credential = header is not null && header.StartsWith("Bearer ", StringComparison.OrdinalIgnoreCase) ? header["Bearer ".Length..].Trim() : null;
        if (broker.Authenticator.Authenticate(credential, out string failure) is { } identity)
        {
            return identity;
        }

        broker.Metrics.ProtocolError(ErrorCode.AuthenticationFailed);
        await Task.Delay(broker.Authenticator.FailureDelay, context.RequestAborted).ConfigureAwait(false);
        throw new LongPollException(StatusCodes.Status401Unauthorized, "AuthenticationFailed", failure);
    }

    private static LongPollException Denied(BrokerCore broker, string message)
    {
        broker.Metrics.ProtocolError(ErrorCode.PermissionDenied);
        return new LongPollException(StatusCodes.Status403Forbidden, "PermissionDenied", message);
    }

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

    /// <summary>Runs a handler and turns every refusal into an RFC 7807 problem with the spec's code (longpoll §3).</summary>
    private static async Task Handle(HttpContext context, Func<PollSessionStore, BrokerCore, Task> handler)
    {
        IServiceProvider services = context.RequestServices;
        try
        {
            await handler(services.GetRequiredService<PollSessionStore>(), services.GetRequiredService<BrokerCore>()).ConfigureAwait(false);
        }
        catch (LongPollException e)
        {
            await ProblemAsync(context, e.Status, e.Code, e.Message, e.RetryAfter).ConfigureAwait(false);
        }
        catch (ProtocolException e)
        {
            string code = e.Code is ErrorCode.MalformedFrame or ErrorCode.FrameTooLarge or ErrorCode.UnknownFrameType or ErrorCode.UnexpectedFrame ? "MalformedRequest" : e.Code.ToString();
            await ProblemAsync(context, StatusCodes.Status400BadRequest, code, e.Message, retryAfter: null).ConfigureAwait(false);
        }
    }

    private static async Task ProblemAsync(HttpContext context, int status, string code, string detail, TimeSpan? retryAfter)
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

        await Results.Problem(detail, statusCode: status, title: code, extensions: new Dictionary<string, object?> { ["code"] = code }).ExecuteAsync(context).ConfigureAwait(false);
    }
}
