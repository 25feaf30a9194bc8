using System.Buffers;
using System.Runtime.InteropServices;
using System.Text;
using Herald.Client.Compression;
using Herald.Client.Serialization;
using Herald.Protocol;

namespace Herald.Client;

/// <summary>
/// A message a subscription received (spec §4.6). The payload is the publisher's bytes, decompressed if it
/// travelled compressed. A message is immutable and may be kept and passed between threads.
/// </summary>
public sealed class HeraldMessage
{
    private readonly HeraldClient? _client;
    private readonly PayloadSerializer _serializer;

    internal HeraldMessage(HeraldClient? client, HeraldSubscription? subscription, PayloadSerializer serializer, string topic, string? replyTo, ReadOnlyMemory<byte> payload, bool wasCompressed, HeraldHeaders? headers = null)
    {
        Headers = headers ?? HeraldHeaders.Empty;
        _client = client;
        _serializer = serializer;
        Subscription = subscription;
        Topic = topic;
        ReplyTo = replyTo;
        Payload = payload;
        WasCompressed = wasCompressed;
    }

    /// <summary>The topic it was published to (never a pattern).</summary>
    public string Topic { get; }

    /// <summary>Where the publisher wants a reply (request/reply, spec §7), or <c>null</c>. See <see cref="RespondAsync(ReadOnlyMemory{byte}, CancellationToken)"/>.</summary>
    public string? ReplyTo { get; }

    /// <summary>The payload, as published.</summary>
    public ReadOnlyMemory<byte> Payload { get; }

    /// <summary>
    /// The headers it was published with (spec §4.9), byte for byte as the publisher sent them; empty (never
    /// <c>null</c>) when it had none, or when headers were not negotiated (<see cref="HeraldServerInfo.Headers"/>).
    /// </summary>
    public HeraldHeaders Headers { get; }

    /// <summary>It travelled as a Fossil delta against the subscription's previous message (spec §11.2), applied on arrival.</summary>
    public bool WasDelta { get; private init; }

    /// <summary>It travelled Zstd-compressed (and was decompressed on arrival).</summary>
    public bool WasCompressed { get; }

    /// <summary>Its position in its topic's history (spec §13: <c>Herald-Offset</c>, <c>Herald-Epoch</c>), or null when its topic keeps none.</summary>
    public StreamPosition? Position =>
        Headers.GetFirstValue(StreamPosition.OffsetHeader) is { } offset && Headers.GetFirstValue(StreamPosition.EpochHeader) is { Length: > 0 } epoch
        && ulong.TryParse(offset, System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out ulong value)
            ? new StreamPosition(value, epoch)
            : null;

    /// <summary>The subscription that received it.</summary>
    public HeraldSubscription? Subscription { get; }

    /// <summary>The payload as UTF-8 text.</summary>
    public string GetString() => Encoding.UTF8.GetString(Payload.Span);

    /// <summary>
    /// The payload as a MessagePack-serialized <typeparamref name="T"/> (deserialized as untrusted data). A
    /// <see cref="string"/> is the payload as UTF-8 and a byte buffer type the bytes themselves, as
    /// <see cref="HeraldClient.PublishAsync{T}"/> sends them.
    /// </summary>
    /// <exception cref="HeraldException">The payload is not a <typeparamref name="T"/>.</exception>
    public T Deserialize<T>() => _serializer.FromPayload<T>(Payload, Topic);

    /// <summary>Publishes a reply to <see cref="ReplyTo"/>.</summary>
    /// <exception cref="InvalidOperationException">The message has no <see cref="ReplyTo"/>.</exception>
    public ValueTask RespondAsync(ReadOnlyMemory<byte> payload, CancellationToken cancellationToken = default) =>
        Responder().PublishAsync(ReplyTo!, payload, replyTo: null, cancellationToken);

    /// <summary>Publishes a reply to <see cref="ReplyTo"/>, with <paramref name="headers"/>.</summary>
    /// <inheritdoc cref="RespondAsync(ReadOnlyMemory{byte}, CancellationToken)"/>
    public ValueTask RespondAsync(ReadOnlyMemory<byte> payload, HeraldHeaders headers, CancellationToken cancellationToken = default) =>
        Responder().PublishAsync(ReplyTo!, payload, headers, replyTo: null, cancellationToken);

    /// <inheritdoc cref="RespondAsync(ReadOnlyMemory{byte}, CancellationToken)"/>
    public ValueTask RespondAsync(byte[] payload, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(payload);
        return Responder().PublishAsync(ReplyTo!, new ReadOnlyMemory<byte>(payload), replyTo: null, cancellationToken);
    }

