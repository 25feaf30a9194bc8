using System.Diagnostics;
using Herald.Broker.Delivery;
using Herald.Protocol;

namespace Herald.Broker.Routing;

/// <summary>
/// What one routing of a traced publication did, for the broker's span: subscriptions matched,
/// backlogs that queued it, that dropped it, that dropped older messages to take it, and the compression.
/// The router fills it only when given one (<see cref="TopicRouter.Publish"/>): an untraced publication
/// pays a null test per subscriber.
/// </summary>
/// <remarks>Threading: one per session, used by the session's one caller (a traced publication at a time).</remarks>
internal sealed class FanoutTally
{
    public int Matched { get; private set; }

    public int Queued { get; private set; }

    public int Dropped { get; private set; }

    public int Evicted { get; private set; }

    /// <summary>Some subscriber got a Zstd form: as the publisher sent it, or compressed by the broker.</summary>
    public bool Compressed { get; private set; }

    /// <summary>The MESSAGE frame's size plain over compressed, when <see cref="Compressed"/>.</summary>
    public double CompressionRatio { get; private set; }

    internal void Start(int matched)
    {
        Matched = matched;
        Queued = Dropped = Evicted = 0;
        Compressed = false;
        CompressionRatio = 0;
    }

    internal void Count(Enqueued result)
    {
        if ((result & Enqueued.Queued) == 0)
        {
            Dropped++;
            return;
        }

        Queued++;
        Evicted += (result & Enqueued.Evicted) != 0 ? 1 : 0;
    }

    /// <summary>Records the compression: <paramref name="compressedFrame"/> is the Zstd form the broker built (null: none), for a plain publication.</summary>
    internal void Compression(in PublishFrame publish, ReadOnlySpan<byte> plainPayload, MessageBuffer? compressedFrame, bool compressedWithHeaders)
    {
        int headers = (int)publish.Headers.Length;
        if ((publish.Flags & PayloadFlags.Zstd) != 0)
        {
            int replyTo = publish.ReplyTo is { } r ? (int)r.Length : 0;
            double plain = ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize((int)publish.Topic.Length, replyTo, PayloadFlags.None, plainPayload.Length) + headers;
            Set(plain / (ProtocolConstants.MessageHeaderSize + publish.Envelope.Length + headers));
        }
        else if (compressedFrame is not null)
        {
            double plain = ProtocolConstants.MessageHeaderSize + publish.Envelope.Length + (compressedWithHeaders ? headers : 0);
            Set(plain / compressedFrame.Length);
        }
    }

    /// <summary>Writes the tally on the broker's span.</summary>
    public void WriteTo(Activity span)
    {
        span.SetTag("herald.route.matched", Matched);
        span.SetTag("herald.route.queued", Queued);
        span.SetTag("herald.route.dropped", Dropped);
        span.SetTag("herald.route.evicted", Evicted);
        span.SetTag("herald.route.compressed", Compressed);
        if (Compressed)
        {
            span.SetTag("herald.route.compression_ratio", Math.Round(CompressionRatio, 3));
        }
    }

    private void Set(double ratio)
    {
        Compressed = true;
        CompressionRatio = ratio;
    }
}
