namespace Herald.Protocol;

/// <summary>Error codes of the ERROR frame (spec §8).</summary>
public enum ErrorCode : uint
{
    None = 0,
    MalformedFrame = 1,
    FrameTooLarge = 2,
    UnknownFrameType = 3,
    UnexpectedFrame = 4,
    HelloRequired = 5,
    UnsupportedVersion = 6,
    InvalidTopic = 7,
    TopicTooLong = 8,
    ReservedTopic = 9,
    DuplicateSubscription = 10,
    UnknownSubscription = 11,
    TooManySubscriptions = 12,
    SlowConsumer = 13,
    MessagesDropped = 14,
    HandshakeTimeout = 15,
    StaleConnection = 16,
    ShuttingDown = 17,
    TruncatedFrame = 18,
    AuthenticationFailed = 19,
    PermissionDenied = 20,
    InternalError = 21,
    DecompressionFailed = 22,
    TooManyConnections = 23,
    RateLimited = 24,
    TooManyTopics = 25,
    InvalidHeaders = 26,
    FrameTimeout = 27,
    FrameBudgetFull = 28,
    PresenceFull = 29,
    PresenceUnavailable = 30,
    HookUnavailable = 31,
    Disconnected = 32,
    Revoked = 33,
    Unsubscribed = 34,
}

public static class ErrorCodes
{
    /// <summary>Whether the broker closes the connection after an ERROR with this code (spec §8).</summary>
    public static bool IsFatal(ErrorCode code) => code is not (ErrorCode.UnknownSubscription or ErrorCode.MessagesDropped or ErrorCode.PermissionDenied or ErrorCode.RateLimited or ErrorCode.TooManyTopics or ErrorCode.PresenceFull or ErrorCode.PresenceUnavailable or ErrorCode.HookUnavailable or ErrorCode.Unsubscribed);
}
