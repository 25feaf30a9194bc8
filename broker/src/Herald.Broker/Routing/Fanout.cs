using System.Buffers;
using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Routing;

/// <summary>
/// Delivery of a publication to what the <see cref="SubscriptionIndex"/> matched: its forms (as sent or the other
/// compression, with its header block or without), each built once and only when a subscriber needs it; one member
/// per queue group, weighed across the cluster's nodes; the same bytes queued to every subscriber's backlog, and the
/// sinks that were idle listed for the caller to flush once.
/// </summary>
/// <remarks>
/// Stateless but for a counter: any number of threads publish at once, each with its own <see cref="PublishContext"/>
/// (and its own flush list), reading the index's cached match without a lock. Per subscriber the loop allocates
/// nothing, copies no frame and takes no lock; its only interface calls are to the subscriber's sink (what it accepts,
/// the enqueue). Each form is retained for every subscription in one atomic add, the unused references dropped once
/// at the end. The <see cref="PublishContext"/> is passed <c>in</c> and read through, never copied.
/// </remarks>
internal sealed class Fanout
{
    private readonly SubscriptionIndex _index;
    private readonly BrokerMetrics? _metrics;
    private long _encodedFrames;

    public Fanout(SubscriptionIndex index, BrokerMetrics? metrics)
    {
        _index = index;
        _metrics = metrics;
    }

    /// <summary>MESSAGE frames encoded so far: one per publication that had at least one subscriber.</summary>
    public long EncodedFrames => Interlocked.Read(ref _encodedFrames);

    /// <summary>
    /// Routes one publication: encodes its MESSAGE frame once (only if someone is subscribed) and queues
    /// the same bytes to every matching subscription. A subscriber that negotiated Zstd may instead get
    /// the compressed form, and one that did not gets the plain form of a compressed publication; a
    /// publication with headers goes to a subscriber that did not negotiate them without its header block
    /// (spec §4.9): each form is built at most once, only if some subscriber needs it (<see cref="PublishContext.Encoder"/>).
    /// Sinks that were idle are added to <see cref="PublishContext.ToFlush"/>; the caller flushes them once, at
    /// the end of its read batch. Returns the number of deliveries.
    /// </summary>
    public int Publish(in PublishContext context) => Route(in context, keep: false, out _);

    /// <summary>
    /// As the other <see cref="Publish(in PublishContext)"/>, and hands the caller one reference to the publication's
    /// MESSAGE as sent, with its header block (built even when nobody is subscribed): what a topic's history keeps (spec §13).
    /// </summary>
    public int Publish(in PublishContext context, out MessageBuffer kept)
    {
        int deliveries = Route(in context, keep: true, out MessageBuffer? asSent);
        kept = asSent!;
        return deliveries;
    }

    /// <summary>
    /// Cluster (spec cluster.md §9, §11): chooses, for a publication of this node's client that is not routed here
    /// first (a history topic's, which comes back from Redis), which node delivers each queue group, as
    /// <see cref="Publish(in PublishContext)"/> would; a group chosen here is not recorded, and is delivered here when the publication comes back.
    /// </summary>
    public void ChooseGroups(in ReadOnlySequence<byte> topic, IMessageSink? origin, GroupAssignments groups)
    {
        groups.Decide();
        Subscription[] subscriptions = _index.Match(topic);
        for (int i = 0; i < subscriptions.Length; i++)
        {
            if (subscriptions[i].Group is { } group)
            {
                int end = RunEnd(subscriptions, i, group);
                ChooseMember(subscriptions.AsSpan(i, end - i), origin, groups);
                i = end - 1;
            }
        }
    }

    private static int RunEnd(Subscription[] subscriptions, int start, string group)
    {
        int end = start + 1;
        while (end < subscriptions.Length && string.Equals(subscriptions[end].Group, group, StringComparison.Ordinal))
        {
            end++;
        }

        return end;
    }

