using System.Text;

namespace Herald.Protocol;

/// <summary>
/// Topic and pattern rules (spec §5): dot-separated non-empty tokens of printable ASCII
/// (0x21-0x7E) other than '.', '*' and '>'; in patterns a whole token may be '*' (one token) or, last,
/// '>' (one or more trailing tokens).
/// </summary>
public static class Topic
{
    public const byte Separator = (byte)'.';
    public const byte SingleWildcard = (byte)'*';
    public const byte TailWildcard = (byte)'>';

    /// <summary>Checks a publish topic; returns <see cref="ErrorCode.None"/> when valid.</summary>
    public static ErrorCode ValidateName(ReadOnlySpan<byte> topic, int maxLength) => Validate(topic, maxLength, allowWildcards: false);

    /// <summary>Checks a subscription pattern; returns <see cref="ErrorCode.None"/> when valid.</summary>
    public static ErrorCode ValidatePattern(ReadOnlySpan<byte> pattern, int maxLength) => Validate(pattern, maxLength, allowWildcards: true);

    /// <summary>A publish topic the broker keeps for itself (first token starts with '$').</summary>
    public static bool IsReserved(ReadOnlySpan<byte> topic) => topic.Length > 0 && topic[0] == (byte)'$';

    /// <summary>Whether a pattern contains a wildcard token.</summary>
    public static bool HasWildcard(ReadOnlySpan<byte> pattern)
    {
        int start = 0;
        while (start <= pattern.Length)
        {
            int dot = pattern[start..].IndexOf(Separator);
            int end = dot < 0 ? pattern.Length : start + dot;
            if (end - start == 1 && pattern[start] is SingleWildcard or TailWildcard)
            {
                return true;
            }

            if (dot < 0)
            {
                break;
            }

            start = end + 1;
        }

        return false;
    }

    /// <summary>Whether <paramref name="topic"/> matches <paramref name="pattern"/> (both assumed valid).</summary>
    public static bool Matches(string pattern, string topic)
    {
        ArgumentNullException.ThrowIfNull(pattern);
        ArgumentNullException.ThrowIfNull(topic);
        return Matches(pattern.AsSpan(), topic.AsSpan());
    }

    /// <summary>Whether <paramref name="topic"/> matches <paramref name="pattern"/> (both assumed valid); allocates nothing.</summary>
    public static bool Matches(ReadOnlySpan<char> pattern, ReadOnlySpan<char> topic)
    {
        while (true)
        {
            int pEnd = pattern.IndexOf('.');
            ReadOnlySpan<char> pTok = pEnd < 0 ? pattern : pattern[..pEnd];
            if (pTok is ">")
            {
                return true; // at least one topic token is left: we are inside the topic here
            }

            int tEnd = topic.IndexOf('.');
            if (pTok is not "*" && !pTok.SequenceEqual(tEnd < 0 ? topic : topic[..tEnd]))
            {
                return false;
            }

            if (pEnd < 0 || tEnd < 0)
            {
                return pEnd < 0 && tEnd < 0;
            }

            pattern = pattern[(pEnd + 1)..];
            topic = topic[(tEnd + 1)..];
        }
    }

    /// <summary>Validates and returns a string topic's UTF-8 bytes, or throws <see cref="ProtocolException"/>.</summary>
    public static byte[] EncodeName(string topic, int maxLength = int.MaxValue) => Encode(topic, maxLength, allowWildcards: false);

    /// <summary>Validates and returns a string pattern's UTF-8 bytes, or throws <see cref="ProtocolException"/>.</summary>
    public static byte[] EncodePattern(string pattern, int maxLength = int.MaxValue) => Encode(pattern, maxLength, allowWildcards: true);

    private static byte[] Encode(string value, int maxLength, bool allowWildcards)
    {
        ArgumentNullException.ThrowIfNull(value);
        byte[] bytes = Encoding.UTF8.GetBytes(value);
        ErrorCode error = Validate(bytes, maxLength, allowWildcards);
        if (error != ErrorCode.None)
        {
            ThrowHelper.Throw(error, Describe(error, bytes, maxLength));
        }

        return bytes;
    }

    /// <summary>A human-readable reason for an ERROR frame.</summary>
    public static string Describe(ErrorCode error, ReadOnlySpan<byte> topic, int maxLength) => error switch
    {
        ErrorCode.TopicTooLong => $"Topic of {topic.Length} bytes is longer than the limit of {maxLength} bytes.",
        ErrorCode.ReservedTopic => $"Topic '{Printable(topic)}' is reserved for the broker ('$' prefix).",
        _ => $"Topic '{Printable(topic)}' is not valid (spec §5: dot-separated non-empty tokens of printable ASCII; '*' and '>' only as whole tokens of a pattern, '>' last).",
    };

    /// <summary>The most bytes of a queue group's name (spec §4.3).</summary>
    public const int MaxQueueNameBytes = 64;

    /// <summary>A queue group's name (spec §4.3, §14): 1 to <see cref="MaxQueueNameBytes"/> topic token characters (printable ASCII except '.', '*' and '>').</summary>
    public static bool IsQueueName(ReadOnlySpan<char> name)
    {
        if (name.Length is 0 or > MaxQueueNameBytes)
        {
            return false;
        }

        foreach (char c in name)
        {
            if (c is < '!' or > '~' or '.' or '*' or '>')
            {
                return false;
            }
        }

        return true;
    }

    /// <summary>Why <paramref name="name"/> is not a queue group's name (<see cref="IsQueueName"/>), for an error message; control and non-ASCII characters shown as '?'.</summary>
    public static string DescribeQueueName(string name) =>
        $"Queue group name '{Printable(Encoding.UTF8.GetBytes(name))}' must be 1 to {MaxQueueNameBytes} bytes of topic token characters (printable ASCII except '.', '*' and '>').";

    private static string Printable(ReadOnlySpan<byte> topic)
    {
        const int Shown = 64;
        ReadOnlySpan<byte> head = topic.Length > Shown ? topic[..Shown] : topic;
        var sb = new StringBuilder(head.Length + 3);
        foreach (byte b in head)
        {
            sb.Append(b is >= 0x20 and < 0x7F ? (char)b : '?');
        }

        if (topic.Length > Shown) sb.Append("...");
        return sb.ToString();
    }

    private static ErrorCode Validate(ReadOnlySpan<byte> value, int maxLength, bool allowWildcards)
    {
        if (value.Length > maxLength)
        {
            return ErrorCode.TopicTooLong;
        }

        if (value.IsEmpty)
        {
            return ErrorCode.InvalidTopic;
        }

        int tokenStart = 0;
        for (int i = 0; i <= value.Length; i++)
        {
            if (i == value.Length || value[i] == Separator)
            {
                int tokenLength = i - tokenStart;
                if (tokenLength == 0)
                {
                    return ErrorCode.InvalidTopic; // leading, trailing or double dot
                }

                if (tokenLength == 1 && value[tokenStart] is SingleWildcard or TailWildcard)
                {
                    if (!allowWildcards)
                    {
                        return ErrorCode.InvalidTopic;
                    }

                    if (value[tokenStart] == TailWildcard && i != value.Length)
                    {
                        return ErrorCode.InvalidTopic; // '>' must be the last token
                    }
                }
                else
                {
                    foreach (byte b in value.Slice(tokenStart, tokenLength))
                    {
                        if (b is < 0x21 or > 0x7E or SingleWildcard or TailWildcard)
                        {
                            return ErrorCode.InvalidTopic;
                        }
                    }
                }

                tokenStart = i + 1;
            }
        }

        return ErrorCode.None;
    }
}
