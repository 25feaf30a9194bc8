using System.Net;
using System.Net.Sockets;

namespace Herald.Testing;

/// <summary>
/// A TCP link between a client and a real broker on loopback that a test can cut, as a network would: every
/// connection through it is reset at once, and new ones are refused until <see cref="Restore"/>. The broker
/// itself stays up (its topic histories too), so the client's reconnect finds it again through the same port;
/// or, as a load balancer would, another node (<see cref="Retarget"/>). Shared by the broker's and the .NET
/// client's tests (linked into both).
/// </summary>
public sealed class CuttableLink : IAsyncDisposable
{
    private int _target;
    private readonly List<Socket> _open = [];
    private readonly Lock _gate = new();
    private TcpListener? _listener;
    private CancellationTokenSource _accepting = new();

    public CuttableLink(int target)
    {
        _target = target;
        Restore();
    }

    /// <summary>
    /// Where clients connect: chosen at the first <see cref="Restore"/>, the same after every cut. It is below the
    /// kernel's ephemeral range (32768-60999), so no outgoing connection of a test running beside this one can take
    /// it while the link is cut (a CI run lost a resume test to "Address already in use" on a port chosen by the
    /// system): in the test project's range (<see cref="TestPorts"/>).
    /// </summary>
    public int Port { get; private set; }

    /// <summary>Sends the connections made from now on to another port (a load balancer moving clients to another node).</summary>
    public void Retarget(int target) => Volatile.Write(ref _target, target);

    /// <summary>Resets every connection through the link and refuses new ones.</summary>
    public void Cut()
    {
        lock (_gate)
        {
            _accepting.Cancel();
            _listener?.Stop();
            _listener = null;
            foreach (Socket socket in _open)
            {
                try
                {
                    socket.LingerState = new LingerOption(true, 0); // RST, not FIN: the peer learns at once
                    socket.Close();
                }
                catch (ObjectDisposedException)
                {
                }
            }

            _open.Clear();
        }
    }

    /// <summary>Accepts connections again, on the same port.</summary>
    public void Restore()
    {
        lock (_gate)
        {
            _accepting = new CancellationTokenSource();
            _listener = Port == 0 ? TestPorts.Listen() : Listen(Port);
            Port = ((IPEndPoint)_listener.LocalEndpoint).Port;
            _ = AcceptAsync(_listener, _accepting.Token);
        }
    }

    private static TcpListener Listen(int port)
    {
        var listener = new TcpListener(IPAddress.Loopback, port);
        listener.Start();
        return listener;
    }

    public ValueTask DisposeAsync()
    {
        Cut();
        return ValueTask.CompletedTask;
    }

    private async Task AcceptAsync(TcpListener listener, CancellationToken stop)
    {
        while (!stop.IsCancellationRequested)
        {
            Socket inbound;
            try
            {
                inbound = await listener.AcceptSocketAsync(stop);
            }
            catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException)
            {
                return;
            }

            var outbound = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
            await outbound.ConnectAsync(IPAddress.Loopback, Volatile.Read(ref _target), stop);
            lock (_gate)
            {
                _open.Add(inbound);
                _open.Add(outbound);
            }

            _ = PumpAsync(inbound, outbound);
            _ = PumpAsync(outbound, inbound);
        }
    }

    private static async Task PumpAsync(Socket from, Socket to)
    {
        byte[] buffer = new byte[64 * 1024];
        try
        {
            while (true)
            {
                int read = await from.ReceiveAsync(buffer, SocketFlags.None);
                if (read == 0)
                {
                    to.Shutdown(SocketShutdown.Send);
                    return;
                }

                await to.SendAsync(buffer.AsMemory(0, read), SocketFlags.None);
            }
        }
        catch (Exception e) when (e is SocketException or ObjectDisposedException)
        {
            try
            {
                to.LingerState = new LingerOption(true, 0);
                to.Close(); // one side cut: the other is reset too
            }
            catch (ObjectDisposedException)
            {
            }
        }
    }
}
