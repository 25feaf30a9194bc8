using System.Text;
using Herald.Broker.Engines;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The cluster's idempotency keys (an <see cref="IIdempotency"/>): one Redis string per (topic, key), on the topic's
/// shard (<see cref="ClusterShards.For(string)"/>), claimed with <c>SET key 1 NX PX window</c>, so whichever node a
/// repeat reaches, Redis says it was seen. Each string expires with its window: what the API can make a shard hold is
/// bounded by the keys' rate (<c>Herald:Api:RequestsPerSecond</c> per key, times the items of a request) times the window,
/// each string about 90 bytes plus the topic and key. Key: <c>{prefix}i:{topic length}:{topic}{key}</c> (the length keeps
/// any topic and key apart).
/// </summary>
internal sealed class RedisIdempotency(ClusterShards shards) : IIdempotency
{
    public async ValueTask<bool> ClaimAsync(string topic, string key, TimeSpan window)
    {
        ClusterConnection shard = shards.For(topic);
        try
        {
            return await shard.Database.StringSetAsync(KeyOf(shard.Prefix, topic, key), 1, window, When.NotExists).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            throw new ClusterUnavailableException($"The idempotency key could not be checked: Redis shard {shard.Index} is unavailable.", e);
        }
    }

    public async ValueTask ForgetAsync(string topic, string key)
    {
        ClusterConnection shard = shards.For(topic);
        try
        {
            await shard.Database.KeyDeleteAsync(KeyOf(shard.Prefix, topic, key)).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // The claim then expires with its window: a corrected retry within it is answered as a repeat.
        }
    }

    private static RedisKey KeyOf(string prefix, string topic, string key) =>
        Encoding.UTF8.GetBytes($"{prefix}i:{Encoding.UTF8.GetByteCount(topic)}:{topic}{key}");
}
