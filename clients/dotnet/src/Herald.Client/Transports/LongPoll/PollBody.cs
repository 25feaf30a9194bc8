using System.Buffers;
using System.Globalization;
using System.Net.Http.Headers;
using Herald.Client.Protocol;
using Herald.Protocol;

namespace Herald.Client.Transports.LongPoll;

/// <summary>What the headers of a binary poll response say (longpoll §2.1).</summary>
internal readonly record struct PollPage(long FirstSequence, int Count, long Dropped)
{
    /// <summary>The sids that may have lost an unknown number of messages just before the first one (<c>Herald-Gaps</c>, longpoll §2), or empty.</summary>
    public uint[] Gaps { get; init; } = [];

    /// <summary>
    /// The <c>ack</c> of the next poll: <c>Herald-First-Sequence + Herald-Count - 1</c>, the last sequence received, or
    /// past the loss marks an answer of no message reported (longpoll §2); never below the ack sent.
    /// </summary>
    public long NextAck(long ack) => Math.Max(ack, FirstSequence + Count - 1);

    /// <exception cref="ProtocolException">A header is missing or not a number, or <c>Herald-Gaps</c> is not a list of sids.</exception>
    public static PollPage FromHeaders(HttpResponseHeaders headers) => new(
        Header(headers, "Herald-First-Sequence"),
        checked((int)Header(headers, "Herald-Count")),
        Header(headers, "Herald-Dropped"))
    {
        Gaps = headers.TryGetValues("Herald-Gaps", out IEnumerable<string>? values) ? Sids([.. values]) : [],
    };

    /// <summary>
    /// <c>Herald-Gaps</c> as longpoll §2.1 writes it: one field of sids 1 to 4294967295 in decimal, without sign or
    /// leading zero, separated by a comma and nothing else (<c>1,3</c>). Anything else is a malformed answer, not a
    /// value to guess at: a sid misread would tell the wrong subscription it lost messages.
    /// </summary>
    private static uint[] Sids(string[] fields) =>
        fields.Length == 1
            ? [.. fields[0].Split(',').Select(sid =>
                sid.Length > 0 && sid[0] != '0' && uint.TryParse(sid, NumberStyles.None, CultureInfo.InvariantCulture, out uint value)
                    ? value
                    : throw new ProtocolException(ErrorCode.MalformedFrame, $"The poll response's Herald-Gaps is not a list of sids: '{fields[0]}'."))]
            : throw new ProtocolException(ErrorCode.MalformedFrame, $"The poll response has {fields.Length} Herald-Gaps fields; one is sent.");

    private static long Header(HttpResponseHeaders headers, string name) =>
        headers.TryGetValues(name, out IEnumerable<string>? values)
        && long.TryParse(values.FirstOrDefault(), NumberStyles.None, CultureInfo.InvariantCulture, out long value)
            ? value
            : throw new ProtocolException(ErrorCode.MalformedFrame, $"The poll response has no valid {name} header.");
}

/// <summary>Receives one MESSAGE of a poll body with its sequence number.</summary>
internal delegate void PollMessageVisitor(long sequence, in PublishFrame message);

/// <summary>
/// Reads a binary poll body (longpoll §2.1): the MESSAGE frames back to back, exactly the bytes a TCP
/// client gets, read through the same <see cref="ServerFrames.TryRead"/>.
/// </summary>
internal static class PollBody
{
    /// <exception cref="ProtocolException">A frame is invalid or not a MESSAGE, the body ends inside a frame, or it holds other than <c>Herald-Count</c> frames.</exception>
    public static void Read(ReadOnlySequence<byte> body, PollPage page, int maxFrame, PollMessageVisitor visit)
    {
        long sequence = page.FirstSequence;
        int count = 0;
        while (ServerFrames.TryRead(ref body, maxFrame, out ServerFrame frame))
        {
            if (frame.Type != FrameType.Message)
            {
                throw new ProtocolException(ErrorCode.UnexpectedFrame, $"A poll body holds a {frame.Type} frame; only MESSAGE frames belong there.");
            }

            visit(sequence++, frame.Message);
            count++;
        }

        if (!body.IsEmpty)
        {
            throw new ProtocolException(ErrorCode.MalformedFrame, $"The poll body ends with {body.Length} bytes of an incomplete frame.");
        }

        if (count != page.Count)
        {
            throw new ProtocolException(ErrorCode.MalformedFrame, $"The poll body holds {count} frames; Herald-Count says {page.Count}.");
        }
    }
}
