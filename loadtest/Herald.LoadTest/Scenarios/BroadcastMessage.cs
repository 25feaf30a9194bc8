using System.Buffers;
using System.Buffers.Binary;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// The one message of every <c>broadcast</c> burst: a fixed payload whose first 8 bytes are the burst
/// number (little-endian). Every MESSAGE of it has the same length and layout (spec §4.6: the sid is
/// always a uint32), so a subscriber finds the burst number at a fixed offset without decoding; the
/// first MESSAGE each subscriber gets is decoded fully and compared with what was published.
/// </summary>
internal sealed class BroadcastMessage
{
    public const uint Sid = 1;
    public const int BurstBytes = sizeof(long);

    private readonly byte[] _payload;

    public BroadcastMessage(string topic, int payloadLength)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(payloadLength, BurstBytes);
        Topic = topic;
        TopicBytes = Herald.Protocol.Topic.EncodeName(topic);
        _payload = new byte[payloadLength];
        for (int i = BurstBytes; i < _payload.Length; i++)
        {
            _payload[i] = (byte)('a' + (i % 26));
        }

        var frame = new ArrayBufferWriter<byte>(payloadLength + 64);
        FrameWriter.WritePublish(frame, TopicBytes, default, PayloadFlags.None, _payload);
        PublishFrame = frame.WrittenSpan.ToArray();
        PublishBurstOffset = PublishFrame.Length - payloadLength; // the payload ends the frame
        MessageBodyLength = ProtocolConstants.MessageHeaderSize - ProtocolConstants.LengthPrefixSize
            + FrameWriter.EnvelopeSize(TopicBytes.Length, 0, PayloadFlags.None, payloadLength);
        BodyBurstOffset = MessageBodyLength - payloadLength;
    }

    public string Topic { get; }

    public byte[] TopicBytes { get; }

    public int PayloadLength => _payload.Length;

    /// <summary>A PUBLISH frame (length prefix included) to stamp with <see cref="StampPublish"/> and send.</summary>
    public byte[] PublishFrame { get; }

    public int PublishBurstOffset { get; }

    /// <summary>Body length (after the 4-byte prefix) of every MESSAGE of a burst.</summary>
    public int MessageBodyLength { get; }

    /// <summary>Offset of the burst number in a MESSAGE body.</summary>
    public int BodyBurstOffset { get; }

    /// <summary>Bytes of one MESSAGE frame on the wire, prefix included.</summary>
    public int MessageFrameLength => MessageBodyLength + ProtocolConstants.LengthPrefixSize;

    public void StampPublish(byte[] frame, long burst) =>
        BinaryPrimitives.WriteInt64LittleEndian(frame.AsSpan(PublishBurstOffset, BurstBytes), burst);

    /// <summary>A new payload carrying <paramref name="burst"/>, for publishing over HTTP.</summary>
    public byte[] PayloadFor(long burst)
    {
        byte[] payload = (byte[])_payload.Clone();
        BinaryPrimitives.WriteInt64LittleEndian(payload, burst);
        return payload;
    }

    /// <summary>
    /// The hot path: whether <paramref name="body"/> is a MESSAGE of this shape for sid 1 (fixarray of 6,
    /// type 6, uint32 sid 1, the expected length), and its burst number. Anything else goes to <see cref="Check"/>.
    /// </summary>
    public bool TryReadBurst(ReadOnlySpan<byte> body, out long burst)
    {
        if (body.Length == MessageBodyLength && body[0] == 0x96 && body[1] == (byte)FrameType.Message && body[2] == 0xce
            && BinaryPrimitives.ReadUInt32BigEndian(body[3..]) == Sid)
        {
            burst = BinaryPrimitives.ReadInt64LittleEndian(body[BodyBurstOffset..]);
            return true;
        }

        burst = -1;
        return false;
    }

    /// <summary>
    /// Decodes a MESSAGE body fully. Returns why it is not what was published (<c>null</c> when it is) and
    /// its burst number (-1 when unknown).
    /// </summary>
    /// <exception cref="ProtocolException">The body is not a valid frame.</exception>
    public string? Check(in PublishFrame message, out long burst)
    {
        burst = message.Payload.Length >= BurstBytes ? BinaryPrimitives.ReadInt64LittleEndian(message.Payload.FirstSpan) : -1;
        if (message.Sid != Sid) return $"sid {message.Sid}, subscribed as {Sid}";
        if (!message.Topic.FirstSpan.SequenceEqual(TopicBytes)) return $"topic '{message.TopicString}'";
        if (message.ReplyTo is not null) return $"reply_to '{message.ReplyToString}', published without";
        if (message.Flags != PayloadFlags.None) return $"flags {message.Flags}";
        if (message.Payload.Length != _payload.Length) return $"payload of {message.Payload.Length} bytes, published {_payload.Length}";
        if (!message.Payload.FirstSpan[BurstBytes..].SequenceEqual(_payload.AsSpan(BurstBytes))) return "payload bytes differ";
        return null;
    }

    /// <summary>
    /// The payload-level check for targets reached through <c>IPubSubClient</c> (the client has taken the
    /// frame apart): why <paramref name="payload"/> is not what was published (<c>null</c> when it is), and
    /// its burst number (-1 when unknown).
    /// </summary>
    public string? CheckPayload(ReadOnlySpan<byte> payload, out long burst)
    {
        burst = payload.Length >= BurstBytes ? BinaryPrimitives.ReadInt64LittleEndian(payload) : -1;
        if (payload.Length != _payload.Length) return $"payload of {payload.Length} bytes, published {_payload.Length}";
        if (!payload[BurstBytes..].SequenceEqual(_payload.AsSpan(BurstBytes))) return "payload bytes differ";
        return null;
    }
}
