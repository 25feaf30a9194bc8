using System.Buffers;
using Herald.Protocol;

namespace Herald.Client.Protocol;

/// <summary>
/// The frames a client sends (spec §4.1, §4.3-§4.5, §4.7, §15.3), encoded by the shared
/// <see cref="FrameWriter"/> so they are byte for byte the canonical vectors of protocol-spec/vectors/.
/// Every frame the client writes goes through here; the conformance tests run the vectors through it.
/// </summary>
internal static class ClientFrames
{
    /// <summary>Bytes of a PING or PONG frame, prefix included.</summary>
    public const int EmptyFrameSize = ProtocolConstants.LengthPrefixSize + 2;

    /// <param name="info">The client info others see beside this connection's presence (spec §4.1, §15); null: none.</param>
    public static void Hello(IBufferWriter<byte> output, string clientName, Capabilities capabilities, string? auth = null, uint version = ProtocolConstants.Version, string? info = null) =>
        FrameWriter.WriteHello(output, clientName, capabilities, auth, version, info);

    /// <param name="since">Resume the topic's history after this position (spec §4.3, §13); null: a live subscription.</param>
    /// <param name="queue">The queue group to join (spec §4.3, §14), its name already checked; empty: none (a plain subscription).</param>
    /// <exception cref="ArgumentException">Both <paramref name="since"/> and <paramref name="queue"/>: the broker would close the connection over it (spec §4.3).</exception>
    public static void Subscribe(IBufferWriter<byte> output, uint sid, ReadOnlySpan<byte> pattern, SubscribeOptions options, StreamPosition? since = null, ReadOnlySpan<byte> queue = default)
    {
        if (since is not null && !queue.IsEmpty)
        {
            throw new ArgumentException("A SUBSCRIBE may not carry both a queue group and a history position (spec §4.3): a queue group has no position to resume.", nameof(queue));
        }

        FrameWriter.WriteSubscribe(output, sid, pattern, options, since, queue);
    }

    public static void Unsubscribe(IBufferWriter<byte> output, uint sid) => FrameWriter.WriteUnsubscribe(output, sid);

    /// <summary>PUBLISH; an empty <paramref name="replyTo"/> is written as nil (no reply wanted); a non-empty <paramref name="headers"/> block (spec §4.9) is the sixth element.</summary>
    public static void Publish(IBufferWriter<byte> output, ReadOnlySpan<byte> topic, ReadOnlySpan<byte> replyTo, PayloadFlags flags, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> headers = default) =>
        FrameWriter.WritePublish(output, topic, replyTo, flags, payload, headers);

    /// <summary>Bytes of a whole PUBLISH frame, prefix included.</summary>
    public static int PublishSize(int topicLength, int replyToLength, PayloadFlags flags, int payloadLength, int headersLength = 0) =>
        ProtocolConstants.LengthPrefixSize + PublishBodySize(topicLength, replyToLength, flags, payloadLength, headersLength);

    /// <summary>Bytes of a PUBLISH body (what the broker compares with its <c>max_frame</c>): array header, type, envelope, header block.</summary>
    public static int PublishBodySize(int topicLength, int replyToLength, PayloadFlags flags, int payloadLength, int headersLength = 0) =>
        1 + 1 + FrameWriter.EnvelopeSize(topicLength, replyToLength, flags, payloadLength) + headersLength;

    /// <summary>PRESENCE (spec §15.3): at most <paramref name="limit"/> members of <paramref name="topic"/> after <paramref name="cursor"/>; 0: the occupancy alone.</summary>
    public static void Presence(IBufferWriter<byte> output, uint requestId, ReadOnlySpan<byte> topic, ulong limit, string? cursor) =>
        FrameWriter.WritePresence(output, requestId, topic, limit, cursor);

    public static void Ping(IBufferWriter<byte> output) => FrameWriter.WritePing(output);

    public static void Pong(IBufferWriter<byte> output) => FrameWriter.WritePong(output);
}
