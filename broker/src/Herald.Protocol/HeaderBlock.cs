using System.Buffers;
using System.Text;
using System.Text.Unicode;
using MessagePack;

namespace Herald.Protocol;

/// <summary>
/// A message's header block (spec §4.9): a MessagePack map from key to an array of one or more values.
/// <code>
/// { key: str, ... }            key: 1-256 bytes of HTTP token characters (RFC 9110 tchar), case kept,
///   -> [ value: str, ... ]          unique ignoring ASCII case; "Herald-..." is the broker's
///                              value: any UTF-8, empty allowed, no CR or LF; at least one per key
/// </code>
/// The block travels as it was published, byte for byte: the broker validates it once per publication
/// (<see cref="Validate"/>: one bounded pass, no allocation but a pooled array for many keys) and never
/// re-encodes it.
/// </summary>
public static class HeaderBlock
{
    /// <summary>Prefix of the keys only the broker sets (ASCII case-insensitive, spec §4.9).</summary>
    public const string ReservedPrefix = "Herald-";

    /// <summary>Longest key, in bytes.</summary>
    public const int MaxKeyBytes = 256;

    // RFC 9110 §5.6.2 tchar: what an HTTP field name is made of.
    private static readonly SearchValues<byte> TokenChars = SearchValues.Create("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"u8);

    private const int StackKeys = 32;

    /// <summary>
    /// Checks the shape of a header block (one encoded MessagePack map, whole) and returns how many values it
    /// holds; <paramref name="reservedKey"/> is its first key under <see cref="ReservedPrefix"/>, or null.
    /// A shape error is <see cref="ErrorCode.MalformedFrame"/>.
    /// </summary>
    public static int Validate(in ReadOnlySequence<byte> block, out string? reservedKey)
    {
        // One contiguous span (copied only when a frame straddled two reads): keys are compared in place.
        ReadOnlyMemory<byte> bytes = block.IsSingleSegment ? block.First : block.ToArray();
        var reader = new MessagePackReader(bytes);
        reservedKey = null;
        if (reader.NextMessagePackType != MessagePackType.Map)
        {
            ThrowHelper.ThrowMalformed("Field headers is not a MessagePack map.");
        }

        int keys = reader.ReadMapHeader();
        int[]? rented = null;
        Span<int> spans = keys <= StackKeys ? stackalloc int[2 * StackKeys] : (rented = ArrayPool<int>.Shared.Rent(2 * keys));
        long[]? rentedOrder = null;
        Span<long> order = keys <= StackKeys ? stackalloc long[StackKeys] : (rentedOrder = ArrayPool<long>.Shared.Rent(keys));
        try
        {
            int values = 0;
            ReadOnlySpan<byte> all = bytes.Span;
            for (int i = 0; i < keys; i++)
            {
                if (reader.NextMessagePackType != MessagePackType.String)
                {
                    ThrowHelper.ThrowMalformed("A header key is not a MessagePack str.");
                }

                int length = reader.ReadStringSequence()!.Value.FirstSpan.Length;
                int start = (int)reader.Consumed - length;
                ReadOnlySpan<byte> key = all.Slice(start, length);
                if (key.IsEmpty || key.Length > MaxKeyBytes || key.IndexOfAnyExcept(TokenChars) >= 0)
                {
                    ThrowHelper.ThrowMalformed($"Header key '{Printable(key)}' is not 1 to {MaxKeyBytes} bytes of HTTP token characters.");
                }

                if (reservedKey is null && key.Length >= ReservedPrefix.Length && Ascii.EqualsIgnoreCase(key[..ReservedPrefix.Length], "Herald-"u8))
                {
                    reservedKey = Encoding.ASCII.GetString(key);
                }

                spans[2 * i] = start;
                spans[(2 * i) + 1] = length;
                order[i] = ((long)FoldedHash(key) << 32) | (uint)i;
                if (reader.NextMessagePackType != MessagePackType.Array)
                {
                    ThrowHelper.ThrowMalformed($"Header '{Printable(key)}' has no array of values.");
                }

                int count = reader.ReadArrayHeader();
                if (count == 0)
                {
                    ThrowHelper.ThrowMalformed($"Header '{Printable(key)}' has no value; a key has one or more.");
                }

                for (int v = 0; v < count; v++)
                {
                    if (reader.NextMessagePackType != MessagePackType.String)
                    {
                        ThrowHelper.ThrowMalformed($"A value of header '{Printable(key)}' is not a MessagePack str.");
                    }

                    ReadOnlySpan<byte> value = reader.ReadStringSequence()!.Value.FirstSpan;
                    if (!Utf8.IsValid(value) || value.IndexOfAny((byte)'\r', (byte)'\n') >= 0)
                    {
                        ThrowHelper.ThrowMalformed($"A value of header '{Printable(key)}' is not UTF-8 without CR and LF.");
                    }
                }

                values += count;
            }

            if (!reader.End)
            {
                ThrowHelper.ThrowMalformed("Bytes follow the header map.");
            }

            RequireUniqueKeys(all, spans[..(2 * keys)], order[..keys]);
            return values;
        }
        finally
        {
            if (rented is not null)
            {
                ArrayPool<int>.Shared.Return(rented);
                ArrayPool<long>.Shared.Return(rentedOrder!);
            }
        }
    }

