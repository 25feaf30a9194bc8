using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Threading.Channels;
using Herald.Client.Telemetry;
using Herald.Protocol;

namespace Herald.Client;

/// <summary>
/// A live subscription to a topic pattern (spec §4.3, wildcards <c>*</c> and <c>&gt;</c>). Either
/// enumerate it (<c>await foreach (var m in subscription)</c>) or, when it was created with a handler, let
/// the handler receive each message, one at a time and in order. Dispose it to unsubscribe. It survives
/// reconnects: the client subscribes again on every new connection.
/// </summary>
/// <remarks>
/// Delivery: the connection's reader hands each message to the subscription's bounded buffer
/// (<see cref="SubscriptionOptions.Capacity"/>). A handler runs on the thread pool, never on the
/// caller's <see cref="SynchronizationContext"/>, unless <see cref="SubscriptionOptions.DeliverOnCapturedContext"/>
/// asked for the context that was current at subscribe time.
/// </remarks>
public sealed class HeraldSubscription : IAsyncEnumerable<HeraldMessage>, IAsyncDisposable
{
    private readonly HeraldClient _client;
    private readonly Channel<HeraldMessage>? _channel;
    private readonly Func<HeraldMessage, CancellationToken, ValueTask>? _handler;
    private readonly Action<HeraldMessage>? _inline;
    private readonly SynchronizationContext? _context;
    private readonly CancellationTokenSource _stop = new();
    private long _dropped;
    private int _ended;
    private readonly Lock _positionGate = new();
    private StreamPosition? _position; // the last one received (message or status); guarded by _positionGate
    private bool _resumes; // sends since on every SUBSCRIBE (spec §13): asked for, one topic, and its topic keeps a history as far as known
    private bool _resuming; // the last SUBSCRIBE carried a real position: its status is told (Resumed)
    private readonly bool _presenceEvents; // SUBSCRIBE's presence-events bit (spec §15.2): MESSAGEs with Herald-Presence are events
    private readonly Action<HeraldPresenceEvent>? _onPresence;
    private readonly Channel<HeraldPresenceEvent>? _presence; // events for ReadPresenceEventsAsync, or for OnPresence's loop on an enumerated subscription
    private long _droppedPresence;

    /// <summary>A subscription read by enumeration or dispatched to <paramref name="handler"/>.</summary>
    internal HeraldSubscription(HeraldClient client, uint sid, string pattern, byte[] patternBytes, SubscribeOptions wireOptions, int capacity, BoundedChannelFullMode fullMode, Func<HeraldMessage, CancellationToken, ValueTask>? handler, SynchronizationContext? context, bool resume = true, string? queue = null, byte[]? queueBytes = null, Action<HeraldPresenceEvent>? onPresence = null)
    {
        _client = client;
        _resumes = resume && queue is null && pattern.AsSpan().IndexOfAny('*', '>') < 0; // a queue group member never resumes (spec §4.3)
        Queue = queue;
        QueueBytes = queueBytes;
        Sid = sid;
        Pattern = pattern;
        PatternBytes = patternBytes;
        WireOptions = wireOptions;
        _handler = handler;
        _context = context;
        _channel = Channel.CreateBounded<HeraldMessage>(
            new BoundedChannelOptions(capacity) { FullMode = fullMode, SingleReader = handler is not null, SingleWriter = false, AllowSynchronousContinuations = false },
            _ => Interlocked.Increment(ref _dropped));
        _presenceEvents = (wireOptions & SubscribeOptions.PresenceEvents) != 0;
        _onPresence = onPresence;
        if (_presenceEvents && (handler is null || onPresence is null))
        {
            // Read by the application (or OnPresence's own loop): a reader that falls behind loses the oldest, counted, rather than holding up the messages.
            _presence = Channel.CreateBounded<HeraldPresenceEvent>(
                new BoundedChannelOptions(capacity) { FullMode = BoundedChannelFullMode.DropOldest, SingleReader = onPresence is not null, SingleWriter = false, AllowSynchronousContinuations = false },
                _ => Interlocked.Increment(ref _droppedPresence));
        }
    }

