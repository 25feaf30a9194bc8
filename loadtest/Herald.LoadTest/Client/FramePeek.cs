using Herald.Protocol;

namespace Herald.LoadTest.Client;

/// <summary>
/// Reads a frame's type from its first two body bytes without decoding it, for the receive hot path.
/// <code>
/// body: | 0x9N fixarray of N | type as positive fixint (1-9) | ...
/// </code>
/// Every encoder in the project writes this form, and MESSAGE always starts <c>96 06 ce</c> (spec §4.6).
/// A body in any other (still valid) MessagePack form peeks as <c>0</c>: decode it with
/// <see cref="FrameDecoder.ReadHeader"/> instead.
/// </summary>
internal static class FramePeek
{
    public static FrameType TypeOf(ReadOnlySpan<byte> body) =>
        body.Length >= 2 && (body[0] & 0xF0) == 0x90 && body[1] is >= (byte)FrameType.Hello and <= (byte)FrameType.Error
            ? (FrameType)body[1]
            : 0;
}
