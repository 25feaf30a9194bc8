using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Net;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Hosting;
using Herald.Broker.Monitoring;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using MessagePack;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Sessions;

/// <summary>
/// One client connection speaking the binary protocol (spec §4-§6), whatever transport carries its
/// bytes: the frame loop, the handshake, subscriptions, publishing into the router, liveness and the
/// closing sequence. Transports only hand it a <see cref="ConnectionContext"/>.
/// </summary>
/// <remarks>
/// Threading: <see cref="RunAsync"/> (the read loop) owns <c>_subscriptions</c>, <c>_toFlush</c> and the
/// handshake state. <see cref="RequestClose"/>, <see cref="CheckLiveness"/> and the outbound queue may
/// be called from any thread.
/// </remarks>
internal sealed class ClientSession : IConnectionStats
{
    private readonly BrokerCore _broker;
    private readonly ConnectionContext _connection;
    private readonly LimitOptions _limits;
    private readonly string _transport;
    private readonly List<IMessageSink> _toFlush = [];
    private Dictionary<uint, Subscription>? _subscriptions;
    private bool _welcomed;
    private Identity _identity = Identity.Anonymous;
    private int _subscriptionCount;
    private long _readAt; // Stopwatch timestamp of the current read batch, when fan-out latency is measured

    // Publish rate limit (token bucket), owned by the read loop.
    private double _tokens;
    private long _refilledAt = Stopwatch.GetTimestamp();
    private bool _rateWarned;

    // Liveness, shared with the sweeper (Environment.TickCount64 milliseconds).
    private readonly long _openedAt;
    private long _lastReadAt;
    private long _lastPingAt;
    private int _pingsOutstanding;

    // Why the broker is closing this connection; set once, from any thread.
    private int _closeCode;
    private string? _closeReason;

    public ClientSession(BrokerCore broker, ConnectionContext connection, long id, string transport)
    {
        _broker = broker;
        _connection = connection;
        _limits = broker.Options.Limits;
        _transport = transport;
        Id = id;
        _openedAt = _lastReadAt = Environment.TickCount64;
        _tokens = _limits.PublishBurst;
        Outbound = new OutboundQueue(connection.Transport.Output, transport, _limits.MaxPendingBytes, _limits.MaxPendingMessages, _limits.SlowConsumerPolicy, broker.Metrics, OnSlowConsumer);
    }

    public long Id { get; }

    public OutboundQueue Outbound { get; }

    public EndPoint? RemoteEndPoint => _connection.RemoteEndPoint;

    /// <inheritdoc/>
    public string? ClientName { get; private set; }

    /// <inheritdoc/>
    public int SubscriptionCount => Volatile.Read(ref _subscriptionCount);

    /// <inheritdoc/>
    public long PendingMessages => Outbound.Pending.Messages;

    /// <inheritdoc/>
    public long PendingBytes => Outbound.Pending.Bytes;

    /// <summary>
    /// The canonical read loop: read, parse frames until the reader says "need more", flush every queue
    /// the batch touched once, advance. Returns when the client leaves or the broker closes it.
    /// </summary>
    public async Task RunAsync()
    {
        PipeReader input = _connection.Transport.Input;
        int maxFrame = _limits.MaxFrameBytes;
        try
        {
            while (true)
            {
                ReadResult result = await input.ReadAsync().ConfigureAwait(false);
                if (result.IsCanceled)
                {
                    break; // RequestClose: a timeout, a slow consumer or shutdown
                }

                ReadOnlySequence<byte> buffer = result.Buffer;
                _readAt = _broker.Metrics.FanoutEnabled ? Stopwatch.GetTimestamp() : 0;
                Volatile.Write(ref _lastReadAt, Environment.TickCount64);
                Volatile.Write(ref _pingsOutstanding, 0);
                try
                {
                    while (FrameReader.TryReadFrame(ref buffer, maxFrame, out ReadOnlySequence<byte> body))
                    {
                        HandleFrame(body);
                    }
                }
                finally
                {
                    FlushTouched();
                    input.AdvanceTo(buffer.Start, buffer.End);
                }

                if (_tokens < 0)
                {
                    // Over the publish rate: read nothing more until the debt is paid. TCP backpressure
                    // slows the publisher down; nothing it sent is dropped.
                    await Task.Delay(TimeSpan.FromSeconds(-_tokens / _limits.PublishRatePerSecond)).ConfigureAwait(false);
                }

                if (result.IsCompleted)
                {
                    if (!buffer.IsEmpty)
                    {
                        _broker.Metrics.ProtocolError(ErrorCode.TruncatedFrame);
                        _broker.Log.TruncatedFrame(Id, RemoteEndPoint, buffer.Length);
                    }

                    break;
                }
            }
        }
        catch (ProtocolException e)
        {
            _broker.Metrics.ProtocolError(e.Code);
            _broker.Log.ProtocolError(Id, RemoteEndPoint, e.Code, e.Message);
            RequestClose(e.Code, e.Message);
        }
        catch (Exception e) when (e is ConnectionResetException or IOException or ConnectionAbortedException or OperationCanceledException)
        {
            // The client went away mid-read: nothing to tell it.
        }
        catch (Exception e)
        {
            _broker.Log.ConnectionFailed(e, Id, RemoteEndPoint);
            RequestClose(ErrorCode.InternalError, "Internal error; the connection is closed.");
        }
        finally
        {
            await CloseAsync().ConfigureAwait(false);
        }
    }

