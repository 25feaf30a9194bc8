using Herald.Broker.Cluster;
using Herald.Protocol;
using Herald.Testing;
using Xunit;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>
/// More than a node can route from Redis: from a publisher on another node, <see cref="Publications"/> Zstd
/// publications on <c>flood</c>, each a few dozen bytes that the receiving node must decompress to 512 KiB before
/// routing, with <see cref="Calm"/> plain ones on <c>calm</c> (<c>calm 0</c>, <c>calm 1</c>, ...) among them for a
/// bystander. The node's inbound bound (<c>Cluster:MaxInboundMessages</c>) makes it shed.
/// </summary>
internal static class InboundFlood
{
    public const int Publications = 2000;
    public const int Calm = 20;

    /// <summary>Publishes the flood through <paramref name="publisher"/> (granted Zstd), then waits until <paramref name="receiver"/> has routed or shed every publication.</summary>
    public static async Task SendAsync(ProtocolClient publisher, ClusterMetrics receiver)
    {
        byte[] compressed = new ZstdSharp.Compressor(3).Wrap(new byte[512 * 1024]).ToArray();
        for (int i = 0; i < Publications; i++)
        {
            await publisher.SendAsync(w => FrameWriter.WritePublish(w, "flood"u8, default, PayloadFlags.Zstd, compressed));
            if (i % (Publications / Calm) == 0)
            {
                await publisher.PublishAsync("calm", $"calm {i / (Publications / Calm)}");
            }
        }

        Assert.Empty(await publisher.PingPongAsync());

        await Until.True(() => receiver.Received + receiver.InboundShed >= Publications + Calm, "the node routed or shed every publication");
    }
}
