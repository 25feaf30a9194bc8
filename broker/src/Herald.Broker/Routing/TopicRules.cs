using System.Buffers;
using System.Text;
using Herald.Protocol;

namespace Herald.Broker.Routing;

/// <summary>
/// The broker's checks on topics and patterns received from any transport (spec §5), throwing the
/// spec's <see cref="ProtocolException"/>. Publish topics are checked in place, without allocating.
/// </summary>
internal static class TopicRules
{
    /// <summary>Checks a PUBLISH topic (or, with <paramref name="isReplyTo"/>, a reply_to, where '$' is allowed).</summary>
    public static void CheckName(in ReadOnlySequence<byte> topic, int maxLength, bool isReplyTo = false)
    {
        if (topic.IsSingleSegment)
        {
            ReadOnlySpan<byte> span = topic.FirstSpan;
            ErrorCode error = Topic.ValidateName(span, maxLength);
            if (error == ErrorCode.None && !isReplyTo && Topic.IsReserved(span))
            {
                error = ErrorCode.ReservedTopic;
            }

            if (error != ErrorCode.None)
            {
                throw new ProtocolException(error, Topic.Describe(error, span, maxLength));
            }

            return;
        }

        string name = ToValidString(topic, maxLength, isPattern: false); // split across segments: rare, may allocate
        if (!isReplyTo && name.StartsWith('$'))
        {
            throw new ProtocolException(ErrorCode.ReservedTopic, $"Topic '{name}' is reserved for the broker ('$' prefix).");
        }
    }

    /// <summary>Whether a (checked) topic is under the broker's reserved '$' prefix (spec §5).</summary>
    public static bool IsReserved(in ReadOnlySequence<byte> topic) => topic.FirstSpan is [(byte)'$', ..] || (topic.FirstSpan.IsEmpty && !topic.IsEmpty && Topic.IsReserved(topic.ToArray()));

    /// <summary>Checks a SUBSCRIBE pattern and returns it as a string (the router keeps it).</summary>
    public static string CheckPattern(in ReadOnlySequence<byte> pattern, int maxLength) => ToValidString(pattern, maxLength, isPattern: true);

    private static string ToValidString(in ReadOnlySequence<byte> topic, int maxLength, bool isPattern)
    {
        if (topic.Length > maxLength)
        {
            throw new ProtocolException(ErrorCode.TopicTooLong, $"Topic of {topic.Length} bytes is longer than the limit of {maxLength} bytes.");
        }

        byte[] bytes = topic.ToArray();
        ErrorCode error = isPattern ? Topic.ValidatePattern(bytes, maxLength) : Topic.ValidateName(bytes, maxLength);
        if (error != ErrorCode.None)
        {
            throw new ProtocolException(error, Topic.Describe(error, bytes, maxLength));
        }

        return Encoding.ASCII.GetString(bytes);
    }
}
