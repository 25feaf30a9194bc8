using System.Buffers;
using System.IO.Pipelines;
using Herald.Protocol;

namespace Herald.Broker.Delivery;

/// <summary>
/// The one per-subscriber step of every transport: copy a shared frame into that subscriber's output
/// and, for a MESSAGE, stamp its sid into the copy (spec §4.6). The shared bytes are never touched.
/// </summary>
internal static class FrameCopy
{
    /// <summary>sids start at 1 (spec §4.3): 0 marks a control frame, copied as is.</summary>
    public const uint ControlSid = 0;

    private const int SmallFrame = 4096;

    public static void Write(IBufferWriter<byte> output, ReadOnlySpan<byte> frame, uint sid)
    {
        if (sid == ControlSid)
        {
            output.Write(frame);
            return;
        }

        if (frame.Length <= SmallFrame)
        {
            Span<byte> span = output.GetSpan(frame.Length);
            frame.CopyTo(span);
            FrameWriter.StampSid(span, sid);
            output.Advance(frame.Length);
            return;
        }

        Span<byte> header = stackalloc byte[ProtocolConstants.MessageHeaderSize];
        frame[..ProtocolConstants.MessageHeaderSize].CopyTo(header);
        FrameWriter.StampSid(header, sid);
        output.Write(header);
        output.Write(frame[ProtocolConstants.MessageHeaderSize..]);
    }

    /// <summary>A window take's frames into <paramref name="output"/>, flushed every <see cref="FlushEvery"/> bytes so no response is held whole.</summary>
    public static async Task WriteAllAsync(PipeWriter output, WindowTake take)
    {
        for (int i = 0; i < take.Count; i++)
        {
            Write(output, take.Frames[i].Frame.Span, take.Frames[i].Sid);
            if (output.UnflushedBytes >= FlushEvery)
            {
                await output.FlushAsync().ConfigureAwait(false);
            }
        }

        await output.FlushAsync().ConfigureAwait(false);
    }

    /// <summary>How much a streamed body may hold before it is flushed to the socket.</summary>
    public const int FlushEvery = 64 * 1024;
}
