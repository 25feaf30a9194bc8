using System.Net.Security;
using System.Text;
using System.Threading.Channels;
using Herald.Protocol;
using MessagePack;

namespace Herald.Client;

/// <summary>
/// Settings of a <see cref="HeraldClient"/>. The client takes a copy when it is created; changing the
/// object afterwards has no effect on it. Every value is checked then (an <see cref="ArgumentException"/>
/// names the bad one).
/// </summary>
public sealed class HeraldClientOptions
{
    /// <summary>
    /// The broker: <c>tcp://host:4502</c> (binary protocol), <c>tcp://host:4502-4534</c> (a port of the
    /// range picked at random for each connection, which spreads clients over the broker's listeners),
    /// <c>tls://host:4502</c> (the same over TLS, for the broker's <c>Herald:Security:Tls:TcpPorts</c>),
    /// <c>ws://host:8080/ws</c> / <c>wss://...</c> (the same protocol over a WebSocket on the broker's HTTP port; the
    /// path defaults to <c>/ws</c>), or <c>http://host:8080</c> / <c>https://...</c> (HTTP long-poll, for networks that
    /// only let plain HTTP requests through).
    /// </summary>
    public string? Url { get; set; }

    /// <summary>
    /// The credential for a broker with authentication on (a static token or a JWT): sent in HELLO's
    /// <c>auth</c> (spec §4.1), or as <c>Authorization: Bearer</c> when a long-poll session is created.
    /// </summary>
    public string? Credential { get; set; }

    /// <summary>
    /// Asked for the credential before every connection (and by <see cref="HeraldClient.RefreshCredentialAsync"/>),
    /// so a reconnect, or a refresh before a JWT expires, uses a fresh one. Wins over <see cref="Credential"/>.
    /// With it, a connection the broker closes as <c>AuthenticationFailed</c> (an expired token) is
    /// reconnected; without it, the client closes.
    /// </summary>
    public Func<CancellationToken, ValueTask<string?>>? CredentialProvider { get; set; }

    /// <summary>
    /// <c>tls://</c>, <c>wss://</c> and <c>https://</c>: checks the broker's certificate (say, to trust a self-signed one).
    /// <c>null</c>: the system's validation, for the host name of the address.
    /// </summary>
    public RemoteCertificateValidationCallback? ServerCertificateValidation { get; set; }

    /// <summary>Sent to the broker in HELLO (or when a long-poll session is created); shown in its logs and <c>/connz</c>. At most 128 UTF-8 bytes.</summary>
    public string ClientName { get; set; } = "herald-dotnet";

    /// <summary>
    /// The client info other clients see beside this client's presence (spec §4.1 HELLO <c>info</c>, §15): a display
    /// name, a small JSON object, whatever the application chooses to show (never a credential: the broker shows it as
    /// sent). The broker bounds it (<c>Herald:Presence:MaxInfoBytes</c>, 256 UTF-8 bytes by default): a longer one is
    /// refused when connecting, <see cref="ErrorCode.MalformedFrame"/>, and the client does not retry it. A JWT's
    /// <c>herald_info</c> claim replaces it. Shown only where a subscription joins (<see cref="SubscriptionOptions.Join"/>).
    /// <c>null</c> (the default): none.
    /// </summary>
    public string? Info { get; set; }

    /// <summary>Ask the broker for Zstd compression (spec §11). Compressed messages are decompressed before you see them.</summary>
    public bool EnableCompression { get; set; } = true;

    /// <summary>
    /// Ask the broker for headers (spec §4.1, §4.9; on by default): publications may carry
    /// <see cref="HeraldHeaders"/>, and <see cref="HeraldMessage.Headers"/> shows what arrives with a message.
    /// Off (or with a broker that does not grant them, <see cref="HeraldServerInfo.Headers"/>): messages
    /// arrive without their headers, and publishing with headers throws before anything is sent.
    /// Tracing (<c>traceparent</c>, see the README) travels in headers, so it needs them too.
    /// </summary>
    public bool EnableHeaders { get; set; } = true;

    /// <summary>
    /// Ask the broker to answer at once a request that reaches no subscriber (spec §7, the no-responders
    /// status; on by default, and only with <see cref="EnableHeaders"/>): the request then throws
    /// <see cref="HeraldNoRespondersException"/> at once instead of <see cref="HeraldTimeoutException"/> at its timeout.
    /// </summary>
    public bool EnableNoResponders { get; set; } = true;

    /// <summary>
    /// When compression was negotiated, payloads of at least this many bytes are published Zstd-compressed
    /// (if that makes them smaller). <c>null</c> (the default): never; the broker still compresses what it sends.
    /// </summary>
    public int? CompressPublishesAbove { get; set; }

