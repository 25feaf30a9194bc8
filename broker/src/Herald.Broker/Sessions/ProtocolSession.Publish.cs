using System.Buffers;
using Herald.Broker.Compression;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.Sessions;

/// <summary>
/// PUBLISH (spec §4.5): the checks (topic, reply, permissions, headers, bounded decompression) and the rate limit, for one
/// frame or a batch.
/// </summary>
internal abstract partial class ProtocolSession
{
    /// <summary>
    /// PUBLISH (spec §4.5): checked, charged one token, then routed once to every matching subscriber. A
    /// refusal (PermissionDenied) routes nothing; a RateLimited notice (once per episode) routed it and
    /// asks the transport to wait <see cref="Throttle"/>.
    /// </summary>
    public Refusal Publish(in PublishFrame publish, long receivedAt)
    {
        Refusal refused = Check(publish, out bool permittedReply);
        if (!refused.IsNone || (Broker.DecidesPublications && !permittedReply && PublishWaitsOrRefused(publish, batch: false, out refused)))
        {
            return refused; // refused, or waiting for the backend's decision (nothing routed or charged: carried out again)
        }

        Refusal notice = Limits.PublishRatePerSecond > 0 ? TakeToken() : default;
        if ((publish.Flags & PayloadFlags.Zstd) == 0)
        {
            Route(publish, default, receivedAt);
            return notice;
        }

        // Sent compressed: always checked (bounded, so no decompression bomb) before anything is routed;
        // subscribers without Zstd get the plain form.
        int length = Zstd.Decompress(publish.Payload, PlainPayloadLimit(publish), out byte[] plain);
        try
        {
            Route(publish, plain.AsSpan(0, length), receivedAt);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(plain);
        }

        return notice;
    }

    /// <summary>
    /// A body of PUBLISH frames back to back (long-poll's publish, longpoll §1.3): every one is read and
    /// checked, and every compressed payload decompressed, before any is routed; then all are routed in
    /// order (topics a publish hook matches are asked of the backend together first). The bytes the payloads declare they decompress to count, together, against
    /// <paramref name="maxDecompressedBytes"/> before any buffer is taken, so one small body cannot hold
    /// more than that.
    /// </summary>
    public Refusal PublishAll(ReadOnlySequence<byte> frames, long receivedAt, int maxDecompressedBytes)
    {
        var publishes = new List<PublishFrame>();
        while (FrameReader.TryReadFrame(ref frames, Limits.MaxFrameBytes, out ReadOnlySequence<byte> frame))
        {
            var reader = new MessagePackReader(frame);
            FrameType type = FrameDecoder.ReadHeader(ref reader, out int count);
            publishes.Add(type == FrameType.Publish ? FrameDecoder.ReadPublish(ref reader, count) : throw new ProtocolException(ErrorCode.UnexpectedFrame, $"Only PUBLISH frames may be posted here, not {type}."));
        }

        if (!frames.IsEmpty || publishes.Count == 0)
        {
            Throw(ErrorCode.MalformedFrame, frames.IsEmpty ? "The body holds no PUBLISH frame." : $"The body ends with {frames.Length} bytes of an incomplete frame.");
        }

        long decompressed = 0;
        bool deciding = false;
        foreach (PublishFrame publish in publishes)
        {
            Refusal refused = Check(publish, out bool permittedReply);
            if (!refused.IsNone)
            {
                ForgetAsked();
                return refused;
            }

            if (Broker.DecidesPublications && !permittedReply && PublishWaitsOrRefused(publish, batch: true, out refused))
            {
                if (!refused.IsNone)
                {
                    ForgetAsked();
                    return refused; // one refused: none is routed
                }

                deciding = true; // the others are asked meanwhile; the body is carried out again once all are answered
            }

            if ((publish.Flags & PayloadFlags.Zstd) != 0 && (decompressed += Zstd.DecompressedCapacity(publish.Payload, PlainPayloadLimit(publish))) > maxDecompressedBytes)
            {
                Throw(ErrorCode.DecompressionFailed, $"The body's compressed payloads would decompress to more than {maxDecompressedBytes} bytes together.");
            }
        }

        if (deciding)
        {
            return default;
        }

        ForgetAsked();
        var plain = new (byte[]? Bytes, int Length)[publishes.Count];
        Refusal notice = default;
        try
        {
            for (int i = 0; i < publishes.Count; i++)
            {
                if ((publishes[i].Flags & PayloadFlags.Zstd) != 0)
                {
                    plain[i].Length = Zstd.Decompress(publishes[i].Payload, PlainPayloadLimit(publishes[i]), out plain[i].Bytes);
                }
            }

            for (int i = 0; i < publishes.Count; i++)
            {
                if (Limits.PublishRatePerSecond > 0 && TakeToken() is { IsNone: false } warned)
                {
                    notice = warned;
                }

                Route(publishes[i], plain[i].Bytes is { } bytes ? bytes.AsSpan(0, plain[i].Length) : default, receivedAt);
            }
        }
        finally
        {
            foreach ((byte[]? bytes, _) in plain)
            {
                if (bytes is not null)
                {
                    ArrayPool<byte>.Shared.Return(bytes);
                }
            }
        }

        return notice;
    }

