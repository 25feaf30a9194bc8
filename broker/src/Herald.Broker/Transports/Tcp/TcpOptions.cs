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
    /// Each accepted socket's kernel send buffer (SO_SNDBUF, set on the listening sockets and inherited), in
    /// bytes; 0 leaves it to the kernel, whose autotuning may grow it to <c>net.ipv4.tcp_wmem</c>'s maximum
    /// (4 MiB by default) for a peer that does not read. Part of what a stalled connection holds beyond its
    /// queue (Linux reserves twice the value for its bookkeeping).
    /// </summary>
    [Range(0, 64 * 1024 * 1024)]
    public int SendBufferBytes { get; set; } = 64 * 1024;
}