    /// <summary>
    /// Bytes of publications the client holds that are not yet written to the broker. Connected, a publish
    /// over it waits for the socket (back-pressure). Disconnected, publications are kept up to this size and
    /// sent after the reconnect; past it <see cref="HeraldBufferFullException"/> is thrown. 0: nothing is
    /// kept while disconnected.
    /// </summary>
    public int PublishBufferSize { get; set; } = 8 * 1024 * 1024;

    /// <summary>Time one connection attempt may take: TCP connect (or WebSocket upgrade) plus HELLO/WELCOME, or the long-poll session; plus restoring the subscriptions.</summary>
    public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>Delay before the first reconnect attempt; it doubles with every failed attempt, up to <see cref="MaxReconnectDelay"/>. Each delay is jittered (between half and all of it).</summary>
    public TimeSpan ReconnectDelay { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>Longest delay between two reconnect attempts.</summary>
    public TimeSpan MaxReconnectDelay { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Reconnect attempts after a connection is lost before the client gives up and closes; -1 (the default): never give up.</summary>
    public int MaxReconnectAttempts { get; set; } = -1;

    /// <summary>TCP and WebSocket: idle time after which the client PINGs the broker (spec §6.2). <see cref="Timeout.InfiniteTimeSpan"/>: never.</summary>
    public TimeSpan PingInterval { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>TCP and WebSocket: unanswered PINGs after which the broker is presumed dead and the client reconnects.</summary>
    public int MaxPingsOutstanding { get; set; } = 2;

    /// <summary>Default time <see cref="HeraldClient.RequestAsync(string, ReadOnlyMemory{byte}, TimeSpan?, CancellationToken)"/> waits for a reply.</summary>
    public TimeSpan RequestTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Messages a subscription buffers for its reader or handler (see <see cref="SubscriptionOptions.Capacity"/>).</summary>
    public int SubscriptionCapacity { get; set; } = 10_000;

    /// <summary>What a subscription does when its buffer is full (see <see cref="SubscriptionOptions.FullMode"/>).</summary>
    public BoundedChannelFullMode SubscriptionFullMode { get; set; } = BoundedChannelFullMode.Wait;

    /// <summary>
    /// Run subscription handlers on the <see cref="SynchronizationContext"/> that was current when
    /// <c>SubscribeAsync</c> was called (a UI thread, say). Off by default: handlers run on the thread pool,
    /// which is much faster; turn it on only for handlers that must touch UI objects.
    /// </summary>
    public bool DeliverOnCapturedContext { get; set; }

    /// <summary>
    /// MessagePack options for typed payloads. Serialization uses them as they are; deserialization adds
    /// <see cref="MessagePackSecurity.UntrustedData"/> unless they already carry a security setting of their own.
    /// </summary>
    public MessagePackSerializerOptions SerializerOptions { get; set; } = MessagePackSerializerOptions.Standard;

    /// <summary>Largest frame body accepted from the broker, and largest decompressed payload, in bytes.</summary>
    public int MaxIncomingFrameBytes { get; set; } = 64 * 1024 * 1024;

    /// <summary>How long <see cref="HeraldClient.DisposeAsync"/> waits for queued publications to reach the broker.</summary>
    public TimeSpan CloseTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Long-poll: the HTTP handler to use (proxy, TLS settings, tests). Not disposed by the client. <c>null</c>: a <see cref="SocketsHttpHandler"/> of its own.</summary>
    public HttpMessageHandler? HttpMessageHandler { get; set; }

    /// <summary>
    /// Let the application's backend subscribe this client through the broker's server API (spec §4.1 bit 6,
    /// §4.10; TCP and WebSocket, and long-poll with headers: the session is created with <c>serverSubscriptions</c>,
    /// longpoll §1.4). Each such subscription is raised through <see cref="HeraldClient.ServerSubscribed"/>
    /// and read like one of the application's own. Off by default: an application that does not listen to that
    /// event would otherwise receive messages it never asked for. A server-made subscription ends with its
    /// connection and is not made again by a reconnect (the backend decides).
    /// </summary>
    public bool AcceptServerSubscriptions { get; set; }

    /// <summary>
    /// Ask for deltas on every subscription to a topic without wildcards and without a queue group (spec §11.2; off by
    /// default; <see cref="SubscriptionOptions.Delta"/> decides per subscription): the broker may then send a message
    /// as a Fossil delta against the previous one the subscription received, which the client applies, so the
    /// application always sees the full payload. Pays on streams of small updates to one topic (a ticker, a JSON
    /// document that changes a few fields); the client keeps each such subscription's last payload.
    /// </summary>
    public bool Deltas { get; set; }

    /// <summary>Tests: the TCP socket's receive buffer, small so that a client that stops reading soon leaves the broker's queue to fill.</summary>
    internal int? ReceiveBufferSize { get; set; }

    /// <summary>The HELLO capabilities (spec §4.1) these options ask for; long-poll asks for the same when it creates its session.</summary>
    internal Capabilities Capabilities =>
        Capabilities.QueueGroups // always asked: a queue is sent only where it was granted
        | Capabilities.Deltas // always asked: a subscription asks for deltas only where they were granted
        | (EnableCompression ? Capabilities.Zstd : Capabilities.None)
        | (AcceptServerSubscriptions ? Capabilities.ServerSubscriptions : Capabilities.None)
        | (EnableHeaders ? Capabilities.Headers | Capabilities.History | Capabilities.Presence | (EnableNoResponders ? Capabilities.NoResponders : Capabilities.None) : Capabilities.None);

    /// <summary>The longest <see cref="Info"/> any broker takes (<c>Herald:Presence:MaxInfoBytes</c> at its highest); the broker's own limit is checked when connecting.</summary>
    internal const int MaxInfoBytes = 65_536;

    internal HeraldClientOptions Clone() => (HeraldClientOptions)MemberwiseClone();

    internal void Validate()
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(Url, nameof(Url));
        ArgumentNullException.ThrowIfNull(ClientName, nameof(ClientName));
        ArgumentNullException.ThrowIfNull(SerializerOptions, nameof(SerializerOptions));
        if (Encoding.UTF8.GetByteCount(ClientName) > ProtocolConstants.MaxClientNameBytes)
        {
            throw new ArgumentException($"ClientName is longer than {ProtocolConstants.MaxClientNameBytes} UTF-8 bytes.", nameof(ClientName));
        }

        if (Info is not null && Encoding.UTF8.GetByteCount(Info) > MaxInfoBytes)
        {
            throw new ArgumentException($"Info is longer than {MaxInfoBytes} UTF-8 bytes, more than any broker takes (spec §4.1 max_presence_info; Herald's default is {ProtocolConstants.DefaultMaxPresenceInfoBytes}).", nameof(Info));
        }

        Positive(ConnectTimeout, nameof(ConnectTimeout));
        Positive(ReconnectDelay, nameof(ReconnectDelay));
        Positive(MaxReconnectDelay, nameof(MaxReconnectDelay));
        Positive(RequestTimeout, nameof(RequestTimeout));
        Positive(CloseTimeout, nameof(CloseTimeout));
        if (PingInterval != Timeout.InfiniteTimeSpan)
        {
            Positive(PingInterval, nameof(PingInterval));
        }

        ArgumentOutOfRangeException.ThrowIfNegative(PublishBufferSize, nameof(PublishBufferSize));
        ArgumentOutOfRangeException.ThrowIfLessThan(MaxReconnectAttempts, -1, nameof(MaxReconnectAttempts));
        ArgumentOutOfRangeException.ThrowIfLessThan(MaxPingsOutstanding, 1, nameof(MaxPingsOutstanding));
        ArgumentOutOfRangeException.ThrowIfLessThan(SubscriptionCapacity, 1, nameof(SubscriptionCapacity));
        ArgumentOutOfRangeException.ThrowIfLessThan(MaxIncomingFrameBytes, 64, nameof(MaxIncomingFrameBytes));
        if (CompressPublishesAbove is { } above)
        {
            ArgumentOutOfRangeException.ThrowIfNegative(above, nameof(CompressPublishesAbove));
        }
    }

    private static void Positive(TimeSpan value, string name)
    {
        if (value <= TimeSpan.Zero)
        {
            throw new ArgumentOutOfRangeException(name, value, $"{name} must be positive.");
        }
    }
}

/// <summary>Settings of one subscription; what is left <c>null</c> comes from <see cref="HeraldClientOptions"/>.</summary>
public sealed class SubscriptionOptions
{
    /// <summary><see cref="Resume"/> as set; <c>null</c> when left at its default.</summary>
    private bool? _resume;

    /// <summary>Do not receive what this same client publishes (spec §4.3 "no echo").</summary>
    public bool NoEcho { get; set; }

    /// <summary>Messages buffered between the connection and the reader or handler.</summary>
    public int? Capacity { get; set; }

    /// <summary>
    /// When the buffer is full: <see cref="BoundedChannelFullMode.Wait"/> (the default) stops reading from the
    /// broker until there is room, so nothing is lost and the broker's slow-consumer policy decides (spec §6.3);
    /// the drop modes keep reading and count what they drop in <see cref="HeraldSubscription.DroppedMessages"/>.
    /// </summary>
    public BoundedChannelFullMode? FullMode { get; set; }

    /// <summary>Overrides <see cref="HeraldClientOptions.DeliverOnCapturedContext"/> for this subscription.</summary>
    public bool? DeliverOnCapturedContext { get; set; }

    /// <summary>
    /// On a topic that keeps a history (spec §13), resume after a reconnect from the last message received: what
    /// was published meanwhile arrives first, with no gap and no duplicate, or <see cref="HeraldSubscription.Resumed"/>
    /// says it cannot. Only for a pattern without wildcards, with headers on (<see cref="HeraldClientOptions.EnableHeaders"/>).
    /// Default on, except for a queue group member (<see cref="Queue"/>), which never resumes: setting <c>Resume = true</c>
    /// together with a <see cref="Queue"/> is refused.
    /// </summary>
    public bool Resume
    {
        get => _resume ?? true;
        set => _resume = value;
    }

    /// <summary>
    /// Join this queue group (spec §14): of the subscriptions to the same pattern with the same queue name, on any
    /// clients and transports, each message reaches only one, chosen by the broker (plain subscriptions still get it
    /// too). That is how workers or responders share a stream. <c>null</c> (the default): a plain subscription.
    /// A name is 1 to 64 printable ASCII characters without spaces, <c>.</c>, <c>*</c> or <c>&gt;</c>; another is an
    /// <see cref="ArgumentException"/> before anything is sent. Needs a broker that routes queue groups
    /// (<see cref="HeraldServerInfo.QueueGroups"/>): with any other the subscription fails with a <see cref="HeraldException"/>
    /// instead of becoming a plain one. A member does not resume a topic's history (a group shares the live stream).
    /// </summary>
    public string? Queue { get; set; }

    /// <summary>
    /// Be present on the topic (spec §15.1): while this subscription lives, this client's connection is a member of the
    /// topic, shown with its <see cref="HeraldClientOptions.Info"/>, and leaves when it is unsubscribed, the client is
    /// disposed or the connection is lost; after a reconnect it joins again (a new member, with a new client id). Only for
    /// one topic (no <c>*</c> or <c>&gt;</c>: an <see cref="ArgumentException"/>), with a broker
    /// that grants presence (<see cref="HeraldServerInfo.Presence"/>). The broker may refuse it: subscribing then throws a
    /// <see cref="HeraldException"/> whose code says why (<see cref="ErrorCode.PermissionDenied"/> without the join
    /// permission, <see cref="ErrorCode.PresenceFull"/> past a limit, <see cref="ErrorCode.PresenceUnavailable"/>);
    /// refused on a reconnect, the subscription ends with that error.
    /// </summary>
    public bool Join { get; set; }

    /// <summary>
    /// Also receive the topic's join and leave events (spec §15.2) as <see cref="HeraldPresenceEvent"/>s, never as
    /// messages: through <see cref="OnPresence"/> when set, else read with
    /// <see cref="HeraldSubscription.ReadPresenceEventsAsync"/>. Needs the presence permission (a refusal ends the
    /// subscription as for <see cref="Join"/>). One topic only. Implied by <see cref="OnPresence"/>.
    /// </summary>
    public bool PresenceEvents { get; set; }

    /// <summary>
    /// Called with each presence event of the topic (join, leave, suppressed, resumed); implies <see cref="PresenceEvents"/>.
    /// On a subscription with a handler it runs on the handler's turn: one call at a time, in order with the messages
    /// (a member's join before what it publishes after joining, its leave after what it published before leaving). On
    /// an enumerated subscription it runs on the thread pool, in the events' order. An exception is reported through
    /// <see cref="HeraldClient.Error"/>.
    /// </summary>
    public Action<HeraldPresenceEvent>? OnPresence { get; set; }

    /// <summary>
    /// Ask for deltas on this subscription (spec §11.2): <c>true</c> or <c>false</c> overrides <see cref="HeraldClientOptions.Deltas"/>
    /// (<c>null</c>, the default). Honoured on a topic without wildcards and without a <see cref="Queue"/>; elsewhere
    /// the subscription gets full messages. Either way the application sees full payloads.
    /// </summary>
    public bool? Delta { get; set; }

    /// <summary>The SUBSCRIBE option bits of presence (spec §4.3): join, events (asked for, or implied by <see cref="OnPresence"/>).</summary>
    internal SubscribeOptions PresenceBits =>
        (Join ? SubscribeOptions.Join : SubscribeOptions.None) | (PresenceEvents || OnPresence is not null ? SubscribeOptions.PresenceEvents : SubscribeOptions.None);

    /// <summary>The subscription resumes (spec §13); checked against <see cref="Queue"/>.</summary>
    /// <exception cref="ArgumentException"><see cref="Resume"/> set to <c>true</c> together with a <see cref="Queue"/>.</exception>
    internal bool Resumes()
    {
        if (Queue is null)
        {
            return Resume;
        }

        if (_resume == true)
        {
            throw new ArgumentException(
                $"A subscription in the queue group '{Queue}' cannot resume a topic's history (spec §4.3: a group shares the live stream, it has no position). Leave SubscriptionOptions.Resume unset, or set it to false. Nothing was subscribed.",
                "options");
        }

        return false;
    }
}
