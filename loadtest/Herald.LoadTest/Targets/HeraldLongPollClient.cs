using System.Buffers;
using System.Buffers.Binary;
using System.Net;
using Herald.LoadTest.Client;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Targets;

/// <summary>
/// <see cref="IPubSubClient"/> over one Herald long-poll session (protocol-spec/longpoll.md), the HTTP
/// counterpart of <see cref="HeraldTcpClient"/>.
/// <para>
/// One client is one session with its own <see cref="LongPollClient"/> (a <c>SocketsHttpHandler</c> capped
/// at <see cref="ConnectionsPerSession"/> connections: the held poll, a publish and a subscribe in flight).
/// Subscribing is <c>POST .../subscriptions</c>; its 204 means the subscription is live (longpoll §1.2).
/// </para>
/// <para>
/// A poll loop runs from connect until dispose: <c>GET .../messages?ack=N</c> where N is the last sequence
/// received (longpoll §2), so a response lost in transit comes again and nothing is dispatched twice. The
/// binary body is the same MESSAGE frames as TCP, parsed in place with <see cref="FrameReader"/> and
/// <see cref="FrameDecoder"/> and handed to the handler by sid. 409 <c>PollReplaced</c> polls again, 503
/// waits <c>Retry-After</c> and polls again, 404/410 (the session ended) and repeated network errors are
/// the <see cref="Failure"/>.
/// </para>
/// <para>
/// Publications are PUBLISH frames encoded into a <see cref="BatchedWriter"/>, whose send is one
/// <c>POST .../publish</c> with <c>Content-Type: application/vnd.herald.frames</c> (longpoll §1.3) of
/// everything buffered, cut at frame boundaries to the session's <c>maxBodyBytes</c>: one POST in flight,
/// later publications join the next one. Replies published by handlers are sent in one POST after the
/// poll batch is dispatched, so the poll loop never waits for a publish.
/// </para>
/// </summary>
internal sealed class HeraldLongPollClient : IPubSubClient
{
    /// <summary>HTTP connections one session uses at most: the held poll, a publish POST, a subscribe.</summary>
    public const int ConnectionsPerSession = 3;

    private const int MaxPollAttempts = 3;      // consecutive network failures before the session counts as lost
    private const int MaxPublishAttempts = 5;   // 503 answers to one publish before it counts as failed
    private static readonly TimeSpan MaxRetryAfter = TimeSpan.FromSeconds(10);

    private readonly LongPollClient _http;
    private readonly LongPollSessionInfo _session;
    private readonly BatchedWriter _writer;
    private readonly TopicCache _topics = new();
    private readonly CancellationTokenSource _stop = new();
    private readonly Lock _subscribeGate = new();
    private readonly Task _polling;
    private DeliveryHandler?[] _handlers = []; // by sid - 1, copy on write under _subscribeGate
    private bool _dispatching;                 // set by the poll loop while it calls handlers
    private string? _failure;
    private long _errors;
    private long _dropped;
    private volatile bool _disposed;

    private HeraldLongPollClient(LongPollClient http, LongPollSessionInfo session)
    {
        _http = http;
        _session = session;
        _writer = new BatchedWriter(SendAsync);
        _polling = Task.Run(PollLoopAsync);
    }

    public long? MaxPendingMessages => _session.MaxPendingMessages > 0 ? _session.MaxPendingMessages : null;

    public string InboxPrefix => _session.InboxPrefix ?? IPubSubClient.AnonymousInboxPrefix;

    public string? Failure => Volatile.Read(ref _failure) ?? (_disposed ? null : _writer.Failure);

    public long Errors => Interlocked.Read(ref _errors);

    /// <summary>Messages the broker's slow-consumer policy dropped before this session received them (<c>Herald-Dropped</c>).</summary>
    public long Dropped => Interlocked.Read(ref _dropped);

