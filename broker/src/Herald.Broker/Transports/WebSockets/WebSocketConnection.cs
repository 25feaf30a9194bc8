using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.WebSockets;
using Herald.Broker.Sessions;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Connections.Features;
using Microsoft.AspNetCore.Http.Features;

namespace Herald.Broker.Transports.WebSockets;

/// <summary>
/// One WebSocket as the connection a <see cref="FrameSession"/> reads and writes: binary messages in are the
/// byte stream of frames (a frame may span messages), and each batch the session's drain flushes (whole
/// frames) goes out as one binary message, sent by the flushing drain itself (<see cref="MessageWriter"/>): the
/// same MESSAGE bytes a TCP subscriber gets. A text message, or one over <c>max_frame</c> + 4 bytes, ends the
/// connection with a WebSocket close that says why.
/// </summary>
internal sealed class WebSocketConnection : ConnectionContext
{
    private readonly WebSocket _socket;
    private readonly HttpContext _context;
    private readonly Pipe _inbound;
    private readonly MessageWriter _outbound;
    private readonly int _maxMessageBytes;
    private readonly TimeSpan _closeTimeout;
    private readonly CancellationTokenSource _aborted = new();
    private readonly IConnectionLifetimeFeature? _socketLifetime; // Kestrel's connection under the WebSocket: its socket
    private readonly TaskCompletionSource _released = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private Task _receiving = Task.CompletedTask;

