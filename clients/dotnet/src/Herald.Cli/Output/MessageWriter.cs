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
    /// With a number (sub): <c>[#1] chat.room1 (5 bytes, zstd, reply to _INBOX.x)</c>; then a <c>Key: value</c>
    /// line per header value, then the payload as UTF-8 text (or how many bytes of binary it was). Without one
    /// (req's reply): the headers and the payload only.
    /// </summary>
    private static string Text(HeraldMessage message, long? number)
    {
        var text = new StringBuilder();
        if (number is { } n)
        {
            text.Append("[#").Append(n).Append("] ").Append(message.Topic).Append(" (").Append(message.Payload.Length).Append(message.Payload.Length == 1 ? " byte" : " bytes");
            if (message.WasCompressed)
            {
                text.Append(", zstd");
            }

            if (message.ReplyTo is { } replyTo)
            {
                text.Append(", reply to ").Append(replyTo);
            }

            text.Append(")\n");
        }

        foreach ((string key, IReadOnlyList<string> values) in message.Headers)
        {
            foreach (string value in values)
            {
                text.Append(key).Append(": ").Append(value).Append('\n');
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

    /// <summary>The payload as text when it is valid UTF-8 without control characters other than tab and line ends; else null.</summary>
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

        foreach (char c in text)
        {
            if (char.IsControl(c) && c is not ('\t' or '\n' or '\r'))
            {
                return null;
            }
        }

        return text;
    }
}
