using System.Buffers.Binary;
using System.Net;
using System.Net.WebSockets;
using Herald.Protocol;

namespace Herald.Client.Transports.WebSockets;

/// <summary>
/// <c>ws://</c> and <c>wss://</c> (spec §1): a WebSocket with the subprotocol <c>herald.v1</c>, on the broker's HTTP
/// port, as a byte stream (<see cref="WebSocketStream"/>). Whatever the broker's binary messages carry is read as
/// one stream of frames; each write goes out as one binary message of whole frames.
/// </summary>
/// <remarks>
/// The broker takes a message of any size (it reads the frames in it as they come, spec §1); a batch of the
/// connection's queue (a burst of publications) is still cut at frame boundaries into messages of at most
/// <c>max_frame</c> + 4 bytes, so no message is larger than the largest frame; a single frame never needs cutting,
/// since the connection refuses to queue a frame over <c>max_frame</c>. The WebSocket's own keep-alive is off:
/// Herald's PING is the liveness (spec §6.2) and a WebSocket ping would only hide a broker that stopped reading. No <c>permessage-deflate</c>:
/// payloads are compressed with Zstd where it pays (spec §11). No <c>Origin</c> is sent: this is not a browser,
/// and the broker checks an Origin only when one is sent.
/// </remarks>
internal sealed class WebSocketLink : StreamLink
{
    public const string SubProtocol = "herald.v1";

    private readonly ClientWebSocket _socket;

    /// <summary>Largest message the broker takes: <c>max_frame</c> + 4 once WELCOME said it; HELLO (under 64 KiB) goes before.</summary>
    private int _maxMessage = int.MaxValue;

    private WebSocketLink(ClientWebSocket socket, int port)
        : base(WebSocketStream.Create(socket, WebSocketMessageType.Binary, ownsWebSocket: false), HeraldTransport.WebSocket, port) => _socket = socket;

    public override string? CloseReason => _socket.CloseStatus is { } status
        ? $"WebSocket close {(int)status} ({Meaning(status)}){(string.IsNullOrEmpty(_socket.CloseStatusDescription) ? "" : ": " + _socket.CloseStatusDescription)}."
        : null;