    /// <summary>Asks the read loop to stop and the connection to close with <paramref name="code"/>. Any thread; first call wins.</summary>
    public void RequestClose(ErrorCode code, string reason)
    {
        if (Interlocked.CompareExchange(ref _closeCode, (int)code, 0) == 0)
        {
            _closeReason = reason;
            _connection.Transport.Input.CancelPendingRead();
        }
    }

    /// <summary>Called by the sweeper: handshake timeout, idle PINGs, stale connections (spec §6.2).</summary>
    public void CheckLiveness(long now)
    {
        if (!Volatile.Read(ref _welcomed))
        {
            if (now - _openedAt > (long)_limits.HandshakeTimeout.TotalMilliseconds)
            {
                RequestClose(ErrorCode.HandshakeTimeout, $"No HELLO within {_limits.HandshakeTimeout.TotalSeconds:0.###} s.");
            }

            return;
        }

        if (Volatile.Read(ref _identity).ExpiresAt is { } expires && DateTimeOffset.UtcNow >= expires)
        {
            RequestClose(ErrorCode.AuthenticationFailed, "The credential has expired; a client refreshes it with a new HELLO before it does.");
            return;
        }

        long interval = (long)_limits.PingInterval.TotalMilliseconds;
        if (now - Volatile.Read(ref _lastReadAt) < interval || now - _lastPingAt < interval)
        {
            return;
        }

        if (Volatile.Read(ref _pingsOutstanding) >= _limits.MaxPingsOutstanding)
        {
            RequestClose(ErrorCode.StaleConnection, $"No answer to {_limits.MaxPingsOutstanding} PINGs.");
            return;
        }

        Interlocked.Increment(ref _pingsOutstanding);
        _lastPingAt = now;
        if (Outbound.EnqueueControl(ControlFrames.Ping()))
        {
            Outbound.ScheduleFlush();
        }
    }

    private void HandleFrame(in ReadOnlySequence<byte> body)
    {
        var reader = new MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
        if (!_welcomed && type != FrameType.Hello)
        {
            Throw(ErrorCode.HelloRequired, $"{type} before HELLO: the first frame must be HELLO.");
        }

        switch (type)
        {
            case FrameType.Publish:
                Publish(FrameDecoder.ReadPublish(ref reader, count));
                break;
            case FrameType.Subscribe:
                Subscribe(FrameDecoder.ReadSubscribe(ref reader, count));
                break;
            case FrameType.Unsubscribe:
                Unsubscribe(FrameDecoder.ReadUnsubscribe(ref reader, count));
                break;
            case FrameType.Ping:
                FrameDecoder.ReadEmpty(ref reader, count);
                Control(ControlFrames.Pong());
                break;
            case FrameType.Pong:
                FrameDecoder.ReadEmpty(ref reader, count);
                break;
            case FrameType.Hello:
                Hello(FrameDecoder.ReadHello(ref reader, count));
                break;
            default:
                Throw(ErrorCode.UnexpectedFrame, $"{type} frames are sent by the broker, not to it.");
                break;
        }
    }

    private void Hello(in HelloFrame hello)
    {
        if (_welcomed && _broker.Authenticator.Mode == AuthMode.None)
        {
            Throw(ErrorCode.UnexpectedFrame, "HELLO was already accepted on this connection.");
        }

        if (hello.Version != ProtocolConstants.Version)
        {
            Throw(ErrorCode.UnsupportedVersion, $"Protocol version {hello.Version} is not supported; this broker speaks version {ProtocolConstants.Version}.");
        }

        Identity identity = _broker.Authenticator.Authenticate(hello.Auth, out string failure) ?? throw new ProtocolException(ErrorCode.AuthenticationFailed, failure);
        if (_welcomed)
        {
            // A refresh (spec §4.1): the same identity with a fresh credential, before the old one expires.
            if (identity.Name != _identity.Name)
            {
                Throw(ErrorCode.AuthenticationFailed, "A refreshing HELLO must authenticate the same identity.");
            }

            // Answered by a fresh WELCOME, below.
        }

        Volatile.Write(ref _identity, identity);

        ClientName = hello.ClientName;
        Volatile.Write(ref _welcomed, true);
        Capabilities accepted = (hello.Capabilities & Capabilities.Zstd) != 0 && _broker.Encoder.Enabled ? Capabilities.Zstd : Capabilities.None;
        Outbound.AcceptsZstd = accepted.HasFlag(Capabilities.Zstd);
        var writer = new ArrayBufferWriter<byte>(256);
        FrameWriter.WriteWelcome(writer, _broker.Options.ServerName, (ulong)Id, accepted, _broker.WelcomeLimits);
        Control(MessageBuffer.Copy(writer.WrittenSpan));
        _broker.Log.Welcomed(Id, RemoteEndPoint, hello.ClientName);
    }

