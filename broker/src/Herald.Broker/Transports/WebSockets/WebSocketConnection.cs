using System.Buffers.Binary;
using System.IO.Pipelines;
using System.Net;
using System.Net.WebSockets;
using System.Text;
using Herald.Broker.Sessions;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Connections.Features;
using Microsoft.AspNetCore.Http.Features;

namespace Herald.Broker.Transports.WebSockets;

/// <summary>
/// One WebSocket as the connection a <see cref="FrameSession"/> reads and writes, over the upgraded HTTP
/// connection's own pipes (Kestrel's socket reader and writer, as a TCP session has them): binary messages in are
/// the byte stream of frames (a frame may span messages), parsed and unmasked in place (<see cref="WebSocketInput"/>);
/// each batch the session's drain flushes (whole frames) goes out as one binary message, its frame header written
/// into the same pipe before it (<see cref="WebSocketOutput"/>): the same MESSAGE bytes a TCP subscriber gets. A
/// client that breaks a WebSocket rule (a text message, a bad frame) ends the
/// connection with a WebSocket close that says why.
/// </summary>
internal sealed class WebSocketConnection : ConnectionContext
{
    private readonly HttpContext _context;
    private readonly WebSocketInput _input;
    private readonly WebSocketOutput _output;
    private readonly TimeSpan _closeTimeout;
    private readonly CancellationTokenSource _aborted = new();
    private readonly IConnectionLifetimeFeature? _socketLifetime; // Kestrel's connection under the WebSocket: its socket
    private readonly TaskCompletionSource _released = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <param name="upgraded">The HTTP connection's own pipes, once the 101 response has gone out.</param>
    public WebSocketConnection(IDuplexPipe upgraded, HttpContext context, LimitOptions limits)
    {
        _context = context;
        _socketLifetime = context.Features.Get<IConnectionLifetimeFeature>();
        _closeTimeout = limits.CloseTimeout;
        _output = new WebSocketOutput(upgraded.Output);
        _input = new WebSocketInput(upgraded.Input, _output);
        Transport = new DuplexPipe(_input, _output);
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
    public WebSocketCloseStatus? Refused => _input.Failure?.Status;

    /// <summary>
    /// Completes when the WebSocket is closed (or aborted) and the HTTP request may end, so that Kestrel closes the
    /// socket under it; <see cref="CloseAsync"/> goes on until that socket is gone.
    /// </summary>
    public Task Released => _released.Task;

    /// <summary>
    /// Ends the connection once its session has ended, before the registry stops counting it, all within
    /// <see cref="LimitOptions.CloseTimeout"/>: what the session flushed has gone out; the broker's Close is sent
    /// (the refusal's status when the client broke a rule) and the client's awaited, unless it came first or the
    /// client broke a rule (then the socket goes at once, RFC 6455 §7.1.7); the request ends (<see cref="Released"/>)
    /// and Kestrel closes the socket once what it holds is sent. Whatever cannot be done in time (a client that
    /// stopped reading leaves a flush blocked, and the close waits behind it; or it never takes the last bytes) is
    /// not waited for: the socket is aborted, and with it the send and what it held.
    /// </summary>
    public async Task CloseAsync()
    {
        using var deadline = CancellationTokenSource.CreateLinkedTokenSource(_aborted.Token);
        deadline.CancelAfter(_closeTimeout);
        try
        {
            await _output.CompleteAsync().ConfigureAwait(false); // later flushes send nothing
            await HandshakeAsync(deadline.Token).ConfigureAwait(false);
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
            (WebSocketCloseStatus status, string reason) = _input.Failure ?? (WebSocketCloseStatus.NormalClosure, "");
            await _output.SendControlAsync(WebSocketOutput.Close, CloseFrame(status, reason), deadline).ConfigureAwait(false);
            if (_input.Failure is null && !_input.CloseReceived)
            {
                await _input.WaitForCloseAsync(deadline).ConfigureAwait(false);
            }
        }
        catch (OperationCanceledException) when (deadline.IsCancellationRequested && !_aborted.IsCancellationRequested)
        {
            Abort(new ConnectionAbortedException($"The WebSocket could not be closed within {_closeTimeout.TotalSeconds:0.###} s."));
        }
        catch (Exception e) when (e is OperationCanceledException or ObjectDisposedException or IOException or InvalidOperationException)
        {
            Abort(new ConnectionAbortedException("The WebSocket failed while closing.", e)); // the client is gone: its socket goes too
        }
    }

    /// <summary>A Close frame's payload: the status, then the reason in UTF-8 (cut to fit a control frame's 125 bytes).</summary>
    private static byte[] CloseFrame(WebSocketCloseStatus status, string reason)
    {
        byte[] payload = new byte[2 + Math.Min(Encoding.UTF8.GetByteCount(reason), 123)];
        BinaryPrimitives.WriteUInt16BigEndian(payload, (ushort)status);
        byte[] text = Encoding.UTF8.GetBytes(reason);
        text.AsSpan(0, payload.Length - 2).CopyTo(payload.AsSpan(2));
        return payload;
    }

    /// <summary>Ends the connection now: the HTTP connection under the WebSocket (its socket), whatever a send is waiting for.</summary>
    public override void Abort(ConnectionAbortedException abortReason)
    {
        _aborted.Cancel();
        _context.Abort();
    }

    public override async ValueTask DisposeAsync()
    {
        _aborted.Dispose();
        _output.Dispose();
        await base.DisposeAsync().ConfigureAwait(false);
    }

    private sealed class DuplexPipe(PipeReader input, PipeWriter output) : IDuplexPipe
    {
        public PipeReader Input { get; } = input;

        public PipeWriter Output { get; } = output;
    }
}
