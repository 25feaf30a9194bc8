using System.Buffers;
using System.Globalization;
using System.Text;
using System.Text.Json;
using MessagePack;

namespace Herald.Protocol.Tests;

/// <summary>
/// A frame as the library sees it: <see cref="Frame"/> is the <see cref="HelloFrame"/>, <see cref="WelcomeFrame"/>,
/// <see cref="SubscribeFrame"/>, <see cref="UnsubscribeFrame"/>, <see cref="PublishFrame"/> (PUBLISH and MESSAGE),
/// <see cref="ErrorFrame"/>, <see cref="PresenceFrame"/>, <see cref="PresenceReplyFrame"/> or <see cref="SubscribedFrame"/> that <see cref="FrameDecoder"/> returns; <c>null</c> for PING and PONG.
/// </summary>
internal sealed record DecodedFrame(FrameType Type, object? Frame);

/// <summary>
/// The test side of the codec: decodes a body with <see cref="FrameDecoder"/>, builds the frame a vector's
/// <c>fields</c> describe, re-encodes with <see cref="FrameWriter"/>, and prints a frame as one line of text so
/// that two frames are equal exactly when their lines are.
/// </summary>
internal static class FrameModel
{
    private static readonly UTF8Encoding StrictUtf8 = new(encoderShouldEmitUTF8Identifier: false, throwOnInvalidBytes: true);

    /// <summary>The field names of spec §4, in wire order.</summary>
    public static string[] FieldNames(FrameType type) => type switch
    {
        FrameType.Hello => ["version", "client_name", "capabilities", "auth"],
        FrameType.Welcome => ["version", "server_name", "connection_id", "capabilities", "limits"],
        FrameType.Subscribe => ["sid", "pattern", "options"],
        FrameType.Unsubscribe => ["sid"],
        FrameType.Publish => ["topic", "reply_to", "flags", "payload"],
        FrameType.Message => ["sid", "topic", "reply_to", "flags", "payload"],
        FrameType.Error => ["code", "fatal", "message", "count"],
        FrameType.Presence => ["request_id", "topic", "limit", "cursor"],
        FrameType.PresenceReply => ["request_id", "code", "members", "identities", "entries", "next"],
        FrameType.Subscribed => ["sid", "pattern", "options"],
        _ => [],
    };

    /// <summary>Trailing fields a frame may carry (spec §4.1 <c>info</c>, §4.2 <c>inbox_prefix</c>, §4.8 <c>sid</c> and <c>sids</c>); a vector names them only when present.</summary>
    public static string[] OptionalFieldNames(FrameType type) => type switch
    {
        FrameType.Hello => ["info"],
        FrameType.Welcome => ["inbox_prefix"],
        FrameType.Error => ["sid", "sids"],
        FrameType.Subscribe => ["since", "queue"],
        FrameType.Publish or FrameType.Message => ["headers"],
        _ => [],
    };

    /// <summary>Decodes one frame body: <see cref="FrameDecoder.ReadHeader"/>, then the reader for its type.</summary>
    public static DecodedFrame Decode(ReadOnlySequence<byte> body)
    {
        var reader = new MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
        object? frame;
        switch (type)
        {
            case FrameType.Hello:
                frame = FrameDecoder.ReadHello(ref reader, count);
                break;
            case FrameType.Welcome:
                frame = FrameDecoder.ReadWelcome(ref reader, count);
                break;
            case FrameType.Subscribe:
                frame = FrameDecoder.ReadSubscribe(ref reader, count);
                break;
            case FrameType.Unsubscribe:
                frame = FrameDecoder.ReadUnsubscribe(ref reader, count);
                break;
            case FrameType.Publish:
                frame = FrameDecoder.ReadPublish(ref reader, count);
                break;
            case FrameType.Message:
                frame = FrameDecoder.ReadMessage(ref reader, count);
                break;
            case FrameType.Error:
                frame = FrameDecoder.ReadError(ref reader, count);
                break;
            case FrameType.Presence:
                frame = FrameDecoder.ReadPresence(ref reader, count);
                break;
            case FrameType.PresenceReply:
                frame = FrameDecoder.ReadPresenceReply(ref reader, count);
                break;
            case FrameType.Subscribed:
                frame = FrameDecoder.ReadSubscribed(ref reader, count);
                break;
            case FrameType.Ping:
            case FrameType.Pong:
                FrameDecoder.ReadEmpty(ref reader, count);
                frame = null;
                break;
            default:
                throw new InvalidOperationException($"ReadHeader returned {type}, which is not a frame type of spec §3.");
        }

        return new DecodedFrame(type, frame);
    }

