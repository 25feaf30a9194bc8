using System.Net;
using System.Net.Sockets;
using System.Runtime.CompilerServices;
using System.Text;
using System.Text.Json;
using Herald.LoadTest.Client;

namespace Herald.LoadTest.Peers.Nats;

/// <summary>
/// A minimal NATS text-protocol client connection, built like <see cref="Client.HeraldConnection"/>: a raw
/// <see cref="Socket"/> with TCP_NODELAY, one growable receive buffer parsed in place, and whole-buffer sends.
/// Only what the fanout peer comparison needs: INFO/CONNECT, SUB, PUB/HPUB, PING/PONG, MSG/HMSG, +OK/-ERR.
/// <para>
/// Reading is pull-based: look at <see cref="Buffered"/>, <see cref="Consume"/> what was handled, then
/// <see cref="ReceiveAsync"/> for more. One task at a time reads; any task may send.
/// </para>
/// </summary>
internal sealed class NatsConnection : IDisposable
{
    public const int DefaultReceiveBufferSize = 64 * 1024;
    private const int MaxControlLine = 4096;
    private const int MaxMessage = 64 * 1024 * 1024;

    private static readonly byte[] ConnectLine = "CONNECT {\"verbose\":false,\"pedantic\":false,\"echo\":true}\r\n"u8.ToArray();
    private static readonly byte[] ConnectWithHeadersLine = "CONNECT {\"verbose\":false,\"pedantic\":false,\"echo\":true,\"headers\":true}\r\n"u8.ToArray();
    private static readonly byte[] PongLine = "PONG\r\n"u8.ToArray();

    private readonly Socket _socket;
    private Stream? _tls; // set when the server requires TLS; reads and writes then go through it
    private readonly SemaphoreSlim _sendGate = new(1, 1);
    private readonly ReceiveBuffer _received = new(DefaultReceiveBufferSize);
    private long _bytesSent;
    private int _closed;

    private NatsConnection(Socket socket, string name)
    {
        _socket = socket;
        Name = name;
    }

    public string Name { get; }

    /// <summary>The server's INFO as received on connecting.</summary>
    public string ServerName { get; private set; } = "nats-server";

    public int ProtocolVersion { get; private set; }

    public long MaxPayload { get; private set; }

    public long BytesReceived => _received.BytesReceived;

    public long BytesSent => Volatile.Read(ref _bytesSent);

    /// <summary>Bytes received and not yet consumed; valid until the next <see cref="ReceiveAsync"/>.</summary>
    public ReadOnlySpan<byte> Buffered => _received.Buffered;

    public void Consume(int count) => _received.Consume(count);