    private void Subscribe(in SubscribeFrame subscribe)
    {
        _subscriptions ??= [];
        if (subscribe.Sid == 0 || _subscriptions.ContainsKey(subscribe.Sid))
        {
            Throw(ErrorCode.DuplicateSubscription, subscribe.Sid == 0 ? "Subscription id 0 is not allowed." : $"Subscription id {subscribe.Sid} is already in use on this connection.");
        }

        if (_subscriptions.Count >= _limits.MaxSubscriptionsPerConnection)
        {
            Throw(ErrorCode.TooManySubscriptions, $"More than {_limits.MaxSubscriptionsPerConnection} subscriptions on one connection.");
        }

        string pattern = TopicRules.CheckPattern(subscribe.Pattern, _limits.MaxTopicLength);
        if (!_identity.Permissions.CanSubscribe(pattern))
        {
            Denied($"Subscribing to '{pattern}' is not permitted for '{_identity.Name}'.");
            return;
        }

        var subscription = new Subscription(Outbound, subscribe.Sid, pattern, (subscribe.Options & SubscribeOptions.NoEcho) != 0);
        try
        {
            _broker.Router.Add(subscription);
        }
        catch (ProtocolException e) when (e.Code == ErrorCode.TooManyTopics)
        {
            _broker.Metrics.ProtocolError(e.Code);
            Control(ControlFrames.Error(e.Code, e.Message)); // refused, told; the connection stays
            return;
        }

        _subscriptions.Add(subscribe.Sid, subscription);
        Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
    }

    private void Unsubscribe(in UnsubscribeFrame unsubscribe)
    {
        if (_subscriptions is null || !_subscriptions.Remove(unsubscribe.Sid, out Subscription? subscription))
        {
            _broker.Metrics.ProtocolError(ErrorCode.UnknownSubscription);
            Control(ControlFrames.Error(ErrorCode.UnknownSubscription, $"No live subscription with id {unsubscribe.Sid}."));
            return;
        }

        _broker.Router.Remove(subscription);
        Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
    }

    private void Publish(in PublishFrame publish)
    {
        TopicRules.CheckName(publish.Topic, _limits.MaxTopicLength);
        if (publish.ReplyTo is { } replyTo)
        {
            TopicRules.CheckName(replyTo, _limits.MaxTopicLength, isReplyTo: true);
        }

        if (_limits.PublishRatePerSecond > 0)
        {
            TakeToken();
        }

        if (!_identity.Permissions.IsAllowAll && !_identity.Permissions.CanPublish(publish.TopicString))
        {
            Denied($"Publishing to '{publish.TopicString}' is not permitted for '{_identity.Name}'.");
            return;
        }

        if ((publish.Flags & PayloadFlags.Zstd) == 0)
        {
            _broker.Metrics.Published(_transport, _broker.Router.Publish(publish, Outbound, _toFlush, _broker.Encoder, receivedAt: _readAt), FrameBytes(publish));
            return;
        }

        // Sent compressed: only by a client that negotiated it, and always checked (bounded, so no
        // decompression bomb) before anything is routed; subscribers without Zstd get the plain form.
        if (!Outbound.AcceptsZstd)
        {
            Throw(ErrorCode.MalformedFrame, "A Zstd-compressed payload was sent without negotiating Zstd in HELLO.");
        }

        int length = Zstd.Decompress(publish.Payload, _limits.MaxFrameBytes, out byte[] plain);
        try
        {
            _broker.Metrics.Published(_transport, _broker.Router.Publish(publish, Outbound, _toFlush, _broker.Encoder, plain.AsSpan(0, length), _readAt), FrameBytes(publish));
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(plain);
        }
    }

    /// <summary>The size of the MESSAGE frame a publication is routed as (header and envelope as sent).</summary>
    private static int FrameBytes(in PublishFrame publish) => ProtocolConstants.MessageHeaderSize + (int)publish.Envelope.Length;