    /// <summary>Publishes <paramref name="text"/> (UTF-8) as the reply to <see cref="ReplyTo"/>.</summary>
    public ValueTask RespondAsync(string text, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(text);
        return Responder().PublishAsync(ReplyTo!, new ReadOnlyMemory<byte>(Encoding.UTF8.GetBytes(text)), replyTo: null, cancellationToken);
    }

    /// <summary>Publishes <paramref name="value"/>, MessagePack-serialized (bytes and text as they are), as the reply to <see cref="ReplyTo"/>.</summary>
    public ValueTask RespondAsync<T>(T value, CancellationToken cancellationToken = default) =>
        Responder().PublishAsync(ReplyTo!, _serializer.ToPayload(value), replyTo: null, cancellationToken);

    public override string ToString() => $"{Topic} ({Payload.Length} bytes{(ReplyTo is null ? "" : ", reply to " + ReplyTo)})";

    /// <summary>
    /// Builds a message from a MESSAGE frame: copies it out of the read buffer and decompresses a Zstd
    /// payload, bounded by <paramref name="maxPayload"/>.
    /// </summary>
    /// <exception cref="ProtocolException"><see cref="ErrorCode.DecompressionFailed"/>.</exception>
    internal static HeraldMessage FromFrame(in PublishFrame frame, HeraldClient? client, HeraldSubscription? subscription, PayloadSerializer serializer, int maxPayload, byte[]? applied = null)
    {
        bool compressed = (frame.Flags & PayloadFlags.Zstd) != 0;
        byte[] payload = applied ?? (compressed ? ZstdCodec.Decompress(frame.Payload, maxPayload) : frame.Payload.ToArray());
        HeraldHeaders? headers = frame.HasHeaders ? HeraldHeaders.FromBlock(frame.Headers) : null;
        return new HeraldMessage(client, subscription, serializer, frame.TopicString, frame.ReplyToString, payload, compressed, headers) { WasDelta = applied is not null };
    }

    /// <summary>
    /// As <see cref="FromFrame"/> for a subscription that asked for deltas (spec §11.2): a delta is applied to the
    /// subscription's last payload on this connection, bounded by <paramref name="maxPayload"/>, and every payload
    /// becomes the next base.
    /// </summary>
    /// <exception cref="ProtocolException"><see cref="ErrorCode.DecompressionFailed"/>: a bad delta, or one with no base on this connection.</exception>
    internal static HeraldMessage FromDeltaFrame(in PublishFrame frame, object connection, HeraldClient? client, HeraldSubscription subscription, PayloadSerializer serializer, int maxPayload)
    {
        byte[]? applied = null;
        if ((frame.Flags & PayloadFlags.Delta) != 0)
        {
            if (subscription.DeltaBase is not { } source || !ReferenceEquals(subscription.DeltaBaseConnection, connection))
            {
                throw new ProtocolException(ErrorCode.DecompressionFailed, $"A delta for subscription {frame.Sid} arrived before any payload it could apply to.");
            }

            ReadOnlySequence<byte> delta = frame.Payload;
            applied = FossilDelta.Apply(source, delta.IsSingleSegment ? delta.FirstSpan : delta.ToArray(), maxPayload);
        }

        HeraldMessage message = FromFrame(frame, client, subscription, serializer, maxPayload, applied);
        subscription.DeltaBase = applied ?? (MemoryMarshal.TryGetArray(message.Payload, out ArraySegment<byte> whole) && whole.Offset == 0 && whole.Count == whole.Array!.Length ? whole.Array : message.Payload.ToArray());
        subscription.DeltaBaseConnection = connection;
        return message;
    }

    /// <summary>
    /// Not a message: a presence event carried through a handler subscription's buffer so that its OnPresence call takes its
    /// turn among the messages (spec §15.2 order). Never handed to the application as a message.
    /// </summary>
    internal HeraldPresenceEvent? PresenceEvent { get; private init; }

    internal static HeraldMessage ForPresence(HeraldPresenceEvent presence) =>
        new(client: null, presence.Subscription, PayloadSerializer.Default, presence.Topic, replyTo: null, ReadOnlyMemory<byte>.Empty, wasCompressed: false) { PresenceEvent = presence };

    /// <summary>The broker's no-responders status (spec §7): an empty message with <c>Herald-Status: 503</c>.</summary>
    internal bool IsNoResponders => Payload.IsEmpty && Headers.Count > 0 && Headers.GetFirstValue("Herald-Status") == "503";

    private HeraldClient Responder()
    {
        if (ReplyTo is null)
        {
            throw new InvalidOperationException($"The message on '{Topic}' has no reply_to: nobody is waiting for a reply.");
        }

        return _client ?? throw new InvalidOperationException("This message did not come from a client.");
    }
}
