namespace Herald.Client.Transports;

/// <summary>
/// The byte stream a <see cref="FrameConnection"/> speaks the binary protocol over, as a transport opened it:
/// a TCP connection (<see cref="Tcp.TcpLink"/>, with TLS or not). A link only moves bytes; the protocol, from
/// HELLO on, is the connection's alone.
/// </summary>
/// <remarks>
/// Threading: the connection's reader reads <see cref="Stream"/>, its writer calls <see cref="WriteAsync"/> (one
/// call at a time).
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

    public virtual ValueTask DisposeAsync() => Stream.DisposeAsync();
}