    /// <summary>
    /// Creates a session on <paramref name="address"/>:<paramref name="port"/> for client <paramref name="index"/>
    /// (which picks its source address on loopback). Retries while the broker's HTTP port is not up yet or it
    /// answers 503 <c>TooManyPendingSessions</c>, until <paramref name="cancellationToken"/>. With
    /// <paramref name="bearer"/>, every request of the session carries it (<c>Authorization: Bearer</c>).
    /// </summary>
    public static async Task<HeraldLongPollClient> ConnectAsync(IPAddress address, int port, int index, CancellationToken cancellationToken, string? bearer = null, bool headers = false)
    {
        var http = new LongPollClient(address, port, SourceAddresses.ForClient(address, index, ConnectionsPerSession), TimeSpan.FromSeconds(10), ConnectionsPerSession, bearer);
        try
        {
            for (int attempt = 1; ; attempt++)
            {
                try
                {
                    LongPollSessionInfo session = await http.CreateSessionAsync(cancellationToken, headers);
                    return new HeraldLongPollClient(http, session);
                }
                catch (LongPollException e) when (e.Retryable)
                {
                    await Task.Delay(e.RetryAfter is { } after && after < MaxRetryAfter ? after : TimeSpan.FromMilliseconds(100), cancellationToken);
                }
                catch (HttpRequestException) when (attempt < 50)
                {
                    await Task.Delay(TimeSpan.FromMilliseconds(100), cancellationToken); // the HTTP port may open after the TCP ports
                }
            }
        }
        catch
        {
            http.Dispose();
            throw;
        }
    }

    public Task SubscribeAsync(string topic, DeliveryHandler handler, CancellationToken cancellationToken) =>
        SubscribeAsync(topic, queue: null, handler, cancellationToken);

    public async Task SubscribeAsync(string topic, string? queue, DeliveryHandler handler, CancellationToken cancellationToken)
    {
        uint sid;
        lock (_subscribeGate)
        {
            DeliveryHandler?[] handlers = [.. _handlers, handler];
            sid = (uint)handlers.Length;
            Volatile.Write(ref _handlers, handlers);
        }

        await _http.SubscribeAsync(_session.Token, sid, topic, cancellationToken, queue); // 204: live
    }

    public void Publish(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo = default) =>
        Append(topic, payload, replyTo, default, _dispatching ? SendPolicy.Deferred : SendPolicy.Now);

    public ValueTask PublishAsync(string topic, ReadOnlyMemory<byte> payload, ReadOnlyMemory<byte> replyTo = default, ReadOnlyMemory<byte> headers = default, bool sendNow = true, CancellationToken cancellationToken = default)
    {
        Append(topic, payload.Span, replyTo.Span, headers.Span, sendNow ? SendPolicy.Now : SendPolicy.WhenFull);
        return _writer.WaitForRoomAsync(cancellationToken);
    }

    public ValueTask FlushAsync(CancellationToken cancellationToken) => _writer.FlushAsync(cancellationToken);

    /// <summary>Sends what is buffered (for up to a second), stops the poll loop and closes the session.</summary>
    public async ValueTask DisposeAsync()
    {
        try
        {
            using var flush = new CancellationTokenSource(TimeSpan.FromSeconds(1));
            await _writer.FlushAsync(flush.Token);
        }
        catch (OperationCanceledException)
        {
            // the broker is not taking publications; closing anyway
        }

        _disposed = true;
        await _stop.CancelAsync();
        try
        {
            await _polling;
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            // the loop ends with the cancellation; how it ended does not matter now
        }

        try
        {
            using var close = new CancellationTokenSource(TimeSpan.FromSeconds(2));
            await _http.DeleteSessionAsync(_session.Token, close.Token);
        }
        catch (Exception e) when (e is HttpRequestException or OperationCanceledException)
        {
            // the broker ends an idle session by itself (inactivity timeout)
        }

        _http.Dispose();
        _stop.Dispose();
    }

