using Herald.Broker.Cluster;
using Herald.Protocol;
using Herald.Testing;
using Xunit;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>
/// More than a node can route from Redis: from a publisher on another node, <see cref="Publications"/> Zstd
/// publications on <c>flood</c>, each a few dozen bytes that the receiving node must decompress to 512 KiB before
/// routing, with <see cref="Calm"/> plain ones on <c>calm</c> (<c>calm 0</c>, <c>calm 1</c>, ...) among them for a
/// bystander; with <c>largeBytes</c>, a plain publication of that many incompressible bytes on <c>flood</c> after every
/// <see cref="LargeEvery"/>th, so what waits is large in bytes while few in number. The node's inbound bound
/// (<c>Cluster:MaxInboundMessages</c>, <c>MaxInboundBytes</c>) makes it shed.
/// </summary>
internal static class InboundFlood
{
    public const int Publications = 2000;
    public const int Calm = 20;
    public const int LargeEvery = 10;

    /// <summary>Publications on <c>flood</c> a flood sends: the Zstd ones and, with <paramref name="largeBytes"/>, the large ones.</summary>
    public static int OnFlood(int largeBytes) => Publications + (largeBytes > 0 ? Publications / LargeEvery : 0);

    /// <summary>Publishes the flood through <paramref name="publisher"/> (granted Zstd), then waits until <paramref name="receiver"/> has routed or shed every publication.</summary>
    public static async Task SendAsync(ProtocolClient publisher, ClusterMetrics receiver, int largeBytes = 0)
    {
        byte[] compressed = new ZstdSharp.Compressor(3).Wrap(new byte[512 * 1024]).ToArray();
        byte[] large = new byte[largeBytes];
        new Random(7).NextBytes(large);
        for (int i = 0; i < Publications; i++)
        {
            await publisher.SendAsync(w => FrameWriter.WritePublish(w, "flood"u8, default, PayloadFlags.Zstd, compressed));
            if (largeBytes > 0 && i % LargeEvery == 0)
            {
                await publisher.SendAsync(w => FrameWriter.WritePublish(w, "flood"u8, default, PayloadFlags.None, large));
            }

            if (i % (Publications / Calm) == 0)
            {
                await publisher.PublishAsync("calm", $"calm {i / (Publications / Calm)}");
            }
        }

        Assert.Empty(await publisher.PingPongAsync());

        await Until.True(() => receiver.Received + receiver.InboundShed >= OnFlood(largeBytes) + Calm, "the node routed or shed every publication");
    }
}
