using System.Buffers;
using System.Diagnostics;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Protocol;

namespace Herald.Broker.Compression;

/// <summary>
/// Builds the second form of a publication's MESSAGE frame when a subscriber needs it: the Zstd form of
/// a plain publication (if the <see cref="CompressionAdvisor"/> says so), or the plain form of a
/// publication its client sent compressed. Called at most once per publication and form, whatever the
/// number of subscribers; the result is shared by reference like the first form.
/// </summary>
internal sealed class MessageEncoder
{
    private readonly CompressionAdvisor _advisor;
    private readonly CompressionMetrics _metrics;
    private readonly CompressionOptions _options;

    public MessageEncoder(CompressionAdvisor advisor, CompressionMetrics metrics, CompressionOptions options, DeltaEncoder? deltas = null)
    {
        _advisor = advisor;
        _metrics = metrics;
        _options = options;
        Deltas = deltas;
    }

    public bool Enabled => _options.Enabled;

    /// <summary>The delta form's engine (spec §11.2), or null when deltas are off: subscriptions that ask for them get full messages.</summary>
    public DeltaEncoder? Deltas { get; }

    /// <summary>The Zstd MESSAGE frame for a plain publication, or null when it should go out plain.</summary>
    public MessageBuffer? TryCompress(in PublishFrame publish, bool withHeaders = true)
    {
        int size = (int)publish.Payload.Length;
        if (size < _options.NoCompressionLimit || !_options.Enabled)
        {
            _metrics.Decision(_options.Enabled ? CompressionDecision.TooSmall : CompressionDecision.Disabled); // decided before any allocation
            return null;
        }

        string action = Encoding.ASCII.GetString(publish.Topic);
        CompressionDecision decision = _advisor.Decide(action, size, out int level);
        _metrics.Decision(decision);
        if (decision is not (CompressionDecision.Compress or CompressionDecision.Probe))
        {
            return null;
        }

        ReadOnlySequence<byte> payload = publish.Payload;
        long start = Stopwatch.GetTimestamp();
        int compressedLength = Zstd.Compress(payload.IsSingleSegment ? payload.FirstSpan : payload.ToArray(), level, out byte[] compressed);
        _metrics.Compressed(size, compressedLength, Stopwatch.GetElapsedTime(start));
        _advisor.Record(action, size, compressedLength);
        try
        {
            return compressedLength < size ? Encode(publish, PayloadFlags.Zstd, compressed.AsSpan(0, compressedLength), withHeaders) : null;
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(compressed);
        }
    }

    /// <summary>
    /// Encodes a MESSAGE frame (sid 0, stamped per subscriber later) with the publication's topic and reply_to,
    /// the given payload and, <paramref name="withHeaders"/>, its header block as is (headers are never compressed).
    /// </summary>
    public static MessageBuffer Encode(in PublishFrame publish, PayloadFlags flags, ReadOnlySpan<byte> payload, bool withHeaders = true)
    {
        ReadOnlySpan<byte> topic = publish.Topic.IsSingleSegment ? publish.Topic.FirstSpan : publish.Topic.ToArray();
        ReadOnlySpan<byte> replyTo = publish.ReplyTo is { } r ? (r.IsSingleSegment ? r.FirstSpan : r.ToArray()) : default;
        ReadOnlySpan<byte> headers = !withHeaders || !publish.HasHeaders ? default : publish.Headers.IsSingleSegment ? publish.Headers.FirstSpan : publish.Headers.ToArray();
        var frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(topic.Length, replyTo.Length, flags, payload.Length) + headers.Length);
        var writer = new MessageBufferWriter(frame);
        FrameWriter.WriteMessage(writer, 0, topic, replyTo, flags, payload, headers);
        Debug.Assert(writer.Written == frame.Length, "MESSAGE size computed wrong");
        return frame;
    }
}
