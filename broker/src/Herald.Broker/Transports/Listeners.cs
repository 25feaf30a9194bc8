using System.Net;
using System.Net.Sockets;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;

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

    /// <summary>The server API's listener, if on.</summary>
    internal ListenOptions? Api { get; set; }

    /// <summary>The setting that asked for each configured port (read when a bind fails); written while Kestrel is configured.</summary>
    private readonly Dictionary<int, string> _settings = [];

    /// <summary>Why the policy responder is not listening, if it is not (logged at start).</summary>
    internal string? PolicyUnavailable { get; set; }

    public IReadOnlyList<int> TcpPorts => Tcp.Select(l => l.IPEndPoint!.Port).ToArray();

    public int? HttpPort => Http?.IPEndPoint?.Port;

    public int? PolicyPort => Policy?.IPEndPoint?.Port;

    public int? MonitoringPort => Monitoring?.IPEndPoint?.Port;

    public int? ApiPort => Api?.IPEndPoint?.Port;

    /// <summary>Records that <paramref name="setting"/> asked for <paramref name="port"/>, so a failed bind can name it.</summary>
    internal void Configured(int port, string setting)
    {
        if (port != 0)
        {
            _settings.TryAdd(port, setting);
        }
    }

    /// <summary>
    /// Kestrel's listen socket (<see cref="SocketTransportOptions.CreateBoundListenSocket"/>): a port that is
    /// taken, forbidden or on an address this machine does not have fails with one sentence naming the port and
    /// the setting that asked for it, instead of Kestrel's stack of wrapped exceptions.
    /// </summary>
    internal Socket Bind(EndPoint endpoint)
    {
        try
        {
            return SocketTransportOptions.CreateDefaultBoundListenSocket(endpoint);
        }
        catch (SocketException e) when (endpoint is IPEndPoint ip && e.SocketErrorCode is SocketError.AddressAlreadyInUse or SocketError.AccessDenied or SocketError.AddressNotAvailable)
        {
            string setting = _settings.TryGetValue(ip.Port, out string? name) ? name : "a listener";
            string problem = e.SocketErrorCode switch
            {
                SocketError.AddressAlreadyInUse => "is already in use (another process, or another Herald, listens there)",
                SocketError.AccessDenied => "needs root or CAP_NET_BIND_SERVICE",
                _ => "cannot be bound: the address is not one of this machine's",
            };
            throw new ListenerUnavailableException($"Port {ip.Port} on {ip.Address} ({setting}) {problem}.", e);
        }
    }

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

/// <summary>A listener the broker cannot open; its message is the one line the broker prints before it exits.</summary>
public sealed class ListenerUnavailableException(string message, Exception inner) : IOException(message, inner);