    private void TakeToken()
    {
        long now = Stopwatch.GetTimestamp();
        int rate = _limits.PublishRatePerSecond;
        _tokens = Math.Min(_limits.PublishBurst, _tokens + (Stopwatch.GetElapsedTime(_refilledAt, now).TotalSeconds * rate)) - 1;
        _refilledAt = now;
        if (_tokens < 0 && !_rateWarned)
        {
            _rateWarned = true; // once per episode
            _broker.Metrics.ProtocolError(ErrorCode.RateLimited);
            Control(ControlFrames.Error(ErrorCode.RateLimited, $"Publishing faster than {rate} messages/s (burst {_limits.PublishBurst}): reads are paused to hold that rate; nothing is dropped."));
        }
        else if (_tokens >= 0)
        {
            _rateWarned = false;
        }
    }

    /// <summary>A refused SUBSCRIBE or PUBLISH (spec §8 PermissionDenied): told, counted, the connection stays.</summary>
    private void Denied(string message)
    {
        if (_broker.Options.Security.DisconnectOnPermissionDenied)
        {
            Throw(ErrorCode.PermissionDenied, message); // configured: refused, then closed
        }

        _broker.Metrics.ProtocolError(ErrorCode.PermissionDenied);
        Control(ControlFrames.Error(ErrorCode.PermissionDenied, message));
    }

    private void Control(MessageBuffer frame)
    {
        if (Outbound.EnqueueControl(frame))
        {
            _toFlush.Add(Outbound);
        }
    }

    private void FlushTouched()
    {
        List<IMessageSink> toFlush = _toFlush;
        int count = toFlush.Count;
        if (count == 0)
        {
            return;
        }

        if (count == 1)
        {
            toFlush[0].Flush(); // one receiver (request/reply, 1:1): write now on this thread, no hand-off
        }
        else
        {
            for (int i = 0; i < count; i++)
            {
                toFlush[i].ScheduleFlush(); // fan-out: every receiver's drain runs on the pool, in parallel
            }
        }

        toFlush.Clear();
    }

    private void OnSlowConsumer() => RequestClose(ErrorCode.SlowConsumer, "Slow consumer.");

    /// <summary>Unsubscribes everything, sends the closing ERROR after what may still be sent, and completes the transport.</summary>
    private async Task CloseAsync()
    {
        if (_subscriptions is not null)
        {
            foreach (Subscription subscription in _subscriptions.Values)
            {
                _broker.Router.Remove(subscription);
            }

            _subscriptions.Clear();
            Volatile.Write(ref _subscriptionCount, 0);
        }

        var code = (ErrorCode)Volatile.Read(ref _closeCode);
        _broker.Metrics.Disconnected(_transport, code);
        if (code == ErrorCode.None)
        {
            // The client closed: nobody is left to write to.
            Outbound.Abandon();
            _broker.Log.ClosedByClient(Id, RemoteEndPoint);
            return;
        }

        string reason = _closeReason ?? code.ToString();
        if (code is ErrorCode.HandshakeTimeout or ErrorCode.StaleConnection or ErrorCode.SlowConsumer or ErrorCode.ShuttingDown)
        {
            _broker.Log.ClosedByBroker(Id, RemoteEndPoint, code, reason);
            if (code != ErrorCode.ShuttingDown)
            {
                _broker.Metrics.ProtocolError(code);
            }
        }

        if (code == ErrorCode.AuthenticationFailed)
        {
            await Task.Delay(_broker.Authenticator.FailureDelay).ConfigureAwait(false); // the same delay for every failure: no timing oracle
        }

        // Shutdown delivers what is queued first (spec §6.4); an error or timeout tells the client at once.
        bool drainQueued = code == ErrorCode.ShuttingDown;
        MessageBuffer? final = code == ErrorCode.SlowConsumer ? null : ControlFrames.Error(code, reason, fatal: true);
        TimeSpan timeout = drainQueued ? _limits.ShutdownDrainTimeout : _limits.ErrorFlushTimeout;
        Task drained = Outbound.Complete(final, discardQueued: !drainQueued);
        if (await Task.WhenAny(drained, Task.Delay(timeout)).ConfigureAwait(false) == drained)
        {
            await _connection.Transport.Output.CompleteAsync().ConfigureAwait(false);
        }
        else
        {
            _broker.Log.DrainTimedOut(Id, RemoteEndPoint, timeout);
            _connection.Abort(new ConnectionAbortedException($"Closed ({code}); the client did not take its last frames in time."));
            Outbound.Abandon();
        }
    }

    private static void Throw(ErrorCode code, string message) => throw new ProtocolException(code, message);
}
