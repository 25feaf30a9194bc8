using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Cluster;

/// <summary>
/// <c>Herald:Cluster</c>: many Herald nodes, one topic space, over Redis pub/sub (spec: cluster.md). Off
/// unless <see cref="Redis"/> is set: the single-node broker has no cluster engine and pays nothing for it.
/// </summary>
public sealed class ClusterOptions
{
    /// <summary>
    /// A StackExchange.Redis configuration string (<c>redis:6379</c>, <c>host1:6379,host2:6379,password=...,ssl=true</c>):
    /// the Redis every node of the cluster shares. Empty: no cluster.
    /// </summary>
    public string? Redis { get; set; }

    /// <summary>
    /// What every Redis channel and key of this cluster starts with (<c>{herald}:</c> then the topic): clusters
    /// that share one Redis keep apart by it. Every node of a cluster must use the same. It must hold a Redis
    /// hash tag (<c>{...}</c>): on Redis Cluster every channel then hashes to one slot, so one shard carries a
    /// node's publications in the order it sent them (spec cluster.md §1), which its duplicate skipping needs.
    /// </summary>
    [Required, StringLength(64, MinimumLength = 1)]
    public string ChannelPrefix { get; set; } = "{herald}:";

    /// <summary>
    /// Bytes of publications waiting to be sent to Redis (a copy of each, 18 bytes more than its PUBLISH);
    /// past it a publication is delivered on this node only and counted
    /// (<c>herald.cluster.forward.dropped</c>, reason <c>queue_full</c>).
    /// </summary>
    [Range(1024, long.MaxValue)]
    public long MaxForwardQueueBytes { get; set; } = 64L * 1024 * 1024;

    /// <summary>
    /// A secret every node of the cluster shares (16 characters or more): each envelope then carries an
    /// HMAC-SHA256 tag, and a node routes only envelopes whose tag it can check (spec cluster.md §3). Without it,
    /// whoever can PUBLISH to this Redis can deliver to any subscriber past every permission. Null: unsigned.
    /// </summary>
    public string? Secret { get; set; }

    /// <summary>
    /// With <see cref="Secret"/>: how far from this node's clock a signed envelope's stamp may be (spec cluster.md §3);
    /// older or later, it is refused as a replay and counted (<c>herald.cluster.replayed</c>), as is one this node routed
    /// already. The nodes' clocks must agree within it.
    /// </summary>
    public TimeSpan ReplayWindow { get; set; } = TimeSpan.FromMinutes(1);

    /// <summary>
    /// Publications from Redis waiting to be routed on this node, per Redis subscription (StackExchange.Redis queues
    /// them unbounded): when its reader finds more waiting, it sheds the oldest down to half of this without routing
    /// them, counts them (<c>herald.cluster.inbound.shed</c>) and tells each subscriber here whose pattern matches one
    /// how many it lost (a non-fatal <c>MessagesDropped</c>, as <c>DropOldest</c> does). 0: no limit.
    /// </summary>
    [Range(0, int.MaxValue)]
    public int MaxInboundMessages { get; set; } = 10_000;

    /// <summary>
    /// The same bound in bytes (the publications' envelopes as Redis sent them), per Redis subscription: a publisher of
    /// frames near <c>MaxFrameBytes</c> would otherwise make a node hold <see cref="MaxInboundMessages"/> of them. Checked
    /// as the count is; past it the reader sheds the oldest down to half of it, counted and told the same way. 0: no limit.
    /// </summary>
    [Range(0, long.MaxValue)]
    public long MaxInboundBytes { get; set; } = 16 * 1024 * 1024;