    private void Append(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers, SendPolicy policy)
    {
        byte[] encoded = _topics.Get(topic);
        using BatchedWriter.AppendScope scope = _writer.BeginAppend(policy);
        FrameWriter.WritePublish(scope.Buffer, encoded, replyTo, PayloadFlags.None, payload, headers);
    }

    /// <summary>
    /// The writer's send: POSTs the buffered PUBLISH frames in bodies of at most <c>maxBodyBytes</c>, in order.
    /// Runs on the writer's loop only (one call at a time).
    /// </summary>
    private async ValueTask SendAsync(ReadOnlyMemory<byte> frames, CancellationToken cancellationToken)
    {
        while (!frames.IsEmpty)
        {
            int length = BodyLength(frames.Span, _session.MaxBodyBytes);
            await PostAsync(frames[..length], split: true);
            frames = frames[length..];
        }
    }

    /// <summary>
    /// One publish POST. 503 waits <c>Retry-After</c> and tries again; a 4xx other than a lost session
    /// refuses the whole body (longpoll §1.3: all or none), so a body of several frames is sent again one
    /// frame per POST and only the invalid ones are counted in <see cref="Errors"/>, as TCP would.
    /// A lost session (404/410) or a network error throws: the writer stops and reports it.
    /// </summary>
    private async Task PostAsync(ReadOnlyMemory<byte> body, bool split)
    {
        for (int attempt = 1; ; attempt++)
        {
            try
            {
                await _http.PublishFramesAsync(_session.Token, body, CancellationToken.None);
                return;
            }
            catch (LongPollException e) when (e.Status == 503 && attempt < MaxPublishAttempts)
            {
                await Task.Delay(e.RetryAfter is { } after && after < MaxRetryAfter ? after : TimeSpan.FromSeconds(1));
            }
            catch (LongPollException e) when (e.Status is >= 400 and < 500 and not (404 or 410))
            {
                if (!split || BodyLength(body.Span, 0) == body.Length)
                {
                    Interlocked.Increment(ref _errors);
                    return;
                }

                while (!body.IsEmpty)
                {
                    int one = BodyLength(body.Span, 0);
                    await PostAsync(body[..one], split: false);
                    body = body[one..];
                }

                return;
            }
        }
    }

    /// <summary>
    /// The length of the longest run of whole frames at the start of <paramref name="frames"/> that fits in
    /// <paramref name="maxBytes"/>; always at least one frame.
    /// <code>
    /// +----------------+-----------------------+
    /// | length: u32 BE | body (length bytes)   |  ... back to back (README §4)
    /// +----------------+-----------------------+
    /// </code>
    /// </summary>
    private static int BodyLength(ReadOnlySpan<byte> frames, long maxBytes)
    {
        int offset = 0;
        while (offset < frames.Length)
        {
            int frame = ProtocolConstants.LengthPrefixSize + (int)BinaryPrimitives.ReadUInt32BigEndian(frames[offset..]);
            if (offset > 0 && offset + (long)frame > maxBytes)
            {
                break;
            }

            offset += frame;
        }

        return offset;
    }

