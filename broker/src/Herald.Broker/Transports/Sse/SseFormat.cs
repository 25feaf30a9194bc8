using System.Buffers;
using System.Buffers.Text;
using System.Globalization;
using System.IO.Pipelines;
using System.Text;
using System.Text.Json;
using Herald.Broker.Delivery;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.Transports.Sse;

/// <summary>How a stream's messages are written in their <c>data:</c> line (sse.md §2).</summary>
internal enum SseDataFormat
{
    /// <summary>One JSON object per message: topic, reply-to, base64 payload, its text when UTF-8, headers.</summary>
    Json,

    /// <summary>The payload alone, base64.</summary>
    Base64,
}

/// <summary>
/// A stream's MESSAGE frames as Server-Sent Events (protocol-spec/sse.md), written straight from the shared
/// frame's bytes. Each stream names its topics in its URL, in order; subscription <c>i + 1</c> is topic
/// <c>i</c>. The event id lists, per topic, the history position (spec §13) of the last message the stream
/// delivered (<c>offset:epoch</c>, or <c>-</c> where there is none), so that a browser's reconnect
/// (<c>Last-Event-ID</c>) resumes every topic that keeps a history. The id is written only when it changes.
/// </summary>
/// <remarks>One drain at a time writes (<see cref="PipeDrain{TFormat}"/>); nothing here is shared between streams.</remarks>
internal sealed class SseFormat : IDrainFormat, IDisposable
{
    private static readonly byte[] HeartbeatBytes = ":\n\n"u8.ToArray();

    private readonly SseDataFormat _data;
    private readonly bool[] _tracked; // per topic: an exact topic that keeps a history, whose position the id carries
    private readonly StreamPosition?[] _positions;
    private readonly Utf8JsonWriter _json = new(Stream.Null);
    private bool _idChanged = true; // the first event names the stream's positions, even when none is known

    /// <param name="tracked">Per topic, whether its position is carried in the id.</param>
    /// <param name="positions">Per topic, where the stream resumes from (from <c>Last-Event-ID</c>), or null.</param>
    public SseFormat(SseDataFormat data, bool[] tracked, StreamPosition?[] positions)
    {
        _data = data;
        _tracked = tracked;
        _positions = positions;
    }

    /// <summary>Once the stream has ended (its drain done or abandoned).</summary>
    public void Dispose() => _json.Dispose();

    /// <summary>A comment line: keeps an idle stream open through proxies.</summary>
    public static MessageBuffer Heartbeat() => MessageBuffer.Copy(HeartbeatBytes);

    /// <summary>The stream's last event when the broker ends it (sse.md §3): <c>event: error</c>, the spec §8 code and why.</summary>
    public static MessageBuffer Error(ErrorCode code, string message)
    {
        var output = new ArrayBufferWriter<byte>(128 + message.Length);
        output.Write("event: error\ndata: "u8);
        using (var json = new Utf8JsonWriter(output))
        {
            json.WriteStartObject();
            json.WriteString("code"u8, code.ToString());
            json.WriteString("message"u8, message);
            json.WriteEndObject();
        }

        output.Write("\n\n"u8);
        return MessageBuffer.Copy(output.WrittenSpan);
    }

    /// <summary>
    /// A server-made subscription's event (sse.md §2): <c>event: subscribed</c> <c>{"sid", "topic", "options"}</c> or
    /// <c>event: unsubscribed</c> <c>{"sid", "topic", "message"}</c>; <paramref name="text"/> null writes <paramref name="number"/>.
    /// </summary>
    public static MessageBuffer Notice(ReadOnlySpan<byte> name, uint sid, string pattern, ReadOnlySpan<byte> field, string? text, uint number)
    {
        var output = new ArrayBufferWriter<byte>(96 + (pattern.Length * 3) + ((text?.Length ?? 0) * 3));
        output.Write("event: "u8);
        output.Write(name);
        output.Write("\ndata: "u8);
        using (var json = new Utf8JsonWriter(output))
        {
            json.WriteStartObject();
            json.WriteNumber("sid"u8, sid);
            json.WriteString("topic"u8, pattern);
            if (text is null)
            {
                json.WriteNumber(field, number);
            }
            else
            {
                json.WriteString(field, text);
            }

            json.WriteEndObject();
        }

        output.Write("\n\n"u8);
        return MessageBuffer.Copy(output.WrittenSpan);
    }

