using System.ComponentModel.DataAnnotations;
using Herald.Broker.Delivery;

namespace Herald.Broker.Sessions;

public sealed class LimitOptions
{
    /// <summary>Largest frame body accepted, in bytes (spec §2).</summary>
    [Range(64, 64 * 1024 * 1024)]
    public int MaxFrameBytes { get; set; } = 1024 * 1024;

    /// <summary>Longest topic or pattern, in bytes (spec §5).</summary>
    [Range(1, 4096)]
    public int MaxTopicLength { get; set; } = 256;

    /// <summary>
    /// Largest PUBLISH payload (WELCOME's <c>max_payload</c>, spec §4.2): derived, not set, so that every
    /// MESSAGE fits in <see cref="MaxFrameBytes"/>: <c>MaxFrameBytes - 2 × MaxTopicLength - 31</c>.
    /// </summary>
    public int MaxPayloadBytes => Herald.Protocol.ProtocolConstants.MaxPayload(MaxFrameBytes, MaxTopicLength);

    /// <summary>Most header values one PUBLISH may carry, over all its keys (WELCOME's <c>max_headers</c>, spec §4.9); more: <c>InvalidHeaders</c>.</summary>
    [Range(1, 1_000_000)]
    public int MaxHeaders { get; set; } = 64;

    /// <summary>Largest encoded header block of one PUBLISH, in bytes (WELCOME's <c>max_header_bytes</c>, spec §4.9); more: <c>InvalidHeaders</c>.</summary>
    [Range(1, 64 * 1024 * 1024)]
    public int MaxHeaderBytes { get; set; } = 8 * 1024;

    /// <summary>Most live subscriptions per connection.</summary>
    [Range(1, 1_000_000)]
    public int MaxSubscriptionsPerConnection { get; set; } = 10_000;

    /// <summary>Bytes queued for one connection before the slow-consumer policy acts (spec §6.3).</summary>
    [Range(1024, int.MaxValue)]
    public int MaxPendingBytes { get; set; } = 8 * 1024 * 1024;

    /// <summary>Frames queued for one connection before the slow-consumer policy acts (spec §6.3).</summary>
    [Range(1, 10_000_000)]
    public int MaxPendingMessages { get; set; } = 100_000;

    /// <summary>
    /// Replies (PONG, non-fatal ERROR, WELCOME) queued for one connection and not yet written before the
    /// broker stops reading from it until they are (spec §6.3): a client that asks faster than it reads is
    /// held back, never answered by growing memory. Replies also count against the pending limits above.
    /// </summary>
    [Range(1, 1_000_000)]
    public int MaxPendingReplies { get; set; } = 1000;

    /// <summary>What to do with a connection over its pending limits.</summary>
    public SlowConsumerPolicy SlowConsumerPolicy { get; set; } = SlowConsumerPolicy.Disconnect;

