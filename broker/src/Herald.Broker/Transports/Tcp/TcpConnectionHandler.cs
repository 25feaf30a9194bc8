using Herald.Broker.Sessions;
using Microsoft.AspNetCore.Connections;

namespace Herald.Broker.Transports.Tcp;

/// <summary>
/// Raw TCP (spec §1): Kestrel accepts the socket on any port of the range and hands its pipes here; the
/// protocol core does the rest. Nothing TCP-specific is left to do.
/// </summary>
internal sealed class TcpConnectionHandler : ConnectionHandler
{
    public const string Transport = "tcp";

    private readonly SessionRegistry _sessions;

    public TcpConnectionHandler(SessionRegistry sessions) => _sessions = sessions;

    public override Task OnConnectedAsync(ConnectionContext connection) => _sessions.RunAsync(connection, Transport);
}