    /// <inheritdoc/>
    public void Write(PipeWriter output, MessageBuffer frame, uint sid)
    {
        if (sid == FrameCopy.ControlSid)
        {
            output.Write(frame.Span); // the session's own events, already written as SSE
            return;
        }

        PublishFrame message = MessageJson.Parse(frame);
        Positions found = message.HasHeaders ? Find(message.Headers) : default;
        int topic = (int)sid - 1;
        if ((uint)topic < (uint)_tracked.Length && _tracked[topic] && found.PositionOf(_positions[topic]) is { } position)
        {
            // A status after a recovered resume names the topic's top: the replayed messages move the stream's own
            // position (spec §13). Any other status ("Live", 410) and every message set it.
            bool recovered = found.Status == 200 && _positions[topic] is { } own && own.Epoch == position.Epoch;
            if (!recovered && _positions[topic] != position)
            {
                _positions[topic] = position;
                _idChanged = true;
            }
        }

        if (found.IsPresence)
        {
            WritePresence(output, message, sid);
            return;
        }

        if (found.Status != 0)
        {
            output.Write("event: status\n"u8);
            WriteId(output);
            output.Write("data: "u8);
            _json.Reset(output);
            _json.WriteStartObject();
            _json.WriteNumber("sid"u8, sid);
            _json.WriteString("topic"u8, message.Topic.FirstSpan);
            _json.WriteNumber("status"u8, found.Status);
            _json.WriteString("description"u8, found.Description ?? "");
            if (found.PositionOf((uint)topic < (uint)_positions.Length ? _positions[topic] : null) is { } top)
            {
                _json.WriteNumber("offset"u8, top.Offset);
                _json.WriteString("epoch"u8, top.Epoch);
            }

            _json.WriteEndObject();
            _json.Flush();
            output.Write("\n\n"u8);
            return;
        }

        WriteId(output);
        output.Write("data: "u8);
        if (_data == SseDataFormat.Base64)
        {
            ReadOnlySpan<byte> payload = message.Payload.FirstSpan; // one contiguous frame
            Span<byte> span = output.GetSpan(Base64.GetMaxEncodedToUtf8Length(payload.Length));
            Base64.EncodeToUtf8(payload, span, out _, out int written);
            output.Advance(written);
        }
        else
        {
            _json.Reset(output);
            MessageJson.WriteObject(_json, message, sequence: -1, sid);
            _json.Flush();
        }

        output.Write("\n\n"u8);
    }

    /// <summary>
    /// A join or leave event (spec §15.2) as <c>event: presence</c> (sse.md §2), in either format: JSON <c>{"sid", "topic",
    /// "presence", "client", "identity", "reason", "occupancy", "info"}</c> read from the event's headers and payload (the
    /// member's info on a join). Only presence events come here: a topic's membership changes, never its messages.
    /// </summary>
    private void WritePresence(PipeWriter output, in PublishFrame message, uint sid)
    {
        output.Write("event: presence\n"u8);
        WriteId(output);
        output.Write("data: "u8);
        _json.Reset(output);
        _json.WriteStartObject();
        _json.WriteNumber("sid"u8, sid);
        _json.WriteString("topic"u8, message.Topic.FirstSpan);
        foreach (KeyValuePair<string, string[]> header in HeaderBlock.Read(message.Headers))
        {
            string? value = header.Value.Length > 0 ? header.Value[^1] : null;
            switch (header.Key)
            {
                case "Herald-Presence":
                    _json.WriteString("presence"u8, value);
                    break;
                case "Herald-Client":
                    _json.WriteString("client"u8, value);
                    break;
                case "Herald-Identity":
                    _json.WriteString("identity"u8, value);
                    break;
                case "Herald-Reason":
                    _json.WriteString("reason"u8, value);
                    break;
                case "Herald-Occupancy" when long.TryParse(value, NumberStyles.None, CultureInfo.InvariantCulture, out long occupancy):
                    _json.WriteNumber("occupancy"u8, occupancy);
                    break;
            }
        }

        if (!message.Payload.IsEmpty)
        {
            _json.WriteString("info"u8, message.Payload.FirstSpan); // the member's info, UTF-8 (spec §15.1)
        }

        _json.WriteEndObject();
        _json.Flush();
        output.Write("\n\n"u8);
    }

