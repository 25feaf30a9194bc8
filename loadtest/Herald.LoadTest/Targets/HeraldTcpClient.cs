using System.Buffers;
using System.Net;
using Herald.LoadTest.Client;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Targets;

/// <summary>
/// <see cref="IPubSubClient"/> over one Herald connection (<see cref="HeraldConnection"/>: TCP, or TLS or a
/// WebSocket over it, the same frames and the same code whatever the byte stream): SUBSCRIBE
/// with a PING/PONG barrier (spec §4.7), PRESENCE answered by request id (spec §15.3), PUBLISH frames encoded straight into the batched writer, and a
/// receive loop that parses MESSAGE frames in place (<see cref="FramePeek.TryReadMessage"/>) and calls the
/// subscription's handler by sid. The rest is <see cref="SocketPubSubClient"/>.
/// </summary>
internal sealed class HeraldTcpClient : SocketPubSubClient
{
    private static readonly byte[] Ping = [0, 0, 0, 2, 0x91, (byte)FrameType.Ping];
    private static readonly byte[] Pong = [0, 0, 0, 2, 0x91, (byte)FrameType.Pong];

    private readonly HeraldConnection _connection;
    private readonly TopicCache _topics = new();
    private readonly System.Collections.Concurrent.ConcurrentDictionary<uint, TaskCompletionSource<PresenceReplyFrame>> _presenceReplies = new();
    private int _lastRequest;

    private HeraldTcpClient(HeraldConnection connection)
        : base(connection.SendAsync)
    {
        _connection = connection;
        StartReceiving();
    }

    public override long? MaxPendingMessages => _connection.Welcome.Limits.TryGetValue("max_pending_msgs", out ulong limit) && limit > 0 ? (long)Math.Min(limit, long.MaxValue) : null;

    /// <summary>The broker's WELCOME (limits, capabilities).</summary>
    public WelcomeFrame Welcome => _connection.Welcome;

    protected override string ClosedByServer => "the broker closed the connection";

    /// <summary>WELCOME's <c>inbox_prefix</c> (spec §4.2), <c>_INBOX</c> from a broker that names none.</summary>
    public override string InboxPrefix => _connection.Welcome.InboxPrefix ?? IPubSubClient.AnonymousInboxPrefix;

    public static async Task<HeraldTcpClient> ConnectAsync(IPEndPoint endPoint, string name, CancellationToken cancellationToken, int receiveBufferSize = HeraldConnection.DefaultReceiveBufferSize, IPAddress? localAddress = null, string? auth = null, Capabilities capabilities = Capabilities.None, BrokerEndpoints? via = null)
    {
        HeraldConnection connection = await HeraldConnection.ConnectAsync(endPoint, name, cancellationToken, receiveBufferSize, localAddress, via, capabilities, auth: auth);
        return new HeraldTcpClient(connection);
    }

    /// <summary>
    /// As <see cref="SocketPubSubClient.SubscribeAsync(string, DeliveryHandler, CancellationToken)"/> with SUBSCRIBE's
    /// <paramref name="options"/>: present on the topic (join), its join and leave events (spec §15), needing a
    /// broker that granted presence (<see cref="Welcome"/>). Live, and joined, once its PING's PONG is back; a
    /// refused join is a non-fatal ERROR (<see cref="IPubSubClient.Errors"/>).
    /// </summary>
    public Task SubscribeAsync(string topic, SubscribeOptions options, DeliveryHandler handler, CancellationToken cancellationToken) =>
        SubscribeAsync((buffer, sid) => WriteSubscribeAndPing(buffer, topic, null, options, sid), handler, cancellationToken);

