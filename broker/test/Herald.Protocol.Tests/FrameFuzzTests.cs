using System.Buffers;
using System.Buffers.Binary;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>
/// Fuzz target for the reader and decoder: random mutations of the vectors, with a fixed seed so a failure
/// reproduces. The only failure allowed is <see cref="ProtocolException"/>; a failing input is printed in hex.
/// Input that is accepted is re-checked independently: re-encoded with <see cref="FrameWriter"/> and decoded
/// again, it must give the same fields.
/// </summary>
public class FrameFuzzTests
{
    private const int Seed = 0x4845_5241; // "HERA"
    private const int Iterations = 20_000;

    /// <summary>MessagePack codes that change how the following bytes are read, and length edges.</summary>
    private static readonly byte[] InterestingBytes =
    [
        0x00, 0x01, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xCA, 0xCB,
        0xCC, 0xCD, 0xCE, 0xCF, 0xD0, 0xD3, 0xD4, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF, 0xE0, 0xFF,
    ];

    [Fact]
    public void Mutated_vectors_fail_only_with_ProtocolException_and_accepted_ones_round_trip()
    {
        var random = new Random(Seed);
        // Mostly valid vectors, whose mutants reach deepest into the decoders; sometimes the others.
        byte[][] valid = VectorCatalog.All.Where(v => v.Kind == VectorKind.Valid).Select(v => v.Bytes).ToArray();
        byte[][] others = VectorCatalog.All.Where(v => v.Kind != VectorKind.Valid && v.Bytes.Length > 0).Select(v => v.Bytes).ToArray();
        int accepted = 0;
        for (int i = 0; i < Iterations; i++)
        {
            byte[][] seeds = random.Next(4) == 0 ? others : valid;
            byte[] input = Mutate(random, seeds[random.Next(seeds.Length)]);
            if (Check(input, random.Next(input.Length + 1)))
            {
                accepted++;
            }
        }

        // The mutations must not be so violent that nothing gets through to the field decoders.
        Assert.InRange(accepted, Iterations / 50, Iterations);
    }

    /// <summary>Feeds <paramref name="input"/> whole and split at <paramref name="splitAt"/>; returns whether a frame was decoded.</summary>
    private static bool Check(byte[] input, int splitAt)
    {
        string whole = Outcome(input, Sequences.Whole(input), VectorCatalog.MaxFrame, out DecodedFrame? frame);
        string split = Outcome(input, Sequences.SplitAt(input, splitAt), VectorCatalog.MaxFrame, out _);
        Assert.True(whole == split, $"Input {Hex(input)} split at {splitAt}:\nwhole {whole}\nsplit {split}");
        if (frame is null)
        {
            return false;
        }

        // Independent re-check: what FrameWriter makes of the decoded fields decodes to the same fields.
        byte[] again;
        try
        {
            again = FrameModel.Encode(frame);
        }
        catch (Exception e) when (e is not Xunit.Sdk.XunitException)
        {
            Assert.Fail($"Input {Hex(input)} was accepted as {FrameModel.Describe(frame)} but FrameWriter threw {e}");
            throw;
        }

        var buffer = Sequences.Whole(again);
        string reread = Outcome(again, buffer, int.MaxValue, out DecodedFrame? second);
        Assert.True(second is not null, $"Input {Hex(input)} was accepted as {FrameModel.Describe(frame)}; re-encoded as {Hex(again)} it gives {reread}");
        Assert.True(
            FrameModel.Describe(frame, emptyReplyToIsNil: true) == FrameModel.Describe(second, emptyReplyToIsNil: true),
            $"Input {Hex(input)}\ndecoded    {FrameModel.Describe(frame)}\nre-encoded {Hex(again)}\ndecoded    {FrameModel.Describe(second)}");
        return true;
    }

    /// <summary>Reads and decodes one frame; any exception but <see cref="ProtocolException"/> fails the test.</summary>
    private static string Outcome(byte[] input, ReadOnlySequence<byte> sequence, int maxFrame, out DecodedFrame? frame)
    {
        frame = null;
        ReadOnlySequence<byte> buffer = sequence;
        try
        {
            if (!FrameReader.TryReadFrame(ref buffer, maxFrame, out ReadOnlySequence<byte> body))
            {
                Assert.True(buffer.Start.Equals(sequence.Start) && buffer.End.Equals(sequence.End), $"Input {Hex(input)}: TryReadFrame returned false but moved the buffer");
                return "need more data";
            }

            Assert.True(sequence.Length - buffer.Length == ProtocolConstants.LengthPrefixSize + body.Length, $"Input {Hex(input)}: consumed bytes do not match the body");
            frame = FrameModel.Decode(body);
            return FrameModel.Describe(frame) + $" with {buffer.Length} bytes left";
        }
        catch (ProtocolException e)
        {
            frame = null;
            return $"error {e.Code}";
        }
        catch (Exception e) when (e is not Xunit.Sdk.XunitException)
        {
            Assert.Fail($"Input {Hex(input)} threw {e.GetType().Name} instead of ProtocolException: {e}");
            throw;
        }
    }

    private static byte[] Mutate(Random random, byte[] seed)
    {
        var data = new List<byte>(seed);
        int operations = 1 + random.Next(3);
        for (int op = 0; op < operations; op++)
        {
            int at = data.Count == 0 ? 0 : random.Next(data.Count);
            switch (random.Next(8))
            {
                case 0 when data.Count > 0: // flip one bit
                    data[at] ^= (byte)(1 << random.Next(8));
                    break;
                case 1 when data.Count > 0: // overwrite one byte
                    data[at] = Any(random);
                    break;
                case 2: // truncate
                    data.RemoveRange(at, data.Count - at);
                    break;
                case 3: // extend
                    for (int n = 1 + random.Next(8); n > 0; n--)
                    {
                        data.Add(Any(random));
                    }

                    break;
                case 4: // insert
                    data.Insert(at, Any(random));
                    break;
                case 5 when data.Count > 0: // delete
                    data.RemoveAt(at);
                    break;
                case 6 when data.Count >= 4: // change the length prefix
                    uint length = random.Next(4) switch
                    {
                        0 => (uint)random.NextInt64(0, 1L << 32),
                        1 => (uint)(VectorCatalog.MaxFrame + random.Next(-1, 2)),
                        _ => (uint)Math.Max(0, data.Count - 4 + random.Next(-3, 4)),
                    };
                    WritePrefix(data, length);
                    break;
                default: // overwrite with a MessagePack code
                    if (data.Count > 4)
                    {
                        data[4 + random.Next(data.Count - 4)] = InterestingBytes[random.Next(InterestingBytes.Length)];
                    }

                    break;
            }
        }

        // Half the time make the prefix agree with the mutated body, so the decoder sees it.
        if (data.Count >= 4 && random.Next(2) == 0)
        {
            WritePrefix(data, (uint)(data.Count - 4));
        }

        return [.. data];
    }

    private static byte Any(Random random) =>
        random.Next(2) == 0 ? InterestingBytes[random.Next(InterestingBytes.Length)] : (byte)random.Next(256);

    private static void WritePrefix(List<byte> data, uint length)
    {
        Span<byte> prefix = stackalloc byte[4];
        BinaryPrimitives.WriteUInt32BigEndian(prefix, length);
        for (int i = 0; i < 4; i++)
        {
            data[i] = prefix[i];
        }
    }

    private static string Hex(byte[] bytes) => Convert.ToHexStringLower(bytes);
}