    /// <inheritdoc/>
    public void WriteDropped(PipeWriter output, long dropped, BacklogLimits limits) =>
        WriteDropped(output, dropped, $"Slow consumer: {dropped} messages were dropped because more than {limits.MaxMessages} messages or {limits.MaxBytes} bytes were waiting.");

    /// <inheritdoc/>
    public void WriteShed(PipeWriter output, long shed) => WriteDropped(output, shed, PipeDrain.ShedMessage(shed));

    /// <summary><c>event: dropped</c> with the count and what happened (sse.md §2).</summary>
    private void WriteDropped(PipeWriter output, long dropped, string message)
    {
        output.Write("event: dropped\ndata: "u8);
        _json.Reset(output);
        _json.WriteStartObject();
        _json.WriteNumber("dropped"u8, dropped);
        _json.WriteString("message"u8, message);
        _json.WriteEndObject();
        _json.Flush();
        output.Write("\n\n"u8);
    }

    /// <summary><c>event: dropped</c> with <c>"dropped": 0</c> and the sids that may have lost an unknown number (sse.md §2).</summary>
    public void WriteGaps(PipeWriter output, uint[] sids)
    {
        output.Write("event: dropped\ndata: "u8);
        _json.Reset(output);
        _json.WriteStartObject();
        _json.WriteNumber("dropped"u8, 0);
        _json.WriteStartArray("gaps"u8);
        foreach (uint sid in sids)
        {
            _json.WriteNumberValue(sid);
        }

        _json.WriteEndArray();
        _json.WriteString("message"u8, PipeDrain.GapsMessage);
        _json.WriteEndObject();
        _json.Flush();
        output.Write("\n\n"u8);
    }

    /// <summary>
    /// Reads a <c>Last-Event-ID</c> of a stream of <paramref name="topics"/> topics: one entry per topic, comma
    /// separated, each <c>offset:epoch</c> or <c>-</c>. False when it is not that shape.
    /// </summary>
    public static bool TryParseId(string id, int topics, out StreamPosition?[] positions)
    {
        positions = new StreamPosition?[topics];
        string[] entries = id.Split(',');
        if (entries.Length != topics)
        {
            return false;
        }

        for (int i = 0; i < topics; i++)
        {
            string entry = entries[i];
            if (entry == "-")
            {
                continue;
            }

            int colon = entry.IndexOf(':', StringComparison.Ordinal);
            if (colon <= 0 || !ulong.TryParse(entry.AsSpan(0, colon), NumberStyles.None, CultureInfo.InvariantCulture, out ulong offset)
                || entry.Length - colon - 1 is 0 or > StreamPosition.MaxEpochBytes || !IsIdSafe(entry.AsSpan(colon + 1)))
            {
                return false;
            }

            positions[i] = new StreamPosition(offset, entry[(colon + 1)..]);
        }

        return true;
    }

    /// <summary>An epoch the id can carry as it is: printable ASCII without the id's separators.</summary>
    private static bool IsIdSafe(ReadOnlySpan<char> epoch)
    {
        foreach (char c in epoch)
        {
            if (c is <= ' ' or > '~' or ',' or ':')
            {
                return false;
            }
        }

        return true;
    }