    /// <summary>
    /// Asks for <paramref name="topic"/>'s presence (PRESENCE, spec §15.3): at most <paramref name="limit"/> members after
    /// <paramref name="cursor"/>, or with 0 the occupancy alone; completes with its PRESENCE_REPLY.
    /// </summary>
    public async Task<PresenceReplyFrame> PresenceAsync(string topic, ulong limit, string? cursor, CancellationToken cancellationToken)
    {
        uint id = (uint)Interlocked.Increment(ref _lastRequest);
        var reply = new TaskCompletionSource<PresenceReplyFrame>(TaskCreationOptions.RunContinuationsAsynchronously);
        _presenceReplies[id] = reply;
        try
        {
            using (BatchedWriter.AppendScope scope = Writer.BeginAppend())
            {
                FrameWriter.WritePresence(scope.Buffer, id, _topics.Get(topic), limit, cursor);
            }

            return await reply.Task.WaitAsync(cancellationToken);
        }
        finally
        {
            _presenceReplies.TryRemove(id, out _);
        }
    }

    protected override void WriteSubscribeAndPing(IBufferWriter<byte> buffer, string topic, string? queue, uint sid) =>
        WriteSubscribeAndPing(buffer, topic, queue, SubscribeOptions.None, sid);

    private static void WriteSubscribeAndPing(IBufferWriter<byte> buffer, string topic, string? queue, SubscribeOptions options, uint sid)
    {
        FrameWriter.WriteSubscribe(buffer, sid, Topic.EncodePattern(topic), options, queue: queue is null ? default : System.Text.Encoding.UTF8.GetBytes(queue));
        buffer.Write(Ping);
    }

    protected override void Failed(string why)
    {
        foreach (TaskCompletionSource<PresenceReplyFrame> waiter in _presenceReplies.Values)
        {
            waiter.TrySetException(new IOException(why));
        }
    }

    protected override void WritePublish(IBufferWriter<byte> buffer, string topic, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> replyTo, ReadOnlySpan<byte> headers) =>
        FrameWriter.WritePublish(buffer, _topics.Get(topic), replyTo, PayloadFlags.None, payload, headers);

    protected override void DispatchBuffered()
    {
        while (_connection.TryReadFrame(out ReadOnlySequence<byte> body))
        {
            Dispatch(body);
        }
    }

    protected override ValueTask<bool> ReceiveMoreAsync() => _connection.ReceiveAsync();

    protected override void CloseConnection() => _connection.Close();

    protected override string Describe(Exception e) => e is BrokerErrorException or ProtocolException ? e.Message : base.Describe(e);

    private void Dispatch(ReadOnlySequence<byte> body)
    {
        ReadOnlySpan<byte> span = body.FirstSpan; // one array: every body is a single segment
        if (FramePeek.TryReadMessage(span, out uint sid, out ReadOnlySpan<byte> replyTo, out ReadOnlySpan<byte> payload, out ReadOnlySpan<byte> headers))
        {
            Deliver(sid, payload, replyTo, headers);
            return;
        }

        var reader = new MessagePackReader(body);
        FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
        switch (type)
        {
            case FrameType.Message:
                PublishFrame message = FrameDecoder.ReadMessage(ref reader, elements);
                Deliver(message.Sid, message.Payload.FirstSpan, message.ReplyTo is { } r ? r.FirstSpan : default, message.Headers.FirstSpan);
                break;
            case FrameType.Ping:
                Reply(Pong);
                break;
            case FrameType.Pong:
                PongReceived();
                break;
            case FrameType.PresenceReply:
                PresenceReplyFrame reply = FrameDecoder.ReadPresenceReply(ref reader, elements);
                if (_presenceReplies.TryRemove(reply.RequestId, out TaskCompletionSource<PresenceReplyFrame>? waiter))
                {
                    waiter.TrySetResult(reply);
                }

                break;
            case FrameType.Error:
                ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                if (error.Fatal)
                {
                    throw new BrokerErrorException(error);
                }

                CountError();
                break;
        }
    }
}

/// <summary>Topic strings encoded once (a scenario uses a handful of topics, each many times). Thread-safe.</summary>
internal sealed class TopicCache
{
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, byte[]> _encoded = new(StringComparer.Ordinal);

    public byte[] Get(string topic) => _encoded.TryGetValue(topic, out byte[]? bytes) ? bytes : _encoded.GetOrAdd(topic, System.Text.Encoding.UTF8.GetBytes);
}
