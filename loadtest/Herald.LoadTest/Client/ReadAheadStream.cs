using System.Runtime.CompilerServices;

namespace Herald.LoadTest.Client;

/// <summary>
/// A stream whose small reads are served from one buffer, filled by reads of the inner stream as large as
/// it holds: under a WebSocket, which reads each message's header and then its payload, that is one system
/// call for whatever messages have arrived instead of two per message. A read at least as large as the
/// buffer, with nothing buffered, goes straight to the inner stream (no copy). Writes go straight through.
/// <see cref="Buffered"/>, <see cref="Consume"/> and <see cref="FillAsync"/> let a caller parse what
/// arrived in place (the WebSocket upgrade's response head) and leave the rest to later reads.
/// Threading: one reader and one writer at a time; no allocation per read.
/// </summary>
internal sealed class ReadAheadStream(Stream inner, int size) : DuplexStream
{
    private readonly byte[] _buffer = GC.AllocateUninitializedArray<byte>(size);
    private int _start;
    private int _end;

    /// <summary>Received and not yet read.</summary>
    public ReadOnlySpan<byte> Buffered => _buffer.AsSpan(_start, _end - _start);

    /// <summary>The buffer is full: <see cref="FillAsync"/> has no room left.</summary>
    public bool Full => _start == 0 && _end == _buffer.Length;

    /// <summary>Marks <paramref name="count"/> buffered bytes as read.</summary>
    public void Consume(int count) => _start += count;

    /// <summary>Reads more after what is buffered (moved to the front first); false when the inner stream ended or the buffer is full.</summary>
    public async ValueTask<bool> FillAsync(CancellationToken cancellationToken)
    {
        Compact();
        if (_end == _buffer.Length)
        {
            return false;
        }

        int read = await inner.ReadAsync(_buffer.AsMemory(_end), cancellationToken);
        _end += read;
        return read > 0;
    }

    public override ValueTask<int> ReadAsync(Memory<byte> buffer, CancellationToken cancellationToken = default)
    {
        if (_end > _start)
        {
            return new ValueTask<int>(Take(buffer.Span));
        }

        return buffer.Length >= _buffer.Length ? inner.ReadAsync(buffer, cancellationToken) : ReadAheadAsync(buffer, cancellationToken);
    }

    public override Task<int> ReadAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken) =>
        ReadAsync(buffer.AsMemory(offset, count), cancellationToken).AsTask();

    public override int Read(byte[] buffer, int offset, int count)
    {
        if (_end == _start)
        {
            _start = 0;
            _end = inner.Read(_buffer, 0, _buffer.Length);
        }

        return Take(buffer.AsSpan(offset, count));
    }

    public override ValueTask WriteAsync(ReadOnlyMemory<byte> buffer, CancellationToken cancellationToken = default) => inner.WriteAsync(buffer, cancellationToken);

    public override Task WriteAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken) => inner.WriteAsync(buffer, offset, count, cancellationToken);

    public override void Write(byte[] buffer, int offset, int count) => inner.Write(buffer, offset, count);

    public override void Flush() => inner.Flush();

    public override Task FlushAsync(CancellationToken cancellationToken) => inner.FlushAsync(cancellationToken);

    protected override void Dispose(bool disposing)
    {
        if (disposing)
        {
            inner.Dispose();
        }

        base.Dispose(disposing);
    }

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder<>))]
    private async ValueTask<int> ReadAheadAsync(Memory<byte> buffer, CancellationToken cancellationToken)
    {
        _start = 0;
        _end = await inner.ReadAsync(_buffer, cancellationToken);
        return Take(buffer.Span);
    }

    private int Take(Span<byte> destination)
    {
        int count = Math.Min(destination.Length, _end - _start);
        _buffer.AsSpan(_start, count).CopyTo(destination);
        _start += count;
        return count;
    }

    private void Compact()
    {
        if (_start == 0)
        {
            return;
        }

        Buffer.BlockCopy(_buffer, _start, _buffer, 0, _end - _start);
        _end -= _start;
        _start = 0;
    }
}