    private void WriteId(PipeWriter output)
    {
        if (!_idChanged)
        {
            return;
        }

        _idChanged = false;
        output.Write("id: "u8);
        for (int i = 0; i < _positions.Length; i++)
        {
            if (i > 0)
            {
                output.Write(","u8);
            }

            if (_tracked[i] && _positions[i] is { } position && position.Epoch.Length > 0 && IsIdSafe(position.Epoch))
            {
                Span<byte> number = output.GetSpan(20);
                position.Offset.TryFormat(number, out int written, provider: CultureInfo.InvariantCulture);
                output.Advance(written);
                output.Write(":"u8);
                Span<byte> epoch = output.GetSpan(position.Epoch.Length);
                output.Advance(Encoding.ASCII.GetBytes(position.Epoch, epoch));
            }
            else
            {
                output.Write("-"u8);
            }
        }

        output.Write("\n"u8);
    }

    /// <summary>What the broker's own header values say (spec §13): a resume's status, and a position (its epoch as the block's bytes).</summary>
    private readonly ref struct Positions(int status, string? description, ulong? offset, ReadOnlySpan<byte> epoch, bool hasEpoch, bool presence)
    {
        private readonly ReadOnlySpan<byte> _epoch = epoch;

        /// <summary>A join or leave event (spec §15.2: it carries <c>Herald-Presence</c>).</summary>
        public bool IsPresence { get; } = presence;

        public int Status { get; } = status;

        public string? Description { get; } = description;

        /// <summary>The position, reusing <paramref name="known"/>'s epoch string when it is the same (no string per message).</summary>
        public StreamPosition? PositionOf(StreamPosition? known)
        {
            if (offset is not { } at || !hasEpoch)
            {
                return null;
            }

            string epoch = known is { } k && k.Epoch.Length == _epoch.Length && Encoding.UTF8.GetByteCount(k.Epoch) == _epoch.Length && Equal(k.Epoch, _epoch)
                ? k.Epoch : Encoding.UTF8.GetString(_epoch);
            return new StreamPosition(at, epoch);
        }

        private static bool Equal(string text, ReadOnlySpan<byte> utf8)
        {
            for (int i = 0; i < text.Length; i++)
            {
                if (text[i] != utf8[i])
                {
                    return false;
                }
            }

            return true;
        }
    }

    /// <summary>The broker's keys in a header block the decoder has checked: <c>Herald-Status</c>, <c>-Description</c>, <c>-Offset</c>, <c>-Epoch</c> (last value of each), and whether it has <c>Herald-Presence</c>.</summary>
    private static Positions Find(in ReadOnlySequence<byte> block)
    {
        var reader = new MessagePackReader(block);
        int status = 0;
        string? description = null;
        ulong? offset = null;
        ReadOnlySpan<byte> epoch = default;
        bool hasEpoch = false;
        bool presence = false;
        int keys = reader.ReadMapHeader();
        for (int i = 0; i < keys; i++)
        {
            ReadOnlySpan<byte> key = reader.ReadStringSequence()!.Value.FirstSpan;
            int values = reader.ReadArrayHeader();
            ReadOnlySpan<byte> value = default;
            for (int v = 0; v < values; v++)
            {
                value = reader.ReadStringSequence()!.Value.FirstSpan;
            }

            if (!key.StartsWith("Herald-"u8))
            {
                continue;
            }

            if (key.SequenceEqual("Herald-Offset"u8) && Utf8Parser.TryParse(value, out ulong o, out int used) && used == value.Length)
            {
                offset = o;
            }
            else if (key.SequenceEqual("Herald-Epoch"u8))
            {
                epoch = value;
                hasEpoch = true;
            }
            else if (key.SequenceEqual("Herald-Status"u8) && Utf8Parser.TryParse(value, out int s, out used) && used == value.Length)
            {
                status = s;
            }
            else if (key.SequenceEqual("Herald-Description"u8))
            {
                description = Encoding.UTF8.GetString(value);
            }
            else if (key.SequenceEqual("Herald-Presence"u8))
            {
                presence = true;
            }
        }

        return new Positions(status, description, offset, epoch, hasEpoch, presence);
    }
}
