using System.Buffers;
using System.Buffers.Text;
using System.Collections.Concurrent;
using System.Net;
using System.Text;
using Herald.LoadTest.Client;
using Herald.LoadTest.Peers.Nats;

namespace Herald.LoadTest.Targets;

/// <summary>
/// <see cref="IPubSubClient"/> over one NATS connection (<see cref="NatsConnection"/>), speaking the NATS
/// text protocol itself. This is NOT the official client: NATS.Net (NATS.Client.Core) cannot be restored
/// from the package registry this tool is built against, so the tool carries the few commands it needs.
/// It works the way nats.net does on the wire: SUB behind a PING/PONG barrier, PUB lines encoded straight
/// into the <see cref="BatchedWriter"/> (one send per batch), and a receive loop that parses MSG in place
/// and calls the subscription's handler by sid, answers the server's PINGs and counts <c>-ERR</c>.
/// <para>
/// Threading: <see cref="Publish"/>, <see cref="PublishAsync"/>, <see cref="SubscribeAsync"/> and
/// <see cref="FlushAsync"/> may be called from any thread; the receive buffer is read only by the receive
/// loop.
/// </para>
/// </summary>
internal sealed class NatsPubSubClient : SocketPubSubClient
{
    private const int MaxControlLine = 4096;

    private static readonly byte[] PingLine = "PING\r\n"u8.ToArray();
    private static readonly byte[] PongLine = "PONG\r\n"u8.ToArray();

    private readonly NatsConnection _connection;
    private readonly TopicCache _subjects = new();
    private volatile string? _lastError; // the last -ERR line, for the failure when the server then closes the connection

    private NatsPubSubClient(NatsConnection connection)
        : base(connection.SendAsync)
    {
        _connection = connection;
        StartReceiving();
    }

    protected override string ClosedByServer => "the server closed the connection";

    /// <summary>Connects, reads the server's INFO, handshakes TLS when it asks (with <paramref name="tls"/>) and sends CONNECT (verbose off, echo on, <c>headers</c> as asked).</summary>
    public static async Task<NatsPubSubClient> ConnectAsync(IPEndPoint endPoint, string name, CancellationToken cancellationToken, bool headers = false, TlsTrust? tls = null)
    {
        NatsConnection connection = await NatsConnection.ConnectAsync(endPoint, name, cancellationToken, headers, tls);
        return new NatsPubSubClient(connection);
    }

    /// <summary>
    /// <c>SUB &lt;subject&gt; &lt;sid&gt;\r\nPING\r\n</c>: the server handles a connection's commands in order,
    /// so its PONG means the SUB is in place.
    /// </summary>
    protected override void WriteSubscribeAndPing(IBufferWriter<byte> buffer, string topic, string? queue, uint sid)
    {
        Write(buffer, "SUB "u8);
        Write(buffer, _subjects.Get(topic));
        Write(buffer, " "u8);
        if (queue is not null)
        {
            Write(buffer, Encoding.ASCII.GetBytes(queue)); // SUB <subject> <queue group> <sid>
            Write(buffer, " "u8);
        }

        WriteNumber(buffer, (int)sid);
        Write(buffer, "\r\n"u8);
        Write(buffer, PingLine);
    }

    protected override ValueTask<bool> ReceiveMoreAsync() => _connection.ReceiveAsync();

    protected override void CloseConnection() => _connection.Close();

    protected override string Describe(Exception e) => e is IOException ? e.Message : base.Describe(e);

    protected override string Explain(string why) => _lastError is { } error ? $"{why} ({error})" : why;

    /// <summary>
    /// <c>PUB &lt;subject&gt; [reply-to] &lt;#bytes&gt;\r\n&lt;payload&gt;\r\n</c>, or with headers
    /// <c>HPUB &lt;subject&gt; [reply-to] &lt;#header bytes&gt; &lt;#total bytes&gt;\r\n&lt;headers&gt;&lt;payload&gt;\r\n</c>
    /// </summary>
    protected override void WritePublish(IBufferWriter<byte> buffer, string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers)
    {
        byte[] subject = _subjects.Get(topic);
        Write(buffer, headers.IsEmpty ? "PUB "u8 : "HPUB "u8);
        Write(buffer, subject);
        Write(buffer, " "u8);
        if (!replyTo.IsEmpty)
        {
            Write(buffer, replyTo);
            Write(buffer, " "u8);
        }

        if (!headers.IsEmpty)
        {
            WriteNumber(buffer, headers.Length);
            Write(buffer, " "u8);
        }

        WriteNumber(buffer, headers.Length + payload.Length);
        Write(buffer, "\r\n"u8);
        Write(buffer, headers);
        Write(buffer, payload);
        Write(buffer, "\r\n"u8);
    }

    private static void Write(IBufferWriter<byte> buffer, ReadOnlySpan<byte> bytes)
    {
        bytes.CopyTo(buffer.GetSpan(bytes.Length));
        buffer.Advance(bytes.Length);
    }

