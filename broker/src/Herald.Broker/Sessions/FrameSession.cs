using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using Herald.Broker.Delivery;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using MessagePack;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Sessions;

/// <summary>
/// A <see cref="ProtocolSession"/> over a byte stream of length-prefixed frames (spec §2-§6): raw TCP, and
/// WebSocket's binary messages through the same pipes. It parses frames and calls the session's operations, answers with frames (WELCOME, PONG,
/// ERROR), PINGs an idle client, and runs the closing sequence. Transports only hand it a
/// <see cref="ConnectionContext"/>.
/// </summary>
/// <remarks>
/// Threading: <see cref="RunAsync"/> (the read loop) is the session's one caller. <see cref="ProtocolSession.Close"/>,
/// <see cref="ProtocolSession.CheckLiveness"/> and the backlog may be called from any thread.
/// </remarks>
internal sealed class FrameSession : ProtocolSession
{
    private readonly ConnectionContext _connection;
    private long _readAt; // Stopwatch timestamp of the current read batch, when fan-out latency is measured

    // Liveness, shared with the sweeper (Environment.TickCount64 milliseconds).
    private readonly long _openedAt;
    private long _lastReadAt;
    private long _lastPingAt;
    private int _pingsOutstanding;

    // The frame begun and not complete (spec §6.2): its first byte's time and declared body length (-1 until
    // its prefix is read), written by the read loop; the budget it took; the deadline the sweeper checks (0: none).
    private long _frameBegunAt;
    private long _frameLength = -1;
    private long _frameBudget;
    private long _frameDeadline;

    /// <inheritdoc/>
    protected override bool ChecksOnOneThread => true; // RunAsync is the session's one caller

    public FrameSession(BrokerCore broker, ConnectionContext connection, long id, string transport)
        : base(broker, id, transport, connection.RemoteEndPoint, new BacklogLimits(broker.Limits.MaxPendingMessages, broker.Limits.MaxPendingBytes, broker.Limits.SlowConsumerPolicy))
    {
        _connection = connection;
        _openedAt = _lastReadAt = Environment.TickCount64;
        _ = new PipeDrain<FrameFormat>(Backlog, connection.Transport.Output, transport, broker.Metrics, default);
    }

