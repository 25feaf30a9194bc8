using System.Buffers;
using Herald.Protocol;

namespace Herald.Broker.Delivery;

/// <summary>The broker's own small frames (PING, PONG, ERROR), encoded into their own buffers. Never per message.</summary>
internal static class ControlFrames
{
    private static readonly byte[] PingBytes = [0, 0, 0, 2, 0x91, (byte)FrameType.Ping];
    private static readonly byte[] PongBytes = [0, 0, 0, 2, 0x91, (byte)FrameType.Pong];

    public static MessageBuffer Ping() => MessageBuffer.Copy(PingBytes);

    public static MessageBuffer Pong() => MessageBuffer.Copy(PongBytes);

    /// <summary>A SUBSCRIBED frame (spec §4.10): the server made subscription <paramref name="sid"/> to <paramref name="pattern"/>.</summary>
    public static MessageBuffer Subscribed(uint sid, string pattern, SubscribeOptions options)
    {
        var writer = new ArrayBufferWriter<byte>(32 + pattern.Length * 3);
        FrameWriter.WriteSubscribed(writer, sid, pattern, options);
        return MessageBuffer.Copy(writer.WrittenSpan);
    }

    /// <summary>
    /// A long-poll session's notice of a subscription the server made or ended (longpoll.md §1.4): a MESSAGE on
    /// <paramref name="pattern"/>, without payload, whose header block is <paramref name="header"/>: <paramref name="value"/>;
    /// its sid is stamped when it is queued.
    /// </summary>
    public static MessageBuffer Notice(string pattern, string header, string value)
    {
        byte[] headers = HeaderBlock.Encode([new(header, [value])]);
        byte[] name = System.Text.Encoding.UTF8.GetBytes(pattern);
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(name.Length, 0, PayloadFlags.None, 0) + headers.Length);
        FrameWriter.WriteMessage(new MessageBufferWriter(frame), 0, name, default, PayloadFlags.None, default, headers);
        return frame;
    }

    /// <summary>An ERROR frame; <paramref name="fatal"/> overrides the code's usual flag (a connection closing says so); <paramref name="sid"/> names the subscription it ended.</summary>
    public static MessageBuffer Error(ErrorCode code, string message, bool? fatal = null, uint sid = 0)
    {
        var writer = new ArrayBufferWriter<byte>(64 + message.Length);
        FrameWriter.WriteError(writer, code, fatal ?? ErrorCodes.IsFatal(code), message, sid: sid);
        return MessageBuffer.Copy(writer.WrittenSpan);
    }
}
