using System.Net;
using System.Net.Sockets;

namespace Herald.Testing;

/// <summary>
/// Ports a test names before a process binds them (a redis-server, a broker started on a given port, a link that is
/// cut and restored on the same port). They are below the kernel's ephemeral range (32768-60999), where no outgoing
/// connection of a test running beside this one can take them in between, and each test project has its own range
/// (<c>TestPorts.Range.cs</c>, TESTING.md), so the lanes of <c>test.sh</c> never pick each other's. Shared by the
/// broker's and the .NET client's tests (linked into both).
/// </summary>
public static partial class TestPorts
{
    /// <summary>A port of this project's range that was free when probed.</summary>
    public static int Free() => Free(1);

    /// <summary>The first of <paramref name="count"/> consecutive ports of this project's range, each free when probed.</summary>
    public static int Free(int count)
    {
        for (int attempt = 0; attempt < 200; attempt++)
        {
            int first = Random.Shared.Next(Low, High - count + 1);
            if (Enumerable.Range(first, count).All(IsFree))
            {
                return first;
            }
        }

        throw new InvalidOperationException($"No {count} free consecutive ports in {Low}-{High - 1}.");
    }

    /// <summary>Listens on a port of this project's range (bound at once: no race with anything).</summary>
    public static TcpListener Listen()
    {
        for (int attempt = 0; ; attempt++)
        {
            var listener = new TcpListener(IPAddress.Loopback, Random.Shared.Next(Low, High));
            try
            {
                listener.Start();
                return listener;
            }
            catch (SocketException) when (attempt < 200)
            {
                // taken: try another
            }
        }
    }

    private static bool IsFree(int port)
    {
        try
        {
            using var probe = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            probe.Bind(new IPEndPoint(IPAddress.Loopback, port));
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }
}
