using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;
using Herald.Client.Compression;
using Herald.Client.Delivery;
using Herald.Client.Protocol;
using Herald.Client.Serialization;
using Herald.Client.Telemetry;
using Herald.Client.Transports;
using Herald.Protocol;

namespace Herald.Client;

/// <summary>
/// A client of a Herald broker, over raw TCP (<c>tcp://host:4502</c>), WebSocket (<c>ws://host:8080/ws</c>) or
/// HTTP long-poll (<c>http://host:8080</c>), with one API for all three. Publish, subscribe (enumerate a subscription or give
/// it a handler), request/reply, raw bytes, UTF-8 text or MessagePack-typed payloads.
/// </summary>
/// <remarks>
/// <para>
/// Connecting: call <see cref="ConnectAsync"/>, or just use the client: the first call connects. A lost
/// connection is re-made automatically, with exponential backoff and jitter; the subscriptions are made
/// again on the new connection before <see cref="State"/> turns <see cref="ConnectionState.Connected"/>,
/// and publications made meanwhile are buffered (bounded, <see cref="HeraldClientOptions.PublishBufferSize"/>)
/// and sent after them. Publications already handed to the old connection when it dropped may be lost
/// (at most once).
/// </para>
/// <para>
/// Threading: every member is thread-safe. Handlers and events run on the thread pool, never on the
/// caller's <see cref="SynchronizationContext"/> (unless a subscription asks for it,
/// <see cref="HeraldClientOptions.DeliverOnCapturedContext"/>). Each subscription's messages arrive in order.
/// </para>
/// </remarks>
public sealed partial class HeraldClient : IAsyncDisposable
{
    private readonly HeraldClientOptions _options;
    private readonly BrokerAddress _address;
    private readonly HttpClient? _http;
    private readonly EventQueue _events = new();
    private readonly ConcurrentDictionary<uint, HeraldSubscription> _subscriptions = new();
    private readonly ConcurrentDictionary<string, TaskCompletionSource<HeraldMessage>> _requests = new(StringComparer.Ordinal);
    private readonly ClientIdentity _identity;
    private string? _inboxPrefix; // <the broker's inbox_prefix>.<random>, set once before the inbox is subscribed
    private long _lastRequest;
    private Task<HeraldSubscription>? _inbox;

    /// <summary>A client of the broker at <paramref name="url"/> (see <see cref="HeraldClientOptions.Url"/>), with default options.</summary>
    public HeraldClient(string url)
        : this(new HeraldClientOptions { Url = url })
    {
    }

    /// <summary>A client of the broker at <paramref name="url"/>, with <paramref name="options"/> (whose <see cref="HeraldClientOptions.Url"/> is ignored).</summary>
    public HeraldClient(string url, HeraldClientOptions options)
        : this(WithUrl(options, url))
    {
    }

    /// <summary>A client configured by <paramref name="options"/> (a copy is taken).</summary>
    /// <exception cref="ArgumentException">An option or the address is not valid.</exception>
    /// <exception cref="PlatformNotSupportedException">The netstandard2.0 build only: a <c>wss://</c> address with
    /// <see cref="HeraldClientOptions.ServerCertificateValidation"/>, which its WebSocket cannot apply.</exception>
    public HeraldClient(HeraldClientOptions options)
    {
        ArgumentNullException.ThrowIfNull(options);
        _options = options.Clone();
        _options.Validate();
        _address = BrokerAddress.Parse(_options.Url!);
#if NETSTANDARD2_0
        if (_address.Transport == HeraldTransport.WebSocket && _address.Tls && _options.ServerCertificateValidation is not null)
        {
            // netstandard2.0's ClientWebSocket has no per-connection certificate callback (.NET Framework validates
            // through ServicePointManager, for the whole process): refused here rather than silently not applied.
            throw new PlatformNotSupportedException(
                "HeraldClientOptions.ServerCertificateValidation cannot apply to a wss:// address in Herald.Client's netstandard2.0 build: its ClientWebSocket has no per-connection certificate callback. Use tls:// (the same frames over TCP), a certificate the machine trusts, or the net10.0 build.");
        }
#endif
        Serializer = new PayloadSerializer(_options.SerializerOptions);
        _offline = new PublishBuffer(_options.PublishBufferSize);
        _identity = new ClientIdentity(_options.ClientName, _address.Host, _address.FirstPort);
        if (_address.Transport == HeraldTransport.LongPoll)
        {
#if NETSTANDARD2_0
            // No SocketsHttpHandler: the platform's handler (a connect is bounded by ConnectTimeout's cancellation).
            HttpMessageHandler handler = _options.HttpMessageHandler ?? LongPollHandler(_options.ServerCertificateValidation);
#else
            HttpMessageHandler handler = _options.HttpMessageHandler ?? new SocketsHttpHandler
            {
                ConnectTimeout = _options.ConnectTimeout,
                PooledConnectionLifetime = TimeSpan.FromMinutes(5),
                SslOptions = { RemoteCertificateValidationCallback = _options.ServerCertificateValidation },
            };
#endif
            _http = new HttpClient(handler, disposeHandler: _options.HttpMessageHandler is null) { Timeout = Timeout.InfiniteTimeSpan };
        }
    }

#if NETSTANDARD2_0
    private static HttpClientHandler LongPollHandler(System.Net.Security.RemoteCertificateValidationCallback? validation)
    {
        var handler = new HttpClientHandler();
        if (validation is not null)
        {
            handler.ServerCertificateCustomValidationCallback = (request, certificate, chain, errors) => validation(request, certificate, chain, errors);
        }

        return handler;
    }

#endif
    /// <summary>Raised, in order, whenever <see cref="State"/> changes. On the thread pool.</summary>
    public event EventHandler<ConnectionStateChangedEventArgs>? StateChanged;

