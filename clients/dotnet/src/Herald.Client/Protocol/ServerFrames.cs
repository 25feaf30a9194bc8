using System.Buffers;
using Herald.Protocol;
using MessagePack;

namespace Herald.Client.Protocol;

/// <summary>A frame from the broker. Only the member of its <see cref="Type"/> is set; slices point into the read buffer.</summary>
internal readonly struct ServerFrame
{
    public FrameType Type { get; init; }

    /// <summary>MESSAGE (spec §4.6).</summary>
    public PublishFrame Message { get; init; }

    /// <summary>ERROR (spec §4.8).</summary>
    public ErrorFrame Error { get; init; }

    /// <summary>WELCOME (spec §4.2).</summary>
    public WelcomeFrame Welcome { get; init; }

    /// <summary>PRESENCE_REPLY (spec §15.3).</summary>
    public PresenceReplyFrame PresenceReply { get; init; }

    /// <summary>SUBSCRIBED (spec §4.10).</summary>
    public SubscribedFrame Subscribed { get; init; }
}

/// <summary>
/// Reads the frames a broker sends (WELCOME, MESSAGE, PING, PONG, ERROR, PRESENCE_REPLY, SUBSCRIBED) with the shared
/// <see cref="FrameReader"/> and <see cref="FrameDecoder"/>: the TCP read loop and the long-poll body
/// reader both go through <see cref="TryRead"/>, and so do the conformance tests.
/// </summary>
internal static class ServerFrames
{
    /// <summary>
    /// Reads one frame from the front of <paramref name="buffer"/> (spec §2). Returns <c>false</c>, consuming
    /// nothing, until a whole frame is there; on success advances <paramref name="buffer"/> past it.
    /// </summary>
    /// <exception cref="ProtocolException">The frame breaks the protocol; its code is the one spec §8 names.</exception>
    public static bool TryRead(ref ReadOnlySequence<byte> buffer, int maxFrame, out ServerFrame frame)
    {
        if (!FrameReader.TryReadFrame(ref buffer, maxFrame, out ReadOnlySequence<byte> body))
        {
            frame = default;
            return false;
        }

        frame = Decode(body);
        return true;
    }

    /// <summary>Decodes one frame body. A frame only clients send (HELLO, SUBSCRIBE, ...) is <see cref="ErrorCode.UnexpectedFrame"/>.</summary>
    public static ServerFrame Decode(in ReadOnlySequence<byte> body)
    {
        var reader = new MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
        switch (type)
        {
            case FrameType.Message:
                return new ServerFrame { Type = type, Message = FrameDecoder.ReadMessage(ref reader, count) };
            case FrameType.Ping or FrameType.Pong:
                FrameDecoder.ReadEmpty(ref reader, count);
                return new ServerFrame { Type = type };
            case FrameType.Error:
                return new ServerFrame { Type = type, Error = FrameDecoder.ReadError(ref reader, count) };
            case FrameType.Welcome:
                return new ServerFrame { Type = type, Welcome = FrameDecoder.ReadWelcome(ref reader, count) };
            case FrameType.PresenceReply:
                return new ServerFrame { Type = type, PresenceReply = FrameDecoder.ReadPresenceReply(ref reader, count) };
            case FrameType.Subscribed:
                return new ServerFrame { Type = type, Subscribed = FrameDecoder.ReadSubscribed(ref reader, count) };
            default:
                throw new ProtocolException(ErrorCode.UnexpectedFrame, $"The broker sent a {type} frame, which only clients send.");
        }
    }
}
