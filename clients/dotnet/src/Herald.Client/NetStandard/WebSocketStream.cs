// Compiled for netstandard2.0 only (see Herald.Client.csproj): .NET 10's WebSocketStream.Create, as the WebSocket
// link uses it. Reads return the bytes of the WebSocket's messages one after another, whatever their boundaries,
// and 0 once the far end closes; each write is sent as one whole message of the given type.
namespace System.Net.WebSockets;

[Microsoft.CodeAnalysis.Embedded]
internal sealed class WebSocketStream : Stream
{
    private readonly WebSocket _socket;
    private readonly WebSocketMessageType _type;
    private readonly bool _ownsWebSocket;

    private WebSocketStream(WebSocket socket, WebSocketMessageType type, bool ownsWebSocket)
    {
        _socket = socket;
        _type = type;
        _ownsWebSocket = ownsWebSocket;
    }

    public static WebSocketStream Create(WebSocket webSocket, WebSocketMessageType writeMessageType, bool ownsWebSocket) =>
        new(webSocket, writeMessageType, ownsWebSocket);

    public override bool CanRead => true;

    public override bool CanWrite => true;

    public override bool CanSeek => false;

    public override long Length => throw new NotSupportedException();

    public override long Position { get => throw new NotSupportedException(); set => throw new NotSupportedException(); }

    public override async Task<int> ReadAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken)
    {
        while (true)
        {
            if (_socket.State is WebSocketState.CloseReceived or WebSocketState.Closed)
            {
                return 0;
            }

            WebSocketReceiveResult result = await _socket.ReceiveAsync(new ArraySegment<byte>(buffer, offset, count), cancellationToken).ConfigureAwait(false);
            if (result.MessageType == WebSocketMessageType.Close)
            {
                return 0;
            }

            if (result.Count > 0 || count == 0)
            {
                return result.Count;
            }
        }
    }

    public override Task WriteAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken) =>
        _socket.SendAsync(new ArraySegment<byte>(buffer, offset, count), _type, endOfMessage: true, cancellationToken);

    public override int Read(byte[] buffer, int offset, int count) => ReadAsync(buffer, offset, count).GetAwaiter().GetResult();

    public override void Write(byte[] buffer, int offset, int count) => WriteAsync(buffer, offset, count).GetAwaiter().GetResult();

    public override void Flush()
    {
    }

    public override Task FlushAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public override long Seek(long offset, SeekOrigin origin) => throw new NotSupportedException();

    public override void SetLength(long value) => throw new NotSupportedException();

    protected override void Dispose(bool disposing)
    {
        if (disposing && _ownsWebSocket)
        {
            _socket.Dispose();
        }

        base.Dispose(disposing);
    }
}
