namespace Herald.LoadTest.Client;

/// <summary>
/// A stream read and written in order and never sought: what the byte streams a connection layers over its
/// socket have in common (<see cref="WebSocketFrameStream"/>).
/// </summary>
internal abstract class DuplexStream : Stream
{
    public override bool CanRead => true;

    public override bool CanWrite => true;

    public override bool CanSeek => false;

    public override long Length => throw new NotSupportedException();

    public override long Position
    {
        get => throw new NotSupportedException();
        set => throw new NotSupportedException();
    }

    public override long Seek(long offset, SeekOrigin origin) => throw new NotSupportedException();

    public override void SetLength(long value) => throw new NotSupportedException();
}