    private int Route(in PublishContext context, bool keep, out MessageBuffer? kept)
    {
        kept = null;
        ref readonly PublishFrame publish = ref context.Publication;
        IMessageSink? origin = context.Origin;
        GroupAssignments? groups = context.Groups;
        FanoutTally? tally = context.Tally;
        if (groups is { Deciding: true })
        {
            groups.Decide(); // this routing's choices only (a history evicted meanwhile routes again)
        }

        Subscription[] subscriptions = _index.Match(publish.Topic);
        tally?.Start(subscriptions.Length);
        if (subscriptions.Length == 0)
        {
            if (keep)
            {
                kept = CopyAsSent(publish, withHeaders: true);
                Interlocked.Increment(ref _encodedFrames);
            }

            return 0;
        }

        bool sentCompressed = (publish.Flags & PayloadFlags.Zstd) != 0;
        bool hasHeaders = publish.HasHeaders;
        Forms forms = default;
        FormSlot delta = default;
        long deltaSequence = 0;
        int deliveries = 0;
        bool isRequest = publish.ReplyTo.HasValue;
        for (int i = 0; i < subscriptions.Length; i++)
        {
            Subscription subscription = subscriptions[i];
            if (subscription.Group is { } group)
            {
                int end = RunEnd(subscriptions, i, group);
                Subscription? chosen = ChooseMember(subscriptions.AsSpan(i, end - i), origin, groups);
                i = end - 1;
                if (chosen is null)
                {
                    continue;
                }

                subscription = chosen;
            }
            else if ((subscription.NoEcho && ReferenceEquals(subscription.Sink, origin)) || subscription.Held)
            {
                continue;
            }

            if (isRequest && subscription.Replies is { } replies)
            {
                replies.Grant(publish.ReplyTo!.Value); // a restricted receiver may answer: recorded before it can see the request
            }

            int form = hasHeaders && !subscription.Sink.AcceptsHeaders ? Bare : 0;
            MessageBuffer? frame = null;
            if (subscription.Delta is { } topicDelta && context.Encoder?.Deltas is { } deltas)
            {
                if (!delta.Tried)
                {
                    DeltaForm(ref delta, ref forms, topicDelta, deltas, in context, sentCompressed, subscriptions.Length, out deltaSequence);
                }

                if (delta.Frame is not null && (form & Bare) == 0)
                {
                    frame = delta.Frame; // with the header block as published, if any: not for a sink that reads none
                    delta.Uses++;
                }
            }

            if (frame is null)
            {
                if (subscription.Sink.AcceptsZstd != sentCompressed)
                {
                    frame = Form(ref forms[form | Other], form | Other, in context, sentCompressed, subscriptions.Length, deltaSequence);
                    form |= frame is null ? 0 : Other;
                }

                frame ??= Form(ref forms[form], form, in context, sentCompressed, subscriptions.Length, deltaSequence);
                forms[form].Uses++;
            }

            deliveries++;
            Enqueued enqueued = subscription.Sink.Enqueue(frame!, subscription.Sid);
            if ((enqueued & Enqueued.Wake) != 0)
            {
                context.ToFlush.Add(subscription.Sink);
            }

            tally?.Count(enqueued);
        }

        if (tally is not null)
        {
            bool bare = forms[Other].Frame is null;
            tally.Compression(publish, context.PlainPayload, sentCompressed ? null : forms[bare ? Other | Bare : Other].Frame, compressedWithHeaders: !bare);
        }

        if (keep)
        {
            kept = Form(ref forms[0], 0, in context, sentCompressed, subscriptions.Length, deltaSequence)!;
            kept.Retain(1); // the caller's
        }

        // Each form was retained once per subscription up front (one atomic add); drop the unused
        // references and our own. Every sink releases its own when written.
        for (int i = 0; i < FormCount; i++)
        {
            ReleaseOwn(forms[i].Frame, subscriptions.Length - forms[i].Uses + 1);
        }

        ReleaseOwn(delta.Frame, subscriptions.Length - delta.Uses + 1);

        return deliveries;
    }

    /// <summary>
    /// One member of a queue group (spec §14) for a publication: at random among those that may take it (not
    /// held by a resume, not a no-echo member of the publishing connection); null when none may, or when the
    /// group is delivered on another node.
    /// </summary>
    /// <remarks>
    /// In a cluster (spec cluster.md §11), for this node's publication (<paramref name="groups"/> deciding), each
    /// member elsewhere weighs as many as it stands for, so every member of the cluster is as likely as any other
    /// (NATS weighs its routes' queue subscriptions the same way); a choice elsewhere is recorded for the envelope and
    /// nothing is delivered here. For another node's publication, this node delivers the group only where that node's
    /// choice says so (<see cref="GroupAssignments.DeliversHere"/>), to one of its own members.
    /// </remarks>
    private static Subscription? ChooseMember(ReadOnlySpan<Subscription> members, IMessageSink? origin, GroupAssignments? groups)
    {
        int eligible = 0;
        long elsewhere = 0;
        foreach (Subscription member in members)
        {
            if (member.Node != 0)
            {
                elsewhere += member.Members;
            }
            else if (IsEligible(member, origin))
            {
                eligible++;
            }
        }

        if (groups is null || !groups.Deciding)
        {
            if (groups is not null && !groups.DeliversHere(members))
            {
                return null;
            }

            elsewhere = 0; // chosen here: among this node's members
        }

        long total = eligible + elsewhere;
        if (total == 0)
        {
            return null;
        }

        long pick = total == 1 ? 0 : Random.Shared.NextInt64(total);
        Subscription? last = null; // the last candidate: taken if the weights or eligibility moved since they were counted
        foreach (Subscription member in members)
        {
            if (member.Node != 0)
            {
                if (elsewhere > 0)
                {
                    last = member;
                    if ((pick -= member.Members) < 0)
                    {
                        return Elsewhere(members, member, origin, groups!, eligible);
                    }
                }
            }
            else if (IsEligible(member, origin))
            {
                last = member;
                if (pick-- == 0)
                {
                    return member;
                }
            }
        }

        return last is { Node: not 0 } ? Elsewhere(members, last, origin, groups!, eligible) : last;

        static bool IsEligible(Subscription member, IMessageSink? origin) =>
            !member.Held && !(member.NoEcho && ReferenceEquals(member.Sink, origin));

        // Chosen on another node: recorded for the envelope, nothing delivered here; past what an envelope carries,
        // a member here if one may take it.
        static Subscription? Elsewhere(ReadOnlySpan<Subscription> members, Subscription chosen, IMessageSink? origin, GroupAssignments groups, int eligible) =>
            groups.TryAssign(chosen.GroupId, chosen.Node) || eligible == 0 ? null : ChooseMember(members, origin, groups: null);
    }

