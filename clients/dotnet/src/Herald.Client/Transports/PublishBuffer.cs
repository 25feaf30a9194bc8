using System.Buffers;
using System.Buffers.Binary;
using Herald.Client.Compression;
using Herald.Client.Protocol;
using Herald.Protocol;
using MessagePack;

namespace Herald.Client.Transports;

/// <summary>
/// Publications made while the client has no connection, as encoded PUBLISH frames, bounded in bytes
/// (<see cref="HeraldClientOptions.PublishBufferSize"/>). When a connection is lost, the PUBLISH frames it
/// had not yet written come back here, ahead of anything published since; after the reconnect they all
/// go to the new connection, behind the restored subscriptions.
/// </summary>
/// <remarks>Not thread-safe: the client's gate is held around every call.</remarks>
internal sealed class PublishBuffer
{
    private readonly int _limit;
    private ArrayBufferWriter<byte> _frames = new(256);

    public PublishBuffer(int limit) => _limit = limit;

    public int Bytes => _frames.WrittenCount;

    public int Limit => _limit;

    /// <summary>Keeps a publication (with its encoded header block, if not empty); <c>false</c> (nothing kept) when it does not fit.</summary>
    public bool TryAppend(ReadOnlySpan<byte> topic, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> headers)
    {
        int size = ClientFrames.PublishSize(topic.Length, replyTo.Length, PayloadFlags.None, payload.Length, headers.Length);
        if ((long)_frames.WrittenCount + size > _limit)
        {
            return false;
        }

        ClientFrames.Publish(_frames, topic, replyTo, PayloadFlags.None, payload, headers);
        return true;
    }

    /// <summary>Takes back what a lost connection never wrote: its PUBLISH frames, ahead of what is here (SUBSCRIBE, PING... are dropped: the reconnect restores state itself).</summary>
    public void ReturnUnsent(byte[] frames)
    {
        if (frames.Length == 0)
        {
            return;
        }

        var merged = new ArrayBufferWriter<byte>(frames.Length + _frames.WrittenCount);
        foreach ((FrameType type, ReadOnlyMemory<byte> frame) in Frames(frames))
        {
            if (type == FrameType.Publish)
            {
                merged.Write(frame.Span);
            }
        }

        merged.Write(_frames.WrittenSpan);
        _frames = merged;
    }

    /// <summary>
    /// Moves every publication to <paramref name="queue"/>, fitted to the new connection: a Zstd payload is
    /// decompressed for a broker that did not grant Zstd, and a publication over the broker's limits, or with
    /// headers for a broker that did not grant them, is dropped and reported rather than sent (it would close
    /// the connection, again at every reconnect).
    /// </summary>
    public void MoveTo(BrokerConnection connection, int maxPayload, Action<HeraldException> report)
    {
        (FrameQueue queue, bool zstd, int maxBody, int maxTopic) = (connection.Outbound, connection.Zstd, connection.MaxBody, connection.MaxTopic);
        if (_frames.WrittenCount == 0)
        {
            return;
        }

        var fitted = new ArrayBufferWriter<byte>(_frames.WrittenCount);
        foreach ((_, ReadOnlyMemory<byte> frame) in Frames(_frames.WrittenMemory))
        {
            var reader = new MessagePackReader(frame[ProtocolConstants.LengthPrefixSize..]);
            FrameDecoder.ReadHeader(ref reader, out int count);
            PublishFrame publish = FrameDecoder.ReadPublish(ref reader, count);
            string topic = publish.TopicString;
            if (publish.Topic.Length > maxTopic || (publish.ReplyTo?.Length ?? 0) > maxTopic)
            {
                report(new HeraldException(ErrorCode.TopicTooLong, $"A publication to '{topic}' buffered while disconnected was dropped: the broker's topics are at most {maxTopic} bytes."));
                continue;
            }

            if (HeadersUnfit(publish, connection) is { } unfit)
            {
                report(new HeraldException(unfit.Code, $"A publication to '{topic}' buffered while disconnected was dropped: {unfit.Reason}"));
                continue;
            }

            byte[]? plain = (publish.Flags & PayloadFlags.Zstd) != 0 ? ZstdCodec.Decompress(publish.Payload, maxPayload) : null;
            if ((plain?.Length ?? publish.Payload.Length) + publish.Headers.Length > connection.MaxPayload)
            {
                report(new HeraldException(ErrorCode.FrameTooLarge, $"A publication to '{topic}' buffered while disconnected was dropped: its payload (with its header block) is over the broker's max_payload of {connection.MaxPayload} bytes."));
                continue;
            }

            if (plain is not null && !zstd)
            {
                byte[] replyTo = publish.ReplyTo?.ToArray() ?? [];
                byte[] headers = publish.Headers.ToArray();
                if (ClientFrames.PublishBodySize((int)publish.Topic.Length, replyTo.Length, PayloadFlags.None, plain.Length, headers.Length) <= maxBody)
                {
                    ClientFrames.Publish(fitted, publish.Topic.ToArray(), replyTo, PayloadFlags.None, plain, headers);
                    continue;
                }
            }
            else if (frame.Length - ProtocolConstants.LengthPrefixSize <= maxBody)
            {
                fitted.Write(frame.Span);
                continue;
            }

            report(new HeraldException(ErrorCode.FrameTooLarge, $"A publication to '{topic}' buffered while disconnected was dropped: it is over the broker's limit of {maxBody} bytes."));
        }

        _frames = new ArrayBufferWriter<byte>(256);
        queue.Append(fitted.WrittenSpan, publications: true);
    }

    /// <summary>Why a buffered publication's header block cannot go to <paramref name="connection"/> (spec §4.9), or <c>null</c>.</summary>
    private static (ErrorCode Code, string Reason)? HeadersUnfit(in PublishFrame publish, BrokerConnection connection)
    {
        if (!publish.HasHeaders)
        {
            return null;
        }

        if (!connection.Headers)
        {
            return (ErrorCode.MalformedFrame, "it carries headers, and the broker did not grant headers (spec §4.1).");
        }

        if (publish.HeaderValues > connection.MaxHeaders || publish.Headers.Length > connection.MaxHeaderBytes)
        {
            return (ErrorCode.InvalidHeaders, $"its header block ({publish.HeaderValues} values, {publish.Headers.Length} bytes) is over the broker's max_headers of {connection.MaxHeaders} or max_header_bytes of {connection.MaxHeaderBytes}.");
        }

        return null;
    }

    /// <summary>Walks frames this client encoded itself (whole frames, prefix included).</summary>
    private static IEnumerable<(FrameType Type, ReadOnlyMemory<byte> Frame)> Frames(ReadOnlyMemory<byte> frames)
    {
        int offset = 0;
        while (offset + ProtocolConstants.LengthPrefixSize <= frames.Length)
        {
            int length = ProtocolConstants.LengthPrefixSize + (int)BinaryPrimitives.ReadUInt32BigEndian(frames.Span[offset..]);
            ReadOnlyMemory<byte> frame = frames.Slice(offset, length);
            yield return (TypeOf(frame), frame);
            offset += length;
        }
    }

    private static FrameType TypeOf(ReadOnlyMemory<byte> frame)
    {
        var reader = new MessagePackReader(frame[ProtocolConstants.LengthPrefixSize..]);
        return FrameDecoder.ReadHeader(ref reader, out _);
    }
}
