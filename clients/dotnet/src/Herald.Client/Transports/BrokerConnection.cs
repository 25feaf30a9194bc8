using Herald.Protocol;

namespace Herald.Client.Transports;

/// <summary>
/// One link to the broker: a connection carrying frames (TCP, TLS, WebSocket) or a long-poll session. The
/// client makes a new one for every (re)connect and throws it away when it is lost; all protocol state that
/// must outlive it (subscriptions, buffered publications, pending requests) lives in the client. A transport
/// only moves frames: every MESSAGE it reads is handed to the same delivery path, every publication comes
/// from the same <see cref="FrameQueue"/>.
/// </summary>
internal abstract class BrokerConnection : IAsyncDisposable
{
    private readonly TaskCompletionSource<Exception> _lost = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly CancellationTokenSource _lifetime = new();
    private int _disposed;

    protected BrokerConnection(HeraldClient client, HeraldClientOptions options)
    {
        Client = client;
        Options = options;
        Outbound = new FrameQueue(options.PublishBufferSize);
    }

    /// <summary>The frames waiting to be written.</summary>
    public FrameQueue Outbound { get; }

    /// <summary>Completes, with the reason, when the connection is lost (or closed).</summary>
    public Task<Exception> Lost => _lost.Task;

    /// <summary>What the broker said about this connection; set by <see cref="OpenAsync"/>.</summary>
    public HeraldServerInfo Info { get; protected set; } = null!;

    public bool Zstd => Info.Compression;

    /// <summary>The broker granted headers (spec §4.1): publications may carry them, messages may arrive with them.</summary>
    public bool Headers => Info.Headers;

    /// <summary>
    /// Why <paramref name="subscription"/> cannot be sent on this connection, or <c>null</c>: a queue group member on a
    /// connection whose broker did not grant queue groups (spec §4.1 bit 4; long-poll's <c>queueGroups</c>). Such a
    /// broker would take it as a plain subscription (every member would get every message), so it is never sent. Or a
    /// join or presence events where presence was not granted (spec §4.1 bit 5): the broker would close the connection.
    /// </summary>
    public HeraldException? Refusal(HeraldSubscription subscription)
    {
        string medium = Info.Transport == HeraldTransport.LongPoll ? "long-poll session" : "connection";
        if (subscription.Queue is not null && !Info.QueueGroups)
        {
            return new HeraldException(
                ErrorCode.MalformedFrame,
                $"The subscription to '{subscription.Pattern}' joins the queue group '{subscription.Queue}', and this {medium} did not negotiate queue groups "
                + "(a broker before them; see HeraldServerInfo.QueueGroups). It was not sent: the broker would have made it a plain subscription, delivering every message to every member.");
        }

        if ((subscription.WireOptions & (SubscribeOptions.Join | SubscribeOptions.PresenceEvents)) != 0 && !Info.Presence)
        {
            return new HeraldException(ErrorCode.MalformedFrame, $"The subscription to '{subscription.Pattern}' asks for {(subscription.Joins ? "join" : "presence events")}, and {PresenceNotGranted(medium)} It was not sent.");
        }

        return null;
    }

    /// <summary>Why presence cannot be used on this connection, for the exceptions that say so.</summary>
    protected static string PresenceNotGranted(string medium) =>
        $"this {medium} did not negotiate presence (spec §4.1 capability bit 5: presence off on the broker, Herald:Presence:Enabled; headers off, HeraldClientOptions.EnableHeaders; or a broker before presence; see HeraldServerInfo.Presence).";

    /// <summary>WELCOME's <c>max_headers</c>: most header values one PUBLISH may carry (spec §4.9).</summary>
    public int MaxHeaders { get; protected set; } = int.MaxValue;

    /// <summary>WELCOME's <c>max_header_bytes</c>: largest encoded header block of one PUBLISH (spec §4.9).</summary>
    public int MaxHeaderBytes { get; protected set; } = int.MaxValue;

    /// <summary>Largest PUBLISH body the broker accepts.</summary>
    public int MaxBody { get; protected set; } = int.MaxValue;

    /// <summary>Largest PUBLISH payload (uncompressed) the broker accepts: WELCOME's <c>max_payload</c> (spec §4.2).</summary>
    public int MaxPayload { get; protected set; } = int.MaxValue;

    /// <summary>Longest topic or pattern the broker accepts, in bytes.</summary>
    public int MaxTopic { get; protected set; } = int.MaxValue;

    /// <summary>
    /// TCP: SUBSCRIBE and UNSUBSCRIBE are frames queued in order with the publications
    /// (<see cref="EnqueueSubscribe"/>, <see cref="FrameQueue.EnqueueUnsubscribe"/>). Long-poll: they are
    /// HTTP requests (<see cref="SubscribeAsync"/>, <see cref="UnsubscribeAsync"/>).
    /// </summary>
    public abstract bool SubscribesInline { get; }

    protected HeraldClient Client { get; }

    protected HeraldClientOptions Options { get; }

    /// <summary>Cancelled when the connection is lost: every loop of the connection stops on it.</summary>
    protected CancellationToken Lifetime => _lifetime.Token;

    /// <summary>
    /// Connects and completes the handshake (TCP HELLO/WELCOME, or creating the session) with
    /// <paramref name="credential"/>, if the broker wants one, then starts the connection's loops.
    /// </summary>
    public abstract Task OpenAsync(string? credential, CancellationToken cancellationToken);

    /// <summary>
    /// TCP: queues a SUBSCRIBE (without waiting: the caller may hold the client's gate). The task completes
    /// when the broker has it, or fails with its refusal.
    /// </summary>
    public virtual Task EnqueueSubscribe(HeraldSubscription subscription) => throw new NotSupportedException();