    /// <summary>
    /// A PUBLISH's checks (spec §4.5, §10), in the order of spec §8.1: Zstd negotiation, topic and reply_to
    /// rules, the payload limit, then permissions. A reply_to must be a topic the publisher may subscribe to
    /// (never a reserved one, where no responder may publish); a topic the permissions do not grant may still
    /// be a reply the session was asked for (one of its <see cref="ReplyPermits"/>, spent here). Allow-all
    /// identities pay only the reserved-prefix test.
    /// </summary>
    /// <param name="permittedReply">Whether a reply permit granted it (spent here): a reply the broker allows because a request asked
    /// for it, which no publish hook is asked about (the request was), so it is never read twice.</param>
    private Refusal Check(in PublishFrame publish, out bool permittedReply)
    {
        permittedReply = false;
        if ((publish.Flags & PayloadFlags.Zstd) != 0 && !Backlog.AcceptsZstd)
        {
            Throw(ErrorCode.MalformedFrame, "A Zstd-compressed payload was sent without negotiating Zstd (HELLO's capabilities, or long-poll's \"zstd\": true).");
        }

        if (publish.HasHeaders && !Backlog.AcceptsHeaders)
        {
            Throw(ErrorCode.MalformedFrame, "A header block was sent without negotiating headers (HELLO's capabilities, or long-poll's \"headers\": true).");
        }

        bool checkedBefore = ChecksOnOneThread && IsCheckedTopic(publish.Topic);
        if (!checkedBefore)
        {
            TopicRules.CheckName(publish.Topic, Limits.MaxTopicLength);
        }

        Permissions permissions = Identity.Permissions;
        if (publish.ReplyTo is { } replyTo)
        {
            TopicRules.CheckName(replyTo, Limits.MaxTopicLength, isReplyTo: true);
        }

        if (publish.ReservedHeader is { } reserved)
        {
            Throw(ErrorCode.InvalidHeaders, $"Header '{reserved}' is under the prefix {HeaderBlock.ReservedPrefix}, which only the broker sets.");
        }

        if (publish.Payload.Length + publish.Headers.Length > Limits.MaxPayloadBytes)
        {
            Throw(ErrorCode.FrameTooLarge, publish.HasHeaders
                ? $"Payload of {publish.Payload.Length} bytes with a header block of {publish.Headers.Length} bytes is over max_payload ({Limits.MaxPayloadBytes} bytes, WELCOME): its MESSAGE would not fit in max_frame."
                : $"Payload of {publish.Payload.Length} bytes is over max_payload ({Limits.MaxPayloadBytes} bytes, WELCOME): its MESSAGE would not fit in max_frame.");
        }

        if (publish.HeaderValues > Limits.MaxHeaders || publish.Headers.Length > Limits.MaxHeaderBytes)
        {
            Throw(ErrorCode.InvalidHeaders, $"The header block ({publish.HeaderValues} values, {publish.Headers.Length} bytes) is over max_headers ({Limits.MaxHeaders}) or max_header_bytes ({Limits.MaxHeaderBytes}, WELCOME).");
        }

        if (publish.ReplyTo is { } reply && (TopicRules.IsReserved(reply) || (!permissions.IsAllowAll && !MayNameAsReplyTo(permissions, reply))))
        {
            return Denied($"Naming '{publish.ReplyToString}' as reply_to is not permitted for '{Identity.Name}': a reply topic must be one it may subscribe to, and not reserved.");
        }

        if (!permissions.IsAllowAll && !(checkedBefore && ReferenceEquals(_checkedTopicGrantedBy, permissions)))
        {
            PublishGrant grant = MayPublish(permissions, publish.Topic);
            permittedReply = grant == PublishGrant.ReplyPermit;
            if (grant == PublishGrant.None)
            {
                return Denied($"Publishing to '{publish.TopicString}' is not permitted for '{Identity.Name}'.");
            }

            if (ChecksOnOneThread)
            {
                RememberCheckedTopic(publish.Topic, grant == PublishGrant.Permissions ? permissions : null); // a reply permit is spent: never remembered
            }
        }
        else if (ChecksOnOneThread && !checkedBefore)
        {
            RememberCheckedTopic(publish.Topic, permissions); // allow-all: nothing to match
        }

        return default;
    }

