using System.Buffers;
using System.Buffers.Text;
using System.Collections.Concurrent;
using System.Net;
using System.Text;
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
internal sealed class NatsPubSubClient : IPubSubClient
{
    private const int MaxControlLine = 4096;

    private static readonly byte[] PingLine = "PING\r\n"u8.ToArray();
    private static readonly byte[] PongLine = "PONG\r\n"u8.ToArray();

    private readonly NatsConnection _connection;
    private readonly BatchedWriter _writer;
    private readonly ConcurrentQueue<TaskCompletionSource> _pongWaiters = new();
    private readonly TopicCache _subjects = new();
    private readonly Lock _subscribeGate = new();
    private readonly Task _receiving;
    private DeliveryHandler?[] _handlers = []; // by sid - 1, copy on write
    private int _dispatchingThread; // the receive loop's thread while it runs handlers, else 0
    private string? _failure;
    private volatile string? _lastError; // the last -ERR line, for the failure when the server then closes the connection
    private long _errors;
    private volatile bool _disposed;

    private NatsPubSubClient(NatsConnection connection)
    {
        _connection = connection;
        _writer = new BatchedWriter(connection.SendAsync);
        _receiving = Task.Run(ReceiveLoopAsync);
    }

    public string? Failure => Volatile.Read(ref _failure) ?? _writer.Failure;

    public long Errors => Interlocked.Read(ref _errors);

    /// <summary>Connects, reads the server's INFO and sends CONNECT (verbose off, echo on).</summary>
    public static async Task<NatsPubSubClient> ConnectAsync(IPEndPoint endPoint, string name, CancellationToken cancellationToken)
    {
        NatsConnection connection = await NatsConnection.ConnectAsync(endPoint, name, cancellationToken);
        return new NatsPubSubClient(connection);
    }

    public async Task SubscribeAsync(string topic, DeliveryHandler handler, CancellationToken cancellationToken)
    {
        int sid;
        lock (_subscribeGate)
        {
            DeliveryHandler?[] handlers = [.. _handlers, handler];
            sid = handlers.Length;
            Volatile.Write(ref _handlers, handlers);
        }

        var pong = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using (BatchedWriter.AppendScope scope = _writer.BeginAppend())
        {
            // SUB <subject> <sid>\r\nPING\r\n: the server handles a connection's commands in order, so its
            // PONG means the SUB is in place.
            Write(scope.Buffer, "SUB "u8);
            Write(scope.Buffer, _subjects.Get(topic));
            Write(scope.Buffer, " "u8);
            WriteNumber(scope.Buffer, sid);
            Write(scope.Buffer, "\r\n"u8);
            Write(scope.Buffer, PingLine);
            _pongWaiters.Enqueue(pong); // inside the lock: PONGs come back in the order the PINGs were written
        }

        await pong.Task.WaitAsync(cancellationToken);
    }

    public void Publish(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo = default) =>
        Append(topic, payload, replyTo, _dispatchingThread == Environment.CurrentManagedThreadId ? SendPolicy.Deferred : SendPolicy.Now);

    public ValueTask PublishAsync(string topic, ReadOnlyMemory<byte> payload, ReadOnlyMemory<byte> replyTo = default, bool sendNow = true, CancellationToken cancellationToken = default)
    {
        Append(topic, payload.Span, replyTo.Span, sendNow ? SendPolicy.Now : SendPolicy.WhenFull);
        return _writer.WaitForRoomAsync(cancellationToken);
    }

    public ValueTask FlushAsync(CancellationToken cancellationToken) => _writer.FlushAsync(cancellationToken);

    public async ValueTask DisposeAsync()
    {
        _disposed = true;
        _connection.Close();
        try
        {
            await _receiving;
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            // the loop ends with the socket; how it ended does not matter now
        }

        while (_pongWaiters.TryDequeue(out TaskCompletionSource? waiter))
        {
            waiter.TrySetException(new IOException("The client was disposed."));
        }
    }

    /// <summary><c>PUB &lt;subject&gt; [reply-to] &lt;#bytes&gt;\r\n&lt;payload&gt;\r\n</c></summary>
    private void Append(string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, SendPolicy policy)
    {
        byte[] subject = _subjects.Get(topic);
        using BatchedWriter.AppendScope scope = _writer.BeginAppend(policy);
        IBufferWriter<byte> buffer = scope.Buffer;
        Write(buffer, "PUB "u8);
        Write(buffer, subject);
        Write(buffer, " "u8);
        if (!replyTo.IsEmpty)
        {
            Write(buffer, replyTo);
            Write(buffer, " "u8);
        }

        WriteNumber(buffer, payload.Length);
        Write(buffer, "\r\n"u8);
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

    private async Task ReceiveLoopAsync()
    {
        try
        {
            while (true)
            {
                Volatile.Write(ref _dispatchingThread, Environment.CurrentManagedThreadId);
                try
                {
                    Drain();
                }
                finally
                {
                    Volatile.Write(ref _dispatchingThread, 0);
                }

                _writer.Kick(); // replies and PONGs appended while dispatching: one send
                if (!await _connection.ReceiveAsync())
                {
                    Fail("the server closed the connection");
                    return;
                }
            }
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Fail(e is IOException ? e.Message : $"{e.GetType().Name}: {e.Message}");
        }
    }

    /// <summary>Handles every whole message and control line buffered; leaves a partial one for the next receive.</summary>
    private void Drain()
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
            using BatchedWriter.AppendScope scope = _writer.BeginAppend(SendPolicy.Deferred);
            Write(scope.Buffer, PongLine);
        }
        else if (line.SequenceEqual("PONG"u8))
        {
            if (_pongWaiters.TryDequeue(out TaskCompletionSource? waiter))
            {
                waiter.TrySetResult();
            }
        }
        else if (line.StartsWith("-ERR"u8))
        {
            // Protocol errors end the connection (the server closes it, the receive loop notices);
            // permission and similar errors do not: counted either way.
            Interlocked.Increment(ref _errors);
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
    /// (the handler gets the payload without the headers). Returns the bytes it takes, or 0 when it is not all buffered.
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

        DeliveryHandler?[] handlers = Volatile.Read(ref _handlers);
        if ((uint)(sid - 1) < (uint)handlers.Length && handlers[sid - 1] is { } handler)
        {
            ReadOnlySpan<byte> replyTo = count == fixedParts + 1 ? line[parts[3]] : default;
            handler(buffered.Slice(eol + 2 + headerBytes, total - headerBytes), replyTo);
        }

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

    private void Fail(string why)
    {
        if (!_disposed)
        {
            Interlocked.CompareExchange(ref _failure, _lastError is { } error ? $"{why} ({error})" : why, null);
        }

        while (_pongWaiters.TryDequeue(out TaskCompletionSource? waiter))
        {
            waiter.TrySetException(new IOException(why));
        }
    }
}
