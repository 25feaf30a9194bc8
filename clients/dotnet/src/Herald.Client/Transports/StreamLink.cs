namespace Herald.Client.Transports;

/// <summary>
/// The byte stream a <see cref="FrameConnection"/> speaks the binary protocol over, as a transport opened it:
/// a TCP connection (<see cref="Tcp.TcpLink"/>, with TLS or not) or a WebSocket (<see cref="WebSockets.WebSocketLink"/>).
/// A link only moves bytes. What its medium adds (how much one write may carry, why the far end closed, how to
/// say goodbye) it answers here; the protocol, from HELLO on, is the connection's alone.
/// </summary>
/// <remarks>
/// Threading: the connection's reader reads <see cref="Stream"/>, its writer calls <see cref="WriteAsync"/> (one
/// call at a time), and <see cref="LeaveAsync"/> may run beside a write; <see cref="Welcomed"/> may be called from
/// the reader while the writer writes.
/// </remarks>
internal class StreamLink(Stream stream, HeraldTransport transport, int port) : IAsyncDisposable
{
    /// <summary>What the connection reads from the broker.</summary>
    public Stream Stream { get; } = stream;

    public HeraldTransport Transport { get; } = transport;

    /// <summary>The broker's port this link reached.</summary>
    public int Port { get; } = port;

    /// <summary>Writes whole frames (one batch of the connection's queue).</summary>
    public virtual ValueTask WriteAsync(ReadOnlyMemory<byte> frames, CancellationToken cancellationToken) =>
        Stream.WriteAsync(frames, cancellationToken);

    /// <summary>The broker's WELCOME announced <paramref name="maxFrame"/>, its largest frame body (spec §4.2).</summary>
    public virtual void Welcomed(int maxFrame)
    {
    }

    /// <summary>
    /// Once the stream has ended: why the broker closed it, when the medium carries a reason (a WebSocket close's
    /// status and text), as a sentence for the application; <c>null</c> when it carries none (TCP).
    /// </summary>
    public virtual string? CloseReason => null;

    /// <summary>The client is leaving a live connection: a medium with a goodbye of its own says it here. TCP's is closing the socket.</summary>
    public virtual ValueTask LeaveAsync(CancellationToken cancellationToken) => default;

    public virtual ValueTask DisposeAsync() => Stream.DisposeAsync();
}
