using System.Text;
using System.Text.Encodings.Web;
using System.Text.Json;
using Herald.Client;

namespace Herald.Cli.Output;

/// <summary>
/// Writes received messages to stdout in one <see cref="MessageFormat"/>, as bytes (the console's encoding
/// never changes a payload). Not thread-safe: one caller at a time.
/// </summary>
internal sealed class MessageWriter(Stream output, MessageFormat format)
{
    private static readonly UTF8Encoding StrictUtf8 = new(encoderShouldEmitUTF8Identifier: false, throwOnInvalidBytes: true);
    private static readonly JsonWriterOptions JsonOptions = new() { Encoder = JavaScriptEncoder.UnsafeRelaxedJsonEscaping };

    /// <summary>Writes <paramref name="message"/>; <paramref name="number"/> (from 1), when given, heads it in the text format with its topic.</summary>
    public async Task WriteAsync(HeraldMessage message, long? number, CancellationToken cancellationToken)
    {
        switch (format)
        {
            case MessageFormat.Raw:
                await output.WriteAsync(message.Payload, cancellationToken);
                break;
            case MessageFormat.Json:
                await output.WriteAsync(Json(message), cancellationToken);
                break;
            default:
                await output.WriteAsync(Encoding.UTF8.GetBytes(Text(message, number)), cancellationToken);
                break;
        }

        await output.FlushAsync(cancellationToken);
    }

    /// <summary>
    /// Writes a presence event (sub <c>--presence-events</c>), marked so that it is never read as a message: text,
    /// <c>[presence] join room.1 c-1 (alice) info Ada; 1 member</c>; json, an object with <c>presence</c> where a message
    /// has <c>payload</c>; raw (stdout carries payloads only), the text line on stderr.
    /// </summary>
    public async Task WriteAsync(HeraldPresenceEvent presence, CancellationToken cancellationToken)
    {
        if (format == MessageFormat.Raw)
        {
            await Console.Error.WriteAsync(Text(presence));
            return;
        }

        byte[] bytes = format == MessageFormat.Json ? Json(presence) : Encoding.UTF8.GetBytes(Text(presence));
        await output.WriteAsync(bytes, cancellationToken);
        await output.FlushAsync(cancellationToken);
    }

    private static string Text(HeraldPresenceEvent presence)
    {
        var text = new StringBuilder("[presence] ").Append(presence.Kind.ToString().ToLowerInvariant()).Append(' ').Append(Escaped(presence.Topic));
        if (presence.Client is { } client)
        {
            text.Append(' ').Append(Escaped(client)).Append(" (").Append(presence.Identity is { Length: > 0 } identity ? Escaped(identity) : "-").Append(')');
        }

        if (presence.Info is { } info)
        {
            text.Append(" info ").Append(Escaped(info)); // another client's text: escaped as a publisher's
        }

        if (presence.Reason is { } reason)
        {
            text.Append(' ').Append(Escaped(reason));
        }

        if (presence.Occupancy is { } occupancy)
        {
            text.Append("; ").Append(occupancy).Append(occupancy == 1 ? " member" : " members");
        }

        return text.Append('\n').ToString();
    }