    /// <summary>An internal subscription (the request inbox) whose messages go straight to <paramref name="inline"/> on the reading thread.</summary>
    internal HeraldSubscription(HeraldClient client, uint sid, string pattern, byte[] patternBytes, Action<HeraldMessage> inline)
    {
        _client = client;
        Sid = sid;
        Pattern = pattern;
        PatternBytes = patternBytes;
        _inline = inline;
    }

    /// <summary>The pattern subscribed to.</summary>
    public string Pattern { get; }

    /// <summary>The queue group this subscription is a member of (spec §14, <see cref="SubscriptionOptions.Queue"/>), or <c>null</c> for a plain subscription.</summary>
    public string? Queue { get; }

    /// <summary>The subscription id on the wire (spec §4.3): in the broker's <c>/subsz</c> and logs.</summary>
    public uint Sid { get; }

    /// <summary>Not unsubscribed, and its client not closed.</summary>
    public bool IsActive => Volatile.Read(ref _ended) == 0;

    /// <summary>
    /// The position (spec §13) of the last message received on this subscription, or of the broker's answer to
    /// its last resume; null until the topic's history gave one (a topic without history never does). The client
    /// resumes from it by itself after a reconnect (<see cref="SubscriptionOptions.Resume"/>); keep it yourself
    /// to resume in a later process.
    /// </summary>
    public StreamPosition? Position
    {
        get
        {
            lock (_positionGate)
            {
                return _position;
            }
        }
    }

    /// <summary>
    /// Raised when the broker answered a resume after a reconnect (spec §13): <see cref="HeraldResumeEventArgs.Recovered"/>
    /// says whether every message missed meanwhile follows (then nothing was lost), or they cannot be replayed (the
    /// history was lost or is too short: recover from your own source of truth; the live stream goes on). Raised on
    /// the connection's reader: keep the handler short.
    /// </summary>
    public event EventHandler<HeraldResumeEventArgs>? Resumed;

    /// <summary>Messages dropped because the buffer was full (drop modes of <see cref="SubscriptionOptions.FullMode"/> only).</summary>
    public long DroppedMessages => Interlocked.Read(ref _dropped);

    /// <summary>Presence events dropped because <see cref="ReadPresenceEventsAsync"/> fell a whole buffer (<see cref="SubscriptionOptions.Capacity"/>) behind: the oldest go first.</summary>
    public long DroppedPresenceEvents => Interlocked.Read(ref _droppedPresence);

    /// <summary>This subscription makes its connection a member of its topic (<see cref="SubscriptionOptions.Join"/>, spec §15.1).</summary>
    public bool Joins => (WireOptions & SubscribeOptions.Join) != 0;

    internal byte[] PatternBytes { get; }

    internal SubscribeOptions WireOptions { get; }

    /// <summary>
    /// The last payload this subscription received on <see cref="DeltaBaseConnection"/>: the base of the next delta
    /// (spec §11.2). Kept only when the subscription asked for deltas; read and written by that connection's reader only.
    /// </summary>
    internal byte[]? DeltaBase { get; set; }

    /// <summary>The connection <see cref="DeltaBase"/> came on: a delta on another one (after a reconnect) has no base.</summary>
    internal object? DeltaBaseConnection { get; set; }

    /// <summary><see cref="Queue"/> as sent (checked ASCII), or <c>null</c>.</summary>
    internal byte[]? QueueBytes { get; }

    /// <summary>The connection this subscription was last sent on. Caller holds the client's gate.</summary>
    internal object? SentOn { get; set; }

    /// <summary>Made by the broker (SUBSCRIBED, spec §4.10): it ends with its connection and is never sent again.</summary>
    internal bool MadeByServer { get; init; }

    /// <summary>The broker has accepted it on <see cref="SentOn"/>. Caller holds the client's gate.</summary>
    internal bool Confirmed { get; set; }

    /// <summary>
    /// Reads the messages in order until the subscription ends (unsubscribed, client disposed). Not for a
    /// subscription created with a handler. Resumes on the context your <c>await foreach</c> captures: add
    /// <c>.ConfigureAwait(false)</c> in library code.
    /// </summary>
    public IAsyncEnumerator<HeraldMessage> GetAsyncEnumerator(CancellationToken cancellationToken = default)
    {
        if (_channel is null || _handler is not null)
        {
            throw new InvalidOperationException($"The subscription to '{Pattern}' delivers to its handler; it cannot also be enumerated.");
        }

        return _channel.Reader.ReadAllAsync(cancellationToken).GetAsyncEnumerator(cancellationToken);
    }