    /// <summary>Presents a fresh credential for the same identity (spec §4.1 refresh). Long-poll: a session keeps the identity it was created with.</summary>
    public virtual Task RefreshAsync(string? credential, CancellationToken cancellationToken) => Task.CompletedTask;

    /// <summary>
    /// Asks for <paramref name="topic"/>'s presence (spec §15.3): at most <paramref name="limit"/> members after
    /// <paramref name="cursor"/>, 0 for the occupancy alone. The answer as the broker gave it (a refusal is its code).
    /// </summary>
    /// <exception cref="HeraldException">Presence was not granted on this connection, or the connection was lost (<see cref="HeraldConnectionException"/>).</exception>
    public virtual Task<PresenceReplyFrame> PresenceAsync(byte[] topic, ulong limit, string? cursor, CancellationToken cancellationToken) =>
        throw new NotSupportedException();

    /// <summary>Long-poll: subscribes with an HTTP request.</summary>
    public virtual Task SubscribeAsync(HeraldSubscription subscription, CancellationToken cancellationToken) => throw new NotSupportedException();

    /// <summary>Long-poll: unsubscribes with an HTTP request.</summary>
    public virtual Task UnsubscribeAsync(uint sid, CancellationToken cancellationToken) => throw new NotSupportedException();

    /// <summary>
    /// Completes when everything queued before the call has been processed by the broker: TCP, a
    /// PING/PONG round trip (spec §4.7); long-poll, every publish request answered.
    /// </summary>
    public abstract Task FlushAsync(CancellationToken cancellationToken);

    /// <summary>Marks the connection lost (the first reason wins) and stops its loops. Any thread.</summary>
    public void Fail(Exception reason)
    {
        if (_lost.TrySetResult(reason))
        {
            OnLost(reason);
            _lifetime.Cancel();
        }
    }

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        if (!Lost.IsCompleted)
        {
            // The client leaves a live connection: said on the medium while the loops still run (a WebSocket's close).
            using var leaving = new CancellationTokenSource(Options.CloseTimeout);
            await LeaveAsync(leaving.Token).ConfigureAwait(false);
        }

        Fail(new HeraldConnectionException("The connection was closed by the client."));
        await CloseAsync().ConfigureAwait(false);
    }

    /// <summary>Writes one batch of frames (the writer loop's only call).</summary>
    protected abstract ValueTask WriteAsync(ReadOnlyMemory<byte> frames, CancellationToken cancellationToken);

    /// <summary>Says goodbye on the medium, if it has a way (bounded by <paramref name="cancellationToken"/>); the connection is closed right after. Never throws.</summary>
    protected virtual ValueTask LeaveAsync(CancellationToken cancellationToken) => default;

    /// <summary>Releases the transport's resources after the connection is lost or closed.</summary>
    protected abstract ValueTask CloseAsync();

    /// <summary>Called once, when the connection is lost, before its loops are cancelled.</summary>
    protected virtual void OnLost(Exception reason)
    {
    }

    protected void StartWriter() => _ = Task.Run(RunWriterAsync);

    /// <summary>Copies a MESSAGE out of the read buffer for its subscription; <c>null</c> when its sid is no longer live (spec §4.4) or it cannot be decompressed (reported).</summary>
    protected HeraldMessage? Materialize(in PublishFrame frame)
    {
        HeraldSubscription? subscription = Client.FindSubscription(frame.Sid);
        if (subscription is null)
        {
            return null; // unknown sid (spec §4.4)
        }

        if (subscription.TakePresence(frame, out HeraldMessage? ordered))
        {
            return ordered; // a presence event (spec §15.2): in the handler's buffer in its turn, or already in its own
        }

        if (subscription.Observe(frame))
        {
            return null; // the broker's answer to a resume (spec §13)
        }

        if ((subscription.WireOptions & SubscribeOptions.Delta) != 0 || (frame.Flags & PayloadFlags.Delta) != 0)
        {
            try
            {
                return HeraldMessage.FromDeltaFrame(frame, this, Client, subscription, Client.Serializer, Options.MaxIncomingFrameBytes);
            }
            catch (ProtocolException e)
            {
                // Every later delta of the sid would build on a payload the client does not hold: the connection is
                // given up, and the reconnect's subscriptions start again from full messages (spec §11.2).
                Fail(new HeraldException(e.Code, $"A delta on '{frame.TopicString}' could not be applied: {e.Message}", e));
                return null;
            }
        }

        try
        {
            return HeraldMessage.FromFrame(frame, Client, subscription, Client.Serializer, Options.MaxIncomingFrameBytes);
        }
        catch (ProtocolException e)
        {
            Client.ReportError(new HeraldException(e.Code, $"A message on '{frame.TopicString}' was dropped: {e.Message}", e));
            return null;
        }
    }

    /// <summary>Hands a message to its subscription, waiting for room if its buffer is full (back-pressure).</summary>
    protected static ValueTask DeliverAsync(HeraldMessage message, CancellationToken cancellationToken) =>
        message.Subscription!.TryDeliver(message) ? default : message.Subscription.DeliverAsync(message, cancellationToken);

    /// <summary>What a failed I/O call means for the connection.</summary>
    protected static HeraldException LostBecause(string what, Exception e) =>
        e as HeraldException ?? new HeraldConnectionException($"{what}: {e.Message}", e);

    private async Task RunWriterAsync()
    {
        CancellationToken lifetime = Lifetime;
        try
        {
            await Outbound.RunWriterAsync(WriteAsync, lifetime).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (lifetime.IsCancellationRequested)
        {
            // Lost or closed: nothing to write to.
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Fail(LostBecause("Writing to the broker failed", e));
        }
    }
}