    /// <summary>Encodes <paramref name="frame"/> with the reference encoder.</summary>
    public static void Write(DecodedFrame frame, IBufferWriter<byte> output)
    {
        switch (frame.Frame)
        {
            case HelloFrame h:
                FrameWriter.WriteHello(output, h.ClientName, h.Capabilities, h.Auth, h.Version, h.Info);
                break;
            case WelcomeFrame w:
                FrameWriter.WriteWelcome(output, w.ServerName, w.ConnectionId, w.Capabilities, w.Limits, w.Version, w.InboxPrefix);
                break;
            case SubscribeFrame s:
                FrameWriter.WriteSubscribe(output, s.Sid, s.Pattern.ToArray(), s.Options, s.Since, s.Queue.ToArray());
                break;
            case UnsubscribeFrame u:
                FrameWriter.WriteUnsubscribe(output, u.Sid);
                break;
            case PublishFrame p when frame.Type == FrameType.Publish:
                FrameWriter.WritePublish(output, p.Topic.ToArray(), p.ReplyTo?.ToArray(), p.Flags, p.Payload.ToArray(), p.Headers.ToArray());
                break;
            case PublishFrame m:
                FrameWriter.WriteMessage(output, m.Sid, m.Topic.ToArray(), m.ReplyTo?.ToArray(), m.Flags, m.Payload.ToArray(), m.Headers.ToArray());
                break;
            case ErrorFrame { Sids: { } sids, Code: ErrorCode.MessagesDropped, Fatal: false, Count: 0, Sid: 0 } e:
                FrameWriter.WriteMessagesLost(output, e.Message, sids);
                break;
            case ErrorFrame { Sids: { } sids } e:
                WriteErrorWithSids(output, e, sids); // a shape the broker never sends, but a reader takes
                break;
            case ErrorFrame e:
                FrameWriter.WriteError(output, e.Code, e.Fatal, e.Message, e.Count, e.Sid);
                break;
            case PresenceFrame q:
                FrameWriter.WritePresence(output, q.RequestId, q.Topic.ToArray(), q.Limit, q.Cursor);
                break;
            case PresenceReplyFrame r:
                FrameWriter.WritePresenceReply(output, r.RequestId, r.Code, r.Members, r.Identities, r.Entries, r.Next);
                break;
            case SubscribedFrame b:
                FrameWriter.WriteSubscribed(output, b.Sid, b.Pattern, b.Options);
                break;
            case null when frame.Type == FrameType.Ping:
                FrameWriter.WritePing(output);
                break;
            case null when frame.Type == FrameType.Pong:
                FrameWriter.WritePong(output);
                break;
            default:
                throw new InvalidOperationException($"Cannot write {frame}.");
        }
    }

    /// <summary>ERROR with every element, sids included (spec §4.8), written element by element.</summary>
    private static void WriteErrorWithSids(IBufferWriter<byte> output, ErrorFrame e, uint[] sids)
    {
        var body = new ArrayBufferWriter<byte>();
        var w = new MessagePackWriter(body);
        w.WriteArrayHeader(7);
        w.Write((byte)FrameType.Error);
        w.Write((uint)e.Code);
        w.Write(e.Fatal);
        w.Write(e.Message);
        w.Write(e.Count);
        w.Write(e.Sid);
        w.WriteArrayHeader(sids.Length);
        foreach (uint sid in sids)
        {
            w.Write(sid);
        }

        w.Flush();
        System.Buffers.Binary.BinaryPrimitives.WriteUInt32BigEndian(output.GetSpan(4), (uint)body.WrittenCount);
        output.Advance(4);
        output.Write(body.WrittenSpan);
    }

    public static byte[] Encode(DecodedFrame frame)
    {
        var output = new ArrayBufferWriter<byte>();
        Write(frame, output);
        return output.WrittenSpan.ToArray();
    }

