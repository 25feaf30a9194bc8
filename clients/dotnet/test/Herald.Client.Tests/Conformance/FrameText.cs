using System.Buffers;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Herald.Client.Protocol;
using Herald.Protocol;

namespace Herald.Client.Tests.Conformance;

/// <summary>
/// Frames as one comparable line of text: what the client decoded, and what a vector's <c>fields</c>
/// say. A transcript of a whole read (<see cref="Of"/>) is the frames, then how reading stopped.
/// </summary>
internal static class FrameText
{
    public static string Of(ServerFrame frame) => frame.Type switch
    {
        FrameType.Welcome => Welcome(frame.Welcome.Version, frame.Welcome.ServerName, frame.Welcome.ConnectionId, (uint)frame.Welcome.Capabilities, frame.Welcome.Limits, frame.Welcome.InboxPrefix),
        FrameType.Message => Message(frame.Message.Sid, frame.Message.TopicString, frame.Message.ReplyToString, (uint)frame.Message.Flags, frame.Message.Payload.ToArray(), Headers(frame.Message)),
        FrameType.Error => Error((uint)frame.Error.Code, frame.Error.Fatal, frame.Error.Message, frame.Error.Count, frame.Error.Sid, frame.Error.Sids),
        FrameType.PresenceReply => PresenceReply(frame.PresenceReply.RequestId, (uint)frame.PresenceReply.Code, frame.PresenceReply.Members, frame.PresenceReply.Identities, frame.PresenceReply.Entries, frame.PresenceReply.Next),
        FrameType.Subscribed => Subscribed(frame.Subscribed.Sid, frame.Subscribed.Pattern, (uint)frame.Subscribed.Options),
        _ => frame.Type.ToString().ToUpperInvariant(),
    };

    /// <summary>A vector's <c>fields</c>, in the same form.</summary>
    public static string Of(FrameType type, JsonElement f) => type switch
    {
        FrameType.Welcome => Welcome(
            f.GetProperty("version").GetUInt32(),
            f.GetProperty("server_name").GetString()!,
            f.GetProperty("connection_id").GetUInt64(),
            f.GetProperty("capabilities").GetUInt32(),
            f.GetProperty("limits").EnumerateObject().ToDictionary(p => p.Name, p => p.Value.GetUInt64()),
            f.TryGetProperty("inbox_prefix", out JsonElement prefix) ? prefix.GetString() : null),
        FrameType.Message => Message(
            f.GetProperty("sid").GetUInt32(),
            f.GetProperty("topic").GetString()!,
            f.GetProperty("reply_to").GetString(),
            f.GetProperty("flags").GetUInt32(),
            Convert.FromHexString(f.GetProperty("payload").GetString()!),
            Headers(f)),
        FrameType.Error => Error(f.GetProperty("code").GetUInt32(), f.GetProperty("fatal").GetBoolean(), f.GetProperty("message").GetString()!, f.GetProperty("count").GetUInt64(), f.TryGetProperty("sid", out JsonElement sid) ? sid.GetUInt32() : 0, f.TryGetProperty("sids", out JsonElement sids) ? [.. sids.EnumerateArray().Select(s => s.GetUInt32())] : null),
        FrameType.PresenceReply => PresenceReply(
            f.GetProperty("request_id").GetUInt32(),
            f.GetProperty("code").GetUInt32(),
            f.GetProperty("members").GetUInt64(),
            f.GetProperty("identities").GetUInt64(),
            [.. f.GetProperty("entries").EnumerateArray().Select(e => new PresenceEntry(e.GetProperty("client").GetString()!, e.GetProperty("identity").GetString()!, e.GetProperty("info").GetString()))],
            f.GetProperty("next").GetString()),
        FrameType.Subscribed => Subscribed(f.GetProperty("sid").GetUInt32(), f.GetProperty("pattern").GetString()!, f.GetProperty("options").GetUInt32()),
        _ => type.ToString().ToUpperInvariant(),
    };

    /// <summary>Reads frames with the client's reader until it stops: each frame, then "need more (n bytes left)" or the error.</summary>
    public static string Of(ReadOnlySequence<byte> buffer, int maxFrame)
    {
        var text = new StringBuilder();
        try
        {
            while (ServerFrames.TryRead(ref buffer, maxFrame, out ServerFrame frame))
            {
                text.Append(Of(frame)).Append('\n');
            }

            return text.Append(NeedMore(buffer.Length)).ToString();
        }
        catch (ProtocolException e)
        {
            return text.Append(Failed(e.Code)).ToString();
        }
    }

    public static string Subscribed(uint sid, string pattern, uint options) => $"SUBSCRIBED sid={sid} pattern={pattern} options={options}";

    public static string NeedMore(long left) => $"need more data ({left} bytes left)";

    public static string Failed(ErrorCode code) => $"error {code}";

    public static string Message(uint sid, string topic, string? replyTo, uint flags, byte[] payload, string headers = "none") =>
        $"MESSAGE sid={sid} topic={topic} reply_to={replyTo ?? "nil"} flags={flags} payload={Convert.ToHexStringLower(payload)} headers={headers}";

    /// <summary>A decoded MESSAGE's header block (spec §4.9) as text: keys in encoded order, or <c>none</c>.</summary>
    public static string Headers(in PublishFrame message) =>
        message.HasHeaders ? Headers(HeaderBlock.Read(message.Headers)) : "none";

    /// <summary>A vector's <c>"headers"</c> member (spec §12) as text, or <c>none</c> when it is absent.</summary>
    public static string Headers(JsonElement fields) =>
        fields.TryGetProperty("headers", out JsonElement h)
            ? Headers(h.EnumerateObject().Select(p => new KeyValuePair<string, string[]>(p.Name, [.. p.Value.EnumerateArray().Select(v => v.GetString()!)])))
            : "none";

    private static string Headers(IEnumerable<KeyValuePair<string, string[]>> headers) =>
        JsonSerializer.Serialize(headers.Select(h => new object[] { h.Key, h.Value }));

    private static string Welcome(uint version, string name, ulong id, uint capabilities, IReadOnlyDictionary<string, ulong> limits, string? inboxPrefix) =>
        $"WELCOME version={version} server_name={name} connection_id={id} capabilities={capabilities} limits={{{string.Join(",", limits.OrderBy(l => l.Key, StringComparer.Ordinal).Select(l => string.Create(CultureInfo.InvariantCulture, $"{l.Key}={l.Value}")))}}} inbox_prefix={inboxPrefix ?? "none"}";

    private static string PresenceReply(uint requestId, uint code, ulong members, ulong identities, IReadOnlyList<PresenceEntry> entries, string? next) =>
        $"PRESENCE_REPLY request_id={requestId} code={code} members={members} identities={identities} entries={JsonSerializer.Serialize(entries.Select(e => new[] { e.Client, e.Identity, e.Info }))} next={next ?? "nil"}";

    private static string Error(uint code, bool fatal, string message, ulong count, uint sid, uint[]? sids) =>
        $"ERROR code={code} fatal={fatal} message={message} count={count} sid={sid} sids={(sids is null ? "none" : string.Join(",", sids))}";
}