    /// <summary>Time a new connection has to send HELLO.</summary>
    public TimeSpan HandshakeTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Time a frame that has begun (its first byte read) has to complete, beyond its length at
    /// <see cref="MinFrameDataRate"/> (spec §6.2): a client that drips a frame is closed with <c>FrameTimeout</c>,
    /// as Kestrel's <c>MinRequestBodyDataRate</c> does for an HTTP body.
    /// </summary>
    public TimeSpan FrameGracePeriod { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Slowest rate, in bytes per second, a frame's body may arrive at: a frame of <c>n</c> bytes must be
    /// complete within <see cref="FrameGracePeriod"/> plus <c>n / MinFrameDataRate</c> seconds of its first byte.
    /// 16 KiB/s lets a 1 MiB frame take 69 s: a slow link (128 kbit/s) is never cut.
    /// </summary>
    [Range(1, int.MaxValue)]
    public int MinFrameDataRate { get; set; } = 16 * 1024;

    /// <summary>
    /// Largest frame body a TCP connection may hold partly received on its own; a larger frame takes its
    /// size (prefix included) from <see cref="MaxPartialFrameBytesTotal"/> until it is complete. Also the largest frame taken before
    /// HELLO is accepted, and how far the socket reads ahead of the frame reader (Kestrel's input buffer).
    /// </summary>
    [Range(1024, 64 * 1024 * 1024)]
    public int PartialFrameAllowance { get; set; } = 64 * 1024;

    /// <summary>
    /// The unit the sockets (TCP and HTTP) are read and written in: Kestrel's pool blocks. One receive takes at most
    /// one block, so larger blocks mean fewer system calls and larger batches per read (64 KiB writes from a
    /// publisher are 16 receives with 4 KiB blocks). An idle connection holds none; a connection with a frame
    /// half received holds one until it is complete.
    /// </summary>
    [Range(4096, 1024 * 1024)]
    public int SocketBlockBytes { get; set; } = 32 * 1024;

    /// <summary>Bytes of free socket blocks the broker keeps for reuse, all listeners together; blocks returned beyond it go back to the GC.</summary>
    [Range(0, long.MaxValue)]
    public long SocketBlocksRetainedBytes { get; set; } = 32L * 1024 * 1024;

    /// <summary>
    /// Bytes all TCP connections together may hold of frames larger than <see cref="PartialFrameAllowance"/>
    /// that are not complete yet; a frame that finds no room is answered <c>FrameBudgetFull</c> and its
    /// connection closed (spec §6.2).
    /// </summary>
    [Range(1024, long.MaxValue)]
    public long MaxPartialFrameBytesTotal { get; set; } = 256L * 1024 * 1024;

    /// <summary>Idle time after which the broker PINGs a connection (spec §6.2).</summary>
    public TimeSpan PingInterval { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>PINGs without any answer before a connection is closed as stale.</summary>
    [Range(1, 100)]
    public int MaxPingsOutstanding { get; set; } = 2;

    /// <summary>How long shutdown waits for queued frames to be written before closing connections.</summary>
    public TimeSpan ShutdownDrainTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Most TCP connections at once; more are told <c>TooManyConnections</c> and closed. 0: no limit.</summary>
    [Range(0, 10_000_000)]
    public int MaxConnections { get; set; } = 100_000;

    /// <summary>Most TCP connections from one remote address at once. 0: no limit.</summary>
    [Range(0, 10_000_000)]
    public int MaxConnectionsPerAddress { get; set; }

    /// <summary>Publications per second one connection may sustain (token bucket); faster publishers are slowed down and told <c>RateLimited</c>, nothing is dropped. 0: no limit.</summary>
    [Range(0, 100_000_000)]
    public int PublishRatePerSecond { get; set; }

    /// <summary>Publications a connection may send in a burst above <see cref="PublishRatePerSecond"/>.</summary>
    [Range(1, 100_000_000)]
    public int PublishBurst { get; set; } = 1000;

    /// <summary>
    /// SUBSCRIBE and UNSUBSCRIBE frames per second one connection (long-poll: one session) may sustain (token
    /// bucket, one token per frame); faster clients are slowed down and told <c>RateLimited</c>, nothing is
    /// refused. 0: no limit.
    /// </summary>
    [Range(0, 100_000_000)]
    public int SubscriptionRatePerSecond { get; set; } = 1000;

    /// <summary>Subscription changes a connection may make in a burst above <see cref="SubscriptionRatePerSecond"/> (a client subscribing at start).</summary>
    [Range(1, 100_000_000)]
    public int SubscriptionBurst { get; set; } = 10_000;

    /// <summary>
    /// Most clients (TCP connections and long-poll sessions) one identity holds at once; with
    /// authentication off, one remote address. More: <c>TooManyConnections</c>. 0: no limit.
    /// </summary>
    [Range(0, 10_000_000)]
    public int MaxConnectionsPerIdentity { get; set; } = 10_000;

    /// <summary>
    /// Most live subscriptions one identity holds across all its clients (each adds at most one pattern to
    /// the broker); with authentication off, one remote address. More: a non-fatal <c>TooManyTopics</c>. 0: no limit.
    /// </summary>
    [Range(0, 100_000_000)]
    public int MaxSubscriptionsPerIdentity { get; set; } = 100_000;

    /// <summary>
    /// Most live subscriptions with a wildcard (<c>*</c> or <c>&gt;</c>) one identity holds across all its clients, on
    /// this node, those under its own reply inbox included (every client that makes requests holds one there); with
    /// authentication off, one remote address. A wildcard pattern costs more than an exact topic: the router walks it
    /// for every publication, and in a cluster it may be a Redis glob (spec cluster.md §2). More: a non-fatal
    /// <c>TooManyTopics</c> that says so. 0: no limit.
    /// </summary>
    [Range(0, 100_000_000)]
    public int MaxWildcardPatternsPerIdentity { get; set; } = 10_000;

    /// <summary>Most distinct subscription patterns in the broker; a SUBSCRIBE that would add one more gets <c>TooManyTopics</c>. 0: no limit.</summary>
    [Range(0, 100_000_000)]
    public int MaxTopics { get; set; } = 1_000_000;

    /// <summary>How long a connection closed for a protocol error or slow consumption gets to take its ERROR frame.</summary>
    public TimeSpan ErrorFlushTimeout { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>
    /// How long a connection whose session has ended gets to close its socket (a WebSocket's closing handshake, which
    /// waits behind any send the peer has not taken); then the socket is aborted. The connection stays counted
    /// (<c>/varz</c>, <c>/connz</c>, every connection limit) until its socket is gone.
    /// </summary>
    public TimeSpan CloseTimeout { get; set; } = TimeSpan.FromSeconds(5);
}
