namespace Herald.Protocol;

/// <summary>The first element of every frame body (spec §3).</summary>
public enum FrameType : byte
{
    Hello = 1,
    Welcome = 2,
    Subscribe = 3,
    Unsubscribe = 4,
    Publish = 5,
    Message = 6,
    Ping = 7,
    Pong = 8,
    Error = 9,
    Presence = 10,
    PresenceReply = 11,
    Subscribed = 12,
}
