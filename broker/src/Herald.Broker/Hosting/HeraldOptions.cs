using System.ComponentModel.DataAnnotations;
using Herald.Broker.Delivery;

namespace Herald.Broker.Hosting;

/// <summary>
/// The broker's configuration, bound from the <c>Herald</c> section (appsettings.json, environment
/// variables such as <c>Herald__Tcp__PortRangeStart</c>, or <c>--Herald:Tcp:PortRangeStart=</c>).
/// Every limit here is documented in the README's configuration table and in protocol-spec §9.
/// </summary>
public sealed class HeraldOptions
{
    public const string Section = "Herald";

    /// <summary>Name sent in WELCOME and shown in logs.</summary>
    [Required, StringLength(64, MinimumLength = 1)]
    public string ServerName { get; set; } = "herald";

    public TcpOptions Tcp { get; set; } = new();

    public LimitOptions Limits { get; set; } = new();
}

public sealed class TcpOptions
{
    /// <summary>Address the TCP listeners bind: an IP address, or <c>localhost</c>/<c>any</c>.</summary>
    [Required]
    public string Host { get; set; } = "0.0.0.0";

    /// <summary>First port of the TCP range (inclusive). 0 with <see cref="PortRangeEnd"/> 0 binds one ephemeral port (tests).</summary>
    [Range(0, 65535)]
    public int PortRangeStart { get; set; } = 4502;

    /// <summary>Last port of the TCP range (inclusive).</summary>
    [Range(0, 65535)]
    public int PortRangeEnd { get; set; } = 4534;

    /// <summary>
    /// Run socket reads and writes inline on the I/O threads instead of hopping to the thread pool
    /// (Kestrel's UnsafePreferInlineScheduling). Cuts latency; safe because the broker never blocks in
    /// its read loop.
    /// </summary>
    public bool InlineScheduling { get; set; } = true;
}

public sealed class LimitOptions
{
    /// <summary>Largest frame body accepted, in bytes (spec §2).</summary>
    [Range(64, 64 * 1024 * 1024)]
    public int MaxFrameBytes { get; set; } = 1024 * 1024;

    /// <summary>Longest topic or pattern, in bytes (spec §5).</summary>
    [Range(1, 4096)]
    public int MaxTopicLength { get; set; } = 256;

    /// <summary>Most live subscriptions per connection.</summary>
    [Range(1, 1_000_000)]
    public int MaxSubscriptionsPerConnection { get; set; } = 10_000;

    /// <summary>Bytes queued for one connection before the slow-consumer policy acts (spec §6.3).</summary>
    [Range(1024, int.MaxValue)]
    public int MaxPendingBytes { get; set; } = 8 * 1024 * 1024;

    /// <summary>Frames queued for one connection before the slow-consumer policy acts (spec §6.3).</summary>
    [Range(1, 10_000_000)]
    public int MaxPendingMessages { get; set; } = 100_000;

    /// <summary>What to do with a connection over its pending limits.</summary>
    public SlowConsumerPolicy SlowConsumerPolicy { get; set; } = SlowConsumerPolicy.Disconnect;

    /// <summary>Time a new connection has to send HELLO.</summary>
    public TimeSpan HandshakeTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>Idle time after which the broker PINGs a connection (spec §6.2).</summary>
    public TimeSpan PingInterval { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>PINGs without any answer before a connection is closed as stale.</summary>
    [Range(1, 100)]
    public int MaxPingsOutstanding { get; set; } = 2;

    /// <summary>How long shutdown waits for queued frames to be written before closing connections.</summary>
    public TimeSpan ShutdownDrainTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>How long a connection closed for a protocol error or slow consumption gets to take its ERROR frame.</summary>
    public TimeSpan ErrorFlushTimeout { get; set; } = TimeSpan.FromSeconds(2);
}