    /// <summary>Two keys equal ignoring ASCII case are a duplicate: sorted by folded hash, only neighbours are compared (O(n log n)).</summary>
    private static void RequireUniqueKeys(ReadOnlySpan<byte> all, ReadOnlySpan<int> spans, Span<long> order)
    {
        order.Sort();
        for (int i = 1; i < order.Length; i++)
        {
            for (int j = i - 1; j >= 0 && (order[j] >> 32) == (order[i] >> 32); j--)
            {
                ReadOnlySpan<byte> a = Key(all, spans, (int)(uint)order[i]);
                if (Ascii.EqualsIgnoreCase(a, Key(all, spans, (int)(uint)order[j])))
                {
                    ThrowHelper.ThrowMalformed($"Header key '{Printable(a)}' appears twice (keys are compared ignoring ASCII case).");
                }
            }
        }
    }

    private static ReadOnlySpan<byte> Key(ReadOnlySpan<byte> all, ReadOnlySpan<int> spans, int index) => all.Slice(spans[2 * index], spans[(2 * index) + 1]);

    private static uint FoldedHash(ReadOnlySpan<byte> key)
    {
        uint hash = 2166136261;
        foreach (byte b in key)
        {
            hash = (hash ^ (uint)(b is >= (byte)'A' and <= (byte)'Z' ? b | 0x20 : b)) * 16777619;
        }

        return hash;
    }

    private static string Printable(ReadOnlySpan<byte> key) =>
        key.Length > 64 ? Encoding.UTF8.GetString(key[..64]) + "..." : Encoding.UTF8.GetString(key);

    /// <summary>
    /// Copies the first value of <paramref name="key"/> (compared ignoring ASCII case, as keys are unique) from a
    /// header block that <see cref="Validate"/> accepted into <paramref name="destination"/>. False when the key
    /// is absent or its value is longer than <paramref name="destination"/>. Allocates nothing: the broker reads
    /// a traced publication's <c>traceparent</c> with it.
    /// </summary>
    public static bool TryCopyFirstValue(in ReadOnlySequence<byte> block, ReadOnlySpan<byte> key, Span<byte> destination, out int written)
    {
        written = 0;
        var reader = new MessagePackReader(block);
        int keys = reader.ReadMapHeader();
        for (int i = 0; i < keys; i++)
        {
            ReadOnlySequence<byte> name = reader.ReadStringSequence()!.Value;
            int values = reader.ReadArrayHeader();
            if (name.Length == key.Length && EqualsIgnoreCase(name, key))
            {
                ReadOnlySequence<byte> value = reader.ReadStringSequence()!.Value;
                if (value.Length > destination.Length)
                {
                    return false;
                }

                value.CopyTo(destination);
                written = (int)value.Length;
                return true;
            }

            for (int v = 0; v < values; v++)
            {
                reader.Skip();
            }
        }

        return false;
    }

