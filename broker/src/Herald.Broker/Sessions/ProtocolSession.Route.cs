using System.Buffers;
using System.Diagnostics;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Sessions;

/// <summary>
/// Routing a checked publication (spec §4.5, §7): through the histories or the router, then the exchange (the other nodes,
/// in a cluster); its span; and the no-responders answer of a request nobody took.
/// </summary>
internal abstract partial class ProtocolSession
{
    private void Route(in PublishFrame publish, ReadOnlySpan<byte> plainPayload, long receivedAt)
    {
        // The broker's span, only for a publication whose headers carry a sampled traceparent and
        // while something listens: without headers this costs the HasHeaders test, with them HasListeners.
        Activity? span = publish.HasHeaders && BrokerTracing.Source.HasListeners() ? StartSpan(publish, receivedAt) : null;
        FanoutTally? tally = span is null ? null : _fanout;
        if (Broker.History is { Shared: true } && SharedHistoryOf(publish) is { } kept)
        {
            int stamped = ProtocolConstants.MessageHeaderSize - ProtocolConstants.LengthPrefixSize + (int)(publish.Envelope.Length + publish.Headers.Length) + TopicHistory.MaxStampBytes;
            if (stamped > Limits.MaxFrameBytes)
            {
                Throw(ErrorCode.FrameTooLarge, $"Topic '{kept.Topic}' keeps a history: its MESSAGE, with the position the broker stamps in (up to {TopicHistory.MaxStampBytes} bytes), could be {stamped} bytes, over max_frame ({Limits.MaxFrameBytes}).");
            }

            // A history topic in a cluster: Redis gives it its offset, and it comes back to be delivered here too.
            Broker.SharedHistory.ForwardKept(publish, kept, Backlog, ref _groups);
            span?.Dispose();
            Broker.Metrics.Published(Transport, publish.Topic, 0, ProtocolConstants.MessageHeaderSize + (int)(publish.Envelope.Length + publish.Headers.Length));
            return;
        }

        // The fan-out latency (herald.fanout.duration) of one publication in FanoutSampling: a histogram record
        // on every publication cost about 5 % of a streaming publisher's broker CPU (loadtest/docs/profile.md).
        long sampledAt = (_routed++ & (BrokerMetrics.FanoutSampling - 1)) == 0 ? receivedAt : 0;
        GroupAssignments? groups = Broker.Exchange.Assigning(ref _groups, publish); // cluster: queue groups chosen among every node's members
        var routing = new PublishContext(in publish, _toFlush)
        {
            Origin = Backlog,
            Encoder = Broker.Encoder,
            PlainPayload = plainPayload,
            ReceivedAt = sampledAt,
            Tally = tally,
            Groups = groups,
        };
        int deliveries = Broker.History is { } histories
            ? histories.Publish(Broker.Router, in routing, Limits.MaxFrameBytes)
            : Broker.Router.Publish(in routing);
        if (span is not null)
        {
            _fanout!.WriteTo(span);
            span.Dispose(); // ended once queued to every subscriber, not when written
        }

        CountPublished(publish.Topic, deliveries, ProtocolConstants.MessageHeaderSize + (int)(publish.Envelope.Length + publish.Headers.Length));
        bool unanswered = deliveries == 0 && _noResponders && publish.ReplyTo.HasValue;
        // In a cluster the other nodes decide whether anyone takes the request, and the groups given to them go along;
        // on one node (the exchange takes nothing) an unanswered request is answered here.
        if (!Broker.Exchange.Forward(publish, unanswered ? this : null, groups) && unanswered && AnswerNoResponders(publish.ReplyTo!.Value))
        {
            _toFlush.Add(Backlog);
        }
    }

    /// <summary>
    /// Counts a routed publication in the metrics: where one thread routes (a read loop), held in the session's
    /// <see cref="PublicationTally"/> and counted once per topic and read batch (<see cref="FlushTouched"/>), else at once.
    /// </summary>
    private void CountPublished(in ReadOnlySequence<byte> topic, int deliveries, int frameBytes)
    {
        PublicationTally? tally = _tally ??= ChecksOnOneThread ? new PublicationTally() : null;
        if (tally is null || !tally.TryAdd(Broker.Metrics, Transport, topic, deliveries, frameBytes))
        {
            Broker.Metrics.Published(Transport, topic, deliveries, frameBytes);
        }
    }

    private TopicHistory? SharedHistoryOf(in PublishFrame publish)
    {
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var topic = new TopicChars(publish.Topic, stack);
        return Broker.History!.Find(topic.Span);
    }

    /// <summary>A request of this session reached no subscriber on any node (cluster): answered as on one node, from the cluster's thread.</summary>
    void INoResponders.NoResponders(ReadOnlyMemory<byte> replyTo)
    {
        if (AnswerNoResponders(new ReadOnlySequence<byte>(replyTo)))
        {
            Backlog.ScheduleFlush();
        }
    }

    /// <summary>Starts the broker's span of a publication carrying a sampled traceparent, with this session's attributes; null otherwise.</summary>
    private Activity? StartSpan(in PublishFrame publish, long receivedAt)
    {
        Activity? span = BrokerTracing.StartRoute(publish, receivedAt);
        if (span is null)
        {
            return null;
        }

        if (span.IsAllDataRequested)
        {
            span.SetTag("herald.transport", Transport);
            span.SetTag("herald.connection.id", Id);
            if (ClientName is { } name)
            {
                span.SetTag("messaging.client.id", name);
            }
        }

        _fanout ??= new FanoutTally();
        return span;
    }

    /// <summary>The status block of a no-responders answer (spec §7), encoded once.</summary>
    private static readonly byte[] NoRespondersHeaders = HeaderBlock.Encode(
    [
        new("Herald-Status", ["503"]),
        new("Herald-Description", ["No responders"]),
    ]);

    /// <summary>
    /// A request of this session reached no subscription (spec §7): a MESSAGE on its reply_to, with the
    /// no-responders status and nothing else, to this session's own subscriptions that match the reply_to (no
    /// one else's; nothing if it has none). Off the hot path: only a request that found nobody gets here.
    /// True when the backlog must be woken (by the caller: its batch's flush, or at once).
    /// </summary>
    private bool AnswerNoResponders(in ReadOnlySequence<byte> replyTo)
    {
        Broker.Metrics.NoResponders();
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var reply = new TopicChars(replyTo, stack);
        ReadOnlySpan<byte> topic = replyTo.IsSingleSegment ? replyTo.FirstSpan : replyTo.ToArray();
        List<uint>? sids = null;
        lock (_subscriptionsGate)
        {
            if (_subscriptions is null || _subscriptionsEnded)
            {
                return false;
            }

            foreach (Subscription subscription in _subscriptions.Values)
            {
                if (Topic.Matches(subscription.Pattern, reply.Span))
                {
                    (sids ??= []).Add(subscription.Sid);
                }
            }
        }

        if (sids is null)
        {
            return false;
        }

        // Queued outside the gate: a full backlog may end the session, which takes the gate.
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(topic.Length, 0, PayloadFlags.None, 0) + NoRespondersHeaders.Length);
        FrameWriter.WriteMessage(new MessageBufferWriter(frame), 0, topic, default, PayloadFlags.None, default, NoRespondersHeaders);
        frame.Retain(sids.Count - 1);
        bool wake = false;
        foreach (uint sid in sids)
        {
            wake |= (Backlog.Enqueue(frame, sid) & Enqueued.Wake) != 0;
        }

        return wake;
    }
}
