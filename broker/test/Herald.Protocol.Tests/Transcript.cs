using System.Buffers;
using System.Text;

namespace Herald.Protocol.Tests;

/// <summary>
/// Runs the canonical read loop over one input and writes down what happened, one entry per step: each
/// frame read (as <see cref="FrameModel.Describe"/> prints it), then either "need more data" with the bytes
/// left buffered, or the <see cref="ProtocolException"/> code. Two ways of feeding the same bytes must give
/// the same transcript.
/// </summary>
internal static class Transcript
{
    public static string Frame(DecodedFrame frame) => FrameModel.Describe(frame) + " | ";

    public static string NeedMoreData(long buffered) => $"need more data, {buffered} bytes buffered";

    public static string Error(ErrorCode code) => $"error {code}";

    /// <summary>What the vector says must happen (spec §12).</summary>
    public static string Expected(Vector vector) => vector.Kind switch
    {
        VectorKind.Valid => Frame(FrameModel.FromJson(vector.Frame, vector.Fields)) + NeedMoreData(0),
        VectorKind.Incomplete => NeedMoreData(vector.Bytes.Length),
        _ => Error(vector.Error),
    };

    /// <summary>
    /// Reads frames until the reader wants more data or throws. Anything but a <see cref="ProtocolException"/>
    /// propagates. A <c>false</c> from <see cref="FrameReader.TryReadFrame"/> that moved the buffer is written
    /// down as a failure.
    /// </summary>
    public static string Of(ReadOnlySequence<byte> input, int maxFrame)
    {
        var sb = new StringBuilder();
        ReadOnlySequence<byte> buffer = input;
        try
        {
            while (true)
            {
                ReadOnlySequence<byte> before = buffer;
                if (!FrameReader.TryReadFrame(ref buffer, maxFrame, out ReadOnlySequence<byte> body))
                {
                    if (!buffer.Start.Equals(before.Start) || !buffer.End.Equals(before.End))
                    {
                        sb.Append("TryReadFrame returned false but moved the buffer | ");
                    }

                    return sb.Append(NeedMoreData(buffer.Length)).ToString();
                }

                long consumed = before.Length - buffer.Length;
                if (consumed != ProtocolConstants.LengthPrefixSize + body.Length)
                {
                    sb.Append($"consumed {consumed} bytes for a body of {body.Length} | ");
                }

                sb.Append(Frame(FrameModel.Decode(body)));
            }
        }
        catch (ProtocolException e)
        {
            return sb.Append(Error(e.Code)).ToString();
        }
    }
}