    /// <summary>
    /// Connects, reads INFO and sends CONNECT; with <paramref name="headers"/> it may send HPUB and receives HMSG.
    /// A server whose INFO says <c>tls_required</c> gets the TLS handshake before CONNECT (the NATS order), which
    /// takes <paramref name="tls"/>; without it such a server is refused.
    /// </summary>
    public static async Task<NatsConnection> ConnectAsync(IPEndPoint endPoint, string name, CancellationToken cancellationToken, bool headers = false, TlsTrust? tls = null)
    {
        var socket = new Socket(endPoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        var connection = new NatsConnection(socket, name);
        try
        {
            await socket.ConnectAsync(endPoint, cancellationToken);
            string info = await connection.ReadLineAsync(cancellationToken);
            if (!info.StartsWith("INFO ", StringComparison.Ordinal))
            {
                throw new IOException($"{name}: expected INFO, got '{info}'.");
            }

            if (connection.ReadInfo(info[5..]))
            {
                if (tls is null)
                {
                    throw new IOException($"{name}: the server requires TLS; use --transport tls.");
                }

                connection._tls = await TlsClient.AuthenticateAsync(socket, tls.Host, tls.Thumbprint, cancellationToken);
            }

            await connection.SendAsync(headers ? ConnectWithHeadersLine : ConnectLine, cancellationToken);
            return connection;
        }
        catch
        {
            connection.Close();
            throw;
        }
    }

    /// <summary>SUB then a PING barrier: once the PONG is back the server has applied the SUB.</summary>
    public async Task SubscribeAsync(string subject, uint sid, CancellationToken cancellationToken)
    {
        await SendAsync(Encoding.ASCII.GetBytes($"SUB {subject} {sid}\r\nPING\r\n"), cancellationToken);
        while (true)
        {
            string line = await ReadLineAsync(cancellationToken);
            if (line == "PONG")
            {
                return;
            }

            if (line == "PING")
            {
                await SendPongAsync();
            }
            else if (line.StartsWith("-ERR", StringComparison.Ordinal))
            {
                throw new IOException($"{Name}: subscribing to '{subject}': {line}");
            }

            // +OK, INFO: nothing to do
        }
    }

    /// <summary>Receives more bytes (at least one); <c>false</c> when the server closed the connection.</summary>
    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder<>))]
    public async ValueTask<bool> ReceiveAsync(CancellationToken cancellationToken = default)
    {
        Memory<byte> free = _received.PrepareReceive(MaxMessage);
        return _received.Commit(_tls is null
            ? await _socket.ReceiveAsync(free, SocketFlags.None, cancellationToken)
            : await _tls.ReadAsync(free, cancellationToken));
    }

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    public async ValueTask SendAsync(ReadOnlyMemory<byte> data, CancellationToken cancellationToken = default)
    {
        await _sendGate.WaitAsync(cancellationToken);
        try
        {
            if (_tls is not null)
            {
                await _tls.WriteAsync(data, cancellationToken);
                Volatile.Write(ref _bytesSent, _bytesSent + data.Length);
                return;
            }

            while (!data.IsEmpty)
            {
                int sent = await _socket.SendAsync(data, SocketFlags.None, cancellationToken);
                data = data[sent..];
                Volatile.Write(ref _bytesSent, _bytesSent + sent);
            }
        }
        finally
        {
            _sendGate.Release();
        }
    }

    public ValueTask SendPongAsync() => SendAsync(PongLine);

    public void Dispose() => Close();

    public void Close()
    {
        if (Interlocked.Exchange(ref _closed, 1) != 0)
        {
            return;
        }

        try
        {
            _socket.Shutdown(SocketShutdown.Both);
        }
        catch (SocketException)
        {
            // already reset by the peer
        }

        _tls?.Dispose();
        _socket.Dispose();
    }

    /// <summary>Reads one control line (without CRLF); only for setup, before the reading loop starts.</summary>
    private async Task<string> ReadLineAsync(CancellationToken cancellationToken)
    {
        while (true)
        {
            int eol = Buffered.IndexOf("\r\n"u8);
            if (eol >= 0)
            {
                string line = Encoding.UTF8.GetString(Buffered[..eol]);
                Consume(eol + 2);
                return line;
            }

            if (_received.Buffered.Length > MaxControlLine * 4)
            {
                throw new IOException($"{Name}: control line too long.");
            }

            if (!await ReceiveAsync(cancellationToken))
            {
                throw new IOException($"{Name}: the server closed the connection during setup.");
            }
        }
    }

    /// <summary>Reads the server's INFO; true when it requires TLS.</summary>
    private bool ReadInfo(string json)
    {
        try
        {
            using var document = JsonDocument.Parse(json);
            JsonElement root = document.RootElement;
            string id = root.TryGetProperty("server_name", out JsonElement n) ? n.GetString() ?? "" : "";
            string version = root.TryGetProperty("version", out JsonElement v) ? v.GetString() ?? "" : "";
            ServerName = $"nats-server {version} {id}".Trim();
            ProtocolVersion = root.TryGetProperty("proto", out JsonElement p) && p.TryGetInt32(out int proto) ? proto : 0;
            MaxPayload = root.TryGetProperty("max_payload", out JsonElement m) && m.TryGetInt64(out long max) ? max : 0;
            return root.TryGetProperty("tls_required", out JsonElement t) && t.ValueKind == JsonValueKind.True;
        }
        catch (JsonException e)
        {
            throw new IOException($"{Name}: unreadable INFO: {e.Message}", e);
        }
    }
}