    public WebSocketConnection(WebSocket socket, HttpContext context, LimitOptions limits)
    {
        _socket = socket;
        _context = context;
        _socketLifetime = context.Features.Get<IConnectionLifetimeFeature>();
        _maxMessageBytes = limits.MaxFrameBytes + 4;
        _closeTimeout = limits.CloseTimeout;
        // Read ahead at most what TCP reads ahead (Kestrel's MaxReadBufferSize): the partial-frame allowance.
        _inbound = new Pipe(new PipeOptions(pauseWriterThreshold: limits.PartialFrameAllowance, resumeWriterThreshold: limits.PartialFrameAllowance / 2, useSynchronizationContext: false));
        _outbound = new MessageWriter(socket, _aborted.Token);
        Transport = new DuplexPipe(_inbound.Reader, _outbound);
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

    /// <summary>Starts receiving: the client's binary messages become the session's input.</summary>
    public void Start() => _receiving = ReceiveAsync();

    /// <summary>
    /// Completes when the WebSocket is closed (or aborted) and the HTTP request may end, so that Kestrel closes the
    /// socket under it; <see cref="CloseAsync"/> goes on until that socket is gone.
    /// </summary>
    public Task Released => _released.Task;

    /// <summary>
    /// Ends the connection once its session has ended, before the registry stops counting it, all within
    /// <see cref="LimitOptions.CloseTimeout"/>: what the session flushed has gone out; the broker's Close is sent and
    /// the client's awaited (it may have come first); the request ends (<see cref="Released"/>) and Kestrel closes
    /// the socket once what it holds is sent. Whatever cannot be done in time (a client that stopped reading leaves
    /// a send blocked, and the close waits behind it; or it never takes the last bytes) is not waited for: the
    /// socket is aborted, and with it the send and what it held.
    /// </summary>
    public async Task CloseAsync()
    {
        using var deadline = new CancellationTokenSource(_closeTimeout);
        try
        {
            await _outbound.CompleteAsync().ConfigureAwait(false); // later flushes send nothing
            await _inbound.Reader.CompleteAsync().ConfigureAwait(false); // the session reads no more: the receive loop only waits for the client's Close
            await HandshakeAsync(deadline.Token).ConfigureAwait(false);
            _aborted.Cancel(); // the receive loop stops waiting for a client that has nothing more to say
            await _receiving.ConfigureAwait(false);
        }
        finally
        {
            _released.TrySetResult();
        }

        if (_socketLifetime is { } socket && !socket.ConnectionClosed.IsCancellationRequested)
        {
            var gone = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            using (socket.ConnectionClosed.Register(static state => ((TaskCompletionSource)state!).TrySetResult(), gone))
            using (deadline.Token.Register(static state => ((TaskCompletionSource)state!).TrySetResult(), gone))
            {
                await gone.Task.ConfigureAwait(false);
            }

            if (!socket.ConnectionClosed.IsCancellationRequested)
            {
                socket.Abort(); // the client took not even the close in time: its socket goes now
            }
        }
    }

    /// <summary>The WebSocket closing handshake, or the connection aborted when it cannot be done by <paramref name="deadline"/>.</summary>
    private async Task HandshakeAsync(CancellationToken deadline)
    {
        try
        {
            if (_socket.State is WebSocketState.Open or WebSocketState.CloseReceived)
            {
                await _socket.CloseOutputAsync(WebSocketCloseStatus.NormalClosure, null, deadline).ConfigureAwait(false);
            }

            await _receiving.WaitAsync(deadline).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (deadline.IsCancellationRequested)
        {
            Abort(new ConnectionAbortedException($"The WebSocket could not be closed within {_closeTimeout.TotalSeconds:0.###} s."));
        }
        catch (Exception e) when (e is WebSocketException or OperationCanceledException or ObjectDisposedException or IOException)
        {
            Abort(new ConnectionAbortedException("The WebSocket failed while closing.", e)); // the client is gone: its socket goes too
        }
    }

    /// <summary>Ends the connection now: the WebSocket and the HTTP connection under it (its socket), whatever a send is waiting for.</summary>
    public override void Abort(ConnectionAbortedException abortReason)
    {
        _aborted.Cancel();
        _socket.Abort();
        _context.Abort();
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
            bool discarding = false;
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

                if (discarding)
                {
                    continue; // the session has ended: what the client still sends before its Close is dropped
                }

                writer.Advance(received.Count);
                FlushResult flushed = await writer.FlushAsync(_aborted.Token).ConfigureAwait(false); // the session reads at its pace: so does the socket
                discarding = flushed.IsCompleted;
            }
        }
        catch (Exception e) when (e is WebSocketException or OperationCanceledException)
        {
            failure = e is OperationCanceledException ? null : e; // reset by the client, or the session ended first
        }

        await writer.CompleteAsync(failure).ConfigureAwait(false); // the client left: the session sees the end of its input
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

    /// <summary>
    /// The session's output: what its drain writes between two flushes (whole frames, at most one write chunk and
    /// a frame) is one binary message, sent on the flushing thread by the WebSocket, whose send waits while
    /// Kestrel's output buffer is full (the same backpressure a TCP connection's writer has). One drain writes
    /// at a time; the buffer is rented for a batch and returned once it is sent, so an idle connection holds none.
    /// </summary>
    private sealed class MessageWriter(WebSocket socket, CancellationToken aborted) : PipeWriter
    {
        private const int MinimumBuffer = 4096;

        private byte[] _buffer = [];
        private int _written;
        private bool _ended;

        public override bool CanGetUnflushedBytes => true;

        public override long UnflushedBytes => _written;

        public override void Advance(int bytes) => _written += bytes;

        public override Memory<byte> GetMemory(int sizeHint = 0)
        {
            Reserve(sizeHint);
            return _buffer.AsMemory(_written);
        }

        public override Span<byte> GetSpan(int sizeHint = 0)
        {
            Reserve(sizeHint);
            return _buffer.AsSpan(_written);
        }

        [System.Runtime.CompilerServices.AsyncMethodBuilder(typeof(System.Runtime.CompilerServices.PoolingAsyncValueTaskMethodBuilder<>))]
        public override async ValueTask<FlushResult> FlushAsync(CancellationToken cancellationToken = default)
        {
            if (_ended)
            {
                Release();
                return new FlushResult(isCanceled: false, isCompleted: true);
            }

            if (_written == 0)
            {
                return default;
            }

            try
            {
                await socket.SendAsync(_buffer.AsMemory(0, _written), WebSocketMessageType.Binary, endOfMessage: true, aborted).ConfigureAwait(false);
                return default;
            }
            catch (Exception e) when (e is WebSocketException or OperationCanceledException or ObjectDisposedException or IOException)
            {
                _ended = true; // the client is gone: nothing more can reach it
                return new FlushResult(isCanceled: false, isCompleted: true);
            }
            finally
            {
                Release();
            }
        }

        public override void CancelPendingFlush()
        {
        }

        /// <summary>The session ended (its last flush done, or the connection aborted): later flushes send nothing. A batch written and never flushed is left to the GC, never returned to the pool under a send.</summary>
        public override void Complete(Exception? exception = null) => _ended = true;

        private void Reserve(int sizeHint)
        {
            int needed = _written + Math.Max(sizeHint, 1);
            if (needed <= _buffer.Length)
            {
                return;
            }

            byte[] larger = ArrayPool<byte>.Shared.Rent(Math.Max(needed, Math.Max(MinimumBuffer, _buffer.Length * 2)));
            _buffer.AsSpan(0, _written).CopyTo(larger);
            if (_buffer.Length > 0)
            {
                ArrayPool<byte>.Shared.Return(_buffer);
            }

            _buffer = larger;
        }

        private void Release()
        {
            _written = 0;
            if (_buffer.Length > 0)
            {
                ArrayPool<byte>.Shared.Return(_buffer);
                _buffer = [];
            }
        }
    }

    private sealed class DuplexPipe(PipeReader input, PipeWriter output) : IDuplexPipe
    {
        public PipeReader Input { get; } = input;

        public PipeWriter Output { get; } = output;
    }
}
