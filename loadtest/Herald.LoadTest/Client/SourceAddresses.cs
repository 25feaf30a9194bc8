using System.Globalization;
using System.Net;
using System.Net.Sockets;

namespace Herald.LoadTest.Client;

/// <summary>
/// The local addresses client sockets are bound to, so that very many connections to one broker do not
/// run out of ephemeral ports. A TCP connection is named by (source address, source port, destination
/// address, destination port), and Linux hands out source ports from <c>ip_local_port_range</c> (about
/// 28,000 by default) per (source, destination) pair. On loopback every 127.x.y.z address is local, so
/// spreading connections over 127.0.0.1..127.0.0.N multiplies the ports available by N.
/// <para>
/// Sockets are bound with <c>IP_BIND_ADDRESS_NO_PORT</c> (Linux): the source port is then chosen at
/// <c>connect()</c>, per destination, instead of at <c>bind()</c>, where it would have to be unique for
/// the source address across every destination (and the pool would be 28,000 per address, not per pair).
/// </para>
/// </summary>
internal sealed class SourceAddresses
{
    /// <summary>Connections we plan per (source address, destination endpoint) pair: well under the
    /// ~28,000 ports of the default range, leaving room for TIME_WAIT entries of the previous run.</summary>
    public const int ConnectionsPerPair = 16_000;

    private const int IpProtoIp = 0;
    private const int IpBindAddressNoPort = 24; // linux/in.h

    private readonly IPAddress[] _addresses;
    private int _next = -1;

    private SourceAddresses(IPAddress[] addresses) => _addresses = addresses;

    /// <summary>No binding at all: the kernel picks the source address (the route's) and port.</summary>
    public static SourceAddresses None { get; } = new([]);

    /// <summary>How many addresses; 0 when sockets are not bound.</summary>
    public int Count => _addresses.Length;

    /// <summary>"127.0.0.1-127.0.0.4", or "(kernel's choice)".</summary>
    public string Display => Count switch
    {
        0 => "(kernel's choice)",
        1 => _addresses[0].ToString(),
        _ => $"{_addresses[0]}-{_addresses[^1]} ({Count} addresses)",
    };

    /// <summary>
    /// Plans the addresses for <paramref name="connections"/> connections to <paramref name="destinations"/>
    /// endpoints (ports) of <paramref name="target"/>. <paramref name="requested"/> (from <c>--sources</c>)
    /// wins; otherwise, on IPv4 loopback, just enough 127.0.0.x addresses for
    /// <see cref="ConnectionsPerPair"/> per pair, and no binding when one address suffices. Off loopback the
    /// kernel's choice is kept (binding to 127.0.0.x could not reach the broker).
    /// </summary>
    /// <exception cref="UsageException">--sources was given for a broker that is not on IPv4 loopback.</exception>
    public static SourceAddresses Plan(IPAddress target, long connections, int destinations, int? requested)
    {
        bool loopback = target.AddressFamily == AddressFamily.InterNetwork && IPAddress.IsLoopback(target);
        if (!loopback)
        {
            if (requested is > 0)
            {
                throw new UsageException($"--sources binds to 127.0.0.x and needs a broker on IPv4 loopback, not {target}.");
            }

            return None;
        }

        int count = requested ?? (int)Math.Max(1, (connections + ((long)destinations * ConnectionsPerPair) - 1) / ((long)destinations * ConnectionsPerPair));
        if (count <= 1 && requested is null)
        {
            return None;
        }

        var addresses = new IPAddress[Math.Clamp(count, 1, 250)];
        for (int i = 0; i < addresses.Length; i++)
        {
            addresses[i] = IPAddress.Parse(string.Create(CultureInfo.InvariantCulture, $"127.0.0.{i + 1}"));
        }

        return new SourceAddresses(addresses);
    }

    /// <summary>
    /// The source address of client <paramref name="index"/> when every client opens up to
    /// <paramref name="connectionsPerClient"/> connections to one endpoint: on IPv4 loopback, consecutive
    /// clients fill 127.0.0.1, then 127.0.0.2, ... with <see cref="ConnectionsPerPair"/> connections each;
    /// the first address (and any target off loopback) is left to the kernel.
    /// </summary>
    public static SourceAddresses ForClient(IPAddress target, int index, int connectionsPerClient)
    {
        ArgumentNullException.ThrowIfNull(target);
        if (target.AddressFamily != AddressFamily.InterNetwork || !IPAddress.IsLoopback(target))
        {
            return None;
        }

        int slot = (int)((long)index * connectionsPerClient / ConnectionsPerPair % 250);
        return slot == 0 ? None : new([IPAddress.Parse(string.Create(CultureInfo.InvariantCulture, $"127.0.0.{slot + 1}"))]);
    }

    /// <summary>The address of connection <paramref name="index"/>; <c>null</c> when sockets are not bound.</summary>
    public IPAddress? For(int index) => Count == 0 ? null : _addresses[(int)((uint)index % (uint)Count)];

    /// <summary>The next address in turn (thread-safe), for connections opened on demand; <c>null</c> when not bound.</summary>
    public IPAddress? Next() => Count == 0 ? null : For(Interlocked.Increment(ref _next));

    /// <summary>Binds <paramref name="socket"/> to <paramref name="address"/> (port chosen at connect); does nothing for <c>null</c>.</summary>
    public static void Bind(Socket socket, IPAddress? address)
    {
        ArgumentNullException.ThrowIfNull(socket);
        if (address is null)
        {
            return;
        }

        if (OperatingSystem.IsLinux())
        {
            socket.SetRawSocketOption(IpProtoIp, IpBindAddressNoPort, BitConverter.GetBytes(1));
        }

        socket.Bind(new IPEndPoint(address, 0));
    }
}
