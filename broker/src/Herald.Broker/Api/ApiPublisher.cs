using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using Herald.Broker.Delivery;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.Api;

/// <summary>
/// The session a key publishes as: one per key, never registered, subscribed or polled (as long-poll's one-shot
/// publishers), opened as the identity <c>api:&lt;key name&gt;</c> with every permission and headers granted. Each
/// publication goes through <see cref="ProtocolSession.Publish"/>, so it is held to a client's rules (topic validity,
/// <c>max_payload</c>, the header block's limits), routed by the one router, encoded once for its subscribers, kept by a
/// history topic and sent to the other nodes in a cluster, exactly as a client's. One request at a time per key
/// (<see cref="Turn"/>): a session's operations have one caller. The broker's client publish rate
/// (<c>Herald:Limits:PublishRatePerSecond</c>) does not hold it back: the API's own per-key rate limit does.
/// </summary>
internal sealed class ApiPublisher : ProtocolSession
{
    /// <summary>The transport name metrics and spans show for API publications.</summary>
    public const string TransportName = "api";

    public ApiPublisher(BrokerCore broker, ApiKey key, InputGate input)
        : base(broker, 0, TransportName, remoteEndPoint: null, new BacklogLimits(1024, broker.Limits.MaxPendingBytes, SlowConsumerPolicy.DropOldest), input)
    {
        Open(new Identity("api:" + key.Name, Permissions.AllowAll, ExpiresAt: null, "_INBOX"), key.Name, Capabilities.Headers);
    }

    /// <summary>Taken around each request's publications: one caller at a time.</summary>
    public SemaphoreSlim Turn { get; } = new(1, 1);

    /// <summary>
    /// Publishes one PUBLISH frame (<paramref name="frame"/>, length prefix included) and wakes its subscribers. Throws a
    /// <see cref="ProtocolException"/> for a publication a client would be refused (said as 400 and the spec's code);
    /// a non-fatal refusal is returned. Caller holds <see cref="Turn"/> and has entered <see cref="ProtocolSession.Input"/>.
    /// </summary>
    public Refusal PublishFrame(ReadOnlyMemory<byte> frame)
    {
        var body = new ReadOnlySequence<byte>(frame);
        if (!FrameReader.TryReadFrame(ref body, Limits.MaxFrameBytes, out ReadOnlySequence<byte> read))
        {
            throw new ProtocolException(ErrorCode.FrameTooLarge, $"The publication's frame is over max_frame ({Limits.MaxFrameBytes} bytes).");
        }

        var reader = new MessagePackReader(read);
        FrameDecoder.ReadHeader(ref reader, out int count);
        PublishFrame publish = FrameDecoder.ReadPublish(ref reader, count);
        try
        {
            return Publish(publish, Broker.Metrics.FanoutEnabled ? Stopwatch.GetTimestamp() : 0);
        }
        finally
        {
            FlushTouched();
        }
    }

    protected override void OnClose(ErrorCode code, string reason)
    {
    }
}

/// <summary>The publishers of the configured keys, made at a key's first publication (the keys are fixed at start).</summary>
internal sealed class ApiPublishers(BrokerCore broker, SessionRegistry registry)
{
    private readonly ConcurrentDictionary<string, ApiPublisher> _byKey = new(StringComparer.Ordinal);

    public ApiPublisher Of(ApiKey key) => _byKey.GetOrAdd(key.Name, (_, k) => new ApiPublisher(broker, k, registry.UnlistedInput), key);
}