    /// <summary>
    /// Raised for errors no call was waiting for: a non-fatal ERROR from the broker (say,
    /// <see cref="ErrorCode.MessagesDropped"/>), a lost connection, a handler that threw, a publication the
    /// broker refused after it was sent. On the thread pool.
    /// </summary>
    public event EventHandler<HeraldErrorEventArgs>? Error;

    /// <summary>
    /// The application's backend subscribed this client through the server API (spec §4.10; only with
    /// <see cref="HeraldClientOptions.AcceptServerSubscriptions"/>): the subscription, read like one of the
    /// application's own. It ends when the backend unsubscribes it (its reader sees <see cref="ErrorCode.Unsubscribed"/>),
    /// when the application unsubscribes it, or with its connection: a reconnect does not make it again.
    /// </summary>
    public event EventHandler<HeraldSubscription>? ServerSubscribed;

    /// <summary>The broker's address, normalized.</summary>
    public string Url => _address.ToString();

    /// <summary>The transport, chosen by the address's scheme.</summary>
    public HeraldTransport Transport => _address.Transport;

    /// <summary>What the broker said about the current (or last) connection; <c>null</c> before the first.</summary>
    public HeraldServerInfo? ServerInfo => Volatile.Read(ref _current)?.Info ?? Volatile.Read(ref _serverInfo);

    internal PayloadSerializer Serializer { get; }

    /// <summary>Who this client is, for its spans (<c>messaging.client.id</c>, <c>server.*</c>).</summary>
    internal ClientIdentity Identity => _identity;

    /// <summary>Connects now, if not connected yet, and waits until connected (through a reconnect, too).</summary>
    /// <exception cref="HeraldConnectionException">The broker cannot be reached.</exception>
    /// <exception cref="HeraldException">The broker refused the handshake (its code says why).</exception>
    public Task ConnectAsync(CancellationToken cancellationToken = default) => ConnectedAsync(cancellationToken);

