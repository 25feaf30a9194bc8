using System.Buffers;
using System.Buffers.Binary;
using System.Globalization;
using System.Text.Json;
using MessagePack;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// A message body shaped like the seeds' (a MessagePack array of a few counters, then N short strings),
/// serialized once per run. The counters (a sequence number, a room and a round) are written as fixed-width
/// uint32 so a sender stamps each copy in place and a receiver reads them without decoding the strings:
/// <code>
///   array(C + N) | 0xce u32 (counter 0) | ... | 0xce u32 (counter C-1) | str | str | ...
/// </code>
/// Immutable after construction; <see cref="Stamp"/> writes into the caller's buffer, so it is thread-safe.
/// </summary>
internal sealed class StampedPayload
{
    private const byte UInt32Code = 0xce;

    private readonly byte[] _template;
    private readonly int[] _offsets; // of each counter's 4 bytes

    public StampedPayload(int counters, int strings, int stringLength)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(counters);
        Strings = strings;
        StringLength = stringLength;
        var buffer = new ArrayBufferWriter<byte>();
        var writer = new MessagePackWriter(buffer);
        writer.WriteArrayHeader(counters + strings);
        writer.Flush();
        _offsets = new int[counters];
        for (int i = 0; i < counters; i++)
        {
            _offsets[i] = buffer.WrittenCount + 1;
            writer.WriteUInt32(0); // always the 5-byte form: fixed offsets
            writer.Flush();
        }

        for (int i = 0; i < strings; i++)
        {
            // "short strings" of printable text, different per position as a form's fields would be
            string prefix = string.Create(CultureInfo.InvariantCulture, $"field{i}:");
            writer.Write(prefix.Length >= stringLength ? prefix[..stringLength] : prefix + new string((char)('a' + (i % 26)), stringLength - prefix.Length));
        }

        writer.Flush();
        _template = buffer.WrittenSpan.ToArray();
        foreach (int offset in _offsets)
        {
            if (_template[offset - 1] != UInt32Code)
            {
                throw new InvalidOperationException("MessagePack wrote a counter in a compact form; stamps need the uint32 form.");
            }
        }
    }

    /// <summary>Bytes in every copy.</summary>
    public int Length => _template.Length;

    public int Strings { get; }

    public int StringLength { get; }

    /// <summary>Writes the body's shape into a result file's <c>"parameters"</c>: strings, their length, bytes.</summary>
    public void Write(Utf8JsonWriter json)
    {
        json.WriteNumber("strings", Strings);
        json.WriteNumber("stringLength", StringLength);
        json.WriteNumber("payloadBytes", Length);
    }

    /// <summary>A fresh copy of the body with every counter 0.</summary>
    public byte[] NewBuffer() => (byte[])_template.Clone();

    /// <summary>Writes counter <paramref name="index"/> into a copy made by <see cref="NewBuffer"/>.</summary>
    public void Stamp(Span<byte> copy, int index, uint value) => BinaryPrimitives.WriteUInt32BigEndian(copy[_offsets[index]..], value);

    /// <summary>Reads counter <paramref name="index"/> of a received body; false when the body is not one of ours (wrong size or shape).</summary>
    public bool TryRead(ReadOnlySpan<byte> received, int index, out uint value)
    {
        int offset = _offsets[index];
        if (received.Length != _template.Length || received[offset - 1] != UInt32Code)
        {
            value = 0;
            return false;
        }

        value = BinaryPrimitives.ReadUInt32BigEndian(received[offset..]);
        return true;
    }
}
