using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Transports.Tcp;

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

    /// <summary>
    /// Socket I/O loops that run each connection's reads and writes themselves (.NET's socket event threads with
    /// inline completions, each owning the sockets it polls) instead of handing every completion to the thread
    /// pool; 0 keeps .NET's default (one event thread that wakes a pool worker per completion). Process-wide and
    /// read once, before the first socket: it applies to the first broker a process starts.
    /// </summary>
    [Range(0, 64)]
    public int IoLoops { get; set; }

    /// <summary>
    /// The most receivers of one publication the reading thread writes itself (a room, a small fan-out); a batch that
    /// reached more, or several publications' receivers (a responder's replies to many callers, which one thread
    /// would otherwise write all of), spreads their writes over the pool; one receiver is always written inline
    /// (request/reply, a stream). With <see cref="IoLoops"/> a small room then
    /// costs no wake-up beyond its loop's (8 is what loadtest/docs/profile.md measured); a receiver whose socket is
    /// full is left to finish on its own, so it delays the others by one write at most.
    /// </summary>
    [Range(1, 1024)]
    public int InlineFanout { get; set; } = 1;

    /// <summary>
    /// Each accepted socket's kernel send buffer (SO_SNDBUF, set on the listening sockets and inherited), in
    /// bytes; 0 leaves it to the kernel, whose autotuning may grow it to <c>net.ipv4.tcp_wmem</c>'s maximum
    /// (4 MiB by default) for a peer that does not read. Part of what a stalled connection holds beyond its
    /// queue (Linux reserves twice the value for its bookkeeping).
    /// </summary>
    [Range(0, 64 * 1024 * 1024)]
    public int SendBufferBytes { get; set; } = 64 * 1024;
}
