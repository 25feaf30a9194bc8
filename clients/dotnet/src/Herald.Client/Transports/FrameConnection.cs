using System.Buffers;
using System.Collections.Concurrent;
using System.IO.Pipelines;
using Herald.Client.Protocol;
using Herald.Protocol;

namespace Herald.Client.Transports;

/// <summary>
/// The binary protocol (spec §1-§6) over one <see cref="StreamLink"/>: a TCP connection, TLS or not, or a
/// WebSocket. HELLO/WELCOME, then three loops. The reader parses frames in place with the canonical read loop
/// (parse until the reader says "need more", then advance); the writer (<see cref="FrameQueue"/>) writes whole
/// batches; the pinger PINGs an idle broker and gives up on one that stops answering (spec §6.2). The link only
/// moves the bytes: every transport that carries frames runs this one class.
/// </summary>
/// <remarks>
/// PING/PONG pairs are matched in order: every PING this client sends puts an entry in <c>_pongs</c>
/// (a waiting flush or subscription, or <c>null</c> for a liveness PING or a fence), and every PONG
/// completes the oldest. The broker answers PINGs in order and after everything read before them
/// (spec §4.7), which is what makes a PONG a flush, and what lets a non-fatal refusal of a SUBSCRIBE
/// (<c>PermissionDenied</c>, <c>TooManyTopics</c>: no sid in the ERROR) be pinned on it: the SUBSCRIBE is
/// sent between two PINGs, so an ERROR that arrives between their PONGs is its answer.
/// Threading: <c>_pongs</c> is guarded by <c>_pongGate</c> (taken before the queue's own lock); the rest
/// belongs to the loops.
/// </remarks>
internal sealed class FrameConnection : BrokerConnection
{
    private const int ReadBufferSize = 64 * 1024;

    private readonly Func<CancellationToken, Task<StreamLink>> _open;
    private readonly Lock _pongGate = new();
    private readonly Queue<PongWaiter?> _pongs = new();
    private StreamLink? _link;
    private PipeReader? _input;
    private Task? _reading;
    private long _lastReadAt;
    private int _pingsOutstanding;
    private readonly ConcurrentDictionary<uint, TaskCompletionSource<PresenceReplyFrame>> _presence = new(); // PRESENCE waiting for their answer, by request_id; added under _pongGate
    private int _lastPresence;

    /// <param name="open">Opens the link to the broker (the transport's part: connect, TLS, upgrade); bounded by its token.</param>
    public FrameConnection(HeraldClient client, HeraldClientOptions options, Func<CancellationToken, Task<StreamLink>> open)
        : base(client, options) => _open = open;

    public override bool SubscribesInline => true;

    public override async Task OpenAsync(string? credential, CancellationToken cancellationToken)
    {
        StreamLink link = await _open(cancellationToken).ConfigureAwait(false);
        _link = link;
        _input = PipeReader.Create(link.Stream, new StreamPipeReaderOptions(bufferSize: ReadBufferSize, minimumReadSize: 4096, leaveOpen: true));

        var hello = new ArrayBufferWriter<byte>(64);
        ClientFrames.Hello(hello, Options.ClientName, Capabilities, credential, info: Options.Info);
        await link.WriteAsync(hello.WrittenMemory, cancellationToken).ConfigureAwait(false);
        WelcomeFrame welcome = await ReadWelcomeAsync(cancellationToken).ConfigureAwait(false);

        Welcomed(welcome);
        Volatile.Write(ref _lastReadAt, Environment.TickCount64);

        _reading = Task.Run(ReadLoopAsync, CancellationToken.None);
        StartWriter();
        if (Options.PingInterval != Timeout.InfiniteTimeSpan)
        {
            _ = Task.Run(PingLoopAsync, CancellationToken.None);
        }
    }

    public override Task FlushAsync(CancellationToken cancellationToken) =>
        Expect(subscription: null, queue => queue.EnqueuePing()).WaitAsync(cancellationToken);

