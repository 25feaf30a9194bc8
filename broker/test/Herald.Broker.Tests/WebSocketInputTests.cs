using System.Buffers;
using System.IO.Pipelines;
using Herald.Broker.Transports.WebSockets;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// The WebSocket input on a real pipe, read the way a session reads it (it waits for a whole Herald frame, examining
/// what is ready): a frame dripped in fragments of one byte each, with a Ping between them, is handed on whole and
/// right, and each of its bytes is moved at most once to join the others. Moving the bytes already received over
/// every new fragment header instead would move about n²/2 bytes for an n-byte frame (2 GB for the 64 KiB here):
/// CPU a client could take from every other one by dripping.
/// </summary>
public sealed class WebSocketInputTests(ITestOutputHelper output)
{
    [Fact]
    public async Task A_frame_dripped_in_one_byte_fragments_is_read_whole_and_each_byte_moved_at_most_once()
    {
        const int size = 64 * 1024;
        byte[] frame = new byte[size];
        new Random(7).NextBytes(frame);

        var wire = new Pipe(new PipeOptions(pauseWriterThreshold: 0, resumeWriterThreshold: 0, useSynchronizationContext: false));
        var pongs = new Pipe(new PipeOptions(pauseWriterThreshold: 0, resumeWriterThreshold: 0, useSynchronizationContext: false));
        using var answers = new WebSocketOutput(pongs.Writer);
        var input = new WebSocketInput(wire.Reader, answers);

        Task writing = Task.Run(async () =>
        {
            byte[] key = [0x11, 0x7C, 0xA3, 0x05];
            for (int i = 0; i < size; i++)
            {
                byte opcode = i == 0 ? (byte)0x2 : (byte)0x0;
                byte fin = i == size - 1 ? (byte)0x80 : (byte)0;
                Write(wire.Writer, (byte)(fin | opcode), [frame[i]], key);
                if (i == size / 2)
                {
                    Write(wire.Writer, 0x80 | 0x9, "mid-frame ping"u8, key); // a control frame between fragments
                }

                if (i % 4096 == 0)
                {
                    await wire.Writer.FlushAsync(); // many reads, some of them ending inside a header
                }
            }

            await wire.Writer.FlushAsync();
            await wire.Writer.CompleteAsync();
        });

        byte[] received = await ReadWhole(input, size);
        await writing;

        Assert.Equal(frame, received);
        output.WriteLine($"{size} bytes in {size} one-byte fragments: {input.MovedBytes} bytes moved");
        Assert.InRange(input.MovedBytes, 1, size);
        Assert.Null(input.Failure);
    }

    /// <summary>Waits, as a session does, until <paramref name="size"/> bytes are ready, examining what is there each time.</summary>
    private static async Task<byte[]> ReadWhole(PipeReader input, int size)
    {
        while (true)
        {
            ReadResult result = await input.ReadAsync();
            ReadOnlySequence<byte> buffer = result.Buffer;
            if (buffer.Length >= size)
            {
                byte[] whole = buffer.Slice(0, size).ToArray();
                input.AdvanceTo(buffer.GetPosition(size));
                return whole;
            }

            Assert.False(result.IsCompleted, $"the input ended with {buffer.Length} of {size} bytes");
            input.AdvanceTo(buffer.Start, buffer.End);
        }
    }

    /// <summary>Writes one masked client frame (payloads here are under 126 bytes).</summary>
    private static void Write(PipeWriter writer, byte first, ReadOnlySpan<byte> payload, byte[] key)
    {
        Span<byte> span = writer.GetSpan(6 + payload.Length);
        span[0] = first;
        span[1] = (byte)(0x80 | payload.Length);
        key.CopyTo(span[2..]);
        for (int i = 0; i < payload.Length; i++)
        {
            span[6 + i] = (byte)(payload[i] ^ key[i & 3]);
        }

        writer.Advance(6 + payload.Length);
    }
}
