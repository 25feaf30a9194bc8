using System.Buffers;
using System.Text;

namespace Herald.Broker.Routing;

/// <summary>
/// A checked topic's characters (ASCII, spec §5) for a check that reads it as text (permissions, reply
/// permissions), without a string per message: decoded into the caller's stack buffer, or into a rented
/// array when the topic is longer (a <c>max_topic</c> above <see cref="StackLength"/>). Dispose returns it.
/// <code>
/// Span&lt;char&gt; stack = stackalloc char[TopicChars.StackLength];
/// using var name = new TopicChars(publish.Topic, stack);
/// </code>
/// </summary>
internal ref struct TopicChars
{
    /// <summary>The default <c>max_topic</c>: a stack buffer this long holds every topic the defaults allow.</summary>
    public const int StackLength = 256;

    private char[]? _rented;

    public TopicChars(in ReadOnlySequence<byte> topic, Span<char> stack)
    {
        int length = (int)topic.Length;
        Span<char> buffer = length <= stack.Length ? stack : (_rented = ArrayPool<char>.Shared.Rent(length));
        Span = buffer[..Encoding.ASCII.GetChars(topic, buffer)];
    }

    public ReadOnlySpan<char> Span { get; }

    public void Dispose()
    {
        if (_rented is not null)
        {
            ArrayPool<char>.Shared.Return(_rented);
            _rented = null;
        }
    }
}