    /// <summary>
    /// The canonical read loop: read, parse frames until the reader says "need more", flush every backlog
    /// the batch touched once, advance. Returns when the client leaves or the broker closes the session.
    /// </summary>
    /// <remarks>
    /// Each batch passes the session's <see cref="ProtocolSession.Input"/> gate: shutdown stops the input
    /// between two frames, and waits for the batch in hand, before it closes any session (spec §6.4).
    /// The client is held back between two frames, not after a read batch: when it is over a rate
    /// (<see cref="ProtocolSession.Throttle"/>), the loop stops parsing, waits the debt, then goes on with
    /// the frames still buffered, so at rate R and burst B at most about B + R*T frames are handled in T
    /// seconds whatever the batches; when <see cref="LimitOptions.MaxPendingReplies"/> replies wait unsent
    /// (it asks faster than it reads), the loop reads nothing more until the drain takes them (spec §6.3).
    /// </remarks>
    public async Task RunAsync()
    {
        PipeReader input = _connection.Transport.Input;
        int maxFrame = Limits.MaxFrameBytes;
        int maxHelloFrame = Math.Min(maxFrame, Limits.PartialFrameAllowance); // before HELLO: no frame takes budget
        int maxReplies = Limits.MaxPendingReplies;
        long unparsed = 0; // bytes of a frame begun but not complete: a close or reset now tears it (spec §8)
        try
        {
            while (!IsClosing)
            {
                ReadResult result = await input.ReadAsync().ConfigureAwait(false);
                if (result.IsCanceled)
                {
                    break; // Close: a timeout, a slow consumer or shutdown
                }

                if (!Input.TryEnter())
                {
                    // Shutdown stopped the input (spec §6.4): nothing more is taken; its close ends the loop.
                    if (result.IsCompleted)
                    {
                        break;
                    }

                    input.AdvanceTo(result.Buffer.Start, result.Buffer.End);
                    continue;
                }

                ReadOnlySequence<byte> buffer = result.Buffer;
                _readAt = Broker.Metrics.FanoutEnabled ? Stopwatch.GetTimestamp() : 0;
                long now = Environment.TickCount64;
                Volatile.Write(ref _lastReadAt, now);
                Volatile.Write(ref _pingsOutstanding, 0);
                bool heldBack = false;
                try
                {
                    ReadOnlySequence<byte> unread = buffer;
                    while (FrameReader.TryReadFrame(ref buffer, IsOpen ? maxFrame : maxHelloFrame, out ReadOnlySequence<byte> body))
                    {
                        HandleFrame(body);
                        if (Deciding)
                        {
                            buffer = unread; // the application's backend is deciding this frame: it stays in the pipe, read again once decided
                            heldBack = true;
                            break;
                        }

                        unread = buffer;
                        if (Throttle.Ticks > 0 || Backlog.PendingReplies >= maxReplies || Input.IsClosed || AwaitsInterest || PresenceUnanswered >= MaxPresenceUnanswered)
                        {
                            heldBack = true; // the rest of the batch waits in the pipe
                            break;
                        }
                    }
                }
                finally
                {
                    FlushTouched();
                    input.AdvanceTo(buffer.Start, heldBack ? buffer.Start : buffer.End);
                    unparsed = heldBack ? 0 : buffer.Length; // held back: whole frames wait, none is torn
                    Input.Exit(); // what this batch published is queued to every subscriber before shutdown closes one
                }

                PartialFrame(unparsed == 0 ? default : buffer, began: buffer.Length != result.Buffer.Length, now);

                if (heldBack)
                {
                    // Over a rate: read nothing more until the debt is paid. Replies unsent: read nothing more
                    // until the client takes them. TCP backpressure slows the client down; nothing it sent
                    // is dropped.
                    while (Throttle is { Ticks: > 0 } pause && !IsClosing) // again if a timer fired early: never before the debt is paid
                    {
                        await Task.Delay(pause).ConfigureAwait(false);
                    }

                    ThrottleServed();

                    await DecidedAsync().ConfigureAwait(false); // bounded by the hook's timeout; nothing more is read meanwhile
                    await Backlog.WhenRepliesBelow(maxReplies).ConfigureAwait(false);
                    await PresenceRoomAsync().ConfigureAwait(false);
                    if (AwaitsInterest)
                    {
                        // Cluster: a subscription change waits until Redis has it, so the PONG after it means
                        // "live on every node" (spec §4.7, cluster.md §2).
                        await InterestSettledAsync().ConfigureAwait(false);
                    }

                    continue;
                }

                if (result.IsCompleted)
                {
                    Truncated(unparsed); // FIN inside a frame
                    break;
                }
            }
        }
        catch (ProtocolException e)
        {
            Broker.Metrics.ProtocolError(e.Code);
            Broker.Log.ProtocolError(Id, RemoteEndPoint, e.Code, e.Message);
            Close(e.Code, e.Message);
        }
        catch (Exception e) when (e is ConnectionResetException or IOException or ConnectionAbortedException or OperationCanceledException)
        {
            // The client went away mid-read (a reset): nothing to tell it, but a torn frame is still counted.
            if (!IsClosing)
            {
                Truncated(unparsed);
            }
        }
        catch (Exception e)
        {
            Broker.Log.ConnectionFailed(e, Id, RemoteEndPoint);
            Close(ErrorCode.InternalError, "Internal error; the connection is closed.");
        }
        finally
        {
            await CloseAsync().ConfigureAwait(false);
        }
    }

    /// <summary>
    /// Completes once fewer than <see cref="ProtocolSession.MaxPresenceUnanswered"/> PRESENCE wait for their answer (spec
    /// §15.3), or the session closes: until then the loop reads nothing more. Caller: the read loop.
    /// </summary>
    private async Task PresenceRoomAsync()
    {
        while (PresenceUnanswered >= MaxPresenceUnanswered && !IsClosing)
        {
            var room = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            Volatile.Write(ref _presenceRoom, room);
            if (PresenceUnanswered < MaxPresenceUnanswered || IsClosing)
            {
                break; // answered (or closed) between the test and the wait's making
            }

            await room.Task.ConfigureAwait(false);
        }

        Volatile.Write(ref _presenceRoom, null);
    }

    // The read loop's wait for a PRESENCE answer (PresenceRoomAsync); completed by PresenceAnswered or a close.
    private TaskCompletionSource? _presenceRoom;

