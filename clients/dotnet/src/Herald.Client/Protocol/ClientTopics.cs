using System.Text;
using Herald.Protocol;

namespace Herald.Client.Protocol;

/// <summary>
/// The topic rules of spec §5, checked before anything is sent, with the broker's <c>max_topic</c> once
/// it is known: a topic the broker would refuse (and close the connection for) fails at once with the
/// code it would have sent, and the connection carries on.
/// </summary>
internal static class ClientTopics
{
    /// <summary>A PUBLISH topic: a valid name, not reserved (<c>$</c>).</summary>
    public static byte[] EncodeTopic(string topic, int maxTopic)
    {
        ArgumentNullException.ThrowIfNull(topic);
        byte[] bytes = Encoding.UTF8.GetBytes(topic);
        ErrorCode error = Topic.ValidateName(bytes, maxTopic);
        if (error == ErrorCode.None && Topic.IsReserved(bytes))
        {
            error = ErrorCode.ReservedTopic;
        }

        return error == ErrorCode.None ? bytes : throw Refused(error, bytes, maxTopic, "It was not sent.");
    }

    /// <summary>A <c>reply_to</c>: a valid name; <c>$</c> is allowed (spec §4.5). <c>null</c> stays <c>null</c>.</summary>
    public static byte[]? EncodeReplyTo(string? replyTo, int maxTopic)
    {
        if (replyTo is null)
        {
            return null;
        }

        byte[] bytes = Encoding.UTF8.GetBytes(replyTo);
        ErrorCode error = Topic.ValidateName(bytes, maxTopic);
        return error == ErrorCode.None ? bytes : throw Refused(error, bytes, maxTopic, "It is the reply_to; nothing was sent.");
    }

    /// <summary>A SUBSCRIBE pattern: wildcards allowed.</summary>
    public static byte[] EncodePattern(string pattern, int maxTopic)
    {
        ArgumentNullException.ThrowIfNull(pattern);
        byte[] bytes = Encoding.UTF8.GetBytes(pattern);
        ErrorCode error = Topic.ValidatePattern(bytes, maxTopic);
        return error == ErrorCode.None ? bytes : throw Refused(error, bytes, maxTopic, "Nothing was subscribed.");
    }

    /// <summary>
    /// A queue group's name (spec §4.3, §14; the rule is <see cref="Topic.IsQueueName"/>, the broker's). Checked
    /// before anything is sent: the broker would close the connection over a bad one (<c>InvalidTopic</c>).
    /// </summary>
    /// <exception cref="ArgumentException">The name breaks the rules.</exception>
    public static byte[] EncodeQueue(string queue, string paramName)
    {
        ArgumentNullException.ThrowIfNull(queue, paramName);
        if (queue.Length == 0)
        {
            throw new ArgumentException($"A queue group's name is 1 to {Topic.MaxQueueNameBytes} characters; leave SubscriptionOptions.Queue null for a plain subscription. Nothing was subscribed.", paramName);
        }

        return Topic.IsQueueName(queue) ? Encoding.ASCII.GetBytes(queue) : throw new ArgumentException($"{Topic.DescribeQueueName(queue)} Nothing was subscribed.", paramName);
    }

    private static HeraldException Refused(ErrorCode error, byte[] topic, int maxTopic, string outcome) =>
        new(error, $"{Topic.Describe(error, topic, maxTopic)} {outcome}");
}
