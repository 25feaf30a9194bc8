using System.IO.Pipelines;
using System.Security.Cryptography;
using System.Text;
using Herald.Broker.Sessions;
using Microsoft.AspNetCore.Connections.Features;
using Microsoft.AspNetCore.Http.Features;

namespace Herald.Broker.Transports.WebSockets;

/// <summary>
/// WebSocket at <c>/ws</c> on the HTTP port (spec §1, subprotocol <c>herald.v1</c>): the upgrade is checked
/// (a WebSocket request, the subprotocol, the Origin against <c>Herald:Policy:AllowedDomains</c>) and answered
/// here, then the connection is the same <see cref="FrameSession"/> TCP runs, over
/// <see cref="WebSocketConnection"/>: WebSocket frames read and written on the HTTP connection's own pipes.
/// </summary>
internal static class WebSocketEndpoint
{
    public const string Path = "/ws";

    public const string SubProtocol = "herald.v1";

    public const string TransportName = "websocket";

    /// <summary>What RFC 6455 §1.3 appends to the client's key before hashing it into <c>Sec-WebSocket-Accept</c>.</summary>
    private const string AcceptGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

    public static void MapWebSocket(this IEndpointRouteBuilder app) => app.Map(Path, AcceptAsync);

    private static async Task AcceptAsync(HttpContext context)
    {
        if (!context.WebSockets.IsWebSocketRequest)
        {
            await RefuseAsync(context, StatusCodes.Status426UpgradeRequired, $"{Path} speaks WebSocket only (subprotocol {SubProtocol}).").ConfigureAwait(false);
            return;
        }

        if (!context.WebSockets.WebSocketRequestedProtocols.Contains(SubProtocol, StringComparer.Ordinal))
        {
            await RefuseAsync(context, StatusCodes.Status400BadRequest, $"Ask for the WebSocket subprotocol {SubProtocol} (Sec-WebSocket-Protocol).").ConfigureAwait(false);
            return;
        }

        if (context.Request.Headers.Origin is { Count: > 0 } origin && !await HttpExchange.IsOriginAllowedAsync(context, origin.ToString()).ConfigureAwait(false))
        {
            await RefuseAsync(context, StatusCodes.Status403Forbidden, $"Origin '{origin}' is not in Herald:Policy:AllowedDomains.").ConfigureAwait(false);
            return;
        }

        BrokerCore broker = context.RequestServices.GetRequiredService<BrokerCore>();
        SessionRegistry sessions = context.RequestServices.GetRequiredService<SessionRegistry>();
        IDuplexPipe upgraded = await UpgradeAsync(context).ConfigureAwait(false);
        var connection = new WebSocketConnection(upgraded, context, broker.Limits);
        // Counted until its socket is gone, which is after this request ends (Kestrel closes it then): the request
        // ends once the WebSocket is closed, and the registry goes on counting until the socket has gone or is aborted.
        // The session runs outside the request's execution context (as a TCP session runs outside any request): its
        // activity, log scope and async locals are not the session's, and every continuation of its read loop and
        // drain would otherwise restore them.
        Task running;
        using (ExecutionContext.SuppressFlow())
        {
            running = Task.Run(() => RunAsync(sessions, connection));
        }

        await Task.WhenAny(connection.Released, running).ConfigureAwait(false);
        if (running.IsCompleted)
        {
            await running.ConfigureAwait(false);
        }
    }

    private static async Task RunAsync(SessionRegistry sessions, WebSocketConnection connection)
    {
        await using (connection.ConfigureAwait(false))
        {
            await sessions.RunAsync(connection, TransportName, connection.CloseAsync).ConfigureAwait(false);
        }
    }

    /// <summary>
    /// The opening handshake's answer (RFC 6455 §4.2.2: 101, the key's <c>Sec-WebSocket-Accept</c>, the subprotocol;
    /// no extension, so never permessage-deflate), then the HTTP connection's own pipes: Kestrel's socket reader and
    /// writer, which nothing else uses once the request is upgraded, until it ends.
    /// </summary>
    private static async Task<IDuplexPipe> UpgradeAsync(HttpContext context)
    {
        IHttpUpgradeFeature upgrade = context.Features.Get<IHttpUpgradeFeature>() ?? throw new InvalidOperationException("The server cannot upgrade this request.");
        IConnectionTransportFeature transport = context.Features.Get<IConnectionTransportFeature>() ?? throw new InvalidOperationException("The server does not expose the connection's pipes.");
        string key = context.Request.Headers.SecWebSocketKey.ToString();
        context.Response.Headers.Upgrade = "websocket";
#pragma warning disable CA5350 // RFC 6455 fixes SHA-1 here: it proves the server read the handshake, it protects nothing
        context.Response.Headers.SecWebSocketAccept = Convert.ToBase64String(SHA1.HashData(Encoding.ASCII.GetBytes(key + AcceptGuid)));
#pragma warning restore CA5350
        context.Response.Headers.SecWebSocketProtocol = SubProtocol;
        await upgrade.UpgradeAsync().ConfigureAwait(false); // the 101 is flushed; the stream it returns is not used
        return transport.Transport;
    }

    private static Task RefuseAsync(HttpContext context, int status, string message)
    {
        context.Response.StatusCode = status;
        return context.Response.WriteAsync(message);
    }
}
