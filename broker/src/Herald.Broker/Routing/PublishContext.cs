using Herald.Broker.Compression;
using Herald.Broker.Delivery;
using Herald.Protocol;

namespace Herald.Broker.Routing;

/// <summary>
/// What travels with one publication through its routing (the session, a topic's history, the cluster's inbound path,
/// then <see cref="Fanout"/>): the frame, who published it, where idle sinks go to be flushed, and what building its
/// other forms, its span and its queue-group choices need.
/// </summary>
/// <remarks>
/// A <c>ref struct</c> on the caller's stack: it refers to the frame (no copy of it), carries the decompressed payload
/// as a span, and is passed <c>in</c> all the way down, so routing a publication allocates and copies nothing more than
/// the parameters it replaces did. Valid only during the call that routes the publication.
/// </remarks>
internal readonly ref struct PublishContext
{
    /// <param name="publication">The publication to route; referred to, not copied.</param>
    /// <param name="toFlush">Where sinks that were idle are added; the caller flushes them once, at the end of its read batch.</param>
    public PublishContext(in PublishFrame publication, List<IMessageSink> toFlush)
    {
        Publication = ref publication;
        ToFlush = toFlush;
    }

    /// <summary>The publication (PUBLISH as read, or as a history stamped it).</summary>
    public readonly ref readonly PublishFrame Publication;

    /// <summary>Sinks that were idle and were given a message: the caller flushes each once, at the end of its read batch.</summary>
    public List<IMessageSink> ToFlush { get; }

    /// <summary>The publisher's sink (no-echo subscriptions of it are skipped), or null for another node's publication.</summary>
    public IMessageSink? Origin { get; init; }

    /// <summary>Builds the compressed form when a Zstd subscriber needs one; null: none is built.</summary>
    public MessageEncoder? Encoder { get; init; }

    /// <summary>For a publication sent compressed: its payload, decompressed (for subscribers that did not negotiate Zstd).</summary>
    public ReadOnlySpan<byte> PlainPayload { get; init; }

    /// <summary><see cref="System.Diagnostics.Stopwatch"/> timestamp of the read that carried the PUBLISH, or 0 (fan-out latency not measured).</summary>
    public long ReceivedAt { get; init; }

    /// <summary>For a traced publication only: what the routing did, for its span; null costs a test per subscriber.</summary>
    public FanoutTally? Tally { get; init; }

    /// <summary>
    /// Cluster (spec cluster.md §11): which node delivers each queue group; null on a single node (each group is chosen
    /// among this node's members, members elsewhere are not looked at).
    /// </summary>
    public GroupAssignments? Groups { get; init; }

    /// <summary>The same routing for another frame of the publication (a history's, stamped with its position).</summary>
    public PublishContext For(in PublishFrame publication, long receivedAt) => new(in publication, ToFlush)
    {
        Origin = Origin,
        Encoder = Encoder,
        PlainPayload = PlainPayload,
        ReceivedAt = receivedAt,
        Tally = Tally,
        Groups = Groups,
    };
}
