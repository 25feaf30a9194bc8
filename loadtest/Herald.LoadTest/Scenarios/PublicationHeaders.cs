using System.CommandLine;
using System.Globalization;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// The header block <c>--header-bytes N</c> puts on every publication of <c>fanout</c> and <c>stream</c>:
/// the keys a traced, typed message carries (a W3C <c>traceparent</c>, <c>content-type</c>, a
/// <c>message-id</c>, the <c>source</c>) as far as they fit, then an <c>x-padding</c> value that brings the
/// block to exactly N bytes in the target's own encoding (<see cref="ITarget.EncodeHeaders"/>: Herald's
/// MessagePack map, NATS's <c>NATS/1.0</c> lines), so every target carries the same number of header bytes.
/// Encoded once per run; the publisher sends the same bytes with every publication, and each subscriber
/// compares its first block in full and the length of every later one.
/// </summary>
internal static class PublicationHeaders
{
    /// <summary>Smallest non-zero <c>--header-bytes</c>: room for the padding key in every target's encoding.</summary>
    public const int MinimumBytes = 32;

    /// <summary>Largest <c>--header-bytes</c> the option takes (Herald's default <c>max_header_bytes</c> is 8 KiB: above, the broker refuses the block).</summary>
    public const int MaximumBytes = 64 * 1024;

    private const string PaddingKey = "x-padding";

    private static readonly KeyValuePair<string, string[]>[] Realistic =
    [
        new("traceparent", ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]),
        new("content-type", ["application/msgpack"]),
        new("message-id", ["01JD7Q5T9V8X2M4K6N3P0R1S2T"]),
        new("source", ["loadtest/publisher"]),
    ];

    /// <summary><c>--header-bytes</c> (default 0: no header block): 0, or <see cref="MinimumBytes"/> to <see cref="MaximumBytes"/>.</summary>
    public static readonly Option<int> Option = CreateOption();

    private static Option<int> CreateOption()
    {
        Option<int> option = OptionKinds.Integer("header-bytes", 0, 0, MaximumBytes,
            "a header block of exactly N encoded bytes on every publication, checked by every subscriber; 0 (none) or 32-65536 (herald and nats)");
        option.Validators.Add(result =>
        {
            // The token, not the value: a value out of the option's own range has no value to read.
            if (result.Tokens is [.., { Value: var text }] && int.TryParse(text, NumberStyles.Integer, CultureInfo.InvariantCulture, out int bytes) && bytes is > 0 and < MinimumBytes)
            {
                result.AddError(string.Create(CultureInfo.InvariantCulture, $"--header-bytes must be 0 (no headers) or {MinimumBytes} to {MaximumBytes}, got {bytes}."));
            }
        });
        return option;
    }

    /// <summary>
    /// The block of exactly <paramref name="bytes"/> bytes as <paramref name="target"/> encodes it; empty for 0.
    /// </summary>
    /// <exception cref="UsageException">The target carries no headers in this tool.</exception>
    public static byte[] Encode(ITarget target, int bytes)
    {
        if (bytes == 0)
        {
            return [];
        }

        List<KeyValuePair<string, string[]>> headers = [];
        foreach (KeyValuePair<string, string[]> header in Realistic)
        {
            if (target.EncodeHeaders([.. headers, header, Padding(PaddingKey, 0)]).Length <= bytes)
            {
                headers.Add(header);
            }
        }

        // Each padding character adds at least one byte; where a string's length prefix grows (MessagePack
        // fixstr to str8) one length skips a byte, and a longer key takes it instead.
        for (string key = PaddingKey; key.Length <= PaddingKey.Length + 3; key += "x")
        {
            int length = bytes - target.EncodeHeaders([.. headers, Padding(key, 0)]).Length;
            while (length >= 0)
            {
                byte[] block = target.EncodeHeaders([.. headers, Padding(key, length)]);
                if (block.Length == bytes)
                {
                    return block;
                }

                if (block.Length < bytes)
                {
                    break;
                }

                length--;
            }
        }

        throw new UsageException(string.Create(CultureInfo.InvariantCulture, $"--header-bytes {bytes}: no block of exactly that size on {target.Label}."));
    }

    private static KeyValuePair<string, string[]> Padding(string key, int length) => new(key, [new string('p', length)]);
}
