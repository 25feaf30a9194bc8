using System.Buffers;

namespace Herald.Protocol;

/// <summary>
/// The Fossil delta format (spec §11.2): a target's size, copy and insert commands against a source, and the
/// target's checksum. <see cref="TryCreate"/> makes the same bytes as fossil-scm's delta.c as ported by npm
/// <c>fossil-delta</c> 2.0.0; <see cref="Apply(ReadOnlySpan{byte}, ReadOnlySpan{byte}, int)"/> refuses a delta
/// whose declared size passes the caller's limit before it allocates anything, and reports a malformed delta or
/// a checksum mismatch as <see cref="ErrorCode.DecompressionFailed"/>, never another exception.
/// </summary>
/// <remarks>No maintained .NET package implements the format, so it lives here, shared by the broker and the .NET client.</remarks>
public static class FossilDelta
{
    /// <summary>Width of the rolling hash window, in bytes (a power of two).</summary>
    private const int HashWidth = 16;

    /// <summary>How many candidate source blocks one target position is matched against.</summary>
    private const int MaxCandidates = 250;

    private static ReadOnlySpan<byte> Digits => "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"u8;

    /// <summary>
    /// Writes the delta that turns <paramref name="source"/> into <paramref name="target"/> into
    /// <paramref name="destination"/>. Returns false, having written an unspecified prefix, when the delta does
    /// not fit: a destination as long as the target asks "is the delta smaller than the message?" for free.
    /// </summary>
    public static bool TryCreate(ReadOnlySpan<byte> source, ReadOnlySpan<byte> target, Span<byte> destination, out int written)
    {
        var output = new SpanOutput(destination);
        int lenOut = target.Length;
        int lenSrc = source.Length;
        output.PutInt((uint)lenOut);
        output.PutByte((byte)'\n');
        if (lenSrc <= HashWidth)
        {
            // No copy could ever pay: one literal insert of the whole target.
            output.PutInt((uint)lenOut);
            output.PutByte((byte)':');
            output.PutBytes(target);
            return Finish(ref output, target, out written);
        }

        int nHash = (lenSrc + HashWidth - 1) / HashWidth;
        int[] tables = ArrayPool<int>.Shared.Rent(2 * nHash);
        try
        {
            Span<int> collide = tables.AsSpan(0, nHash);
            Span<int> landmark = tables.AsSpan(nHash, nHash);
            collide.Fill(-1);
            landmark.Fill(-1);
            var hash = new RollingHash();
            for (int i = 0; i < lenSrc - HashWidth; i += HashWidth)
            {
                hash.Init(source, i);
                int hv = (int)(hash.Value % (uint)nHash);
                collide[i / HashWidth] = landmark[hv];
                landmark[hv] = i / HashWidth;
            }

            int at = 0;
            while (at + HashWidth < lenOut && output.Ok)
            {
                int bestOffset = 0, bestLiteral = 0, bestCount = 0;
                hash.Init(target, at);
                int i = 0;
                while (true)
                {
                    int limit = MaxCandidates;
                    int block = landmark[(int)(hash.Value % (uint)nHash)];
                    while (block >= 0 && limit-- > 0)
                    {
                        int sourceAt = block * HashWidth;
                        int j = 0;
                        for (int x = sourceAt, y = at + i; x < lenSrc && y < lenOut && source[x] == target[y]; x++, y++)
                        {
                            j++;
                        }

                        j--;
                        int k = 1;
                        while (k < sourceAt && k <= i && source[sourceAt - k] == target[at + i - k])
                        {
                            k++;
                        }

                        k--;
                        int offset = sourceAt - k;
                        int count = j + k + 1;
                        int literal = i - k;
                        int cost = DigitCount(literal) + DigitCount(count) + DigitCount(offset) + 3;
                        if (count >= cost && count > bestCount)
                        {
                            bestCount = count;
                            bestOffset = offset;
                            bestLiteral = literal;
                        }

                        block = collide[block];
                    }

                    if (bestCount > 0)
                    {
                        if (bestLiteral > 0)
                        {
                            output.PutInt((uint)bestLiteral);
                            output.PutByte((byte)':');
                            output.PutBytes(target.Slice(at, bestLiteral));
                            at += bestLiteral;
                        }

                        at += bestCount;
                        output.PutInt((uint)bestCount);
                        output.PutByte((byte)'@');
                        output.PutInt((uint)bestOffset);
                        output.PutByte((byte)',');
                        break;
                    }

                    if (at + i + HashWidth >= lenOut)
                    {
                        output.PutInt((uint)(lenOut - at));
                        output.PutByte((byte)':');
                        output.PutBytes(target.Slice(at));
                        at = lenOut;
                        break;
                    }

                    hash.Next(target[at + i + HashWidth]);
                    i++;
                }
            }

            if (at < lenOut)
            {
                output.PutInt((uint)(lenOut - at));
                output.PutByte((byte)':');
                output.PutBytes(target.Slice(at));
            }

            return Finish(ref output, target, out written);
        }
        finally
        {
            ArrayPool<int>.Shared.Return(tables);
        }
    }