    /// <inheritdoc/>
    protected override void PresenceAnswered() => Volatile.Read(ref _presenceRoom)?.TrySetResult();

    /// <summary>A PRESENCE answered after the engine read Redis: queued as a reply (in any order with the others, spec §15.3) and flushed.</summary>
    private async Task AnswerLaterAsync(ValueTask<MessageBuffer> answer)
    {
        ControlNow(await answer.ConfigureAwait(false));
    }

    /// <summary>
    /// Tracks the frame a read batch left incomplete (<paramref name="rest"/>; empty: none, or the loop holds the
    /// client back and the clock is the broker's): when its first byte came, what it declares, and so its deadline,
    /// <see cref="LimitOptions.FrameGracePeriod"/> plus its length at <see cref="LimitOptions.MinFrameDataRate"/>,
    /// which the sweeper checks (<see cref="CheckTransportLiveness"/>). A frame above
    /// <see cref="LimitOptions.PartialFrameAllowance"/> takes its size from the broker's budget until it is
    /// complete; none left: <c>FrameBudgetFull</c>. Once per read batch, never per frame; a small frame touches
    /// nothing shared. Caller: the read loop.
    /// </summary>
    /// <param name="began">Whether the batch completed a frame, so that what is left began in it.</param>
    private void PartialFrame(in ReadOnlySequence<byte> rest, bool began, long now)
    {
        if (began || rest.IsEmpty || _frameBegunAt == 0)
        {
            EndPartialFrame();
            if (rest.IsEmpty)
            {
                return;
            }

            _frameBegunAt = now; // the frame's first byte came in this batch (the prefix may itself be dripped)
        }

        if (_frameLength >= 0 || !FrameReader.TryReadLength(rest, out uint length))
        {
            if (_frameLength < 0)
            {
                Volatile.Write(ref _frameDeadline, _frameBegunAt + (long)Limits.FrameGracePeriod.TotalMilliseconds);
            }

            return;
        }

        _frameLength = length;
        Volatile.Write(ref _frameDeadline, _frameBegunAt + (long)Limits.FrameGracePeriod.TotalMilliseconds + (length * 1000L / Limits.MinFrameDataRate));
        if (length > (uint)Limits.PartialFrameAllowance)
        {
            long size = length + ProtocolConstants.LengthPrefixSize;
            if (!Broker.PartialFrames.TryTake(size))
            {
                Throw(ErrorCode.FrameBudgetFull, $"The broker holds its maximum of {Limits.MaxPartialFrameBytesTotal} bytes of incomplete large frames; a frame of {length} bytes cannot be received now. Retry later.");
            }

            _frameBudget = size;
        }
    }

    /// <summary>No frame is incomplete any more: its budget is given back and the sweeper stops watching it. Caller: the read loop.</summary>
    private void EndPartialFrame()
    {
        Volatile.Write(ref _frameDeadline, 0);
        _frameBegunAt = 0;
        _frameLength = -1;
        if (_frameBudget > 0)
        {
            Broker.PartialFrames.Release(_frameBudget);
            _frameBudget = 0;
        }
    }

    /// <summary>The peer left with <paramref name="bytes"/> of a frame unread: logged and counted as TruncatedFrame (spec §8).</summary>
    private void Truncated(long bytes)
    {
        if (bytes > 0)
        {
            Broker.Metrics.ProtocolError(ErrorCode.TruncatedFrame);
            Broker.Log.TruncatedFrame(Id, RemoteEndPoint, bytes);
        }
    }

    /// <inheritdoc/>
    protected override void OnClose(ErrorCode code, string reason)
    {
        if (code == ErrorCode.SlowConsumer)
        {
            // Met by a publisher's fan-out: with inline scheduling, cancelling the read would run this
            // session's whole closing sequence (unsubscribing, completing its queue) on the publisher's
            // thread, holding back every subscriber after this one. End it on the pool instead.
            ThreadPool.UnsafeQueueUserWorkItem(static session => session.StopReading(), this, preferLocal: false);
            return;
        }

        StopReading();
    }

    private void StopReading()
    {
        _connection.Transport.Input.CancelPendingRead();
        Backlog.CancelWait(); // a read loop holding its client back ends too
        Volatile.Read(ref _presenceRoom)?.TrySetResult();
    }

