using System.Buffers.Binary;
using System.Globalization;
using System.Text;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Scenarios;

namespace Herald.LoadTest.Peers.Nats;

/// <summary>
/// The fanout roles over NATS (<c>--target nats</c>), with the same method as Herald's: SUB behind a PING
/// barrier, one publisher writing 64 KiB batches of one PUB template with an 8-byte sequence number stamped
/// into each payload, flow control on the slowest subscriber, and a sequence check on every MSG.
/// </summary>
internal static class NatsFanout
{
    public const uint Sid = 1;
    private const int SequenceBytes = sizeof(long);

    /// <summary>The payload pattern the Herald fanout uses, so both peers carry the same bytes.</summary>
    public static byte[] Payload(int length)
    {
        var payload = new byte[length];
        for (int i = 0; i < payload.Length; i++)
        {
            payload[i] = (byte)('a' + (i % 26));
        }

        return payload;
    }

    /// <summary><c>PUB subject n\r\npayload\r\n</c>; the payload starts at <paramref name="payloadOffset"/>.</summary>
    public static byte[] PubTemplate(string subject, byte[] payload, out int payloadOffset)
    {
        byte[] head = Encoding.ASCII.GetBytes(string.Create(CultureInfo.InvariantCulture, $"PUB {subject} {payload.Length}\r\n"));
        payloadOffset = head.Length;
        return [.. head, .. payload, (byte)'\r', (byte)'\n'];
    }

    /// <summary>Parses a decimal token; -1 when it is not one.</summary>
    internal static int ParseInt(ReadOnlySpan<byte> token)
    {
        if (token.IsEmpty || token.Length > 9)
        {
            return -1;
        }

        int value = 0;
        foreach (byte b in token)
        {
            if (b is < (byte)'0' or > (byte)'9')
            {
                return -1;
            }

            value = (value * 10) + (b - '0');
        }

        return value;
    }

    /// <summary>Splits a control line at spaces into at most <c>parts.Length</c> tokens; returns how many (more than that: parts.Length + 1).</summary>
    internal static int Tokens(ReadOnlySpan<byte> line, Span<Range> parts)
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

    internal sealed class Subscriber(NatsConnection connection, string subject, byte[] payload, RunLog log) : IFanoutSubscriber
    {
        private readonly byte[] _subject = Encoding.ASCII.GetBytes(subject);
        private long _received;
        private long _nextSequence;
        private byte[]? _header;   // "MSG subject 1 128\r\n" once the first MSG checked out
        private int _messageLength = -1; // header + payload + CRLF
        private volatile bool _closed;

        public long Received => Volatile.Read(ref _received);

        public long BytesReceived => connection.BytesReceived;

        public bool Closed => _closed;

        public string? LostReason { get; private set; }

        public long Missed { get; private set; }

        public long Reordered { get; private set; }

        public long AnnouncedDropped => 0; // NATS drops silently (slow consumer): a gap counts as missing

        public long ErrorFrames { get; private set; }

        public long Unexpected { get; private set; }

        private bool HasSequence => payload.Length >= SequenceBytes;

        public async Task RunAsync(RunState state)
        {
            try
            {
                while (true)
                {
                    if (Drain())
                    {
                        await connection.SendPongAsync();
                    }

                    if (!await connection.ReceiveAsync())
                    {
                        Lose(state, "the server closed the connection");
                        return;
                    }
                }
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e))
            {
                Lose(state, e.Message);
            }
            finally
            {
                _closed = true;
            }
        }

        private void Lose(RunState state, string why)
        {
            if (!state.Stopping)
            {
                LostReason ??= why;
                log.Report(connection.Name, $"disconnected: {why}");
            }
        }