    /// <summary>The frame a vector's <c>fields</c> describe (spec §12: strings as JSON strings, payload as hex, nil as null).</summary>
    public static DecodedFrame FromJson(FrameType type, JsonElement fields)
    {
        string[] actual = fields.EnumerateObject().Select(p => p.Name).ToArray();
        string[] expected = [.. FieldNames(type), .. OptionalFieldNames(type).Where(actual.Contains)];
        if (!expected.Order(StringComparer.Ordinal).SequenceEqual(actual.Order(StringComparer.Ordinal)))
        {
            throw new InvalidDataException($"{type} fields must be [{string.Join(", ", expected)}], the vector has [{string.Join(", ", actual)}].");
        }

        object? frame = type switch
        {
            FrameType.Hello => new HelloFrame(
                fields.GetProperty("version").GetUInt32(),
                fields.GetProperty("client_name").GetString()!,
                (Capabilities)fields.GetProperty("capabilities").GetUInt32(),
                fields.GetProperty("auth").GetString())
            {
                Info = fields.TryGetProperty("info", out JsonElement info) ? info.GetString() : null,
            },
            FrameType.Welcome => new WelcomeFrame(
                fields.GetProperty("version").GetUInt32(),
                fields.GetProperty("server_name").GetString()!,
                fields.GetProperty("connection_id").GetUInt64(),
                (Capabilities)fields.GetProperty("capabilities").GetUInt32(),
                Limits(fields.GetProperty("limits")),
                fields.TryGetProperty("inbox_prefix", out JsonElement prefix) ? prefix.GetString() : null),
            FrameType.Subscribe => new SubscribeFrame(
                fields.GetProperty("sid").GetUInt32(),
                Utf8(fields.GetProperty("pattern"))!.Value,
                (SubscribeOptions)fields.GetProperty("options").GetUInt32())
            {
                Since = fields.TryGetProperty("since", out JsonElement since) ? new StreamPosition(since.GetProperty("offset").GetUInt64(), since.GetProperty("epoch").GetString()!) : null,
                Queue = fields.TryGetProperty("queue", out JsonElement queue) ? Utf8(queue)!.Value : default,
            },
            FrameType.Unsubscribe => new UnsubscribeFrame(fields.GetProperty("sid").GetUInt32()),
            FrameType.Publish or FrameType.Message => new PublishFrame(
                type == FrameType.Message ? fields.GetProperty("sid").GetUInt32() : 0,
                Utf8(fields.GetProperty("topic"))!.Value,
                Utf8(fields.GetProperty("reply_to")),
                (PayloadFlags)fields.GetProperty("flags").GetUInt32(),
                new ReadOnlySequence<byte>(Convert.FromHexString(fields.GetProperty("payload").GetString()!)),
                default)
            {
                Headers = fields.TryGetProperty("headers", out JsonElement headers) ? new ReadOnlySequence<byte>(HeaderBlock.Encode(HeadersOf(headers))) : default,
            },
            FrameType.Error => new ErrorFrame(
                (ErrorCode)fields.GetProperty("code").GetUInt32(),
                fields.GetProperty("fatal").GetBoolean(),
                fields.GetProperty("message").GetString()!,
                fields.GetProperty("count").GetUInt64(),
                fields.TryGetProperty("sid", out JsonElement sid) ? sid.GetUInt32() : 0)
            {
                Sids = fields.TryGetProperty("sids", out JsonElement sids) ? [.. sids.EnumerateArray().Select(s => s.GetUInt32())] : null,
            },
            FrameType.Presence => new PresenceFrame(
                fields.GetProperty("request_id").GetUInt32(),
                Utf8(fields.GetProperty("topic"))!.Value,
                fields.GetProperty("limit").GetUInt64(),
                fields.GetProperty("cursor").GetString()),
            FrameType.PresenceReply => new PresenceReplyFrame(
                fields.GetProperty("request_id").GetUInt32(),
                (ErrorCode)fields.GetProperty("code").GetUInt32(),
                fields.GetProperty("members").GetUInt64(),
                fields.GetProperty("identities").GetUInt64(),
                [.. fields.GetProperty("entries").EnumerateArray().Select(e => new PresenceEntry(e.GetProperty("client").GetString()!, e.GetProperty("identity").GetString()!, e.GetProperty("info").GetString()))],
                fields.GetProperty("next").GetString()),
            FrameType.Subscribed => new SubscribedFrame(fields.GetProperty("sid").GetUInt32(), fields.GetProperty("pattern").GetString()!, (SubscribeOptions)fields.GetProperty("options").GetUInt32()),
            _ => null,
        };
        return new DecodedFrame(type, frame);
    }