    private async Task PollLoopAsync()
    {
        CancellationToken stop = _stop.Token;
        long ack = 0; // the highest sequence received (longpoll §2)
        int failures = 0;
        try
        {
            while (!stop.IsCancellationRequested)
            {
                PollResult result;
                try
                {
                    using var held = CancellationTokenSource.CreateLinkedTokenSource(stop);
                    held.CancelAfter(_session.PollTimeout + TimeSpan.FromSeconds(15)); // a poll the broker never answers
                    result = await _http.PollAsync(_session.Token, ack, held.Token);
                    failures = 0;
                }
                catch (Exception e) when ((e is HttpRequestException or IOException or OperationCanceledException) && !stop.IsCancellationRequested)
                {
                    if (++failures >= MaxPollAttempts)
                    {
                        Fail($"poll failed {failures} times: {e.Message}");
                        return;
                    }

                    await Task.Delay(TimeSpan.FromMilliseconds(100 * failures), stop); // the next poll with the same ack gets a lost answer again
                    continue;
                }

                switch (result.Status)
                {
                    case 200:
                        ack = Deliver(result, ack);
                        _writer.Kick(); // replies appended by the handlers: one POST
                        break;
                    case 409:
                        break; // PollReplaced: this loop is the session's only poller, so poll again
                    case 503:
                        await Task.Delay(result.RetryAfter is { } after && after < MaxRetryAfter ? after : TimeSpan.FromSeconds(1), stop);
                        break;
                    case 404 or 410:
                        Fail($"the session ended: HTTP {result.Status} {result.Problem}");
                        return;
                    default:
                        Fail($"poll: HTTP {result.Status} {result.Problem}");
                        return;
                }
            }
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            // disposed
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Fail(e is ProtocolException ? e.Message : $"{e.GetType().Name}: {e.Message}");
        }
    }

    /// <summary>
    /// Dispatches one 200 poll body (longpoll §2.1): MESSAGE frames numbered from <c>Herald-First-Sequence</c>;
    /// any at or below <paramref name="ack"/> were dispatched already and are skipped. Returns the new ack.
    /// Runs on the poll loop only.
    /// </summary>
    private long Deliver(PollResult result, long ack)
    {
        try
        {
            if (result.FirstSequence < 1 || result.Count < 0)
            {
                throw new ProtocolException(ErrorCode.MalformedFrame, $"poll: 200 without sequence headers (first {result.FirstSequence}, count {result.Count})");
            }

            if (result.Dropped > 0)
            {
                Interlocked.Add(ref _dropped, result.Dropped);
                Interlocked.Increment(ref _errors);
            }

            var body = new ReadOnlySequence<byte>(result.Body);
            long sequence = result.FirstSequence;
            _dispatching = true;
            try
            {
                while (FrameReader.TryReadFrame(ref body, result.Length, out ReadOnlySequence<byte> frame))
                {
                    if (sequence > ack)
                    {
                        Dispatch(frame);
                    }

                    sequence++;
                }
            }
            finally
            {
                _dispatching = false;
            }

            if (!body.IsEmpty || sequence - result.FirstSequence != result.Count)
            {
                throw new ProtocolException(ErrorCode.MalformedFrame, $"poll: Herald-Count {result.Count} but the body holds {sequence - result.FirstSequence} frames and {body.Length} bytes more");
            }

            return result.Count > 0 ? Math.Max(ack, result.FirstSequence + result.Count - 1) : ack;
        }
        finally
        {
            result.Release();
        }
    }

    private void Dispatch(ReadOnlySequence<byte> body)
    {
        uint sid;
        ReadOnlySpan<byte> replyTo, payload, headers;
        if (!body.IsSingleSegment || !FramePeek.TryReadMessage(body.FirstSpan, out sid, out replyTo, out payload, out headers))
        {
            PublishFrame message = FramePeek.ReadMessageSlow(body);
            sid = message.Sid;
            payload = message.Payload.IsSingleSegment ? message.Payload.FirstSpan : message.Payload.ToArray();
            replyTo = message.ReplyTo is { } r ? (r.IsSingleSegment ? r.FirstSpan : r.ToArray()) : default;
            headers = message.Headers.IsSingleSegment ? message.Headers.FirstSpan : message.Headers.ToArray();
        }

        DeliveryHandler?[] handlers = Volatile.Read(ref _handlers);
        if (sid - 1 < (uint)handlers.Length && handlers[sid - 1] is { } handler)
        {
            handler(payload, replyTo, headers);
        }
    }

    private void Fail(string why)
    {
        if (!_disposed)
        {
            Interlocked.CompareExchange(ref _failure, why, null);
        }
    }
}