    public override Task EnqueueSubscribe(HeraldSubscription subscription)
    {
        if (Refusal(subscription) is { } refused)
        {
            return Task.FromException(refused); // never sent as a plain subscription
        }

        // SinceFor gives a queue group member no position: it never resumes, so the two never travel together (spec §4.3).
        return Expect(subscription, queue => queue.EnqueueFencedSubscribe(subscription.Sid, subscription.PatternBytes, subscription.WireOptions, subscription.SinceFor(Info.History), subscription.QueueBytes), fenced: true);
    }

    /// <summary>HELLO again with <paramref name="credential"/>; the broker answers WELCOME, then the PONG behind it completes this.</summary>
    public override Task RefreshAsync(string? credential, CancellationToken cancellationToken) =>
        Expect(subscription: null, queue => queue.EnqueueRefresh(Options.ClientName, Capabilities, credential, Options.Info)).WaitAsync(cancellationToken);

    /// <summary>PRESENCE, matched with its PRESENCE_REPLY by request id (answers may come in any order, spec §15.3).</summary>
    public override async Task<PresenceReplyFrame> PresenceAsync(byte[] topic, ulong limit, string? cursor, CancellationToken cancellationToken)
    {
        if (!Info.Presence)
        {
            throw new HeraldException(ErrorCode.UnexpectedFrame, $"Asking who is on '{System.Text.Encoding.UTF8.GetString(topic)}' needs presence, and {PresenceNotGranted("connection")} Nothing was sent.");
        }

        uint id = unchecked((uint)Interlocked.Increment(ref _lastPresence));
        var answer = new TaskCompletionSource<PresenceReplyFrame>(TaskCreationOptions.RunContinuationsAsynchronously);
        lock (_pongGate)
        {
            if (Lost.IsCompleted)
            {
                throw Lost.Result as HeraldException ?? new HeraldConnectionException("The connection is closed.", Lost.Result);
            }

            _presence[id] = answer;
            if (!Outbound.EnqueuePresence(id, topic, limit, cursor))
            {
                _presence.TryRemove(id, out _);
                throw new HeraldConnectionException("The connection is closed.");
            }
        }

        try
        {
            return await answer.Task.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _presence.TryRemove(id, out _);
        }
    }

    private Capabilities Capabilities => Options.Capabilities;

    /// <summary>Queues frames ending in a PING (after a fence PING when <paramref name="fenced"/>) and returns what completes at its PONG.</summary>
    private Task Expect(HeraldSubscription? subscription, Func<FrameQueue, bool> enqueue, bool fenced = false, bool absorbsUnknownSubscription = false)
    {
        var waiter = new PongWaiter(subscription) { AbsorbsUnknownSubscription = absorbsUnknownSubscription };
        lock (_pongGate)
        {
            if (Lost.IsCompleted)
            {
                return Task.FromException(Lost.Result);
            }

            if (fenced)
            {
                _pongs.Enqueue(null);
            }

            _pongs.Enqueue(waiter);
            if (!enqueue(Outbound))
            {
                return Task.FromException(new HeraldConnectionException("The connection is closed."));
            }
        }

        return waiter.Done.Task;
    }

    private void Welcomed(in WelcomeFrame welcome)
    {
        // Granted is what both asked for (spec §4.2): a broker that sets a bit nobody asked for is not believed.
        Capabilities granted = welcome.Capabilities & Capabilities;
        bool headers = (granted & Capabilities.Headers) != 0;
        StreamLink link = _link!;
        Info = new HeraldServerInfo(
            link.Transport,
            welcome.ServerName,
            welcome.ConnectionId,
            link.Port,
            (granted & Capabilities.Zstd) != 0,
            welcome.Limits,
            welcome.InboxPrefix,
            headers,
            headers && (granted & Capabilities.NoResponders) != 0,
            headers && (granted & Capabilities.History) != 0,
            (granted & Capabilities.QueueGroups) != 0,
            headers && (granted & Capabilities.Presence) != 0);
        MaxBody = Limit(welcome, "max_frame");
        MaxTopic = Limit(welcome, "max_topic");
        MaxPayload = Limit(welcome, "max_payload");
        MaxHeaders = Limit(welcome, "max_headers");
        MaxHeaderBytes = Limit(welcome, "max_header_bytes");
        link.Welcomed(MaxBody);
    }