    /// <summary>
    /// One line naming the type and every field in wire order: numbers in decimal, strings quoted (or as
    /// <c>x'..'</c> hex when they are not UTF-8), payloads as hex, nil as <c>nil</c>, limits sorted by key.
    /// </summary>
    /// <param name="emptyReplyToIsNil">
    /// Print an empty <c>reply_to</c> as nil: <see cref="FrameWriter"/> documents that it writes an empty
    /// reply_to as nil, so a re-encoded frame can only be compared under this reading.
    /// </param>
    public static string Describe(DecodedFrame frame, bool emptyReplyToIsNil = false)
    {
        string[] values = frame.Frame switch
        {
            HelloFrame h => [Num(h.Version), Text(h.ClientName), Num((uint)h.Capabilities), h.Auth is null ? "nil" : Text(h.Auth), .. h.Info is { } info ? [Text(info)] : Array.Empty<string>()],
            WelcomeFrame w =>
            [
                Num(w.Version), Text(w.ServerName), Num(w.ConnectionId), Num((uint)w.Capabilities),
                "{" + string.Join(", ", w.Limits.OrderBy(l => l.Key, StringComparer.Ordinal).Select(l => $"{Text(l.Key)}: {Num(l.Value)}")) + "}",
                .. w.InboxPrefix is { } prefix ? [Text(prefix)] : Array.Empty<string>(),
            ],
            SubscribeFrame s =>
            [
                Num(s.Sid), Text(s.Pattern), Num((uint)s.Options),
                .. s.Since is { } since ? [$"{{offset: {Num(since.Offset)}, epoch: {Text(since.Epoch)}}}"] : s.Queue.IsEmpty ? Array.Empty<string>() : ["nil"],
                .. s.Queue.IsEmpty ? Array.Empty<string>() : [Text(s.Queue)],
            ],
            UnsubscribeFrame u => [Num(u.Sid)],
            PublishFrame p =>
            [
                .. frame.Type == FrameType.Message ? [Num(p.Sid)] : Array.Empty<string>(),
                Text(p.Topic),
                p.ReplyTo is not { } r || (emptyReplyToIsNil && r.IsEmpty) ? "nil" : Text(r),
                Num((uint)p.Flags),
                "x'" + Convert.ToHexStringLower(p.Payload.ToArray()) + "'",
                .. p.HasHeaders ? [DescribeHeaders(p.Headers)] : Array.Empty<string>(),
            ],
            ErrorFrame e =>
            [
                Num((uint)e.Code), e.Fatal ? "true" : "false", Text(e.Message), Num(e.Count),
                .. e.Sid != 0 || e.Sids is not null ? [Num(e.Sid)] : Array.Empty<string>(),
                .. e.Sids is { } sids ? ["[" + string.Join(", ", sids.Select(sid => Num(sid))) + "]"] : Array.Empty<string>(),
            ],
            PresenceFrame q => [Num(q.RequestId), Text(q.Topic), Num(q.Limit), q.Cursor is null ? "nil" : Text(q.Cursor)],
            PresenceReplyFrame r =>
            [
                Num(r.RequestId), Num((uint)r.Code), Num(r.Members), Num(r.Identities),
                "[" + string.Join(", ", r.Entries.Select(e => $"[{Text(e.Client)}, {Text(e.Identity)}, {(e.Info is null ? "nil" : Text(e.Info))}]")) + "]",
                r.Next is null ? "nil" : Text(r.Next),
            ],
            SubscribedFrame b => [Num(b.Sid), Text(b.Pattern), Num((uint)b.Options)],
            _ => [],
        };
        return frame.Type.ToString().ToUpperInvariant() + " {" + string.Join(", ", FieldNames(frame.Type).Concat(OptionalFieldNames(frame.Type)).Zip(values, (n, v) => $"{n}={v}")) + "}";
    }

    /// <summary>A vector's <c>"headers"</c> (spec §12): a JSON object, keys in encoded order, each an array of strings.</summary>
    public static IEnumerable<KeyValuePair<string, string[]>> HeadersOf(JsonElement headers) =>
        headers.EnumerateObject().Select(p => new KeyValuePair<string, string[]>(p.Name, [.. p.Value.EnumerateArray().Select(v => v.GetString()!)])).ToList();

    private static string DescribeHeaders(ReadOnlySequence<byte> block) =>
        "{" + string.Join(", ", HeaderBlock.Read(block).Select(h => $"{Text(h.Key)}: [{string.Join(", ", h.Value.Select(Text))}]")) + "}";

    private static string Num(ulong value) => value.ToString(CultureInfo.InvariantCulture);

    private static string Text(string value) => JsonSerializer.Serialize(value);

    private static string Text(ReadOnlySequence<byte> value)
    {
        byte[] bytes = value.ToArray();
        try
        {
            return Text(StrictUtf8.GetString(bytes));
        }
        catch (DecoderFallbackException)
        {
            return "x'" + Convert.ToHexStringLower(bytes) + "'";
        }
    }

    private static ReadOnlySequence<byte>? Utf8(JsonElement value) =>
        value.ValueKind == JsonValueKind.Null ? null : new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(value.GetString()!));

    private static OrderedDictionary<string, ulong> Limits(JsonElement limits)
    {
        var result = new OrderedDictionary<string, ulong>(StringComparer.Ordinal);
        foreach (JsonProperty limit in limits.EnumerateObject())
        {
            result.Add(limit.Name, limit.Value.GetUInt64());
        }

        return result;
    }
}