    private static bool EqualsIgnoreCase(in ReadOnlySequence<byte> name, ReadOnlySpan<byte> key)
    {
        if (name.IsSingleSegment)
        {
            return Ascii.EqualsIgnoreCase(name.FirstSpan, key);
        }

        Span<byte> copy = stackalloc byte[MaxKeyBytes];
        name.CopyTo(copy);
        return Ascii.EqualsIgnoreCase(copy[..key.Length], key);
    }

    /// <summary>Decodes a header block that <see cref="Validate"/> accepted: keys in encoded order, each with its values.</summary>
    public static List<KeyValuePair<string, string[]>> Read(in ReadOnlySequence<byte> block)
    {
        var reader = new MessagePackReader(block);
        int keys = reader.ReadMapHeader();
        var result = new List<KeyValuePair<string, string[]>>(keys);
        for (int i = 0; i < keys; i++)
        {
            string key = reader.ReadString()!;
            string[] values = new string[reader.ReadArrayHeader()];
            for (int v = 0; v < values.Length; v++)
            {
                values[v] = reader.ReadString()!;
            }

            result.Add(new(key, values));
        }

        return result;
    }

    /// <summary>
    /// Encodes headers as a block (keys in the given order). Not checked here: the receiver's
    /// <see cref="Validate"/> judges it, so a sender may check with it before sending.
    /// </summary>
    public static byte[] Encode(IEnumerable<KeyValuePair<string, string[]>> headers)
    {
        ArgumentNullException.ThrowIfNull(headers);
        var output = new ArrayBufferWriter<byte>();
        var writer = new MessagePackWriter(output);
        KeyValuePair<string, string[]>[] all = [.. headers];
        writer.WriteMapHeader(all.Length);
        foreach ((string key, string[] values) in all)
        {
            writer.Write(key);
            writer.WriteArrayHeader(values.Length);
            foreach (string value in values)
            {
                writer.Write(value);
            }
        }

        writer.Flush();
        return output.WrittenSpan.ToArray();
    }

    /// <summary>
    /// A block holding every entry of <paramref name="block"/> (empty: none), byte for byte, followed by one
    /// single-valued entry per pair of <paramref name="extra"/>: how the broker stamps its own keys (a history
    /// position, spec §13) onto a publication, once per publication. The caller knows the keys are not there yet
    /// (published blocks never hold a <see cref="ReservedPrefix"/> key).
    /// </summary>
    public static byte[] Append(in ReadOnlySequence<byte> block, ReadOnlySpan<KeyValuePair<string, string>> extra)
    {
        int keys = 0;
        ReadOnlySequence<byte> entries = ReadOnlySequence<byte>.Empty;
        if (!block.IsEmpty)
        {
            var reader = new MessagePackReader(block);
            keys = reader.ReadMapHeader();
            entries = block.Slice(reader.Position);
        }

        var output = new ArrayBufferWriter<byte>((int)entries.Length + 16 + (extra.Length * 48));
        var writer = new MessagePackWriter(output);
        writer.WriteMapHeader(keys + extra.Length);
        writer.Flush();
        foreach (ReadOnlyMemory<byte> segment in entries)
        {
            output.Write(segment.Span);
        }

        writer = new MessagePackWriter(output);
        foreach ((string key, string value) in extra)
        {
            writer.Write(key);
            writer.WriteArrayHeader(1);
            writer.Write(value);
        }

        writer.Flush();
        return output.WrittenSpan.ToArray();
    }
}