    protected override ValueTask WriteAsync(ReadOnlyMemory<byte> frames, CancellationToken cancellationToken) =>
        _link!.WriteAsync(frames, cancellationToken);

    protected override ValueTask LeaveAsync(CancellationToken cancellationToken) =>
        _link?.LeaveAsync(cancellationToken) ?? default;

    protected override void OnLost(Exception reason)
    {
        PongWaiter?[] waiting;
        lock (_pongGate)
        {
            waiting = [.. _pongs];
            _pongs.Clear();
        }

        foreach (PongWaiter? waiter in waiting)
        {
            waiter?.Done.TrySetException(reason);
        }

        HeraldException lost = reason as HeraldException ?? new HeraldConnectionException($"The connection was lost: {reason.Message}", reason);
        foreach (TaskCompletionSource<PresenceReplyFrame> answer in _presence.Values)
        {
            answer.TrySetException(lost);
        }
    }

    /// <summary>The loops are already cancelled; closing the link ends a read in progress, and the reader is completed only once its loop is done (a pipe reader is not thread-safe).</summary>
    protected override async ValueTask CloseAsync()
    {
        if (_link is not null)
        {
            await _link.DisposeAsync().ConfigureAwait(false);
        }

        if (_reading is not null)
        {
            await _reading.ConfigureAwait(false); // never throws: the loop catches everything
        }

        if (_input is not null)
        {
            await _input.CompleteAsync().ConfigureAwait(false);
        }
    }

    /// <summary>Reads up to WELCOME (spec §6.1): an ERROR instead (say, UnsupportedVersion) fails the attempt with its code.</summary>
    private async Task<WelcomeFrame> ReadWelcomeAsync(CancellationToken cancellationToken)
    {
        PipeReader input = _input!;
        while (true)
        {
            ReadResult result = await input.ReadAsync(cancellationToken).ConfigureAwait(false);
            ReadOnlySequence<byte> buffer = result.Buffer;
            try
            {
                if (ServerFrames.TryRead(ref buffer, Options.MaxIncomingFrameBytes, out ServerFrame frame))
                {
                    return frame.Type switch
                    {
                        FrameType.Welcome => frame.Welcome,
                        FrameType.Error => throw BrokerError(frame.Error, hello: true),
                        _ => throw new HeraldException(ErrorCode.UnexpectedFrame, $"The broker answered HELLO with {frame.Type}, not WELCOME."),
                    };
                }
            }
            catch (ProtocolException e)
            {
                throw new HeraldException(e.Code, $"The broker's answer to HELLO is not a valid frame: {e.Message}", e);
            }
            finally
            {
                input.AdvanceTo(buffer.Start, buffer.End);
            }

            if (result.IsCompleted)
            {
                throw new HeraldConnectionException(Closed("The broker closed the connection before WELCOME."));
            }
        }
    }

    /// <summary>The canonical read loop: parse every whole frame, then advance; a full subscription buffer holds it up (back-pressure).</summary>
    private async Task ReadLoopAsync()
    {
        CancellationToken lifetime = Lifetime;
        PipeReader input = _input!;
        int maxFrame = Options.MaxIncomingFrameBytes;
        try
        {
            while (true)
            {
                ReadResult result = await input.ReadAsync(lifetime).ConfigureAwait(false);
                ReadOnlySequence<byte> buffer = result.Buffer;
                Volatile.Write(ref _lastReadAt, Environment.TickCount64);
                Volatile.Write(ref _pingsOutstanding, 0);
                try
                {
                    while (ServerFrames.TryRead(ref buffer, maxFrame, out ServerFrame frame))
                    {
                        HeraldMessage? message = Handle(frame);
                        if (message is not null)
                        {
                            await DeliverAsync(message, lifetime).ConfigureAwait(false);
                        }
                    }
                }
                finally
                {
                    input.AdvanceTo(buffer.Start, buffer.End);
                }

                if (result.IsCompleted)
                {
                    Fail(new HeraldConnectionException(Closed(buffer.IsEmpty
                        ? "The broker closed the connection."
                        : $"The broker closed the connection in the middle of a frame ({buffer.Length} bytes of it arrived).")));
                    return;
                }
            }
        }
        catch (OperationCanceledException) when (lifetime.IsCancellationRequested)
        {
            // Lost or closed.
        }
        catch (ProtocolException e)
        {
            Fail(new HeraldException(e.Code, $"The broker sent an invalid frame: {e.Message}", e));
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Fail(LostBecause("Reading from the broker failed", e));
        }
    }

