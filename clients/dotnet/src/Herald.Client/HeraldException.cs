using Herald.Protocol;

namespace Herald.Client;

/// <summary>
/// Something went wrong talking to the broker. When the broker said so itself (an ERROR frame, spec §8, or
/// a long-poll problem, longpoll §3), <see cref="ErrorCode"/> is its code; when the client refused
/// something before sending it (a topic the broker would refuse), the code is the one the broker would
/// have sent. Otherwise the code is <see cref="Protocol.ErrorCode.None"/>.
/// </summary>
public class HeraldException : Exception
{
    public HeraldException()
        : base("Herald error.")
    {
    }

    public HeraldException(string message)
        : base(message)
    {
    }

    public HeraldException(string message, Exception innerException)
        : base(message, innerException)
    {
    }

    public HeraldException(ErrorCode errorCode, string message, Exception? innerException = null)
        : base(message, innerException) => ErrorCode = errorCode;

    /// <summary>The protocol's error code (spec §8), or <see cref="Protocol.ErrorCode.None"/>.</summary>
    public ErrorCode ErrorCode { get; }

    /// <summary>The broker closed the connection after this error (the ERROR frame's <c>fatal</c>).</summary>
    public bool IsFatal { get; init; }

    /// <summary>For <see cref="Protocol.ErrorCode.MessagesDropped"/>: how many messages were lost.</summary>
    public ulong Count { get; init; }

    /// <summary>The subscription the broker ended with this error (spec §4.8; a credential refresh revoked it), or 0.</summary>
    public uint Sid { get; init; }

    /// <summary>Long-poll: the problem's <c>code</c> (longpoll §3), e.g. <c>SessionExpired</c>.</summary>
    public string? ProblemCode { get; init; }

    /// <summary>The broker refused the HELLO itself (spec §6.1): sent again unchanged, it would be refused again.</summary>
    internal bool RefusedHello { get; init; }

    /// <summary>Long-poll: the HTTP status of the refusal. WebSocket: the status a refused upgrade was answered with.</summary>
    public int? HttpStatus { get; init; }
}

/// <summary>
/// A publication did not fit in the client's buffer while it was disconnected
/// (<see cref="HeraldClientOptions.PublishBufferSize"/>). Nothing of it was kept; try again after the
/// reconnect (<see cref="HeraldClient.StateChanged"/>) or raise the limit.
/// </summary>
public sealed class HeraldBufferFullException : HeraldException
{
    public HeraldBufferFullException()
        : base("The publish buffer is full.")
    {
    }

    public HeraldBufferFullException(string message)
        : base(message)
    {
    }

    public HeraldBufferFullException(string message, Exception innerException)
        : base(message, innerException)
    {
    }

    /// <summary>The configured <see cref="HeraldClientOptions.PublishBufferSize"/>.</summary>
    public int BufferSize { get; init; }
}

/// <summary>
/// No reply arrived in time for a request: a responder was slow or silent, or (without the no-responders
/// status, <see cref="HeraldServerInfo.NoResponders"/>) nobody subscribes to its topic.
/// </summary>
public sealed class HeraldTimeoutException : HeraldException
{
    public HeraldTimeoutException()
        : base("The request timed out.")
    {
    }

    public HeraldTimeoutException(string message)
        : base(message)
    {
    }

    public HeraldTimeoutException(string message, Exception innerException)
        : base(message, innerException)
    {
    }

    /// <summary>The topic the request went to.</summary>
    public string? Topic { get; init; }

    /// <summary>How long the request waited.</summary>
    public TimeSpan Timeout { get; init; }
}

/// <summary>
/// A request reached no subscriber, and the broker said so at once (spec §7, the no-responders status),
/// instead of the request waiting for its timeout. Thrown only when the broker granted it
/// (<see cref="HeraldServerInfo.NoResponders"/>, <see cref="HeraldClientOptions.EnableNoResponders"/>).
/// </summary>
public sealed class HeraldNoRespondersException : HeraldException
{
    public HeraldNoRespondersException()
        : base("Nobody serves the request's topic.")
    {
    }

    public HeraldNoRespondersException(string message)
        : base(message)
    {
    }

    public HeraldNoRespondersException(string message, Exception innerException)
        : base(message, innerException)
    {
    }

    /// <summary>The topic the request went to, which no subscription matched.</summary>
    public string? Topic { get; init; }
}

/// <summary>
/// The broker could not be reached, or the connection was lost (the inner exception says how), or the
/// client gave up reconnecting.
/// </summary>
public sealed class HeraldConnectionException : HeraldException
{
    public HeraldConnectionException()
        : base("The connection to the broker failed.")
    {
    }

    public HeraldConnectionException(string message)
        : base(message)
    {
    }

    public HeraldConnectionException(string message, Exception innerException)
        : base(message, innerException)
    {
    }
}