    // A publication's forms (index: Other | Bare): as sent or the other compression, with its header block or without.
    private const int Other = 1;
    private const int Bare = 2;
    private const int FormCount = 4;

    private struct FormSlot
    {
        public MessageBuffer? Frame;
        public int Uses;
        public bool Tried;
    }

    [System.Runtime.CompilerServices.InlineArray(FormCount)]
    private struct Forms
    {
        private FormSlot _slot;
    }

    /// <summary>
    /// One form of the publication, built the first time a subscriber needs it (the other compression may come out null:
    /// then it is never tried again), carrying the publication's delta sequence once it has one (<see cref="DeltaForm"/>):
    /// a delta subscriber given a full form holds that payload once it is written, whichever form it was.
    /// </summary>
    private MessageBuffer? Form(ref FormSlot slot, int form, in PublishContext context, bool sentCompressed, int holders, long deltaSequence)
    {
        if (slot.Tried)
        {
            return slot.Frame;
        }

        slot.Tried = true;
        bool withHeaders = (form & Bare) == 0;
        MessageBuffer? frame = (form & Other) == 0
            ? CopyAsSent(context.Publication, withHeaders)
            : sentCompressed
                ? MessageEncoder.Encode(context.Publication, PayloadFlags.None, context.PlainPayload, withHeaders)
                : context.Encoder?.TryCompress(context.Publication, withHeaders);
        if (frame is not null)
        {
            Interlocked.Increment(ref _encodedFrames);
            frame.ReceivedAt = context.ReceivedAt;
            frame.DeltaSequence = deltaSequence;
            frame.Retain(holders);
        }

        return slot.Frame = frame;
    }

    /// <summary>
    /// The delta form (spec §11.2), tried once per publication when the first delta subscriber comes: the topic's delta
    /// engine gives the publication its sequence and, when a delta pays, a frame linking the full one (the as-sent form,
    /// built here if needed), both with the publication's header block as is. A publication sent compressed is not sent
    /// as a delta, but is still the next one's base. The forms built so far are given the sequence here, the later
    /// ones as they are built (<see cref="Form"/>).
    /// </summary>
    private void DeltaForm(ref FormSlot slot, ref Forms forms, Compression.TopicDelta topic, DeltaEncoder deltas, in PublishContext context, bool sentCompressed, int holders, out long sequence)
    {
        slot.Tried = true;
        ref readonly PublishFrame publish = ref context.Publication;
        MessageBuffer? full = sentCompressed ? null : Form(ref forms[0], 0, in context, sentCompressed, holders, deltaSequence: 0);
        ReadOnlySequence<byte> sent = publish.Payload;
        ReadOnlySpan<byte> payload = sentCompressed ? context.PlainPayload : sent.IsSingleSegment ? sent.FirstSpan : sent.ToArray();
        MessageBuffer? frame = deltas.Next(topic, publish, payload, full, out sequence);
        for (int i = 0; i < FormCount; i++)
        {
            forms[i].Frame?.DeltaSequence = sequence;
        }

        if (frame is not null)
        {
            Interlocked.Increment(ref _encodedFrames);
            frame.ReceivedAt = context.ReceivedAt;
            frame.Retain(holders);
        }

        slot.Frame = frame;
    }

    private void ReleaseOwn(MessageBuffer? frame, int references)
    {
        if (frame is null)
        {
            return;
        }

        long receivedAt = frame.ReceivedAt;
        if (frame.Release(references) && receivedAt != 0 && _metrics is not null)
        {
            _metrics.FanoutCompleted(receivedAt); // every subscriber wrote it before the fan-out loop ended
        }
    }

    /// <summary>The frame as the publisher sent it: header, then its envelope (and header block) copied as is (no re-encode).</summary>
    private static MessageBuffer CopyAsSent(in PublishFrame publish, bool withHeaders)
    {
        int envelopeLength = (int)publish.Envelope.Length;
        int headersLength = withHeaders ? (int)publish.Headers.Length : 0;
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + envelopeLength + headersLength);
        Span<byte> bytes = frame.Span;
        FrameWriter.WriteMessageHeader(bytes, envelopeLength + headersLength, sid: 0, hasHeaders: headersLength > 0);
        publish.Envelope.CopyTo(bytes[ProtocolConstants.MessageHeaderSize..]);
        if (headersLength > 0)
        {
            publish.Headers.CopyTo(bytes[(ProtocolConstants.MessageHeaderSize + envelopeLength)..]);
        }

        return frame;
    }
}
