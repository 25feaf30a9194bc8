using System.Diagnostics.CodeAnalysis;

namespace Herald.Protocol;

/// <summary>A peer broke the protocol; <see cref="Code"/> is what goes back in the ERROR frame.</summary>
public sealed class ProtocolException : Exception
{
    public ProtocolException(ErrorCode code, string message) : base(message) => Code = code;

    public ProtocolException(ErrorCode code, string message, Exception inner) : base(message, inner) => Code = code;

    public ProtocolException() : this(ErrorCode.MalformedFrame, "Malformed frame.") { }

    public ProtocolException(string message) : this(ErrorCode.MalformedFrame, message) { }

    public ProtocolException(string message, Exception inner) : this(ErrorCode.MalformedFrame, message, inner) { }

    public ErrorCode Code { get; }
}

/// <summary>Keeps throw sites out of hot methods so they stay small enough to inline.</summary>
internal static class ThrowHelper
{
    [DoesNotReturn]
    public static void Throw(ErrorCode code, string message) => throw new ProtocolException(code, message);

    [DoesNotReturn]
    public static void ThrowFrameTooLarge(long length, int max) =>
        throw new ProtocolException(ErrorCode.FrameTooLarge, $"Frame body of {length} bytes is over the limit of {max} bytes.");

    [DoesNotReturn]
    public static void ThrowMalformed(string message) => throw new ProtocolException(ErrorCode.MalformedFrame, message);

    [DoesNotReturn]
    public static void ThrowMalformed(string message, Exception inner) => throw new ProtocolException(ErrorCode.MalformedFrame, message, inner);
}
