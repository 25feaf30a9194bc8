using System.Buffers;

namespace Herald.Broker.Telemetry;

/// <summary>
/// What one read loop's publications to one topic owe <see cref="BrokerMetrics"/>, counted there at once: a publisher
/// streaming to one topic pays the shared counters (the interlocked adds per transport and in total, the topic
/// table's hash and compare) once per read batch instead of once per publication.
/// </summary>
/// <remarks>
/// Owned by one thread, a TCP or WebSocket session's read loop (<c>ChecksOnOneThread</c>). The session counts what it
/// holds when the topic changes and at the end of every read batch, before it wakes the receivers the batch reached
/// (<c>FlushTouched</c>), so a client that has the answer to a later frame of its (a PONG) sees the counts in
/// <c>/metrics</c> and <c>/varz</c>. A topic longer than <see cref="MaxTopicBytes"/>, or split over two segments of
/// the input, is counted at once, as before. Holds one 128-byte array, made at the session's first publication.
/// </remarks>
internal sealed class PublicationTally
{
    /// <summary>The longest topic held (longer ones are counted one by one).</summary>
    public const int MaxTopicBytes = 128;

    private readonly byte[] _topic = new byte[MaxTopicBytes];
    private int _topicLength;
    private long _publications;
    private long _deliveries;
    private long _publishedBytes; // the MESSAGE bytes of the publications that had a subscriber
    private long _deliveredBytes;
    private long _frameBytes; // the MESSAGE bytes of every publication (the topic table's)

    /// <summary>
    /// Holds one publication to <paramref name="topic"/> that reached <paramref name="deliveries"/> subscriptions with a
    /// MESSAGE of <paramref name="frameBytes"/> (what <see cref="BrokerMetrics.Published(string, in ReadOnlySequence{byte}, int, int)"/>
    /// counts); a publication to another topic first counts what is held. False: not held (a long or split topic), the
    /// caller counts it itself.
    /// </summary>
    public bool TryAdd(BrokerMetrics metrics, string transport, in ReadOnlySequence<byte> topic, int deliveries, int frameBytes)
    {
        if (!topic.IsSingleSegment || topic.Length > MaxTopicBytes)
        {
            return false;
        }

        ReadOnlySpan<byte> name = topic.FirstSpan;
        if (!name.SequenceEqual(_topic.AsSpan(0, _topicLength)))
        {
            Count(metrics, transport);
            name.CopyTo(_topic);
            _topicLength = name.Length;
        }

        _publications++;
        _frameBytes += frameBytes;
        if (deliveries > 0)
        {
            _deliveries += deliveries;
            if (frameBytes > 0)
            {
                _publishedBytes += frameBytes;
                _deliveredBytes += (long)frameBytes * deliveries;
            }
        }

        return true;
    }

    /// <summary>Counts what is held into <paramref name="metrics"/> and holds nothing after.</summary>
    public void Count(BrokerMetrics metrics, string transport)
    {
        if (_publications == 0)
        {
            return;
        }

        metrics.Published(transport, _topic.AsSpan(0, _topicLength), new PublishedCounts(_publications, _deliveries, _publishedBytes, _deliveredBytes, _frameBytes));
        _publications = _deliveries = _publishedBytes = _deliveredBytes = _frameBytes = 0;
    }
}

/// <summary>Several publications to one topic, as <see cref="PublicationTally"/> counts them.</summary>
internal readonly record struct PublishedCounts(long Publications, long Deliveries, long PublishedBytes, long DeliveredBytes, long FrameBytes);
