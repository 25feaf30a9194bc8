using System.Buffers;
using System.Security.Cryptography;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Protocol;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster's topic histories (spec cluster.md §9), kept in Redis (<see cref="ClusterHistory"/>'s scripts and keys),
/// each on its topic's shard (§13, <see cref="ClusterShards.For(string)"/>): a history topic's publication is sent there
/// first (by <see cref="ClusterOutbound"/>, in order with the others), and a resume on any node reads the topic's stream
/// there. A shard that does not answer raises <see cref="ClusterUnavailableException"/> for its topics only.
/// </summary>
internal sealed class ClusterSharedHistory(ClusterShards shards, ClusterOutbound outbound, HistoryStore? store) : ISharedHistory
{
    private readonly ClusterOptions _options = shards.First.Options;

    /// <summary>This node's topic histories (shared, in a cluster: their positions come from Redis).</summary>
    public HistoryStore? Store { get; } = store;

    /// <inheritdoc/>
    public bool ForwardKept(in PublishFrame publish, TopicHistory history, IMessageSink publisher, ref GroupAssignments? groups) =>
        outbound.ForwardKept(publish, history, publisher, ref groups);

    /// <summary>
    /// What Redis holds of <paramref name="history"/>'s topic after <paramref name="since"/> (spec cluster.md §9), all of it
    /// (at most the rule's <see cref="HistoryRule.MaxMessages"/> and <see cref="HistoryRule.MaxBytes"/>): for the repair of
    /// a gap this node routes itself.
    /// </summary>
    /// <exception cref="ClusterUnavailableException">Redis is unreachable or did not answer in time.</exception>
    public Task<SharedRead> ReadAsync(TopicHistory history, Herald.Protocol.StreamPosition since) =>
        ReadAsync(history, since, history.Rule.MaxMessages, history.Rule.MaxBytes);

    /// <summary>
    /// What Redis holds of <paramref name="history"/>'s topic after <paramref name="since"/>, for a resume on this node
    /// (spec cluster.md §9): read in one script through the server this node publishes through, which stops at
    /// <paramref name="maxEntries"/> or once the envelopes passed <paramref name="maxBytes"/>, so Redis sends no more than that.
    /// </summary>
    /// <exception cref="ClusterUnavailableException">Redis is unreachable or did not answer in time.</exception>
    public async Task<SharedRead> ReadAsync(TopicHistory history, Herald.Protocol.StreamPosition since, int maxEntries, long maxBytes)
    {
        ClusterConnection shard = shards.For(history.Topic);
        IServer server = shard.PublishServer() ?? throw new ClusterUnavailableException($"Redis shard {shard.Index} is unreachable.");
        byte[] topic = System.Text.Encoding.UTF8.GetBytes(history.Topic);
        try
        {
            RedisResult result = await server.ExecuteAsync(
                "EVAL",
                [ClusterHistory.ReadScript, 2, ClusterHistory.HashKey(shard.Prefix, topic), ClusterHistory.StreamKey(shard.Prefix, topic),
                 since.IsNone ? 0ul : since.Offset, Math.Min(maxEntries, history.Rule.MaxMessages), NewEpoch(), ClusterHistory.TimeToLiveMs(history.Rule), maxBytes]).ConfigureAwait(false);
            return ClusterHistory.Parse(result);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            throw new ClusterUnavailableException(e.Message, e);
        }
    }

    /// <summary>
    /// How many times the connection to <paramref name="topic"/>'s shard was restored so far: a gap in the topic's offsets
    /// after that may be the outage's, read back from its stream (spec cluster.md §9). Per shard, since one shard's outage
    /// leaves the others' topics whole. Caller: an inbound reader, per history publication.
    /// </summary>
    public long Restores(in ReadOnlySequence<byte> topic) => shards.For(topic).Restores;

    /// <summary>
    /// A stream entry's envelope as its PUBLISH, checked as one from Redis's channels is (its signature with a secret); null when it is not one.
    /// </summary>
    public PublishFrame? DecodeKept(byte[] envelope) => DecodeKept(envelope, groups: null);

    /// <summary>As <see cref="DecodeKept(byte[])"/>, and loads <paramref name="groups"/> with where its origin gave its queue groups.</summary>
    public PublishFrame? DecodeKept(byte[] envelope, GroupAssignments? groups)
    {
        EnvelopeSigner? signer = _options.Secret is { } secret ? new EnvelopeSigner(secret) : null;
        try
        {
            if (!ClusterEnvelope.TryRead(envelope, signer, out ulong origin, out _, out ReadOnlyMemory<byte> assignments, out ReadOnlyMemory<byte> body))
            {
                return null;
            }

            groups?.Apply(origin, assignments);
            return ClusterEnvelope.ReadPublish(body);
        }
        catch (ProtocolException)
        {
            return null;
        }
        finally
        {
            signer?.Dispose();
        }
    }

    /// <summary>The history rules as one line, the same on every node that has the same rules (spec cluster.md §9).</summary>
    public static string RulesOf(HistoryStore? history) => history is null ? "" : string.Join(';', history.Options.Topics.Select(r =>
        string.Create(System.Globalization.CultureInfo.InvariantCulture, $"{r.Pattern} {r.MaxMessages} {r.MaxAge:c} {r.MaxBytes}")));

    /// <summary>A fresh epoch for a topic Redis has none for: 16 lowercase hex digits, random.</summary>
    public static string NewEpoch() => Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(8));
}