    /// <summary>One line: <c>{"presence","topic","client","identity","info","reason","occupancy"}</c>, absent members left out.</summary>
    private static byte[] Json(HeraldPresenceEvent presence)
    {
        var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer, JsonOptions))
        {
            json.WriteStartObject();
            json.WriteString("presence", presence.Kind.ToString().ToLowerInvariant());
            json.WriteString("topic", presence.Topic);
            WriteIfSet(json, "client", presence.Client);
            WriteIfSet(json, "identity", presence.Identity);
            WriteIfSet(json, "info", presence.Info);
            WriteIfSet(json, "reason", presence.Reason);
            if (presence.Occupancy is { } occupancy)
            {
                json.WriteNumber("occupancy", occupancy);
            }

            json.WriteEndObject();
        }

        buffer.WriteByte((byte)'\n');
        return buffer.ToArray();
    }

    private static void WriteIfSet(Utf8JsonWriter json, string name, string? value)
    {
        if (value is not null)
        {
            json.WriteString(name, value);
        }
    }

    /// <summary>
    /// With a number (sub): <c>[#1] chat.room1 (5 bytes, zstd, reply to _INBOX.x)</c>; then a <c>Key: value</c>
    /// line per header value, then the payload as UTF-8 text (or how many bytes of binary it was). Without one
    /// (req's reply): the headers and the payload only.
    /// </summary>
    private static string Text(HeraldMessage message, long? number)
    {
        var text = new StringBuilder();
        if (number is { } n)
        {
            text.Append("[#").Append(n).Append("] ").Append(Escaped(message.Topic)).Append(" (").Append(message.Payload.Length).Append(message.Payload.Length == 1 ? " byte" : " bytes");
            if (message.WasCompressed)
            {
                text.Append(", zstd");
            }

            if (message.ReplyTo is { } replyTo)
            {
                text.Append(", reply to ").Append(Escaped(replyTo));
            }

            text.Append(")\n");
        }

        foreach ((string key, IReadOnlyList<string> values) in message.Headers)
        {
            foreach (string value in values)
            {
                text.Append(Escaped(key)).Append(": ").Append(Escaped(value)).Append('\n'); // a publisher's bytes never drive the terminal
            }
        }

        string? payload = AsText(message.Payload);
        text.Append(payload ?? $"<{message.Payload.Length} bytes of binary: --output raw or json shows them>");
        if (payload is null || !payload.EndsWith('\n'))
        {
            text.Append('\n');
        }

        return text.ToString();
    }

    /// <summary>
    /// <paramref name="text"/> as it may reach a terminal: every control character (C0, DEL, C1: escape sequences,
    /// carriage returns, bells) and every invisible direction or line mark as <c>\xNN</c> or <c>\u{NNNN}</c>. The same
    /// instance when there is none.
    /// </summary>
    internal static string Escaped(string text)
    {
        int first = 0;
        while (first < text.Length && !NeedsEscape(text[first]))
        {
            first++;
        }

        if (first == text.Length)
        {
            return text;
        }

        var escaped = new StringBuilder(text.Length + 8).Append(text, 0, first);
        foreach (char c in text.AsSpan(first))
        {
            if (NeedsEscape(c))
            {
                escaped.Append(c <= 0xFF ? $"\\x{(int)c:x2}" : $"\\u{{{(int)c:x4}}}");
            }
            else
            {
                escaped.Append(c);
            }
        }

        return escaped.ToString();
    }

    private static bool NeedsEscape(char c) => char.IsControl(c) || c is '\u2028' or '\u2029' or (>= '\u202A' and <= '\u202E') or (>= '\u2066' and <= '\u2069') or '\u200E' or '\u200F' or '\u061C';

    /// <summary>One line: <c>{"topic","reply_to","size","compressed","headers":{key:[values]},"payload"}</c>, <c>payload_base64</c> for binary.</summary>
    private static byte[] Json(HeraldMessage message)
    {
        var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer, JsonOptions))
        {
            json.WriteStartObject();
            json.WriteString("topic", message.Topic);
            if (message.ReplyTo is { } replyTo)
            {
                json.WriteString("reply_to", replyTo);
            }

            json.WriteNumber("size", message.Payload.Length);
            json.WriteBoolean("compressed", message.WasCompressed);
            json.WriteStartObject("headers");
            foreach ((string key, IReadOnlyList<string> values) in message.Headers)
            {
                json.WriteStartArray(key);
                foreach (string value in values)
                {
                    json.WriteStringValue(value);
                }

                json.WriteEndArray();
            }

            json.WriteEndObject();
            if (AsText(message.Payload) is { } payload)
            {
                json.WriteString("payload", payload);
            }
            else
            {
                json.WriteBase64String("payload_base64", message.Payload.Span);
            }

            json.WriteEndObject();
        }

        buffer.WriteByte((byte)'\n');
        return buffer.ToArray();
    }

    /// <summary>The payload as text when it is valid UTF-8 without control characters other than tab and line ends (a carriage return only before a newline; no direction marks: nothing that rewrites what was printed); else null.</summary>
    private static string? AsText(ReadOnlyMemory<byte> payload)
    {
        string text;
        try
        {
            text = StrictUtf8.GetString(payload.Span);
        }
        catch (DecoderFallbackException)
        {
            return null;
        }

        for (int i = 0; i < text.Length; i++)
        {
            char c = text[i];
            bool lineEnd = c == '\n' || c == '\t' || (c == '\r' && i + 1 < text.Length && text[i + 1] == '\n');
            if (!lineEnd && NeedsEscape(c))
            {
                return null;
            }
        }

        return text;
    }
}