    /// <summary>The messages' payloads as MessagePack-serialized <typeparamref name="T"/> (see <see cref="HeraldMessage.Deserialize{T}"/>).</summary>
    public async IAsyncEnumerable<T> ReadAllAsync<T>([EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        await foreach (HeraldMessage message in this.WithCancellation(cancellationToken).ConfigureAwait(false))
        {
            yield return message.Deserialize<T>();
        }
    }

    /// <summary>
    /// The topic's presence events (join, leave, suppressed, resumed; spec §15.2), in order, until the subscription ends:
    /// <c>await foreach (var e in subscription.ReadPresenceEventsAsync())</c>. Each is handed over after every message
    /// that preceded it and before any that followed it. For a subscription made with
    /// <see cref="SubscriptionOptions.PresenceEvents"/> and without <see cref="SubscriptionOptions.OnPresence"/>.
    /// </summary>
    /// <exception cref="InvalidOperationException">The subscription did not ask for presence events, or gives them to its <see cref="SubscriptionOptions.OnPresence"/>.</exception>
    public async IAsyncEnumerable<HeraldPresenceEvent> ReadPresenceEventsAsync([EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        ChannelReader<HeraldPresenceEvent> reader = PresenceReader();
        while (await reader.WaitToReadAsync(cancellationToken).ConfigureAwait(false))
        {
            while (reader.TryRead(out HeraldPresenceEvent? presence))
            {
                yield return presence;
            }
        }
    }

    /// <summary>Waits for the next presence event (see <see cref="ReadPresenceEventsAsync"/>).</summary>
    /// <exception cref="ChannelClosedException">The subscription ended and every event was read.</exception>
    /// <exception cref="HeraldException">The subscription ended with an error (say, the broker refused its join).</exception>
    public async ValueTask<HeraldPresenceEvent> ReadPresenceEventAsync(CancellationToken cancellationToken = default)
    {
        ChannelReader<HeraldPresenceEvent> reader = PresenceReader();
        while (await reader.WaitToReadAsync(cancellationToken).ConfigureAwait(false))
        {
            if (reader.TryRead(out HeraldPresenceEvent? presence))
            {
                return presence;
            }
        }

        throw new ChannelClosedException($"The subscription to '{Pattern}' has ended.");
    }

    private ChannelReader<HeraldPresenceEvent> PresenceReader() =>
        _presence is not null && _onPresence is null
            ? _presence.Reader
            : throw new InvalidOperationException(_presenceEvents
                ? $"The subscription to '{Pattern}' gives its presence events to its OnPresence callback."
                : $"The subscription to '{Pattern}' did not ask for presence events (SubscriptionOptions.PresenceEvents).");

    /// <summary>Waits for the next message.</summary>
    /// <exception cref="ChannelClosedException">The subscription was unsubscribed (or its client disposed) and every message read.</exception>
    /// <exception cref="HeraldException">The subscription ended with an error: refused by the broker, or the client gave up reconnecting.</exception>
    public async ValueTask<HeraldMessage> ReadAsync(CancellationToken cancellationToken = default)
    {
        if (_channel is null || _handler is not null)
        {
            throw new InvalidOperationException($"The subscription to '{Pattern}' delivers to its handler; it cannot also be read.");
        }

        // WaitToReadAsync throws the error the subscription ended with, rather than wrapping it.
        while (await _channel.Reader.WaitToReadAsync(cancellationToken).ConfigureAwait(false))
        {
            if (_channel.Reader.TryRead(out HeraldMessage? message))
            {
                return message;
            }
        }

        throw new ChannelClosedException($"The subscription to '{Pattern}' has ended.");
    }

    /// <summary>
    /// Unsubscribes (spec §4.4). No handler call starts after this; an enumeration ends after the
    /// messages that had already arrived.
    /// </summary>
    public ValueTask UnsubscribeAsync(CancellationToken cancellationToken = default) => _client.UnsubscribeAsync(this, cancellationToken);

    /// <summary>Unsubscribes; see <see cref="UnsubscribeAsync"/>.</summary>
    public ValueTask DisposeAsync() => UnsubscribeAsync();

    public override string ToString() => Queue is null ? $"{Pattern} (sid {Sid})" : $"{Pattern} (sid {Sid}, queue {Queue})";

    /// <summary>
    /// SUBSCRIBE's <c>since</c> for the connection about to carry it (spec §4.3, CLIENTS.md step 12): the kept position
    /// after a reconnect, "from now" the first time; null when this subscription does not resume, or the broker keeps no
    /// history (capability bit 3 not granted: nothing to resume, and no status to wait for).
    /// </summary>
    internal StreamPosition? SinceFor(bool historyGranted)
    {
        lock (_positionGate)
        {
            if (!_resumes || !historyGranted)
            {
                return null;
            }

            _resuming = _position is not null;
            return _position ?? new StreamPosition(0, "");
        }
    }

    /// <summary>
    /// The broker says this subscription may have lost an unknown number of messages (long-poll: a cluster node took its
    /// session over and could not resume it, longpoll §2 <c>Herald-Gaps</c>; any transport: a Redis shard that carries its
    /// topic was unreachable, spec §6.3): raised as <see cref="Resumed"/> with <see cref="HeraldResumeEventArgs.Recovered"/>
    /// false and its last position (if it keeps one, the application may resume from there), as a resume that did not
    /// recover.
    /// </summary>
    internal void ReportGap()
    {
        StreamPosition? position;
        lock (_positionGate)
        {
            position = _position;
        }

        RaiseResumed(false, "Messages may have been lost: a cluster node or Redis shard the broker relies on failed", position);
    }

    /// <summary>
    /// A presence event (spec §15.2: a MESSAGE with <c>Herald-Presence</c>, which only the broker may set) on a subscription
    /// that asked for them, on the connection's reader: true when taken, so it never reaches the application as a message.
    /// <paramref name="ordered"/> is what goes into the message buffer in its place, for a handler that shares its turn with
    /// <see cref="SubscriptionOptions.OnPresence"/>; otherwise the event went to its own buffer.
    /// </summary>
    internal bool TakePresence(in PublishFrame frame, out HeraldMessage? ordered)
    {
        ordered = null;
        if (!_presenceEvents || !frame.HasHeaders)
        {
            return false;
        }

        Span<byte> kind = stackalloc byte[16];
        if (!HeaderBlock.TryCopyFirstValue(frame.Headers, "Herald-Presence"u8, kind, out int length))
        {
            return false;
        }

        HeraldPresenceEvent? presence = HeraldPresenceEvent.FromFrame(frame, this, System.Text.Encoding.UTF8.GetString(kind[..length]));
        if (presence is null || Volatile.Read(ref _ended) != 0)
        {
            return true; // a kind a later broker added: not for this client
        }

        if (_presence is null)
        {
            ordered = HeraldMessage.ForPresence(presence);
        }
        else
        {
            _presence.Writer.TryWrite(presence);
        }

        return true;
    }

    /// <summary>
    /// Looks at a MESSAGE for this subscription before it is materialized, on the connection's reader, and consumes
    /// the broker's answer to a resume (a <c>Herald-Status</c> MESSAGE with an empty payload: true, it never reaches
    /// the application). A message's own position is kept when it is handed over (<see cref="Track"/>).
    /// </summary>
    internal bool Observe(in PublishFrame frame)
    {
        if (!_resumes || !frame.HasHeaders || !frame.Payload.IsEmpty)
        {
            return false;
        }

        Span<byte> status = stackalloc byte[3];
        if (!HeaderBlock.TryCopyFirstValue(frame.Headers, "Herald-Status"u8, status, out int statusLength))
        {
            return false;
        }

        bool hasPosition = StreamPosition.TryRead(frame.Headers, out StreamPosition position);
        bool recovered = status[..statusLength].SequenceEqual("200"u8);
        bool told;
        lock (_positionGate)
        {
            // A status's position only when nothing is replayed after it ("Live", or not recovered): after "Recovered"
            // the replayed messages move it on, so a connection lost mid-replay resumes from the last one handed over,
            // not from the topic's top (which would skip the rest).
            if (hasPosition && (!recovered || !_resuming))
            {
                _position = position;
            }

            if (!hasPosition)
            {
                _resumes = false; // the topic keeps no history: plain subscribes from now on
            }

            told = _resuming;
            _resuming = false;
        }

        if (told && Resumed is not null)
        {
            Span<byte> description = stackalloc byte[256];
            string why = HeaderBlock.TryCopyFirstValue(frame.Headers, "Herald-Description"u8, description, out int length) ? System.Text.Encoding.UTF8.GetString(description[..length]) : "";
            RaiseResumed(recovered, why, hasPosition ? position : null);
        }

        return true;
    }

    private void RaiseResumed(bool recovered, string why, StreamPosition? position)
    {
        if (Resumed is not { } resumed)
        {
            return;
        }

        try
        {
            resumed(this, new HeraldResumeEventArgs(recovered, why, position));
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            _client.ReportError(new HeraldException($"The Resumed handler of the subscription to '{Pattern}' threw: {e.Message}", e));
        }
    }

    /// <summary>Starts the handler's dispatch loop, on the thread pool.</summary>
    internal void Start()
    {
        if (_handler is not null)
        {
            _ = Task.Run(DispatchAsync);
        }

        if (_onPresence is not null && _presence is not null)
        {
            _ = Task.Run(DispatchPresenceAsync);
        }
    }

    /// <summary>Hands a message over without waiting; <c>false</c> when the buffer is full (mode Wait): call <see cref="DeliverAsync"/>.</summary>
    internal bool TryDeliver(HeraldMessage message)
    {
        if (_inline is not null)
        {
            _inline(message);
            return true;
        }

        if (Volatile.Read(ref _ended) != 0)
        {
            return true;
        }

        if (_channel!.Writer.TryWrite(message))
        {
            Track(message);
            return true;
        }

        return _channel.Reader.Completion.IsCompleted;
    }

    /// <summary>
    /// A message handed over (in the buffer, it reaches the application whatever happens to the connection): its
    /// position is where a resume starts (spec §13). Not before: one lost with its connection while it waited for
    /// room must be replayed.
    /// </summary>
    private void Track(HeraldMessage message)
    {
        if (_resumes && message.Position is { } position)
        {
            lock (_positionGate)
            {
                _position = position;
            }
        }
    }

    /// <summary>Waits for room in the buffer (mode Wait), holding up the connection's reader: back-pressure towards the broker.</summary>
    internal async ValueTask DeliverAsync(HeraldMessage message, CancellationToken cancellationToken)
    {
        try
        {
            using var both = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, _stop.Token);
            await _channel!.Writer.WriteAsync(message, both.Token).ConfigureAwait(false);
            Track(message);
        }
        catch (ChannelClosedException)
        {
            // Unsubscribed meanwhile: the message is dropped, as spec §4.4 says of late messages.
        }
        catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
        {
            // Unsubscribed while waiting for room.
        }
    }

    /// <summary>Ends delivery: unsubscribed (<paramref name="error"/> null) or failed. Idempotent.</summary>
    internal void End(Exception? error)
    {
        if (Interlocked.Exchange(ref _ended, 1) != 0)
        {
            return;
        }

        _channel?.Writer.TryComplete(error);
        _presence?.Writer.TryComplete(error);
        _stop.Cancel();
    }

    /// <summary>
    /// The handler's loop: one message at a time, in order, on the thread pool or the captured context. With
    /// a listener on the <c>Herald.Client</c> source, each call runs inside its <c>process</c> span.
    /// </summary>
    private async Task DispatchAsync()
    {
        ChannelReader<HeraldMessage> reader = _channel!.Reader;
        CancellationToken stop = _stop.Token;
        Activity.Current = null; // started from the subscriber's flow: a handler's span is the message's child, not the subscribe call's
        try
        {
            while (await reader.WaitToReadAsync(stop).ConfigureAwait(false))
            {
                while (!stop.IsCancellationRequested && reader.TryRead(out HeraldMessage? message))
                {
                    if (message.PresenceEvent is { } presence)
                    {
                        await CallOnPresenceAsync(presence, stop).ConfigureAwait(false); // its turn among the messages (spec §15.2 order)
                        continue;
                    }

                    Activity? activity = ClientTracing.Source.HasListeners() ? ClientTracing.StartProcess(message, Pattern, _client.Identity) : null;
                    try
                    {
                        if (_context is null)
                        {
                            await _handler!(message, stop).ConfigureAwait(false);
                        }
                        else
                        {
                            await InvokeOnContextAsync(message, stop).ConfigureAwait(false);
                        }
                    }
                    catch (OperationCanceledException) when (stop.IsCancellationRequested)
                    {
                        return;
                    }
                    catch (Exception e) when (e is not OutOfMemoryException)
                    {
                        ClientTracing.Failed(activity, e);
                        _client.ReportError(new HeraldException($"The handler of the subscription to '{Pattern}' threw on a message on '{message.Topic}': {e.Message}", e));
                    }
                    finally
                    {
                        activity?.Dispose();
                    }
                }
            }
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            // Unsubscribed.
        }
        catch (ChannelClosedException)
        {
            // The client closed.
        }
    }

    /// <summary>OnPresence's loop for an enumerated subscription: one event at a time, in order.</summary>
    private async Task DispatchPresenceAsync()
    {
        ChannelReader<HeraldPresenceEvent> reader = _presence!.Reader;
        CancellationToken stop = _stop.Token;
        try
        {
            while (await reader.WaitToReadAsync(stop).ConfigureAwait(false))
            {
                while (!stop.IsCancellationRequested && reader.TryRead(out HeraldPresenceEvent? presence))
                {
                    await CallOnPresenceAsync(presence, stop).ConfigureAwait(false);
                }
            }
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            // Unsubscribed.
        }
        catch (ChannelClosedException)
        {
            // Ended with an error: the subscription's reader or SubscribeAsync reports it.
        }
    }

    /// <summary>Calls OnPresence, on the captured context if the subscription has one; what it throws is reported.</summary>
    private async Task CallOnPresenceAsync(HeraldPresenceEvent presence, CancellationToken stop)
    {
        try
        {
            if (_context is null)
            {
                _onPresence!(presence);
                return;
            }

            var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            _context.Post(
                static state =>
                {
                    var (call, e, finished) = ((Action<HeraldPresenceEvent>, HeraldPresenceEvent, TaskCompletionSource))state!;
                    try
                    {
                        call(e);
                        finished.TrySetResult();
                    }
                    catch (Exception failure) when (failure is not OutOfMemoryException)
                    {
                        finished.TrySetException(failure);
                    }
                },
                (_onPresence!, presence, done));
            await done.Task.WaitAsync(stop).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            throw;
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            _client.ReportError(new HeraldException($"The OnPresence callback of the subscription to '{Pattern}' threw on a {presence.Kind} event: {e.Message}", e));
        }
    }

    /// <summary>Posts one handler call to the captured context and waits for it (and for its task) to finish, keeping the order.</summary>
    private Task InvokeOnContextAsync(HeraldMessage message, CancellationToken stop)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _context!.Post(
            static state =>
            {
                var (self, m, finished, token) = ((HeraldSubscription, HeraldMessage, TaskCompletionSource, CancellationToken))state!;
                try
                {
                    ValueTask call = self._handler!(m, token);
                    if (call.IsCompletedSuccessfully)
                    {
                        finished.TrySetResult();
                    }
                    else
                    {
                        _ = CompleteAsync(call, finished);
                    }
                }
                catch (Exception e) when (e is not OutOfMemoryException)
                {
                    finished.TrySetException(e);
                }
            },
            (this, message, done, stop));
        return done.Task.WaitAsync(stop);
    }

    private static async Task CompleteAsync(ValueTask call, TaskCompletionSource done)
    {
        try
        {
            await call.ConfigureAwait(false);
            done.TrySetResult();
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            done.TrySetException(e);
        }
    }
}

/// <summary>The broker's answer to a subscription's resume after a reconnect (spec §13).</summary>
public sealed class HeraldResumeEventArgs(bool recovered, string description, StreamPosition? position) : EventArgs
{
    /// <summary>True: every message published while the client was away follows (none lost). False: they cannot be replayed.</summary>
    public bool Recovered { get; } = recovered;

    /// <summary>The broker's reason, for people (<c>Recovered</c>, <c>History lost: ...</c>, <c>Too old: ...</c>).</summary>
    public string Description { get; } = description;

    /// <summary>The topic's position when the live stream resumed.</summary>
    public StreamPosition? Position { get; } = position;
}