    /// <summary>
    /// Waits until the broker has processed everything this client sent before the call (TCP and WebSocket: a PING/PONG
    /// round trip, spec §4.7; long-poll: every publish request answered). Waits for a reconnect first if
    /// there is one under way.
    /// </summary>
    /// <exception cref="HeraldException">The connection was lost before the flush completed.</exception>
    public async Task FlushAsync(CancellationToken cancellationToken = default)
    {
        BrokerConnection connection = await ConnectedAsync(cancellationToken).ConfigureAwait(false);
        await connection.FlushAsync(cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// Presents a fresh credential (from <see cref="HeraldClientOptions.CredentialProvider"/>, else
    /// <see cref="HeraldClientOptions.Credential"/>) for the same identity, before the current one expires
    /// (spec §4.1 refresh: HELLO again, a new WELCOME answers). Only for a broker with authentication on.
    /// Long-poll: a session keeps the identity it was created with; when its JWT expires the session ends
    /// and the client reconnects with a fresh credential, so this does nothing.
    /// </summary>
    public async Task RefreshCredentialAsync(CancellationToken cancellationToken = default)
    {
        BrokerConnection connection = await ConnectedAsync(cancellationToken).ConfigureAwait(false);
        string? credential = await CredentialAsync(cancellationToken).ConfigureAwait(false);
        await connection.RefreshAsync(credential, cancellationToken).ConfigureAwait(false);
    }

    // --- Publish ---------------------------------------------------------------------------------------

    /// <summary>
    /// Publishes <paramref name="payload"/> to <paramref name="topic"/> (no wildcards, spec §5). Completes
    /// when the publication is queued (use <see cref="FlushAsync"/> to know the broker has it). Disconnected,
    /// it is buffered and sent after the reconnect.
    /// </summary>
    /// <exception cref="HeraldException">The topic breaks the rules (<see cref="ErrorCode.InvalidTopic"/>, <see cref="ErrorCode.ReservedTopic"/>, <see cref="ErrorCode.TopicTooLong"/>) or the payload is over the broker's limit (<see cref="ErrorCode.FrameTooLarge"/>); nothing was sent.</exception>
    /// <exception cref="HeraldBufferFullException">Disconnected, and the buffer is full.</exception>
    public ValueTask PublishAsync(string topic, ReadOnlyMemory<byte> payload, string? replyTo = null, CancellationToken cancellationToken = default) =>
        PublishCoreAsync(topic, replyTo, payload, headers: null, cancellationToken);

    /// <inheritdoc cref="PublishAsync(string, ReadOnlyMemory{byte}, string?, CancellationToken)"/>
    public ValueTask PublishAsync(string topic, byte[] payload, string? replyTo = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(payload);
        return PublishCoreAsync(topic, replyTo, payload, headers: null, cancellationToken);
    }

    /// <summary>Publishes <paramref name="text"/> as UTF-8 bytes (a long-poll JSON reader sees it as <c>text</c>).</summary>
    public ValueTask PublishAsync(string topic, string text, string? replyTo = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(text);
        return PublishCoreAsync(topic, replyTo, Encoding.UTF8.GetBytes(text), headers: null, cancellationToken);
    }

    /// <summary>
    /// Publishes <paramref name="value"/> serialized with MessagePack (<see cref="HeraldClientOptions.SerializerOptions"/>).
    /// A <see cref="string"/> or a byte buffer (<c>byte[]</c>, <c>Memory&lt;byte&gt;</c>, <c>ArraySegment&lt;byte&gt;</c>) is sent as
    /// it is, as by the other overloads (and <see cref="HeraldMessage.Deserialize{T}"/> gives it back the same way).
    /// </summary>
    public ValueTask PublishAsync<T>(string topic, T value, string? replyTo = null, CancellationToken cancellationToken = default) =>
        PublishCoreAsync(topic, replyTo, Serializer.ToPayload(value), headers: null, cancellationToken);

    /// <summary>
    /// Publishes <paramref name="payload"/> with <paramref name="headers"/> (spec §4.9); every subscriber's
    /// <see cref="HeraldMessage.Headers"/> shows them as given. Needs a broker that granted headers
    /// (<see cref="HeraldServerInfo.Headers"/>).
    /// </summary>
    /// <exception cref="ArgumentException">A key under the broker's <c>Herald-</c> prefix (say, headers copied from a no-responders status), or more values or encoded bytes than the broker's <c>max_headers</c> / <c>max_header_bytes</c>; nothing was sent.</exception>
    /// <exception cref="HeraldException">The broker did not grant headers (<see cref="ErrorCode.MalformedFrame"/>, what it would answer), or as the overload without headers; nothing was sent.</exception>
    /// <exception cref="HeraldBufferFullException">Disconnected, and the buffer is full.</exception>
    public ValueTask PublishAsync(string topic, ReadOnlyMemory<byte> payload, HeraldHeaders headers, string? replyTo = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(headers);
        return PublishCoreAsync(topic, replyTo, payload, headers, cancellationToken);
    }

    /// <inheritdoc cref="PublishAsync(string, ReadOnlyMemory{byte}, HeraldHeaders, string?, CancellationToken)"/>
    public ValueTask PublishAsync(string topic, byte[] payload, HeraldHeaders headers, string? replyTo = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(payload);
        return PublishAsync(topic, new ReadOnlyMemory<byte>(payload), headers, replyTo, cancellationToken);
    }

    /// <summary>Publishes <paramref name="text"/> as UTF-8 bytes, with <paramref name="headers"/>.</summary>
    /// <inheritdoc cref="PublishAsync(string, ReadOnlyMemory{byte}, HeraldHeaders, string?, CancellationToken)"/>
    public ValueTask PublishAsync(string topic, string text, HeraldHeaders headers, string? replyTo = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(text);
        return PublishAsync(topic, new ReadOnlyMemory<byte>(Encoding.UTF8.GetBytes(text)), headers, replyTo, cancellationToken);
    }

    /// <summary>Publishes <paramref name="value"/> serialized with MessagePack, with <paramref name="headers"/>.</summary>
    /// <inheritdoc cref="PublishAsync(string, ReadOnlyMemory{byte}, HeraldHeaders, string?, CancellationToken)"/>
    public ValueTask PublishAsync<T>(string topic, T value, HeraldHeaders headers, string? replyTo = null, CancellationToken cancellationToken = default) =>
        PublishAsync(topic, Serializer.ToPayload(value), headers, replyTo, cancellationToken);

    // --- Subscribe -------------------------------------------------------------------------------------

    /// <summary>
    /// Subscribes to <paramref name="pattern"/> (<c>*</c> one token, <c>&gt;</c> the rest, spec §5). Read the
    /// messages by enumerating the subscription: <c>await foreach (var m in subscription)</c>. When connected,
    /// completes once the broker has the subscription (a publication sent after it is delivered to it);
    /// disconnected, it is made on the next connection.
    /// </summary>
    /// <exception cref="HeraldException">The broker refused it (<see cref="ErrorCode.InvalidTopic"/>, <see cref="ErrorCode.TooManySubscriptions"/>, ...).</exception>
    public Task<HeraldSubscription> SubscribeAsync(string pattern, SubscriptionOptions? options = null, CancellationToken cancellationToken = default) =>
        SubscribeCoreAsync(pattern, options, handler: null, cancellationToken);

    /// <summary>
    /// Subscribes and calls <paramref name="handler"/> for every message, one at a time, in order, on the
    /// thread pool (the WCF duplex callback model). An exception from it is reported through <see cref="Error"/>.
    /// </summary>
    /// <inheritdoc cref="SubscribeAsync(string, SubscriptionOptions?, CancellationToken)"/>
    public Task<HeraldSubscription> SubscribeAsync(string pattern, Action<HeraldMessage> handler, SubscriptionOptions? options = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(handler);
        return SubscribeCoreAsync(pattern, options, (m, _) => { handler(m); return default; }, cancellationToken);
    }

    /// <inheritdoc cref="SubscribeAsync(string, Action{HeraldMessage}, SubscriptionOptions?, CancellationToken)"/>
    public Task<HeraldSubscription> SubscribeAsync(string pattern, Func<HeraldMessage, Task> handler, SubscriptionOptions? options = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(handler);
        return SubscribeCoreAsync(pattern, options, (m, _) => new ValueTask(handler(m)), cancellationToken);
    }

    /// <summary>As the other handler overloads; the token is cancelled when the subscription ends.</summary>
    /// <inheritdoc cref="SubscribeAsync(string, Action{HeraldMessage}, SubscriptionOptions?, CancellationToken)"/>
    public Task<HeraldSubscription> SubscribeAsync(string pattern, Func<HeraldMessage, CancellationToken, Task> handler, SubscriptionOptions? options = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(handler);
        return SubscribeCoreAsync(pattern, options, (m, token) => new ValueTask(handler(m, token)), cancellationToken);
    }

    // --- Request/reply -----------------------------------------------------------------------------------

    /// <summary>
    /// Publishes a request with a fresh <c>reply_to</c> inbox topic and waits for the first reply (spec §7).
    /// The client subscribes its inbox (<c>&lt;inbox_prefix&gt;.&lt;random&gt;.&gt;</c>, under the prefix the broker
    /// gave its identity, <see cref="HeraldServerInfo.InboxPrefix"/>) once, on the first request. When the
    /// broker grants the no-responders status (<see cref="HeraldServerInfo.NoResponders"/>), a request that
    /// reaches no subscriber fails at once with <see cref="HeraldNoRespondersException"/>.
    /// </summary>
    /// <param name="timeout">How long to wait for the reply; <see cref="HeraldClientOptions.RequestTimeout"/> if <c>null</c>.</param>
    /// <exception cref="HeraldNoRespondersException">Nobody subscribes to <paramref name="topic"/>: the broker said so at once.</exception>
    /// <exception cref="HeraldTimeoutException">No reply in time (a responder was slow or silent; or nobody subscribes to <paramref name="topic"/> and the broker does not say so).</exception>
    public Task<HeraldMessage> RequestAsync(string topic, ReadOnlyMemory<byte> payload, TimeSpan? timeout = null, CancellationToken cancellationToken = default) =>
        RequestCoreAsync(topic, payload, headers: null, timeout, cancellationToken);

    /// <inheritdoc cref="RequestAsync(string, ReadOnlyMemory{byte}, TimeSpan?, CancellationToken)"/>
    public Task<HeraldMessage> RequestAsync(string topic, byte[] payload, TimeSpan? timeout = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(payload);
        return RequestCoreAsync(topic, payload, headers: null, timeout, cancellationToken);
    }

    /// <summary>A request whose payload is <paramref name="text"/> as UTF-8.</summary>
    /// <inheritdoc cref="RequestAsync(string, ReadOnlyMemory{byte}, TimeSpan?, CancellationToken)"/>
    public Task<HeraldMessage> RequestAsync(string topic, string text, TimeSpan? timeout = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(text);
        return RequestCoreAsync(topic, Encoding.UTF8.GetBytes(text), headers: null, timeout, cancellationToken);
    }

    /// <summary>A request and its reply as MessagePack-serialized values.</summary>
    /// <inheritdoc cref="RequestAsync(string, ReadOnlyMemory{byte}, TimeSpan?, CancellationToken)"/>
    public async Task<TReply> RequestAsync<TRequest, TReply>(string topic, TRequest request, TimeSpan? timeout = null, CancellationToken cancellationToken = default)
    {
        HeraldMessage reply = await RequestCoreAsync(topic, Serializer.ToPayload(request), headers: null, timeout, cancellationToken).ConfigureAwait(false);
        return reply.Deserialize<TReply>();
    }

    /// <summary>A request with <paramref name="headers"/> (spec §4.9); the reply's are in its <see cref="HeraldMessage.Headers"/>.</summary>
    /// <inheritdoc cref="RequestAsync(string, ReadOnlyMemory{byte}, TimeSpan?, CancellationToken)"/>
    /// <exception cref="ArgumentException">The headers break the broker's rules or limits (see <see cref="PublishAsync(string, ReadOnlyMemory{byte}, HeraldHeaders, string?, CancellationToken)"/>); nothing was sent.</exception>
    public Task<HeraldMessage> RequestAsync(string topic, ReadOnlyMemory<byte> payload, HeraldHeaders headers, TimeSpan? timeout = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(headers);
        return RequestCoreAsync(topic, payload, headers, timeout, cancellationToken);
    }

    /// <summary>A request whose payload is <paramref name="text"/> as UTF-8, with <paramref name="headers"/>.</summary>
    /// <inheritdoc cref="RequestAsync(string, ReadOnlyMemory{byte}, HeraldHeaders, TimeSpan?, CancellationToken)"/>
    public Task<HeraldMessage> RequestAsync(string topic, string text, HeraldHeaders headers, TimeSpan? timeout = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(text);
        return RequestAsync(topic, new ReadOnlyMemory<byte>(Encoding.UTF8.GetBytes(text)), headers, timeout, cancellationToken);
    }

    private async Task<HeraldMessage> RequestCoreAsync(string topic, ReadOnlyMemory<byte> payload, HeraldHeaders? headers, TimeSpan? timeout, CancellationToken cancellationToken)
    {
        EncodeTopic(topic); // a bad topic throws here, before the inbox is made
        TimeSpan wait = timeout ?? _options.RequestTimeout;
        ArgumentOutOfRangeException.ThrowIfLessThanOrEqual(wait, TimeSpan.Zero, nameof(timeout));
        using var deadline = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        deadline.CancelAfter(wait);
        string token = Interlocked.Increment(ref _lastRequest).ToString(CultureInfo.InvariantCulture);
        var reply = new TaskCompletionSource<HeraldMessage>(TaskCreationOptions.RunContinuationsAsynchronously);
        _requests[token] = reply;
        HeraldMessage answer;
        try
        {
            await EnsureInboxAsync(deadline.Token).ConfigureAwait(false);
            await PublishCoreAsync(topic, $"{_inboxPrefix}.{token}", payload, headers, deadline.Token).ConfigureAwait(false);
            answer = await reply.Task.WaitAsync(deadline.Token).ConfigureAwait(false);
        }
        catch (OperationCanceledException e) when (deadline.IsCancellationRequested && !cancellationToken.IsCancellationRequested)
        {
            throw new HeraldTimeoutException($"No reply to the request on '{topic}' within {wait.TotalMilliseconds.ToString(CultureInfo.InvariantCulture)} ms.", e)
            {
                Topic = topic,
                Timeout = wait,
            };
        }
        finally
        {
            _requests.TryRemove(token, out _);
        }

        if (answer.IsNoResponders)
        {
            throw new HeraldNoRespondersException($"No subscriber serves the request on '{topic}': the broker answered at once that nobody responds (spec §7).") { Topic = topic };
        }

        return answer;
    }

    // --- Internals shared with the transports ----------------------------------------------------------------

    /// <summary>The live subscription with <paramref name="sid"/>, or <c>null</c>: a late message for an ended one is dropped (spec §4.4).</summary>
    internal HeraldSubscription? FindSubscription(uint sid) => _subscriptions.TryGetValue(sid, out HeraldSubscription? subscription) ? subscription : null;

    /// <summary>Raises <see cref="Error"/> on the thread pool.</summary>
    internal void ReportError(HeraldException error) => _events.Post(() => Error?.Invoke(this, new HeraldErrorEventArgs(error)));

    /// <summary>
    /// Every publication's way in: checks what needs no connection, then, only when someone listens to the
    /// <c>Herald.Client</c> source, wraps the send in its Producer span, whose context goes into the headers.
    /// </summary>
    private ValueTask PublishCoreAsync(string topic, string? replyTo, ReadOnlyMemory<byte> payload, HeraldHeaders? headers, CancellationToken cancellationToken)
    {
        byte[] encodedTopic = EncodeTopic(topic);
        byte[]? encodedReplyTo = EncodeReplyTo(replyTo);
        if (headers?.ReservedKey() is not null)
        {
            headers = headers.WithoutReserved(); // a received message's headers passed on: the broker's own keys (its position, a status) stay behind
        }

        return ClientTracing.Source.HasListeners()
            ? TracedSendAsync(topic, encodedTopic, encodedReplyTo, payload, headers, cancellationToken)
            : SendAsync(encodedTopic, encodedReplyTo, payload, headers, traced: null, cancellationToken);
    }

    /// <summary>The send inside its Producer span; the span's context goes in the headers only where headers can go (a connection that granted them).</summary>
    private async ValueTask TracedSendAsync(string topic, byte[] encodedTopic, byte[]? replyTo, ReadOnlyMemory<byte> payload, HeraldHeaders? headers, CancellationToken cancellationToken)
    {
        HeraldHeaders? traced = headers;
        using Activity? activity = ClientTracing.StartSend(topic, payload.Length, _identity, ref traced);
        try
        {
            await SendAsync(encodedTopic, replyTo, payload, headers, ReferenceEquals(traced, headers) ? null : traced, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            ClientTracing.Failed(activity, e);
            throw;
        }
    }

    /// <summary>
    /// Queues a publication on the current connection, or buffers it while there is none. <paramref name="traced"/>
    /// is <paramref name="headers"/> with the trace context added, or <c>null</c>: it is sent where headers
    /// were granted, and the user's own headers (perhaps none) elsewhere, so tracing never makes a publication
    /// fail on a connection without headers.
    /// </summary>
    private async ValueTask SendAsync(byte[] topic, byte[]? replyTo, ReadOnlyMemory<byte> payload, HeraldHeaders? headers, HeraldHeaders? traced, CancellationToken cancellationToken)
    {
        cancellationToken.ThrowIfCancellationRequested();
        byte[] plainBlock = headers is { Count: > 0 } ? headers.Encoded() : [];
        byte[] tracedBlock = traced?.Encoded() ?? plainBlock;
        await StartAsync(cancellationToken).ConfigureAwait(false);

        // Compressed outside the lock; used only if the connection the publication lands on granted Zstd.
        byte[]? compressed = null;
        if (_options.CompressPublishesAbove is { } above && payload.Length >= above && Volatile.Read(ref _current)?.Zstd == true)
        {
            compressed = ZstdCodec.TryCompress(payload.Span);
        }

        while (true)
        {
            Task room;
            lock (_gate)
            {
                ThrowIfClosed();
                BrokerConnection? connection = _current;
                if (connection is null)
                {
                    // Buffered for the next connection: the trace context goes along unless the last one refused headers.
                    byte[] buffered = _options.EnableHeaders && _serverInfo?.Headers != false ? tracedBlock : plainBlock;
                    if (!_offline.TryAppend(topic, replyTo, payload.Span, buffered))
                    {
                        throw new HeraldBufferFullException(
                            $"The client is {_state.ToString().ToLowerInvariant()} and its publish buffer ({_offline.Limit} bytes, HeraldClientOptions.PublishBufferSize) "
                            + $"cannot take a publication of {payload.Length} bytes to '{Encoding.UTF8.GetString(topic)}'; it was not kept.")
                        {
                            BufferSize = _offline.Limit,
                        };
                    }

                    return;
                }

                (HeraldHeaders? sent, byte[] block) = traced is not null && CanCarry(connection, traced, tracedBlock, payload.Length) ? (traced, tracedBlock) : (headers, plainBlock);
                bool zstd = compressed is not null && connection.Zstd;
                ReadOnlySpan<byte> body = zstd ? compressed : payload.Span;
                PayloadFlags flags = zstd ? PayloadFlags.Zstd : PayloadFlags.None;
                CheckLimits(connection, topic, replyTo, flags, body.Length, payload.Length, sent, block);
                if (connection.Outbound.TryEnqueuePublish(topic, replyTo, flags, body, block))
                {
                    return;
                }

                room = connection.Outbound.WaitForRoomAsync();
            }

            await room.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
    }

    private async Task<HeraldSubscription> SubscribeCoreAsync(string pattern, SubscriptionOptions? options, Func<HeraldMessage, CancellationToken, ValueTask>? handler, CancellationToken cancellationToken)
    {
        byte[] encoded = EncodePattern(pattern);
        string? queue = options?.Queue;
        byte[]? queueBytes = queue is null ? null : ClientTopics.EncodeQueue(queue, nameof(options));
        bool resume = options?.Resumes() ?? true;
        SubscribeOptions presence = options?.PresenceBits ?? SubscribeOptions.None;
        if (presence != SubscribeOptions.None)
        {
            string what = $"The subscription to '{pattern}' asks for {((presence & SubscribeOptions.Join) != 0 ? "join" : "presence events")}";
            if (pattern.AsSpan().IndexOfAny('*', '>') >= 0)
            {
                throw new ArgumentException($"{what}: presence is of one topic, and a pattern with wildcards has none (spec §15.1). Nothing was subscribed.", nameof(options));
            }
        }

        SynchronizationContext? context = (options?.DeliverOnCapturedContext ?? _options.DeliverOnCapturedContext) && handler is not null ? SynchronizationContext.Current : null;
        await StartAsync(cancellationToken).ConfigureAwait(false);
        return await AddSubscriptionAsync(
            sid => new HeraldSubscription(
                this,
                sid,
                pattern,
                encoded,
                (options?.NoEcho == true ? SubscribeOptions.NoEcho : SubscribeOptions.None) | presence
                    | ((options?.Delta ?? _options.Deltas) && queue is null && pattern.AsSpan().IndexOfAny('*', '>') < 0 ? SubscribeOptions.Delta : SubscribeOptions.None),
                options?.Capacity ?? _options.SubscriptionCapacity,
                options?.FullMode ?? _options.SubscriptionFullMode,
                handler,
                context,
                resume,
                queue,
                queueBytes,
                options?.OnPresence),
            cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// Adds a subscription to the table and sends it on the current connection, if there is one, then waits
    /// for the broker to have it (TCP and WebSocket: PING/PONG behind the SUBSCRIBE; long-poll: the 204). A refusal removes
    /// it again and throws; a lost connection leaves it to the reconnect.
    /// </summary>
    private async Task<HeraldSubscription> AddSubscriptionAsync(Func<uint, HeraldSubscription> create, CancellationToken cancellationToken)
    {
        HeraldSubscription subscription;
        BrokerConnection? connection;
        Task? confirmed = null;
        lock (_gate)
        {
            ThrowIfClosed();
            subscription = create(NextSidLocked());
            if (_current?.Refusal(subscription) is { } refused)
            {
                subscription.End(refused);
                throw refused; // never sent: a plain subscription where a queue was asked, or a connection closed over presence
            }

            _subscriptions[subscription.Sid] = subscription;
            connection = _current;
            if (connection is not null)
            {
                subscription.SentOn = connection;
                if (connection.SubscribesInline)
                {
                    confirmed = connection.EnqueueSubscribe(subscription);
                }
            }
        }

        subscription.Start();
        if (connection is null)
        {
            return subscription; // made on the next connection, before it counts as connected
        }

        try
        {
            await (confirmed ?? connection.SubscribeAsync(subscription, cancellationToken)).WaitAsync(cancellationToken).ConfigureAwait(false);

            lock (_gate)
            {
                if (ReferenceEquals(subscription.SentOn, connection))
                {
                    subscription.Confirmed = true;
                }
            }

            return subscription;
        }
        catch (HeraldException e) when (e is not HeraldConnectionException && (IsSubscriptionError(e.ErrorCode) || e.HttpStatus is >= 400 and < 500))
        {
            Remove(subscription);
            subscription.End(e);
            throw;
        }
        catch (HeraldException)
        {
            return subscription; // the connection was lost: the reconnect makes the subscription again
        }
        catch (OperationCanceledException)
        {
            await UnsubscribeAsync(subscription, CancellationToken.None).ConfigureAwait(false);
            throw;
        }
    }

    /// <summary>Unsubscribes (spec §4.4): out of the table at once (late messages are dropped), then UNSUBSCRIBE or DELETE.</summary>
    internal async ValueTask UnsubscribeAsync(HeraldSubscription subscription, CancellationToken cancellationToken)
    {
        BrokerConnection? connection = null;
        lock (_gate)
        {
            if (!_subscriptions.TryRemove(KeyValuePair.Create(subscription.Sid, subscription)))
            {
                subscription.End(null);
                return;
            }

            if (_current is { } current && ReferenceEquals(subscription.SentOn, current))
            {
                if (current.SubscribesInline)
                {
                    current.Outbound.EnqueueUnsubscribe(subscription.Sid);
                }
                else
                {
                    connection = current;
                }
            }
        }

        subscription.End(null);
        if (connection is not null)
        {
            try
            {
                await connection.UnsubscribeAsync(subscription.Sid, cancellationToken).ConfigureAwait(false);
            }
            catch (HeraldConnectionException)
            {
                // The session is gone, and its subscriptions with it.
            }
        }
    }

    private void Remove(HeraldSubscription subscription) => _subscriptions.TryRemove(KeyValuePair.Create(subscription.Sid, subscription));

    /// <summary>This client's inbox: a random token under the broker's prefix for its identity (spec §7), so its connections do not share replies.</summary>
    private static string InboxUnder(string? brokerPrefix) =>
        (brokerPrefix ?? ProtocolConstants.InboxPrefix.TrimEnd('.')) + "." + Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(12));

    /// <summary>
    /// The broker ended subscription <paramref name="sid"/> (a credential refresh took the right to it away,
    /// spec §4.1): it ends with <paramref name="reason"/>, which its reader sees and <see cref="Error"/> reports.
    /// </summary>
    internal void Revoke(uint sid, HeraldException reason)
    {
        if (FindSubscription(sid) is { } subscription)
        {
            Refuse(subscription, reason);
        }
        else
        {
            ReportError(reason);
        }
    }

    /// <summary>Subscribes the request inbox once (again after a failure), with a handler that completes the waiting request.</summary>
    private Task EnsureInboxAsync(CancellationToken cancellationToken)
    {
        Task inbox;
        lock (_gate)
        {
            ThrowIfClosed();
            if (_inbox is { IsCompletedSuccessfully: true } done && !done.Result.IsActive)
            {
                _inbox = null; // the broker refused it once (too many subscriptions): subscribe it again
            }

            _inbox ??= Task.Run(SubscribeInboxAsync, CancellationToken.None);
            inbox = _inbox;
        }

        return inbox.WaitAsync(cancellationToken);
    }

    private async Task<HeraldSubscription> SubscribeInboxAsync()
    {
        try
        {
            await StartAsync(_closing.Token).ConfigureAwait(false);
            string inbox = Volatile.Read(ref _inboxPrefix) ?? InboxUnder(ServerInfo?.InboxPrefix);
            Volatile.Write(ref _inboxPrefix, inbox);
            string pattern = inbox + ".>";
            return await AddSubscriptionAsync(sid => new HeraldSubscription(this, sid, pattern, Encoding.UTF8.GetBytes(pattern), OnReply), _closing.Token).ConfigureAwait(false);
        }
        catch
        {
            lock (_gate)
            {
                _inbox = null;
            }

            throw;
        }
    }

    /// <summary>The inbox handler, on the reading thread: completes the request the reply's last token names.</summary>
    private void OnReply(HeraldMessage reply)
    {
        string prefix = Volatile.Read(ref _inboxPrefix)!;
        string token = reply.Topic.Length > prefix.Length + 1 ? reply.Topic[(prefix.Length + 1)..] : "";
        if (_requests.TryRemove(token, out TaskCompletionSource<HeraldMessage>? waiting))
        {
            waiting.TrySetResult(reply);
        }
    }

    /// <summary>
    /// The broker subscribed this client (SUBSCRIBED, spec §4.10) on <paramref name="connection"/>: the subscription is
    /// made under the broker's sid, marked as the server's (not made again on a reconnect), and raised through
    /// <see cref="ServerSubscribed"/> after any event before it.
    /// </summary>
    /// <summary>Tests: the live connection, to break it and see the client reconnect.</summary>
    internal BrokerConnection? CurrentConnection => Volatile.Read(ref _current);

    internal void AcceptServerSubscription(in SubscribedFrame frame, BrokerConnection connection)
    {
        var subscription = new HeraldSubscription(
            this,
            frame.Sid,
            frame.Pattern,
            Encoding.UTF8.GetBytes(frame.Pattern),
            frame.Options,
            _options.SubscriptionCapacity,
            _options.SubscriptionFullMode,
            handler: null,
            context: null,
            resume: false) { MadeByServer = true };
        lock (_gate)
        {
            if (_closedBecause is not null || !_subscriptions.TryAdd(frame.Sid, subscription))
            {
                return; // closing, or a sid already live (the broker never reuses one): nothing to give the application
            }

            subscription.SentOn = connection;
            subscription.Confirmed = true;
        }

        _events.Post(() => ServerSubscribed?.Invoke(this, subscription));
    }

    /// <summary>Caller holds <c>_gate</c>. Below 2^31: the upper half is the broker's, for the subscriptions it makes (spec §4.10).</summary>
    private uint NextSidLocked()
    {
        do
        {
            _lastSid = _lastSid >= int.MaxValue ? 1 : _lastSid + 1;
        }
        while (_subscriptions.ContainsKey(_lastSid));
        return _lastSid;
    }

    /// <summary>Whether <paramref name="connection"/> takes these headers with a payload of <paramref name="plainLength"/> bytes (spec §4.9 limits, §4.5).</summary>
    private static bool CanCarry(BrokerConnection connection, HeraldHeaders headers, byte[] block, int plainLength) =>
        connection.Headers && headers.ValueCount <= connection.MaxHeaders && block.Length <= connection.MaxHeaderBytes && plainLength + block.Length <= connection.MaxPayload;

    /// <summary>What the broker would refuse, refused before sending (spec §4.2, §4.5, §4.9). Caller holds <c>_gate</c>.</summary>
    private static void CheckLimits(BrokerConnection connection, byte[] topic, byte[]? replyTo, PayloadFlags flags, int payloadLength, int plainLength, HeraldHeaders? headers, byte[] block)
    {
        if (block.Length > 0 && !connection.Headers)
        {
            throw new HeraldException(
                ErrorCode.MalformedFrame,
                $"A publication to '{Encoding.UTF8.GetString(topic)}' carries headers, and this connection did not negotiate them (a broker before headers, or HeraldClientOptions.EnableHeaders is off; see HeraldServerInfo.Headers). It was not sent.");
        }

        if (plainLength + block.Length > connection.MaxPayload)
        {
            throw new HeraldException(ErrorCode.FrameTooLarge, $"A payload of {plainLength} bytes{(block.Length > 0 ? $" with a {block.Length}-byte header block" : "")} to '{Encoding.UTF8.GetString(topic)}' is over the broker's max_payload of {connection.MaxPayload} bytes (spec §4.2, §4.5). It was not sent.");
        }

        if (headers is not null && block.Length > 0 && (headers.ValueCount > connection.MaxHeaders || block.Length > connection.MaxHeaderBytes))
        {
            throw new ArgumentException(
                $"The headers of a publication to '{Encoding.UTF8.GetString(topic)}' ({headers.ValueCount} values, {block.Length} bytes encoded) are over the broker's max_headers of {connection.MaxHeaders} values or max_header_bytes of {connection.MaxHeaderBytes} bytes (spec §4.9). It was not sent.",
                nameof(headers));
        }

        if (topic.Length > connection.MaxTopic || (replyTo?.Length ?? 0) > connection.MaxTopic)
        {
            byte[] tooLong = topic.Length > connection.MaxTopic ? topic : replyTo!;
            throw new HeraldException(ErrorCode.TopicTooLong, Topic.Describe(ErrorCode.TopicTooLong, tooLong, connection.MaxTopic) + " It was not sent.");
        }

        int body = ClientFrames.PublishBodySize(topic.Length, replyTo?.Length ?? 0, flags, payloadLength, block.Length);
        if (body > connection.MaxBody)
        {
            throw new HeraldException(ErrorCode.FrameTooLarge, $"A publication of {payloadLength} bytes to '{Encoding.UTF8.GetString(topic)}' makes a {body}-byte frame; the broker takes at most {connection.MaxBody} (spec §9). It was not sent.");
        }
    }

    private byte[] EncodeTopic(string topic) => ClientTopics.EncodeTopic(topic, Volatile.Read(ref _maxTopic));

    private byte[]? EncodeReplyTo(string? replyTo) => ClientTopics.EncodeReplyTo(replyTo, Volatile.Read(ref _maxTopic));

    private byte[] EncodePattern(string pattern) => ClientTopics.EncodePattern(pattern, Volatile.Read(ref _maxTopic));

    private static bool IsSubscriptionError(ErrorCode code) =>
        code is ErrorCode.InvalidTopic or ErrorCode.TopicTooLong or ErrorCode.DuplicateSubscription or ErrorCode.TooManySubscriptions or ErrorCode.PermissionDenied or ErrorCode.TooManyTopics
            or ErrorCode.PresenceFull or ErrorCode.PresenceUnavailable;

    private static HeraldClientOptions WithUrl(HeraldClientOptions options, string url)
    {
        ArgumentNullException.ThrowIfNull(options);
        HeraldClientOptions copy = options.Clone();
        copy.Url = url;
        return copy;
    }
}