    /// <summary>Whether the one thread that calls <see cref="Check"/> is always the same (a TCP read loop), so that it may remember the last topic it checked.</summary>
    protected virtual bool ChecksOnOneThread => false;

    private bool IsCheckedTopic(in ReadOnlySequence<byte> topic) =>
        _checkedTopicLength >= 0 && topic.IsSingleSegment && topic.FirstSpan.SequenceEqual(_checkedTopic.AsSpan(0, _checkedTopicLength));

    private void RememberCheckedTopic(in ReadOnlySequence<byte> topic, Permissions? grantedBy)
    {
        if (!topic.IsSingleSegment || topic.Length > CheckedTopicBytes)
        {
            _checkedTopicLength = -1; // forget the one before: it is no longer the last
            _checkedTopicGrantedBy = null;
            return;
        }

        _checkedTopic ??= new byte[CheckedTopicBytes];
        topic.FirstSpan.CopyTo(_checkedTopic);
        _checkedTopicLength = (int)topic.Length;
        _checkedTopicGrantedBy = grantedBy;
    }

    /// <summary>The longest topic remembered as checked (<see cref="IsCheckedTopic"/>).</summary>
    private const int CheckedTopicBytes = 128;

    private enum PublishGrant
    {
        None,
        Permissions,
        ReplyPermit,
    }

    /// <summary>The most a compressed payload may decompress to: its plain MESSAGE, header block included, must fit in max_frame (spec §4.5, §11).</summary>
    private int PlainPayloadLimit(in PublishFrame publish) => Limits.MaxPayloadBytes - (int)publish.Headers.Length;

    /// <summary>A restricted identity's PUBLISH: granted, or a reply it was asked for (spent here). Allocates nothing.</summary>
    private PublishGrant MayPublish(Permissions permissions, in ReadOnlySequence<byte> topic)
    {
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var name = new TopicChars(topic, stack);
        return permissions.CanPublish(name.Span) ? PublishGrant.Permissions
            : _replyPermits?.TryUse(name.Span) == true ? PublishGrant.ReplyPermit
            : PublishGrant.None;
    }

    private static bool MayNameAsReplyTo(Permissions permissions, in ReadOnlySequence<byte> replyTo)
    {
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var name = new TopicChars(replyTo, stack);
        return permissions.CanReceive(name.Span);
    }

    private Refusal TakeToken()
    {
        int rate = Limits.PublishRatePerSecond;
        return _publishes.Take(rate, Limits.PublishBurst)
            ? Refuse(ErrorCode.RateLimited, $"Publishing faster than {rate} messages/s (burst {Limits.PublishBurst}): input is paused to hold that rate; nothing is dropped.")
            : default;
    }
}
