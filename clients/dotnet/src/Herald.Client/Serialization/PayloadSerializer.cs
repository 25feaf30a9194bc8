using System.Buffers;
using System.Text;
using MessagePack;

namespace Herald.Client.Serialization;

/// <summary>
/// Typed payloads through MessagePack. Serialization uses the caller's options as they are (standard
/// resolvers by default). A payload that arrives is untrusted input: deserialization runs with
/// <see cref="MessagePackSecurity.UntrustedData"/> (collision-resistant hashing, depth limit) unless the
/// caller chose a security setting of their own.
/// </summary>
/// <remarks>
/// Bytes and text are payloads already: a <see cref="string"/> travels as UTF-8 and a byte buffer
/// (<see cref="T:byte[]"/>, <see cref="Memory{T}"/>, <see cref="ReadOnlyMemory{T}"/>, <see cref="ArraySegment{T}"/>)
/// as it is, whichever overload sent them, and they come back the same way. Without this, a
/// <c>Memory&lt;byte&gt;</c> handed to the generic overload (an exact match, so C# prefers it) would
/// arrive wrapped in a MessagePack bin header.
/// </remarks>
internal sealed class PayloadSerializer
{
    public static readonly PayloadSerializer Default = new(MessagePackSerializerOptions.Standard);

    private readonly MessagePackSerializerOptions _write;
    private readonly MessagePackSerializerOptions _read;

    public PayloadSerializer(MessagePackSerializerOptions options)
    {
        _write = options;
        _read = ReferenceEquals(options.Security, MessagePackSecurity.TrustedData) ? options.WithSecurity(MessagePackSecurity.UntrustedData) : options;
    }

    /// <summary>The options deserialization runs with.</summary>
    public MessagePackSerializerOptions ReadOptions => _read;

    /// <summary>The payload that carries <paramref name="value"/>: bytes and text as they are, anything else as MessagePack.</summary>
    public ReadOnlyMemory<byte> ToPayload<T>(T value)
    {
        switch (value)
        {
            case ReadOnlyMemory<byte> bytes:
                return bytes;
            case Memory<byte> bytes:
                return bytes;
            case byte[] bytes:
                return bytes;
            case ArraySegment<byte> bytes:
                return bytes;
            case string text:
                return Encoding.UTF8.GetBytes(text);
            default:
                var buffer = new ArrayBufferWriter<byte>(256);
                Serialize(buffer, value);
                return buffer.WrittenMemory;
        }
    }

    /// <summary>The value a payload carries: the inverse of <see cref="ToPayload{T}"/>.</summary>
    public T FromPayload<T>(ReadOnlyMemory<byte> payload, string topic)
    {
        if (typeof(T) == typeof(string))
        {
            return (T)(object)Encoding.UTF8.GetString(payload.Span);
        }

        if (typeof(T) == typeof(byte[]))
        {
            return (T)(object)payload.ToArray();
        }

        if (typeof(T) == typeof(ReadOnlyMemory<byte>))
        {
            return (T)(object)payload;
        }

        if (typeof(T) == typeof(Memory<byte>) || typeof(T) == typeof(ArraySegment<byte>))
        {
            byte[] copy = payload.ToArray();
            return typeof(T) == typeof(Memory<byte>) ? (T)(object)copy.AsMemory() : (T)(object)new ArraySegment<byte>(copy);
        }

        return Deserialize<T>(payload, topic);
    }

    public void Serialize<T>(IBufferWriter<byte> output, T value)
    {
        try
        {
            MessagePackSerializer.Serialize(output, value, _write);
        }
        catch (MessagePackSerializationException e)
        {
            throw new HeraldException($"A {typeof(T).Name} could not be serialized as MessagePack: {e.Message}", e);
        }
    }

    public T Deserialize<T>(ReadOnlyMemory<byte> payload, string topic)
    {
        try
        {
            return MessagePackSerializer.Deserialize<T>(payload, _read);
        }
        catch (MessagePackSerializationException e)
        {
            throw new HeraldException($"The payload of a message on '{topic}' is not a MessagePack {typeof(T).Name}: {e.Message}", e);
        }
    }
}
