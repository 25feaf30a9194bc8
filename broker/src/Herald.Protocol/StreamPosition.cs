using System.Buffers;
using System.Globalization;
using System.Text;

namespace Herald.Protocol;

/// <summary>
/// A message's place in its topic's history (spec §13): the offset the broker gave it, counted from 1 per topic,
/// and the epoch of the history that holds it. A new epoch means the history was lost (a restart, an eviction):
/// an offset of an older epoch names nothing any more. A SUBSCRIBE's <c>since</c> is one of these; an empty
/// <see cref="Epoch"/> there means "I have no position: start from now, and tell me where that is".
/// </summary>
public readonly record struct StreamPosition(ulong Offset, string Epoch)
{
    /// <summary>Longest epoch on the wire, in bytes (a longer one is <c>MalformedFrame</c>).</summary>
    public const int MaxEpochBytes = 64;

    /// <summary>The header naming a delivered message's offset (spec §13).</summary>
    public const string OffsetHeader = "Herald-Offset";

    /// <summary>The header naming a delivered message's epoch (spec §13).</summary>
    public const string EpochHeader = "Herald-Epoch";

    /// <summary>The header of a broker status MESSAGE (spec §7, §13).</summary>
    public const string StatusHeader = "Herald-Status";

    /// <summary>The header explaining a broker status MESSAGE.</summary>
    public const string DescriptionHeader = "Herald-Description";

    /// <summary>A resume status: every message after the position follows, then the live stream.</summary>
    public const string Recovered = "200";

    /// <summary>A resume status: what was missed cannot be replayed (history lost, too old, or none kept); the live stream follows.</summary>
    public const string NotRecovered = "410";

    /// <summary>Whether this asks for "from now" (no position yet).</summary>
    public bool IsNone => Epoch.Length == 0;

    public override string ToString() => IsNone ? "(none)" : $"{Offset}@{Epoch}";

    /// <summary>
    /// Reads the position a broker stamped into a delivered message's header block, if it carries one (spec §13).
    /// </summary>
    public static bool TryRead(in ReadOnlySequence<byte> headers, out StreamPosition position)
    {
        position = default;
        if (headers.IsEmpty)
        {
            return false;
        }

        Span<byte> offset = stackalloc byte[20];
        Span<byte> epoch = stackalloc byte[MaxEpochBytes];
        if (!HeaderBlock.TryCopyFirstValue(headers, "Herald-Offset"u8, offset, out int offsetLength)
            || !HeaderBlock.TryCopyFirstValue(headers, "Herald-Epoch"u8, epoch, out int epochLength)
            || epochLength == 0
            || !ulong.TryParse(offset[..offsetLength], NumberStyles.None, CultureInfo.InvariantCulture, out ulong value))
        {
            return false;
        }

        position = new StreamPosition(value, Encoding.ASCII.GetString(epoch[..epochLength]));
        return true;
    }
}
