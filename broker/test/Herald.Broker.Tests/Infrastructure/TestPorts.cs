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
    // Ports handed out lately, oldest first: never handed out again while they are here. A port is free when probed but
    // bound later (a redis-server starting; one killed and started again on it; a cut link restored), so without this
    // two tests starting at once could be handed the same port, or one the port another is about to bind again.
    private static readonly Queue<int> s_handedOrder = new();
    private static readonly HashSet<int> s_handed = [];

    /// <summary>A port of this project's range that was free when probed.</summary>
    public static int Free() => Free(1);

    /// <summary>
    /// The first of <paramref name="count"/> consecutive ports of this project's range, each free when probed and none
    /// handed out lately by this process (<see cref="Free()"/>, <see cref="Listen"/>).
    /// </summary>
    public static int Free(int count)
    {
        lock (s_handed)
        {
            for (int attempt = 0; attempt < 400; attempt++)
            {
                int first = Random.Shared.Next(Low, High - count + 1);
                if (Enumerable.Range(first, count).All(port => !s_handed.Contains(port) && IsFree(port)))
                {
                    foreach (int port in Enumerable.Range(first, count))
                    {
                        Hand(port);
                    }

                    return first;
                }
            }
        }

        throw new InvalidOperationException($"No {count} free consecutive ports in {Low}-{High - 1}.");
    }

    /// <summary>Remembers <paramref name="port"/> as handed out; past half the range, the oldest is forgotten.</summary>
    private static void Hand(int port)
    {
        if (s_handed.Add(port))
        {
            s_handedOrder.Enqueue(port);
        }

        while (s_handed.Count > (High - Low) / 2)
        {
            s_handed.Remove(s_handedOrder.Dequeue());
        }
    }

    /// <summary>Listens on a port of this project's range (bound at once: no race with anything).</summary>
    public static TcpListener Listen()
    {
        for (int attempt = 0; ; attempt++)
        {
            int port = Random.Shared.Next(Low, High);
            lock (s_handed)
            {
                if (s_handed.Contains(port) && attempt < 200)
                {
                    continue;
                }
            }

            var listener = new TcpListener(IPAddress.Loopback, port);
            try
            {
                listener.Start();
                lock (s_handed)
                {
                    Hand(port); // a cut link binds it again: no Free() hands it meanwhile
                }

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