    /// <summary>Handshake timeout, idle PINGs, stale connections (spec §6.2).</summary>
    protected override void CheckTransportLiveness(long now)
    {
        if (!IsOpen)
        {
            if (now - _openedAt > (long)Limits.HandshakeTimeout.TotalMilliseconds)
            {
                Close(ErrorCode.HandshakeTimeout, $"No HELLO within {Limits.HandshakeTimeout.TotalSeconds:0.###} s.");
            }

            return; // a frame dripped before HELLO meets the handshake timeout
        }

        long deadline = Volatile.Read(ref _frameDeadline);
        if (deadline != 0 && now > deadline)
        {
            long length = Volatile.Read(ref _frameLength);
            Close(ErrorCode.FrameTimeout, length < 0
                ? $"A frame's length prefix did not arrive within {Limits.FrameGracePeriod.TotalSeconds:0.###} s of its first byte."
                : $"A frame of {length} bytes did not arrive within {Limits.FrameGracePeriod.TotalSeconds:0.###} s plus its length at {Limits.MinFrameDataRate} bytes/s.");
            return;
        }

        long interval = (long)Limits.PingInterval.TotalMilliseconds;
        if (now - Volatile.Read(ref _lastReadAt) < interval || now - _lastPingAt < interval)
        {
            return;
        }

        if (Volatile.Read(ref _pingsOutstanding) >= Limits.MaxPingsOutstanding)
        {
            Close(ErrorCode.StaleConnection, $"No answer to {Limits.MaxPingsOutstanding} PINGs.");
            return;
        }

        Interlocked.Increment(ref _pingsOutstanding);
        _lastPingAt = now;
        ControlNow(ControlFrames.Ping());
    }

    private void HandleFrame(in ReadOnlySequence<byte> body)
    {
        if (IsOpen && FrameDecoder.TryReadCommonPublish(body, out PublishFrame common))
        {
            Tell(Publish(common, _readAt)); // the common PUBLISH (most of a publisher's frames); anything else below
            return;
        }

        var reader = new MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
        // Spec §8.1: the frame's place in the conversation is judged before its fields are read.
        if (!IsOpen && type != FrameType.Hello)
        {
            Throw(ErrorCode.HelloRequired, $"{type} before HELLO: the first frame must be HELLO.");
        }

        if (IsOpen && type == FrameType.Hello && Broker.Authenticator.Mode == Security.AuthMode.None && !Broker.Access.DecidesConnections)
        {
            Throw(ErrorCode.UnexpectedFrame, "HELLO was already accepted on this connection.");
        }

        switch (type)
        {
            case FrameType.Publish:
                Tell(Publish(FrameDecoder.ReadPublish(ref reader, count), _readAt));
                break;
            case FrameType.Subscribe:
                SubscribeFrame subscribe = FrameDecoder.ReadSubscribe(ref reader, count);
                Tell(Subscribe(subscribe.Sid, subscribe.Pattern, (subscribe.Options & SubscribeOptions.NoEcho) != 0, subscribe.Since, subscribe.QueueString, subscribe.Options));
                break;
            case FrameType.Unsubscribe:
                Tell(Unsubscribe(FrameDecoder.ReadUnsubscribe(ref reader, count).Sid));
                break;
            case FrameType.Ping:
                FrameDecoder.ReadEmpty(ref reader, count);
                Control(ControlFrames.Pong());
                break;
            case FrameType.Pong:
                FrameDecoder.ReadEmpty(ref reader, count);
                break;
            case FrameType.Hello:
                Hello(FrameDecoder.ReadHello(ref reader, count, Broker.Presence.Options.MaxInfoBytes));
                break;
            case FrameType.Presence:
                ValueTask<MessageBuffer> answer = PresenceAsync(FrameDecoder.ReadPresence(ref reader, count), out Refusal notice);
                if (answer.IsCompletedSuccessfully)
                {
                    Control(answer.Result);
                }
                else
                {
                    _ = AnswerLaterAsync(answer); // read from the cluster's store: at most MaxPresenceUnanswered at once
                }

                Tell(notice);
                break;
            default:
                Throw(ErrorCode.UnexpectedFrame, $"{type} frames are sent by the broker, not to it.");
                break;
        }
    }

