using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.WebSockets;
using Herald.Broker.Sessions;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Http.Features;

namespace Herald.Broker.Transports.WebSockets;

/// <summary>
/// One WebSocket as the connection a <see cref="FrameSession"/> reads and writes: binary messages in are the
/// byte stream of frames (a frame may span messages), and each batch the session's drain flushes (whole
/// frames) goes out as one binary message: the same MESSAGE bytes a TCP subscriber gets. A text message, or
/// one over <c>max_frame</c> + 4 bytes, ends the connection with a WebSocket close that says why.
/// </summary>
internal sealed class WebSocketConnection : ConnectionContext
{
    private readonly WebSocket _socket;
    private readonly Pipe _inbound;
    private readonly Pipe _outbound;
    private readonly int _maxMessageBytes;
    private readonly CancellationTokenSource _aborted = new();

    public WebSocketConnection(WebSocket socket, HttpContext context, LimitOptions limits)
    {
        _socket = socket;
        _maxMessageBytes = limits.MaxFrameBytes + 4;
        // Read ahead at most what TCP reads ahead (Kestrel's MaxReadBufferSize): the partial-frame allowance.
        _inbound = new Pipe(new PipeOptions(pauseWriterThreshold: limits.PartialFrameAllowance, resumeWriterThreshold: limits.PartialFrameAllowance / 2, useSynchronizationContext: false));
        _outbound = new Pipe(new PipeOptions(pauseWriterThreshold: 64 * 1024, resumeWriterThreshold: 32 * 1024, useSynchronizationContext: false)); // as Kestrel's MaxWriteBufferSize
        Transport = new DuplexPipe(_inbound.Reader, _outbound.Writer);
        ConnectionId = context.TraceIdentifier;
        RemoteEndPoint = context.Connection.RemoteIpAddress is { } address ? new IPEndPoint(address, context.Connection.RemotePort) : null;
        LocalEndPoint = context.Connection.LocalIpAddress is { } local ? new IPEndPoint(local, context.Connection.LocalPort) : null;
        ConnectionClosed = _aborted.Token;
    }

    public override string ConnectionId { get; set; }

    public override IFeatureCollection Features { get; } = new FeatureCollection();

    public override IDictionary<object, object?> Items { get; set; } = new Dictionary<object, object?>();

    public override IDuplexPipe Transport { get; set; }

    /// <summary>The close the connection ended with when the client broke a WebSocket rule (tests, logs).</summary>
    public WebSocketCloseStatus? Refused { get; private set; }

    /// <summary>Runs <paramref name="session"/> over this connection until it ends, pumping both ways; closes the WebSocket after.</summary>
    public async Task RunAsync(Func<ConnectionContext, Task> session)
    {
        Task receiving = ReceiveAsync();
        Task sending = SendAsync();
        try
        {
            await session(this).ConfigureAwait(false);
        }
        finally
        {
            await _outbound.Writer.CompleteAsync().ConfigureAwait(false); // ended: what it wrote goes out, then the close
            await sending.ConfigureAwait(false);
            _aborted.Cancel(); // the receive loop stops waiting for a client that has nothing more to say
            await receiving.ConfigureAwait(false);
        }
    }

    public override void Abort(ConnectionAbortedException abortReason)
    {
        _aborted.Cancel();
        _socket.Abort();
    }

    public override async ValueTask DisposeAsync()
    {
        _aborted.Dispose();
        await base.DisposeAsync().ConfigureAwait(false);
    }

    private async Task ReceiveAsync()
    {
        PipeWriter writer = _inbound.Writer;
        Exception? failure = null;
        try
        {
            long inMessage = 0;
            while (true)
            {
                Memory<byte> memory = writer.GetMemory(4096);
                ValueWebSocketReceiveResult received = await _socket.ReceiveAsync(memory, _aborted.Token).ConfigureAwait(false);
                if (received.MessageType == WebSocketMessageType.Close)
                {
                    break;
                }

                if (received.MessageType == WebSocketMessageType.Text)
                {
                    await RefuseAsync(WebSocketCloseStatus.InvalidMessageType, "Herald frames travel in binary messages (spec §1).").ConfigureAwait(false);
                    break;
                }

                inMessage = received.EndOfMessage ? 0 : inMessage + received.Count;
                if (inMessage > _maxMessageBytes)
                {
                    await RefuseAsync(WebSocketCloseStatus.MessageTooBig, $"A WebSocket message is at most max_frame + 4 = {_maxMessageBytes} bytes.").ConfigureAwait(false);
                    break;
                }

                writer.Advance(received.Count);
                FlushResult flushed = await writer.FlushAsync(_aborted.Token).ConfigureAwait(false); // the session reads at its pace: so does the socket
                if (flushed.IsCompleted)
                {
                    break;
                }
            }
        }
        catch (Exception e) when (e is WebSocketException or OperationCanceledException)
        {
            failure = e is OperationCanceledException ? null : e; // reset by the client, or the session ended first
        }

        await writer.CompleteAsync(failure).ConfigureAwait(false); // the client left: the session sees the end of its input
    }

    private async Task SendAsync()
    {
        PipeReader reader = _outbound.Reader;
        try
        {
            while (true)
            {
                ReadResult result = await reader.ReadAsync().ConfigureAwait(false);
                ReadOnlySequence<byte> buffer = result.Buffer;
                if (!buffer.IsEmpty && _socket.State == WebSocketState.Open)
                {
                    // Whole frames (the drain flushes whole frames): one binary message, segment by segment.
                    ReadOnlyMemory<byte> pending = default;
                    bool first = true;
                    foreach (ReadOnlyMemory<byte> segment in buffer)
                    {
                        if (!first)
                        {
                            await _socket.SendAsync(pending, WebSocketMessageType.Binary, endOfMessage: false, _aborted.Token).ConfigureAwait(false);
                        }

                        pending = segment;
                        first = false;
                    }

                    await _socket.SendAsync(pending, WebSocketMessageType.Binary, endOfMessage: true, _aborted.Token).ConfigureAwait(false);
                }

                reader.AdvanceTo(buffer.End);
                if (result.IsCompleted)
                {
                    break;
                }
            }

            if (_socket.State is WebSocketState.Open or WebSocketState.CloseReceived)
            {
                await _socket.CloseOutputAsync(WebSocketCloseStatus.NormalClosure, null, _aborted.Token).ConfigureAwait(false);
            }
        }
        catch (Exception e) when (e is WebSocketException or OperationCanceledException or ObjectDisposedException)
        {
            // the client is gone: nothing more can reach it
        }

        await reader.CompleteAsync().ConfigureAwait(false);
    }

    private async Task RefuseAsync(WebSocketCloseStatus status, string reason)
    {
        Refused = status;
        try
        {
            await _socket.CloseOutputAsync(status, reason, _aborted.Token).ConfigureAwait(false);
        }
        catch (WebSocketException)
        {
            // already gone
        }
    }

    private sealed class DuplexPipe(PipeReader input, PipeWriter output) : IDuplexPipe
    {
        public PipeReader Input { get; } = input;

        public PipeWriter Output { get; } = output;
    }
}
