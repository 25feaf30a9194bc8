using System.Diagnostics;

namespace Herald.LoadTest.Targets;

/// <summary>
/// One message as a subscriber sees it. The spans are valid only during the call (they point into the
/// client's receive buffer): copy what must outlive it. <paramref name="replyTo"/> is empty when the
/// publisher asked for no reply; <paramref name="headers"/> is the message's header block in the target's
/// own encoding (<see cref="ITarget.EncodeHeaders"/>), empty when it has none.
/// </summary>
internal delegate void DeliveryHandler(ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers);

/// <summary>
/// A broker under test, reached over one transport: Herald over TCP or long-poll, nats-server, redis-server,
/// or an ASP.NET Core SignalR hub over WebSockets or long polling. Scenarios are written once against
/// this and <see cref="IPubSubClient"/>, so every scenario runs against every target with the same method.
/// Disposing it stops the server if the tool started it.
/// </summary>
internal interface ITarget : IAsyncDisposable
{
    /// <summary><c>herald</c>, <c>nats</c>, <c>redis</c>, <c>signalr</c> or <c>cluster</c>.</summary>
    string Name { get; }

    /// <summary>How clients reach it: <c>tcp</c>, <c>tls</c>, <c>websocket</c> or <c>longpoll</c> for Herald (and a cluster of it), <c>tcp</c> or <c>tls</c> for NATS, <c>tcp</c> for Redis,
    /// <c>websockets</c> or <c>longpolling</c> for SignalR.</summary>
    string Transport { get; }

    /// <summary><c>Name/Transport</c>, the label in tables and result files.</summary>
    string Label => $"{Name}/{Transport}";

    /// <summary>What serves it and its version, e.g. <c>nats-server 2.9.10</c>, printed with every result.</summary>
    string ServerDescription { get; }

    /// <summary>The server's command line when the tool started it, else null.</summary>
    string? ServerCommandLine { get; }

    /// <summary>The server process (started by the tool, or named with <c>--server-pid</c>) for its CPU time and RSS; null when unknown.</summary>
    Process? ServerProcess { get; }

    /// <summary>
    /// Every process whose CPU time and RSS the report sums as the server's: <see cref="ServerProcess"/>
    /// alone, or a cluster's nodes.
    /// </summary>
    IReadOnlyList<Process> ServerProcesses => ServerProcess is { } process ? [process] : [];

    /// <summary>The largest payload a publication may carry on this target.</summary>
    int MaxPayload { get; }

    /// <summary>
    /// Opens client number <paramref name="index"/> and completes its handshake. The index spreads clients
    /// over the target's ports and source addresses where it has several (Herald's 4502-4534).
    /// </summary>
    Task<IPubSubClient> ConnectAsync(int index, CancellationToken cancellationToken);

    /// <summary>
    /// Encodes a header block the way this target's wire carries it (Herald: the MessagePack map of spec §4.9;
    /// NATS: the <c>NATS/1.0</c> block of HPUB), for <see cref="IPubSubClient.PublishAsync"/>. Clients ask for
    /// headers when connecting only with <see cref="TargetOptions.Headers"/> set.
    /// </summary>
    /// <exception cref="UsageException">This target carries no headers in this tool.</exception>
    byte[] EncodeHeaders(IReadOnlyList<KeyValuePair<string, string[]>> headers) =>
        throw new UsageException($"--header-bytes: {Label} carries no message headers in this tool (herald and nats do).");
}

/// <summary>
/// One client connection (TCP) or session (long-poll) to a target. Messages arrive on the client's own
/// receive loop, one at a time, in order; publications are buffered and written by the client's writer in
/// batches, so a scenario never pays a system call per message (the way NATS and nats.net clients work).
/// </summary>
internal interface IPubSubClient : IAsyncDisposable
{
    /// <summary>The inbox prefix of a client that has no identity of its own (Herald with auth off, every other target).</summary>
    const string AnonymousInboxPrefix = "_INBOX";

    /// <summary>
    /// The topic under which this client's reply inboxes live (<c>&lt;prefix&gt;.&lt;unique&gt;</c>): Herald's WELCOME
    /// <c>inbox_prefix</c> or long-poll <c>inboxPrefix</c> (spec §7; per identity with auth on), else <c>_INBOX</c>.
    /// </summary>
    string InboxPrefix => AnonymousInboxPrefix;

    /// <summary>
    /// Subscribes <paramref name="handler"/> to <paramref name="topic"/> (an exact topic; no wildcards needed)
    /// and returns once the subscription is live: anything published to the topic after this returns, by
    /// any client of the same target, reaches the handler. The handler runs on the receive loop and must not block.
    /// </summary>
    Task SubscribeAsync(string topic, DeliveryHandler handler, CancellationToken cancellationToken);

    /// <summary>
    /// As <see cref="SubscribeAsync(string, DeliveryHandler, CancellationToken)"/>, as a member of the queue group
    /// <paramref name="queue"/>: each publication reaches one member of the group (Herald spec §14, NATS queue
    /// subscriptions). Targets without queue groups throw <see cref="NotSupportedException"/>.
    /// </summary>
    Task SubscribeAsync(string topic, string queue, DeliveryHandler handler, CancellationToken cancellationToken) =>
        throw new NotSupportedException("this target has no queue groups");

    /// <summary>
    /// Copies one publication into the send buffer and returns without waiting: it is sent at once when the
    /// connection is idle, else with the batch after the send in flight. Called from a
    /// <see cref="DeliveryHandler"/> (e.g. to reply), it is sent after the handlers of the whole received
    /// batch have run, in one write with the other replies. Thread-safe, never blocks.
    /// </summary>
    void Publish(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo = default);

    /// <summary>
    /// As <see cref="Publish"/>, then waits while more than the client's buffer limit is unsent (flow
    /// control). With <paramref name="sendNow"/> false the publication may wait in the buffer until a batch
    /// has accumulated: a producer in a tight loop passes false and calls <see cref="FlushAsync"/> when done.
    /// A non-empty <paramref name="headers"/> (from <see cref="ITarget.EncodeHeaders"/>, on a client of a
    /// target started with <see cref="TargetOptions.Headers"/>) goes with the publication as its header block.
    /// </summary>
    ValueTask PublishAsync(string topic, ReadOnlyMemory<byte> payload, ReadOnlyMemory<byte> replyTo = default, ReadOnlyMemory<byte> headers = default, bool sendNow = true, CancellationToken cancellationToken = default);

    /// <summary>Sends whatever is buffered and completes when everything published so far has been handed to the network (not: delivered).</summary>
    ValueTask FlushAsync(CancellationToken cancellationToken);

    /// <summary>Why the connection ended, when the server or the network ended it (not <see cref="IAsyncDisposable.DisposeAsync"/>); null while it is fine.</summary>
    string? Failure { get; }

    /// <summary>Error replies the server sent that did not end the connection (Herald ERROR frames, NATS -ERR), for the report.</summary>
    long Errors { get; }

    /// <summary>
    /// How many messages the server queues for this client before its slow-consumer policy acts, when the
    /// server says so (Herald: WELCOME's <c>max_pending_msgs</c>, a long-poll session's <c>maxPendingMessages</c>);
    /// null when it does not. Flow-controlled publishers stay below it, so a run measures delivery, not the policy.
    /// </summary>
    long? MaxPendingMessages => null;
}