    /// <summary>HELLO (spec §4.1): authenticate (a connect hook: read again once the backend decided), open (or refresh), answer WELCOME.</summary>
    private void Hello(in HelloFrame hello)
    {
        if (hello.Version != ProtocolConstants.Version)
        {
            Throw(ErrorCode.UnsupportedVersion, $"Protocol version {hello.Version} is not supported; this broker speaks version {ProtocolConstants.Version}.");
        }

        if (Authenticated(hello.Auth, hello.ClientName, hello.Info) is not { } identity)
        {
            return; // the backend is deciding: this HELLO is read again once it has
        }

        bool refreshing = IsOpen;
        HelloInfo = hello.Info;
        Capabilities accepted = Open(identity, hello.ClientName, hello.Capabilities);
        if (!refreshing && ClaimQuota() is { IsNone: false } refused)
        {
            Throw(refused.Code, refused.Message!); // over the identity's connection quota: told, closed
        }

        var writer = new ArrayBufferWriter<byte>(256);
        FrameWriter.WriteWelcome(writer, Broker.ServerName, (ulong)Id, accepted, Broker.WelcomeLimits, inboxPrefix: Identity.InboxPrefix);
        Control(MessageBuffer.Copy(writer.WrittenSpan));
        Broker.Log.Welcomed(Id, RemoteEndPoint, hello.ClientName);
    }

    /// <inheritdoc/>
    protected override void JoinRefused(uint sid, ErrorCode code, string message)
    {
        ControlNow(ControlFrames.Error(code, message + " The subscription stays, without its join.", sid: sid));
    }

    /// <inheritdoc/>
    protected override void Revoked(uint sid, string message) => Control(ControlFrames.Error(ErrorCode.PermissionDenied, message, sid: sid));

    /// <inheritdoc/>
    protected override bool CarriesServerSubscriptions => true;

    /// <inheritdoc/>
    protected override bool CarriesDeltas => true;

    /// <inheritdoc/>
    protected override void ServerSubscribed(uint sid, string pattern, SubscribeOptions options) => ControlNow(ControlFrames.Subscribed(sid, pattern, options));

    /// <inheritdoc/>
    protected override void ServerUnsubscribed(uint sid, string pattern, string reason) => ControlNow(ControlFrames.Error(ErrorCode.Unsubscribed, reason, sid: sid));

    /// <summary>A non-fatal refusal or notice becomes an ERROR frame, in order with what is queued.</summary>
    private void Tell(Refusal refusal)
    {
        if (!refusal.IsNone)
        {
            Control(ControlFrames.Error(refusal.Code, refusal.Message!, sid: refusal.Sid));
        }
    }

    /// <summary>Unsubscribes everything, sends the closing ERROR after what may still be sent, and completes the transport.</summary>
    private async Task CloseAsync()
    {
        EndPartialFrame();
        EndSubscriptions(keepQuota: true); // the registry gives the identity's slot back once the socket is gone
        Close(ErrorCode.None, "Closed by the client."); // no-op when the broker closed first
        ErrorCode code = CloseCode;
        if (code == ErrorCode.None)
        {
            // The client closed: nobody is left to write to.
            Backlog.Abandon();
            Broker.Log.ClosedByClient(Id, RemoteEndPoint);
            return;
        }

        string reason = CloseReason ?? code.ToString();
        if (code is ErrorCode.HandshakeTimeout or ErrorCode.StaleConnection or ErrorCode.FrameTimeout or ErrorCode.SlowConsumer or ErrorCode.ShuttingDown or ErrorCode.Disconnected)
        {
            Broker.Log.ClosedByBroker(Id, RemoteEndPoint, code, reason);
            if (code != ErrorCode.ShuttingDown)
            {
                Broker.Metrics.ProtocolError(code);
            }
        }

        if (code == ErrorCode.AuthenticationFailed)
        {
            await Task.Delay(Broker.Authenticator.FailureDelay).ConfigureAwait(false); // the same delay for every failure: no timing oracle
        }

        if (await SayLastWordsAsync(code, ControlFrames.Error(code, reason, fatal: true)).ConfigureAwait(false))
        {
            await _connection.Transport.Output.CompleteAsync().ConfigureAwait(false);
        }
        else
        {
            _connection.Abort(new ConnectionAbortedException($"Closed ({code}); the client did not take its last frames in time."));
        }
    }
}