    private static void WriteNumber(IBufferWriter<byte> buffer, int value)
    {
        Span<byte> span = buffer.GetSpan(11);
        Utf8Formatter.TryFormat(value, span, out int written);
        buffer.Advance(written);
    }

    /// <summary>Handles every whole message and control line buffered; leaves a partial one for the next receive.</summary>
    protected override void DispatchBuffered()
    {
        while (true)
        {
            ReadOnlySpan<byte> buffered = _connection.Buffered;
            int eol = buffered.IndexOf("\r\n"u8);
            if (eol < 0)
            {
                if (buffered.Length > MaxControlLine)
                {
                    throw new IOException($"{_connection.Name}: control line over {MaxControlLine} bytes.");
                }

                return;
            }

            ReadOnlySpan<byte> line = buffered[..eol];
            int consumed;
            if (line.StartsWith("MSG "u8))
            {
                consumed = DeliverMessage(buffered, line, eol, headers: false);
            }
            else if (line.StartsWith("HMSG "u8))
            {
                consumed = DeliverMessage(buffered, line, eol, headers: true);
            }
            else
            {
                HandleControlLine(line);
                consumed = eol + 2;
            }

            if (consumed == 0)
            {
                return; // the payload is not all here yet
            }

            _connection.Consume(consumed);
        }
    }

    private void HandleControlLine(ReadOnlySpan<byte> line)
    {
        if (line.SequenceEqual("PING"u8))
        {
            Reply(PongLine);
        }
        else if (line.SequenceEqual("PONG"u8))
        {
            PongReceived();
        }
        else if (line.StartsWith("-ERR"u8))
        {
            // Protocol errors end the connection (the server closes it, the receive loop notices);
            // permission and similar errors do not: counted either way.
            CountError();
            _lastError = Encoding.UTF8.GetString(line);
        }
        else if (!line.SequenceEqual("+OK"u8) && !line.StartsWith("INFO "u8) && !line.IsEmpty)
        {
            throw new IOException($"{_connection.Name}: unexpected '{Encoding.UTF8.GetString(line[..Math.Min(line.Length, 80)])}'.");
        }
    }

    /// <summary>
    /// <c>MSG &lt;subject&gt; &lt;sid&gt; [reply-to] &lt;#bytes&gt;\r\n&lt;payload&gt;\r\n</c>, or
    /// <c>HMSG &lt;subject&gt; &lt;sid&gt; [reply-to] &lt;#header bytes&gt; &lt;#total bytes&gt;\r\n&lt;headers&gt;&lt;payload&gt;\r\n</c>
    /// (the handler gets the payload and the header block apart). Returns the bytes it takes, or 0 when it is not all buffered.
    /// </summary>
    private int DeliverMessage(ReadOnlySpan<byte> buffered, ReadOnlySpan<byte> line, int eol, bool headers)
    {
        Span<Range> parts = stackalloc Range[7];
        int count = Tokens(line, parts);
        int fixedParts = headers ? 5 : 4; // without reply-to
        int total = count == fixedParts || count == fixedParts + 1 ? ParseInt(line[parts[count - 1]]) : -1;
        int headerBytes = headers && total >= 0 ? ParseInt(line[parts[count - 2]]) : 0;
        int sid = total >= 0 ? ParseInt(line[parts[2]]) : -1;
        if (total < 0 || sid < 0 || headerBytes < 0 || headerBytes > total)
        {
            throw new IOException($"{_connection.Name}: malformed '{Encoding.UTF8.GetString(line[..Math.Min(line.Length, 80)])}'.");
        }

        int length = eol + 2 + total + 2;
        if (buffered.Length < length)
        {
            return 0;
        }

        if (!buffered.Slice(eol + 2 + total, 2).SequenceEqual("\r\n"u8))
        {
            throw new IOException($"{_connection.Name}: MSG payload not followed by CRLF.");
        }

        Deliver((uint)sid, buffered.Slice(eol + 2 + headerBytes, total - headerBytes), count == fixedParts + 1 ? line[parts[3]] : default, buffered.Slice(eol + 2, headerBytes));

        return length;
    }

    /// <summary>Parses a non-negative decimal token; -1 when it is not one.</summary>
    private static int ParseInt(ReadOnlySpan<byte> token) =>
        Utf8Parser.TryParse(token, out int value, out int used) && used == token.Length && value >= 0 ? value : -1;

    /// <summary>Splits a control line at spaces into at most <c>parts.Length</c> tokens; returns how many (more than that: parts.Length + 1).</summary>
    private static int Tokens(ReadOnlySpan<byte> line, Span<Range> parts)
    {
        int count = 0, i = 0;
        while (i < line.Length)
        {
            while (i < line.Length && line[i] is (byte)' ' or (byte)'\t')
            {
                i++;
            }

            if (i == line.Length)
            {
                break;
            }

            int start = i;
            while (i < line.Length && line[i] is not ((byte)' ' or (byte)'\t'))
            {
                i++;
            }

            if (count == parts.Length)
            {
                return count + 1;
            }

            parts[count++] = new Range(start, i);
        }

        return count;
    }
}
