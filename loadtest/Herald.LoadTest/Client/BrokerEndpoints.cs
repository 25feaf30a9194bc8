using System.Globalization;
using System.Net;
using System.Net.Sockets;

namespace Herald.LoadTest.Client;

/// <summary>
/// The broker's address and the ports connections are spread over (all ports are equal, spec §1).
/// Connection <c>i</c> goes to port <c>First + i % Count</c>. How a connection speaks there: plain frames,
/// over <see cref="Tls"/>, over a <see cref="WebSocket"/> (then the one port is the HTTP port), or both.
/// </summary>
internal sealed class BrokerEndpoints
{
    private BrokerEndpoints(IPAddress address, string host, int firstPort, int lastPort)
    {
        Address = address;
        Host = host;
        FirstPort = firstPort;
        LastPort = lastPort;
    }

    public IPAddress Address { get; }

    /// <summary>Connections speak TLS (<c>--tls</c>), trusting the system's CAs or <see cref="TlsThumbprint"/>.</summary>
    public bool Tls { get; set; }

    public string? TlsThumbprint { get; set; }

    /// <summary>Connections are WebSockets at <c>/ws</c> (<see cref="WebSocketClient"/>, spec §1): these ports are the broker's HTTP port.</summary>
    public bool WebSocket { get; set; }

    public string Host { get; }

    public int FirstPort { get; }

    public int LastPort { get; }

    public int PortCount => LastPort - FirstPort + 1;

    /// <summary>"127.0.0.1:4502", "127.0.0.1:4502-4534" or "ws://127.0.0.1:8080/ws".</summary>
    public string Display => WebSocket
        ? $"{(Tls ? "wss" : "ws")}://{Host}:{FirstPort}{WebSocketClient.Path}"
        : PortCount == 1
        ? $"{Host}:{FirstPort}"
        : $"{Host}:{FirstPort}-{LastPort}";

    /// <summary>Resolves <paramref name="host"/> once, so a thousand connections do not mean a thousand lookups.</summary>
    public static async Task<BrokerEndpoints> ResolveAsync(string host, int firstPort, int lastPort, CancellationToken cancellationToken)
    {
        if (!IPAddress.TryParse(host, out IPAddress? address))
        {
            IPAddress[] addresses = await Dns.GetHostAddressesAsync(host, cancellationToken);
            address = addresses.FirstOrDefault(a => a.AddressFamily == AddressFamily.InterNetwork) ?? addresses.FirstOrDefault()
                ?? throw new SocketException((int)SocketError.HostNotFound);
        }

        return new BrokerEndpoints(address, host, firstPort, lastPort);
    }

    /// <summary>Parses "4502" or "4502-4534".</summary>
    public static bool TryParsePortRange(string text, out int first, out int last)
    {
        first = last = 0;
        int dash = text.IndexOf('-', StringComparison.Ordinal);
        string a = dash < 0 ? text : text[..dash];
        string b = dash < 0 ? text : text[(dash + 1)..];
        return int.TryParse(a, NumberStyles.None, CultureInfo.InvariantCulture, out first)
            && int.TryParse(b, NumberStyles.None, CultureInfo.InvariantCulture, out last)
            && first is > 0 and <= 65535 && last >= first && last <= 65535;
    }

    public IPEndPoint At(int port) => new(Address, port);

    public IPEndPoint For(int connectionIndex) => new(Address, FirstPort + (connectionIndex % PortCount));
}