        /// <summary>Handles every whole message and control line buffered; returns whether a PING asked for a PONG.</summary>
        private bool Drain()
        {
            bool pongDue = false;
            long received = _received;
            while (true)
            {
                ReadOnlySpan<byte> buffered = connection.Buffered;
                if (buffered.IsEmpty)
                {
                    break;
                }

                // Fast path: a MSG exactly like the first one checked (same header, same length).
                if (_header is not null && buffered.Length >= _messageLength && buffered.StartsWith(_header))
                {
                    if (HasSequence)
                    {
                        CheckSequence(BinaryPrimitives.ReadInt64LittleEndian(buffered[_header.Length..]));
                    }

                    received++;
                    connection.Consume(_messageLength);
                    continue;
                }

                int eol = buffered.IndexOf("\r\n"u8);
                if (eol < 0)
                {
                    if (buffered.Length > 4096)
                    {
                        throw new IOException($"{connection.Name}: control line over 4096 bytes.");
                    }

                    break;
                }

                ReadOnlySpan<byte> line = buffered[..eol];
                if (line.StartsWith("MSG "u8))
                {
                    int consumed = HandleMessage(buffered, line, eol);
                    if (consumed == 0)
                    {
                        break; // the payload is not all here yet
                    }

                    received++;
                    connection.Consume(consumed);
                    continue;
                }

                if (line.SequenceEqual("PING"u8))
                {
                    pongDue = true;
                }
                else if (line.StartsWith("-ERR"u8))
                {
                    ErrorFrames++;
                    string error = Encoding.UTF8.GetString(line);
                    LostReason ??= error;
                    log.Report(connection.Name, error);
                }
                else if (!line.SequenceEqual("PONG"u8) && !line.SequenceEqual("+OK"u8) && !line.StartsWith("INFO "u8))
                {
                    Unexpected++;
                    log.Report(connection.Name, $"unexpected line '{Encoding.UTF8.GetString(line)}'");
                }

                connection.Consume(eol + 2);
            }

            Volatile.Write(ref _received, received);
            return pongDue;
        }

        /// <summary>Decodes a MSG fully; returns the bytes it takes, or 0 when its payload is not all buffered.</summary>
        private int HandleMessage(ReadOnlySpan<byte> buffered, ReadOnlySpan<byte> line, int eol)
        {
            // MSG <subject> <sid> [reply-to] <#bytes>
            Span<Range> parts = stackalloc Range[6];
            int count = Tokens(line, parts);
            int size = count is 4 or 5 ? ParseInt(line[parts[count - 1]]) : -1;
            if (size < 0)
            {
                throw new IOException($"{connection.Name}: malformed '{Encoding.UTF8.GetString(line)}'.");
            }

            int total = eol + 2 + size + 2;
            if (buffered.Length < total)
            {
                return 0;
            }

            ReadOnlySpan<byte> body = buffered.Slice(eol + 2, size);
            if (!buffered.Slice(eol + 2 + size, 2).SequenceEqual("\r\n"u8))
            {
                throw new IOException($"{connection.Name}: MSG payload not followed by CRLF.");
            }

            string? mismatch =
                !line[parts[1]].SequenceEqual(_subject) ? $"subject '{Encoding.UTF8.GetString(line[parts[1]])}'"
                : ParseInt(line[parts[2]]) != Sid ? $"sid {Encoding.UTF8.GetString(line[parts[2]])}, subscribed as {Sid}"
                : count == 5 ? "a reply subject, published without"
                : size != payload.Length ? $"payload of {size} bytes, published {payload.Length}"
                : !body[(HasSequence ? SequenceBytes : 0)..].SequenceEqual(payload.AsSpan(HasSequence ? SequenceBytes : 0)) ? "payload bytes differ"
                : null;
            if (mismatch is not null)
            {
                if (Unexpected++ == 0)
                {
                    log.Report(connection.Name, $"MSG differs from what was published: {mismatch}");
                }

                return total;
            }

            if (_header is null)
            {
                _header = buffered[..(eol + 2)].ToArray();
                _messageLength = total;
            }

            if (HasSequence)
            {
                CheckSequence(BinaryPrimitives.ReadInt64LittleEndian(body));
            }

            return total;
        }