    private HeraldMessage? Handle(in ServerFrame frame)
    {
        switch (frame.Type)
        {
            case FrameType.Message:
                return Materialize(frame.Message);
            case FrameType.Ping:
                Outbound.EnqueuePong();
                return null;
            case FrameType.Pong:
                PongWaiter? waiter;
                lock (_pongGate)
                {
                    _pongs.TryDequeue(out waiter);
                }

                if (waiter?.Refusal is { } refusal)
                {
                    waiter.Done.TrySetException(refusal);
                }
                else
                {
                    waiter?.Done.TrySetResult();
                }

                return null;
            case FrameType.Error:
                HeraldException error = BrokerError(frame.Error);
                if (frame.Error.Fatal)
                {
                    throw error; // the broker closes the connection now (spec §4.8)
                }

                if (frame.Error.Sids is { Length: > 0 } lost)
                {
                    foreach (uint sid in lost)
                    {
                        Client.FindSubscription(sid)?.ReportGap(); // spec §6.3: told as a resume that did not recover
                    }

                    return null;
                }

                if (frame.Error.Sid != 0)
                {
                    if (error.ErrorCode is ErrorCode.PresenceFull or ErrorCode.PresenceUnavailable)
                    {
                        Forget(frame.Error.Sid);
                    }

                    lock (_pongGate)
                    {
                        if (_pongs.TryPeek(out PongWaiter? head) && head?.Subscription?.Sid == frame.Error.Sid)
                        {
                            head.Refusal ??= error; // the refusal of the SUBSCRIBE being confirmed (a join past a limit, spec §15.1): thrown to its caller
                            return null;
                        }
                    }

                    Client.Revoke(frame.Error.Sid, error); // a refresh took the right to it away (spec §4.1), or a refused join on a reconnect
                    return null;
                }

                if (error.ErrorCode == ErrorCode.UnknownSubscription)
                {
                    lock (_pongGate)
                    {
                        if (_pongs.TryPeek(out PongWaiter? head) && head?.AbsorbsUnknownSubscription == true)
                        {
                            return null; // the answer to Forget on one node, which made nothing: expected, not the application's concern
                        }
                    }
                }

                if (error.ErrorCode is ErrorCode.PermissionDenied or ErrorCode.TooManyTopics)
                {
                    lock (_pongGate)
                    {
                        if (_pongs.TryPeek(out PongWaiter? head) && head?.Subscription is not null)
                        {
                            head.Refusal ??= error; // between the fence's PONG and its own: the SUBSCRIBE's answer
                            return null;
                        }
                    }
                }

                Client.ReportError(error);
                return null;
            case FrameType.Welcome:
                Welcomed(frame.Welcome); // the answer to a refreshing HELLO (spec §4.1)
                return null;
            case FrameType.Subscribed when (Capabilities & Capabilities.ServerSubscriptions) != 0:
                Client.AcceptServerSubscription(frame.Subscribed, this); // queued before any MESSAGE for its sid (spec §4.10)
                return null;
            case FrameType.PresenceReply:
                if (_presence.TryRemove(frame.PresenceReply.RequestId, out TaskCompletionSource<PresenceReplyFrame>? answer))
                {
                    answer.TrySetResult(frame.PresenceReply);
                }

                return null; // an answer nobody waits for any more (its caller gave up) is dropped
            default:
                throw new ProtocolException(ErrorCode.UnexpectedFrame, $"The broker sent {frame.Type} after WELCOME.");
        }
    }