    /// <summary>
    /// Reads the target size a delta declares. False when the delta does not start with a size line; the caller
    /// compares the size with its limit before allocating the target.
    /// </summary>
    public static bool TryGetTargetSize(ReadOnlySpan<byte> delta, out int size)
    {
        int pos = 0;
        if (!TryGetInt(delta, ref pos, out long declared) || declared > int.MaxValue || pos >= delta.Length || delta[pos] != (byte)'\n')
        {
            size = 0;
            return false;
        }

        size = (int)declared;
        return true;
    }

    /// <summary>
    /// Applies <paramref name="delta"/> to <paramref name="source"/> into <paramref name="destination"/>, which
    /// must be exactly the declared target size (<see cref="TryGetTargetSize"/>). Returns null on success, else
    /// why the delta is refused (malformed, a copy past the source, a size or checksum mismatch).
    /// </summary>
    public static string? TryApply(ReadOnlySpan<byte> source, ReadOnlySpan<byte> delta, Span<byte> destination)
    {
        int pos = 0;
        if (!TryGetInt(delta, ref pos, out long limit) || pos >= delta.Length || delta[pos++] != (byte)'\n')
        {
            return "the delta's size line is malformed";
        }

        if (limit != destination.Length)
        {
            return "the destination is not the delta's declared size";
        }

        int total = 0;
        while (pos < delta.Length)
        {
            if (!TryGetInt(delta, ref pos, out long count) || pos >= delta.Length)
            {
                return "the delta is truncated";
            }

            switch (delta[pos++])
            {
                case (byte)'@':
                    if (!TryGetInt(delta, ref pos, out long offset) || pos >= delta.Length || delta[pos++] != (byte)',')
                    {
                        return "a copy command is malformed";
                    }

                    if (count > limit - total)
                    {
                        return "a copy passes the declared size";
                    }

                    if (offset > source.Length - count)
                    {
                        return "a copy passes the end of the source";
                    }

                    source.Slice((int)offset, (int)count).CopyTo(destination.Slice(total));
                    total += (int)count;
                    break;
                case (byte)':':
                    if (count > limit - total)
                    {
                        return "an insert passes the declared size";
                    }

                    if (count > delta.Length - pos)
                    {
                        return "an insert passes the end of the delta";
                    }

                    delta.Slice(pos, (int)count).CopyTo(destination.Slice(total));
                    pos += (int)count;
                    total += (int)count;
                    break;
                case (byte)';':
                    if (total != limit)
                    {
                        return "the delta makes fewer bytes than it declared";
                    }

                    return (uint)count == Checksum(destination) ? null : "the checksum does not match";
                default:
                    return "unknown delta command";
            }
        }

        return "the delta has no checksum";
    }

    /// <summary>
    /// Applies <paramref name="delta"/> to <paramref name="source"/> and returns the target, refusing one whose
    /// declared size is over <paramref name="maxTargetSize"/> before allocating it.
    /// </summary>
    /// <exception cref="ProtocolException"><see cref="ErrorCode.DecompressionFailed"/> for any delta that cannot be applied.</exception>
    public static byte[] Apply(ReadOnlySpan<byte> source, ReadOnlySpan<byte> delta, int maxTargetSize)
    {
        if (!TryGetTargetSize(delta, out int size))
        {
            ThrowHelper.Throw(ErrorCode.DecompressionFailed, "Delta's size line is malformed.");
        }

        if (size > maxTargetSize)
        {
            ThrowHelper.Throw(ErrorCode.DecompressionFailed, $"Delta declares {size} bytes, over the limit of {maxTargetSize}.");
        }

        byte[] target = size == 0 ? [] : new byte[size];
        if (TryApply(source, delta, target) is { } error)
        {
            ThrowHelper.Throw(ErrorCode.DecompressionFailed, $"Delta refused: {error}.");
        }

        return target;
    }

    /// <summary>The format's 32-bit checksum: big-endian 32-bit words summed, then the tail bytes.</summary>
    internal static uint Checksum(ReadOnlySpan<byte> data)
    {
        uint sum0 = 0, sum1 = 0, sum2 = 0, sum3 = 0;
        int z = 0;
        int n = data.Length;
        while (n >= 4)
        {
            sum0 += data[z];
            sum1 += data[z + 1];
            sum2 += data[z + 2];
            sum3 += data[z + 3];
            z += 4;
            n -= 4;
        }

        sum3 += (sum2 << 8) + (sum1 << 16) + (sum0 << 24);
        switch (n)
        {
            case 3:
                sum3 += (uint)data[z + 2] << 8;
                sum3 += (uint)data[z + 1] << 16;
                sum3 += (uint)data[z] << 24;
                break;
            case 2:
                sum3 += (uint)data[z + 1] << 16;
                sum3 += (uint)data[z] << 24;
                break;
            case 1:
                sum3 += (uint)data[z] << 24;
                break;
        }

        return sum3;
    }

