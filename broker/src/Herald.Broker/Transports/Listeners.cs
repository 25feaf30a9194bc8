using System.Net;
using System.Net.Sockets;
using Microsoft.AspNetCore.Server.Kestrel.Core;

namespace Herald.Broker.Transports;

/// <summary>
/// The endpoints the broker listens on, by role. After start, each <see cref="ListenOptions"/> holds the
/// port actually bound (port 0 in configuration binds an ephemeral one, which tests use).
/// </summary>
public sealed class Listeners
{
    internal List<ListenOptions> Tcp { get; } = [];

    internal ListenOptions? Http { get; set; }

    internal ListenOptions? Policy { get; set; }

    /// <summary>The monitoring listener (probes, metrics, monitoring endpoints), if on.</summary>
    internal ListenOptions? Monitoring { get; set; }

    /// <summary>Why the policy responder is not listening, if it is not (logged at start).</summary>
    internal string? PolicyUnavailable { get; set; }

    public IReadOnlyList<int> TcpPorts => Tcp.Select(l => l.IPEndPoint!.Port).ToArray();

    public int? HttpPort => Http?.IPEndPoint?.Port;

    public int? PolicyPort => Policy?.IPEndPoint?.Port;

    public int? MonitoringPort => Monitoring?.IPEndPoint?.Port;

    /// <summary>
    /// Whether this process may bind <paramref name="port"/> (ports below 1024 need root or
    /// CAP_NET_BIND_SERVICE). Tries a bind and releases it at once.
    /// </summary>
    internal static bool CanBind(IPAddress address, int port, out string? reason)
    {
        reason = null;
        if (port is 0 or >= 1024)
        {
            return true;
        }

        try
        {
            using var probe = new Socket(address.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
            probe.Bind(new IPEndPoint(address, port));
            return true;
        }
        catch (SocketException e) when (e.SocketErrorCode == SocketError.AccessDenied)
        {
            reason = e.Message;
            return false;
        }
        catch (SocketException)
        {
            return true; // in use or similar: let Kestrel report it as a start failure
        }
    }
}