        private void CheckSequence(long sequence)
        {
            if (sequence != _nextSequence)
            {
                if (sequence > _nextSequence)
                {
                    Missed += sequence - _nextSequence;
                }
                else
                {
                    Reordered++;
                }
            }

            _nextSequence = sequence + 1;
        }
    }

    internal sealed class Publisher(NatsConnection connection, IFanoutSubscriber[] subscribers, string subject, byte[] payload, long maxLead, int batchBytes, RunLog log) : IFanoutPublisher
    {
        private long _published;
        private long _sent;
        private volatile string? _failure;

        public long Published => Volatile.Read(ref _published);

        public long Sent => Volatile.Read(ref _sent);

        public long BytesSent => connection.BytesSent;

        public long FlowWaits { get; private set; }

        public long ErrorFrames { get; private set; }

        public long Unexpected { get; private set; }

        public string? Failure => _failure;

        public async Task PublishAsync(RunState state, CancellationToken stop)
        {
            byte[] template = PubTemplate(subject, payload, out int payloadOffset);
            int frameLength = template.Length;
            int perBatch = (int)Math.Clamp(batchBytes / frameLength, 1, maxLead);
            byte[] batch = new byte[perBatch * frameLength];
            for (int i = 0; i < perBatch; i++)
            {
                template.CopyTo(batch, i * frameLength);
            }

            bool stamp = payload.Length >= SequenceBytes;
            long published = 0;
            try
            {
                while (!stop.IsCancellationRequested)
                {
                    long slowest = FanoutScenario.MinReceived(subscribers);
                    if (slowest == long.MaxValue || published + perBatch - slowest > maxLead)
                    {
                        FlowWaits++;
                        await Task.Delay(1, stop);
                        continue;
                    }

                    if (stamp)
                    {
                        for (int i = 0; i < perBatch; i++)
                        {
                            BinaryPrimitives.WriteInt64LittleEndian(batch.AsSpan((i * frameLength) + payloadOffset), published + i);
                        }
                    }

                    published += perBatch;
                    Volatile.Write(ref _published, published);
                    await connection.SendAsync(batch, CancellationToken.None);
                    Volatile.Write(ref _sent, published);
                }
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                // the window is over
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e))
            {
                if (!state.Stopping)
                {
                    _failure ??= e.Message;
                    log.Report(connection.Name, $"send failed: {e.Message}");
                }
            }
        }

        public async Task ReadAsync(RunState state)
        {
            try
            {
                while (true)
                {
                    bool pongDue = false;
                    while (true)
                    {
                        ReadOnlySpan<byte> buffered = connection.Buffered;
                        int eol = buffered.IndexOf("\r\n"u8);
                        if (eol < 0)
                        {
                            break;
                        }

                        ReadOnlySpan<byte> line = buffered[..eol];
                        if (line.SequenceEqual("PING"u8))
                        {
                            pongDue = true;
                        }
                        else if (line.StartsWith("-ERR"u8))
                        {
                            ErrorFrames++;
                            string error = Encoding.UTF8.GetString(line);
                            _failure ??= error;
                            log.Report(connection.Name, error);
                        }
                        else if (!line.SequenceEqual("PONG"u8) && !line.SequenceEqual("+OK"u8) && !line.StartsWith("INFO "u8))
                        {
                            Unexpected++;
                            log.Report(connection.Name, $"unexpected line '{Encoding.UTF8.GetString(line)}'");
                        }

                        connection.Consume(eol + 2);
                    }

                    if (pongDue)
                    {
                        await connection.SendPongAsync();
                    }

                    if (!await connection.ReceiveAsync())
                    {
                        if (!state.Stopping)
                        {
                            _failure ??= "the server closed the connection";
                            log.Report(connection.Name, "disconnected: the server closed the connection");
                        }

                        return;
                    }
                }
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e))
            {
                if (!state.Stopping)
                {
                    _failure ??= e.Message;
                    log.Report(connection.Name, $"disconnected: {e.Message}");
                }
            }
        }
    }
}