    private static bool Finish(ref SpanOutput output, ReadOnlySpan<byte> target, out int written)
    {
        output.PutInt(Checksum(target));
        output.PutByte((byte)';');
        written = output.Ok ? output.Position : 0;
        return output.Ok;
    }

    /// <summary>Digits of <paramref name="value"/> in the format's base 64.</summary>
    private static int DigitCount(int value)
    {
        int i = 1;
        for (long x = 64; value >= x; i++, x <<= 6)
        {
        }

        return i;
    }

    /// <summary>Reads a base-64 integer of at most 32 bits: false when there is no digit or it overflows.</summary>
    private static bool TryGetInt(ReadOnlySpan<byte> delta, ref int pos, out long value)
    {
        long v = 0;
        int start = pos;
        while (pos < delta.Length && DigitValue(delta[pos]) is var d and >= 0)
        {
            v = (v << 6) + d;
            if (v > uint.MaxValue)
            {
                value = 0;
                return false;
            }

            pos++;
        }

        value = v;
        return pos > start;
    }

    private static int DigitValue(byte c) => c switch
    {
        >= (byte)'0' and <= (byte)'9' => c - '0',
        >= (byte)'A' and <= (byte)'Z' => c - 'A' + 10,
        (byte)'_' => 36,
        >= (byte)'a' and <= (byte)'z' => c - 'a' + 37,
        (byte)'~' => 63,
        _ => -1,
    };

    /// <summary>The format's rolling hash over a <see cref="HashWidth"/>-byte window.</summary>
    private struct RollingHash
    {
        private uint _a;
        private uint _b;
        private int _i;
        private Window _z;

        public readonly uint Value => (_a & 0xffff) | ((_b & 0xffff) << 16);

        public void Init(ReadOnlySpan<byte> data, int pos)
        {
            uint a = 0, b = 0;
            _z = default;
            for (int i = 0; i < HashWidth; i++)
            {
                byte x = data[pos + i];
                a = (a + x) & 0xffff;
                b = (b + ((uint)(HashWidth - i) * x)) & 0xffff;
                _z[i] = x;
            }

            _a = a;
            _b = b;
            _i = 0;
        }

        public void Next(byte c)
        {
            byte old = _z[_i];
            _z[_i] = c;
            _i = (_i + 1) & (HashWidth - 1);
            _a = (_a - old + c) & 0xffff;
            _b = (_b - (HashWidth * (uint)old) + _a) & 0xffff;
        }
    }

    /// <summary>The hash window's bytes, inline.</summary>
    private struct Window
    {
        private ulong _lo;
        private ulong _hi;

        public byte this[int i]
        {
            readonly get => (byte)((i < 8 ? _lo >> (8 * i) : _hi >> (8 * (i - 8))) & 0xff);
            set
            {
                if (i < 8)
                {
                    _lo = (_lo & ~(0xffUL << (8 * i))) | ((ulong)value << (8 * i));
                }
                else
                {
                    _hi = (_hi & ~(0xffUL << (8 * (i - 8)))) | ((ulong)value << (8 * (i - 8)));
                }
            }
        }
    }

    /// <summary>Writes into a fixed span; once something does not fit, <see cref="Ok"/> stays false.</summary>
    private ref struct SpanOutput(Span<byte> destination)
    {
        private readonly Span<byte> _destination = destination;

        public int Position { get; private set; }

        public bool Ok { get; private set; } = true;

        public void PutByte(byte b)
        {
            if (Position < _destination.Length)
            {
                _destination[Position++] = b;
            }
            else
            {
                Ok = false;
            }
        }

        public void PutBytes(ReadOnlySpan<byte> bytes)
        {
            if (bytes.Length <= _destination.Length - Position)
            {
                bytes.CopyTo(_destination.Slice(Position));
                Position += bytes.Length;
            }
            else
            {
                Ok = false;
            }
        }

        public void PutInt(uint v)
        {
            if (v == 0)
            {
                PutByte((byte)'0');
                return;
            }

            Span<byte> digits = stackalloc byte[6];
            int n = 0;
            for (; v > 0; v >>= 6)
            {
                digits[n++] = Digits[(int)(v & 0x3f)];
            }

            while (n > 0)
            {
                PutByte(digits[--n]);
            }
        }
    }
}