    /// <summary>
    /// How long a node that acts on clients for the server API (disconnect, revoke, server-side subscribe: spec cluster.md
    /// §14) waits for the other nodes' answers before it answers the backend with what it has (<c>nodes</c> of
    /// <c>nodes_asked</c>); an action's control message carries the same deadline, past which a node does not carry it out.
    /// </summary>
    public TimeSpan ControlReplyTimeout { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>How long the first connection to Redis may take at start before the node starts without it (and keeps trying).</summary>
    public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Receive every publication of the cluster on one Redis subscription (the glob <c>{prefix}*</c>) while the
    /// node has any subscriber, instead of only what its clients' patterns ask for. A publisher's order then
    /// holds across all topics at this node's subscribers (spec cluster.md §4), at the cost of every
    /// publication of the cluster crossing from Redis to this node. Off: interest-based, order per topic.
    /// </summary>
    public bool ReceiveAll { get; set; }

    /// <summary>
    /// Most Redis subscriptions (channels and globs) a node makes for the topics under one reply inbox prefix
    /// (<c>_INBOX.</c> and one token: one identity's, spec §7). Past it, the node subscribes to that prefix's one glob
    /// instead (spec cluster.md §2): however many patterns an identity holds under its inbox, they cost Redis at most
    /// this many subscriptions per node, and every publication of the cluster at most this many glob checks per node.
    /// The price: that node then receives every publication under the prefix (the identity's replies to its clients on
    /// other nodes too), and a request to a topic there no longer fails fast (spec cluster.md §4).
    /// </summary>
    [Range(1, 1_000_000)]
    public int MaxRedisSubscriptionsPerInbox { get; set; } = 16;

    /// <summary>How often a node renews its entry in the cluster's member list (<c>/varz</c> <c>cluster.nodes</c>); silent for three intervals, it is dropped.</summary>
    public TimeSpan HeartbeatInterval { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Long-poll sessions are the cluster's (spec cluster.md §10): served by any node, their backlogs in Redis, so a
    /// node's death loses none of their messages, at the cost of a Redis write per message per session. Off: a
    /// session lives on the node that made it, in memory, as on one node (a load balancer must keep its requests there).
    /// </summary>
    public bool ShareLongPollSessions { get; set; } = true;

    /// <summary>
    /// Requests other nodes sent for this node's long-poll sessions (spec cluster.md §10) being carried out or waiting
    /// for their session at once; past it one is answered 503 <c>OwnerBusy</c> with <c>Retry-After</c> and counted
    /// (<c>herald.cluster.sessions.refused</c>, reason <c>busy</c>).
    /// </summary>
    [Range(1, 1_000_000)]
    public int MaxSessionCommands { get; set; } = 1_000;

    /// <summary>
    /// Bytes of frames a node keeps from its latest appends to shared long-poll sessions (spec cluster.md §10), so that a
    /// poll on that node takes them from memory instead of fetching them from Redis; the oldest append's go first past
    /// it, and a poll then fetches them. 0: none kept, every poll fetches.
    /// </summary>
    [Range(0, long.MaxValue)]
    public long KeptFrameBytes { get; set; } = 16L * 1024 * 1024;

    /// <summary>
    /// Several independent Redis shards instead of the one <see cref="Redis"/> (spec cluster.md §13): each topic lives on
    /// one of them (a jump consistent hash of the topic), with its channel, history and presence, and each long-poll
    /// session on the one its token hashes to, so no one Redis carries the whole cluster. Every node lists the same
    /// shards in the same order. Empty: the one shard <see cref="Redis"/>. Not with <see cref="Redis"/>.
    /// </summary>
    public List<ClusterShardOptions> Shards { get; set; } = [];

    public bool Enabled => !string.IsNullOrWhiteSpace(Redis) || Shards.Count > 0;

    /// <summary>The shards this node connects to, in order: <see cref="Shards"/>, or <see cref="Redis"/> alone.</summary>
    internal IReadOnlyList<ClusterShardOptions> ShardList =>
        Shards.Count > 0 ? Shards : [new ClusterShardOptions { Redis = Redis }];

    /// <summary>What is wrong with <paramref name="redis"/> as <see cref="Redis"/> (not a StackExchange.Redis configuration string, or one without an endpoint); null: nothing.</summary>
    internal static string? RedisProblem(string redis, string key = "Herald:Cluster:Redis")
    {
        try
        {
            return StackExchange.Redis.ConfigurationOptions.Parse(redis).EndPoints.Count == 0 ? $"{key} names no Redis endpoint (host:port)." : null;
        }
        catch (ArgumentException e)
        {
            return $"{key} is not a StackExchange.Redis configuration string: {e.Message}";
        }
    }
}

/// <summary><c>Herald:Cluster:Shards:N</c>: one shard of the cluster (spec cluster.md §13).</summary>
public sealed class ClusterShardOptions
{
    /// <summary>The shard's StackExchange.Redis configuration string: one Redis, or the masters of a Redis Cluster.</summary>
    public string? Redis { get; set; }

    /// <summary>
    /// This shard's channel and key prefix; null: <see cref="ClusterOptions.ChannelPrefix"/>. Two shards on one Redis
    /// (say, the masters of one Redis Cluster) must differ by it, and their hash tags place them on its masters.
    /// </summary>
    public string? ChannelPrefix { get; set; }
}
