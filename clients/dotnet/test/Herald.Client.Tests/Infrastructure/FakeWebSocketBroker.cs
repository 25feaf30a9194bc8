using System.Collections.Concurrent;
using System.Net.WebSockets;
using System.Threading.Channels;
using Herald.Client;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;

namespace Herald.Client.Tests.Infrastructure;

/// <summary>
/// A scripted WebSocket endpoint at <c>/ws</c> on a real loopback HTTP server (Kestrel), for what the real broker
/// will not do on demand: refuse an upgrade with a chosen status, accept without <c>herald.v1</c>, close with a
/// chosen WebSocket status, or tell which close the client sent. Accepted connections speak frames as a
/// <see cref="FakeConnection"/> over the WebSocket's stream.
/// </summary>
public sealed class FakeWebSocketBroker : IAsyncDisposable
{
    private readonly WebApplication _app;
    private readonly string? _subProtocol;
    private readonly int _refuseWith;
    private readonly Channel<FakeConnection> _accepted = Channel.CreateUnbounded<FakeConnection>();
    private readonly ConcurrentBag<FakeConnection> _all = [];

    private FakeWebSocketBroker(WebApplication app, string? subProtocol, int refuseWith)
    {
        _app = app;
        _subProtocol = subProtocol;
        _refuseWith = refuseWith;
    }

    public int Port => new Uri(_app.Urls.First()).Port;

    public string Url => $"ws://127.0.0.1:{Port}/ws";

    /// <param name="subProtocol">The subprotocol the endpoint accepts with: <c>herald.v1</c> as a broker does, or none, or another.</param>
    /// <param name="refuseWith">An HTTP status every upgrade is refused with (0: accepted).</param>
    public static async Task<FakeWebSocketBroker> StartAsync(string? subProtocol = "herald.v1", int refuseWith = 0)
    {
        WebApplicationBuilder builder = WebApplication.CreateSlimBuilder();
        builder.WebHost.UseUrls("http://127.0.0.1:0");
        builder.Logging.ClearProviders();
        WebApplication app = builder.Build();
        var broker = new FakeWebSocketBroker(app, subProtocol, refuseWith);
        app.UseWebSockets();
        app.Map("/ws", broker.HandleAsync);
        await app.StartAsync();
        return broker;
    }

    public async Task<FakeConnection> AcceptAsync() => await _accepted.Reader.ReadAsync().AsTask().WaitAsync(Wait.Limit);

    /// <summary>Connects <paramref name="client"/>: accepts it and goes through the handshake (<see cref="FakeConnection.HandshakeAsync"/>) until it is connected.</summary>
    public async Task<FakeConnection> ConnectAsync(HeraldClient client)
    {
        Task connecting = client.ConnectAsync(Wait.Token());
        FakeConnection connection = await AcceptAsync();
        await connection.HandshakeAsync();
        await connecting.Within();
        return connection;
    }

    public async ValueTask DisposeAsync()
    {
        foreach (FakeConnection connection in _all)
        {
            await connection.DisposeAsync(); // ends its request
        }

        await _app.StopAsync();
        await _app.DisposeAsync();
    }

    private async Task HandleAsync(HttpContext context)
    {
        if (_refuseWith != 0 || !context.WebSockets.IsWebSocketRequest)
        {
            context.Response.StatusCode = _refuseWith != 0 ? _refuseWith : StatusCodes.Status426UpgradeRequired;
            return;
        }

        WebSocket socket = await context.WebSockets.AcceptWebSocketAsync(new WebSocketAcceptContext { SubProtocol = _subProtocol, KeepAliveInterval = TimeSpan.Zero });
        var connection = new FakeConnection(WebSocketStream.Create(socket, WebSocketMessageType.Binary)) { WebSocket = socket };
        _all.Add(connection);
        _accepted.Writer.TryWrite(connection);
        await connection.Disposed; // the WebSocket lives as long as its request
    }
}