    /// <summary>Upgrades to a WebSocket at <paramref name="address"/>'s endpoint with the subprotocol <c>herald.v1</c>.</summary>
    /// <exception cref="HeraldConnectionException">Nothing answered, TLS failed, the upgrade was refused, or the endpoint does not speak <c>herald.v1</c>.</exception>
    public static async Task<StreamLink> OpenAsync(BrokerAddress address, HeraldClientOptions options, CancellationToken cancellationToken)
    {
        Uri endpoint = address.WebSocket!;
        var socket = new ClientWebSocket();
        try
        {
            socket.Options.AddSubProtocol(SubProtocol);
            socket.Options.KeepAliveInterval = TimeSpan.Zero;
#if NETSTANDARD2_0
            // netstandard2.0's ClientWebSocket does not report a refused upgrade's status, and takes no certificate
            // callback (HeraldClient's constructor refuses wss:// with one).
            try
            {
                await socket.ConnectAsync(endpoint, cancellationToken).ConfigureAwait(false);
            }
            catch (WebSocketException e)
            {
                throw Refused(endpoint, status: 0, e);
            }
#else
            socket.Options.CollectHttpResponseDetails = true; // the status of a refused upgrade
            socket.Options.RemoteCertificateValidationCallback = options.ServerCertificateValidation;
            try
            {
                await socket.ConnectAsync(endpoint, cancellationToken).ConfigureAwait(false);
            }
            catch (WebSocketException e)
            {
                throw Refused(endpoint, socket.HttpStatusCode, e);
            }
#endif

            if (socket.SubProtocol != SubProtocol)
            {
                throw new HeraldConnectionException(
                    $"{endpoint} accepted the WebSocket without the subprotocol {SubProtocol} (it chose none): it is not a Herald broker's WebSocket endpoint, or a proxy in between dropped Sec-WebSocket-Protocol.");
            }

            return new WebSocketLink(socket, address.FirstPort);
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    public override async ValueTask WriteAsync(ReadOnlyMemory<byte> frames, CancellationToken cancellationToken)
    {
        int limit = Volatile.Read(ref _maxMessage);
        while (frames.Length > limit)
        {
            int cut = WholeFramesWithin(frames.Span, limit);
            await Stream.WriteAsync(frames[..cut], cancellationToken).ConfigureAwait(false);
            frames = frames[cut..];
        }

        await Stream.WriteAsync(frames, cancellationToken).ConfigureAwait(false);
    }

    public override void Welcomed(int maxFrame) =>
        Volatile.Write(ref _maxMessage, (int)Math.Min(int.MaxValue, (long)maxFrame + ProtocolConstants.LengthPrefixSize));

    /// <summary>A close (1000) the broker answers by ending the session as when a client leaves.</summary>
    public override async ValueTask LeaveAsync(CancellationToken cancellationToken)
    {
        try
        {
            if (_socket.State == WebSocketState.Open)
            {
                await _socket.CloseOutputAsync(WebSocketCloseStatus.NormalClosure, statusDescription: null, cancellationToken).ConfigureAwait(false);
            }
        }
        catch (Exception e) when (e is WebSocketException or OperationCanceledException or ObjectDisposedException)
        {
            // Gone already, or too slow to take it: the socket is closed next anyway.
        }
    }

    public override async ValueTask DisposeAsync()
    {
        await base.DisposeAsync().ConfigureAwait(false); // the stream (not owning the socket)
        _socket.Dispose(); // ends a read in progress
    }

    /// <summary>
    /// The length of the longest run of whole frames at the front of <paramref name="frames"/> that fits in
    /// <paramref name="limit"/> bytes (<paramref name="frames"/> holds only whole frames, spec §2). A frame that alone
    /// is over the limit (never queued) is cut at the limit: the broker refuses it by its length prefix either way.
    /// </summary>
    private static int WholeFramesWithin(ReadOnlySpan<byte> frames, int limit)
    {
        int end = 0;
        while (frames.Length - end >= ProtocolConstants.LengthPrefixSize)
        {
            long next = end + ProtocolConstants.LengthPrefixSize + (long)BinaryPrimitives.ReadUInt32BigEndian(frames[end..]);
            if (next > limit)
            {
                break;
            }

            end = (int)next;
        }

        return end > 0 ? end : limit;
    }

    private static HeraldConnectionException Refused(Uri endpoint, HttpStatusCode status, WebSocketException e)
    {
        if (status is not 0 and not HttpStatusCode.SwitchingProtocols)
        {
            string why = status switch
            {
                HttpStatusCode.NotFound => $"nothing serves WebSocket at {endpoint.AbsolutePath} (the broker's endpoint is {BrokerAddress.DefaultWebSocketPath})",
                HttpStatusCode.Forbidden => "forbidden: the broker refuses an Origin its Herald:Policy:AllowedDomains does not list (this client sends none: a proxy in between may have added one), or a proxy refused",
                HttpStatusCode.UpgradeRequired => "the request reached the endpoint without its WebSocket upgrade (a proxy in between that drops the Upgrade header?)",
                HttpStatusCode.BadRequest => $"the endpoint wants the subprotocol {SubProtocol} (a proxy in between that drops Sec-WebSocket-Protocol?)",
                _ => "not a Herald broker's WebSocket endpoint, or a proxy in between said no",
            };
            return new HeraldConnectionException($"The WebSocket upgrade at {endpoint} was refused with HTTP {(int)status} ({status}): {why}.", e) { HttpStatus = (int)status };
        }

        if (e.WebSocketErrorCode == WebSocketError.UnsupportedProtocol)
        {
            return new HeraldConnectionException($"{endpoint} answered with a WebSocket subprotocol other than {SubProtocol}: it is not a Herald broker's WebSocket endpoint. {e.Message}", e);
        }

        Exception cause = e;
        while (cause.InnerException is not null)
        {
            cause = cause.InnerException; // what the socket or TLS said, not "Unable to connect to the remote server"
        }

        return new HeraldConnectionException($"Could not open a WebSocket to {endpoint}: {cause.Message}", e);
    }

    private static string Meaning(WebSocketCloseStatus status) => status switch
    {
        WebSocketCloseStatus.NormalClosure => "normal closure",
        WebSocketCloseStatus.EndpointUnavailable => "going away: the broker is stopping",
        WebSocketCloseStatus.InvalidMessageType => "unsupported data: the broker takes Herald frames in binary messages only",
        WebSocketCloseStatus.MessageTooBig => "message too big: the broker takes messages of at most max_frame + 4 bytes",
        WebSocketCloseStatus.PolicyViolation => "policy violation",
        WebSocketCloseStatus.InternalServerError => "the broker failed",
        _ => status.ToString(),
    };
}
