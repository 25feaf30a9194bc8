namespace Herald.Client;

/// <summary>Where a <see cref="HeraldClient"/> stands with its broker; see <see cref="HeraldClient.StateChanged"/>.</summary>
public enum ConnectionState
{
    /// <summary>Not connected yet (or the first connection attempt failed). The next call connects.</summary>
    Disconnected,

    /// <summary>The first connection is being made.</summary>
    Connecting,

    /// <summary>Connected; subscriptions are live at the broker.</summary>
    Connected,

    /// <summary>The connection was lost; the client is reconnecting with backoff. Publications are buffered.</summary>
    Reconnecting,

    /// <summary>Disposed, or reconnecting was given up (see <see cref="ConnectionStateChangedEventArgs.Error"/>). Final.</summary>
    Closed,
}

/// <summary>The transport a client speaks, chosen by its address.</summary>
public enum HeraldTransport
{
    /// <summary><c>tcp://</c>, <c>tls://</c>: the binary protocol (protocol-spec/README.md).</summary>
    Tcp,

    /// <summary><c>http://</c>, <c>https://</c>: HTTP long-poll (protocol-spec/longpoll.md).</summary>
    LongPoll,

    /// <summary><c>ws://</c>, <c>wss://</c>: the same binary protocol as TCP, in binary WebSocket messages on the broker's HTTP port (spec §1, subprotocol <c>herald.v1</c>).</summary>
    WebSocket,
}

public sealed class ConnectionStateChangedEventArgs : EventArgs
{
    public ConnectionStateChangedEventArgs(ConnectionState previous, ConnectionState current, Exception? error)
    {
        Previous = previous;
        Current = current;
        Error = error;
    }

    public ConnectionState Previous { get; }

    public ConnectionState Current { get; }

    /// <summary>Why the connection was lost or could not be made, if it was.</summary>
    public Exception? Error { get; }
}

/// <summary>An error nobody awaited: a non-fatal ERROR from the broker, a lost connection, a handler that threw.</summary>
public sealed class HeraldErrorEventArgs : EventArgs
{
    public HeraldErrorEventArgs(HeraldException exception) => Exception = exception;

    public HeraldException Exception { get; }
}

/// <summary>What the broker told the client about the current connection.</summary>
public sealed class HeraldServerInfo
{
    internal HeraldServerInfo(HeraldTransport transport, string? serverName, ulong? connectionId, int? port, bool compression, IReadOnlyDictionary<string, ulong> limits, string? inboxPrefix = null, bool headers = false, bool noResponders = false, bool history = false, bool queueGroups = false, bool presence = false)
    {
        Presence = presence;
        QueueGroups = queueGroups;
        History = history;
        Headers = headers;
        NoResponders = noResponders;
        InboxPrefix = inboxPrefix;
        Transport = transport;
        ServerName = serverName;
        ConnectionId = connectionId;
        Port = port;
        Compression = compression;
        Limits = limits;
    }

    public HeraldTransport Transport { get; }

    /// <summary>TCP and WebSocket: the broker's name from WELCOME. Long-poll: <c>null</c>.</summary>
    public string? ServerName { get; }

    /// <summary>TCP and WebSocket: the connection id from WELCOME (the broker's logs and <c>/connz</c> show it).</summary>
    public ulong? ConnectionId { get; }

    /// <summary>TCP: the port connected to (one of the address's range). WebSocket: the HTTP port. Long-poll: <c>null</c>.</summary>
    public int? Port { get; }

    /// <summary>Zstd was negotiated: the broker may send compressed messages, and large publications may be compressed.</summary>
    public bool Compression { get; }

    /// <summary>
    /// Headers were negotiated (spec §4.1, <see cref="HeraldClientOptions.EnableHeaders"/>): publications may
    /// carry <see cref="HeraldHeaders"/>, and messages arrive with theirs. <c>false</c> with a broker before headers.
    /// </summary>
    public bool Headers { get; }

    /// <summary>
    /// The broker answers a request nobody serves at once (spec §7, <see cref="HeraldClientOptions.EnableNoResponders"/>):
    /// <see cref="HeraldClient.RequestAsync(string, ReadOnlyMemory{byte}, TimeSpan?, CancellationToken)"/> then throws
    /// <see cref="HeraldNoRespondersException"/> instead of waiting for its timeout.
    /// </summary>
    public bool NoResponders { get; }

    /// <summary>
    /// The broker keeps topic histories (spec §4.1 bit 3, §13): subscriptions to one topic resume after a reconnect
    /// (<see cref="SubscriptionOptions.Resume"/>). <c>false</c> from a broker without any, or before history.
    /// </summary>
    public bool History { get; }

    /// <summary>
    /// The broker routes queue groups (spec §4.1 bit 4, §14; long-poll's <c>queueGroups</c>): a subscription may join one
    /// (<see cref="SubscriptionOptions.Queue"/>). <c>false</c> from a broker before them: subscribing with a queue then
    /// fails, rather than becoming a plain subscription.
    /// </summary>
    public bool QueueGroups { get; }

    /// <summary>
    /// The broker granted presence (spec §4.1 bit 5, §15; only with headers): a subscription may join its topic or ask
    /// for its join and leave events (<see cref="SubscriptionOptions.Join"/>, <see cref="SubscriptionOptions.PresenceEvents"/>),
    /// and <see cref="HeraldClient.PresenceAsync"/> may ask who is there. <c>false</c> from a broker with presence off
    /// (<c>Herald:Presence:Enabled</c>), a client without headers, or a broker before presence.
    /// </summary>
    public bool Presence { get; }

    /// <summary>
    /// The part of the inbox space that is this client's identity's (spec §7: WELCOME's <c>inbox_prefix</c>,
    /// long-poll's <c>inboxPrefix</c>); <see cref="HeraldClient.RequestAsync(string, byte[], TimeSpan?, CancellationToken)"/>
    /// makes its inbox under it. <c>null</c> from a broker that sends none (the client then uses <c>_INBOX</c>).
    /// </summary>
    public string? InboxPrefix { get; }

    /// <summary>TCP and WebSocket: WELCOME's limits (spec §4.2). Long-poll: the session's (longpoll §1.1), by their JSON names.</summary>
    public IReadOnlyDictionary<string, ulong> Limits { get; }
}
