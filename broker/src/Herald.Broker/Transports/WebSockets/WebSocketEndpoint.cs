using System.Net.WebSockets;
using Herald.Broker.Sessions;

namespace Herald.Broker.Transports.WebSockets;

/// <summary>
/// WebSocket at <c>/ws</c> on the HTTP port (spec §1, subprotocol <c>herald.v1</c>): the upgrade is checked
/// here (a WebSocket request, the subprotocol, the Origin against <c>Herald:Policy:AllowedDomains</c>), then
/// the connection is the same <see cref="FrameSession"/> TCP runs, over <see cref="WebSocketConnection"/>'s pipes.
/// </summary>
internal static class WebSocketEndpoint
{
    public const string Path = "/ws";

    public const string SubProtocol = "herald.v1";

    public const string TransportName = "websocket";

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
        using WebSocket socket = await context.WebSockets.AcceptWebSocketAsync(new WebSocketAcceptContext { SubProtocol = SubProtocol }).ConfigureAwait(false);
        var connection = new WebSocketConnection(socket, context, broker.Limits);
        connection.Start();
        // Counted until its socket is gone, which is after this request ends (Kestrel closes it then): the request
        // ends once the WebSocket is closed, and the registry goes on counting until the socket has gone or is aborted.
        Task running = RunAsync(sessions, connection);
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

    private static Task RefuseAsync(HttpContext context, int status, string message)
    {
        context.Response.StatusCode = status;
        return context.Response.WriteAsync(message);
    }
}