    /// <summary>
    /// Ends at the broker what may be left of a SUBSCRIBE whose join was refused with <see cref="ErrorCode.PresenceFull"/> or
    /// <see cref="ErrorCode.PresenceUnavailable"/>: one node made nothing, but a cluster node keeps the subscription without
    /// its join (spec §15.5), which the client, having ended it, would never read. UNSUBSCRIBE between two PINGs, so that
    /// one node's <see cref="ErrorCode.UnknownSubscription"/> answer is recognized and absorbed.
    /// </summary>
    private void Forget(uint sid) =>
        _ = Expect(subscription: null, queue => queue.EnqueueFencedUnsubscribe(sid), fenced: true, absorbsUnknownSubscription: true)
            .ContinueWith(static t => _ = t.Exception, CancellationToken.None, TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);

    /// <summary>PINGs the broker after <see cref="HeraldClientOptions.PingInterval"/> of silence; gives up after <see cref="HeraldClientOptions.MaxPingsOutstanding"/> unanswered ones.</summary>
    private async Task PingLoopAsync()
    {
        CancellationToken lifetime = Lifetime;
        TimeSpan interval = Options.PingInterval;
        using var timer = new PeriodicTimer(interval);
        try
        {
            while (await timer.WaitForNextTickAsync(lifetime).ConfigureAwait(false))
            {
                if (Environment.TickCount64 - Volatile.Read(ref _lastReadAt) < (long)interval.TotalMilliseconds)
                {
                    continue;
                }

                if (Volatile.Read(ref _pingsOutstanding) >= Options.MaxPingsOutstanding)
                {
                    Fail(new HeraldException(ErrorCode.StaleConnection, $"The broker answered none of {Options.MaxPingsOutstanding} PINGs; the connection is presumed dead."));
                    return;
                }

                Interlocked.Increment(ref _pingsOutstanding);
                lock (_pongGate)
                {
                    _pongs.Enqueue(null);
                    Outbound.EnqueuePing();
                }

            }
        }
        catch (OperationCanceledException) when (lifetime.IsCancellationRequested)
        {
            // Lost or closed.
        }
    }

    /// <param name="hello">The answer to HELLO: a <see cref="ErrorCode.MalformedFrame"/> there (say, a client info over the broker's <c>max_presence_info</c>, spec §4.1) is the HELLO's own fault, which no reconnect fixes.</param>
    internal static HeraldException BrokerError(in ErrorFrame error, bool hello = false) =>
        new(error.Code, $"The broker sent ERROR {error.Code}{(error.Fatal ? " and closed the connection" : "")}{(hello ? " in answer to HELLO" : "")}: {error.Message}")
        {
            IsFatal = error.Fatal,
            Count = error.Count,
            Sid = error.Sid,
            RefusedHello = hello && error.Code == ErrorCode.MalformedFrame,
        };

    /// <summary><paramref name="what"/>, and what the medium said about the close (a WebSocket's status), if anything.</summary>
    private string Closed(string what) => _link?.CloseReason is { } reason ? $"{what} {reason}" : what;

    private static int Limit(in WelcomeFrame welcome, string key) =>
        welcome.Limits.TryGetValue(key, out ulong value) && value is > 0 and <= int.MaxValue ? (int)value : int.MaxValue;

    /// <summary>What waits for one PONG: a flush, a refresh, or a subscription (which collects a refusal that arrives before it).</summary>
    private sealed class PongWaiter(HeraldSubscription? subscription)
    {
        public TaskCompletionSource Done { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public HeraldSubscription? Subscription { get; } = subscription;

        /// <summary>Caller holds <c>_pongGate</c>.</summary>
        public HeraldException? Refusal { get; set; }

        /// <summary>Waits behind a <see cref="Forget"/>: an <see cref="ErrorCode.UnknownSubscription"/> before its PONG is that UNSUBSCRIBE's answer.</summary>
        public bool AbsorbsUnknownSubscription { get; init; }
    }
}
