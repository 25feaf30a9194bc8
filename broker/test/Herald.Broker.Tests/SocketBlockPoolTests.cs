using System.Buffers;
using System.Text;
using Herald.Broker.Tests.Infrastructure;
using Herald.Broker.Transports;
using Herald.Protocol;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>The socket memory Kestrel reads into and writes from (Herald:Limits:SocketBlockBytes).</summary>
public sealed class SocketBlockPoolTests
{
    [Fact]
    public void A_block_is_the_configured_size_and_nothing_larger_is_lent()
    {
        using var pool = new SocketBlockPool(8192, 64 * 1024);

        using IMemoryOwner<byte> block = pool.Rent(100);

        Assert.Equal(8192, block.Memory.Length);
        Assert.Equal(8192, pool.MaxBufferSize);
        Assert.Throws<ArgumentOutOfRangeException>(() => pool.Rent(8193));
    }

    [Fact]
    public void Free_blocks_kept_never_exceed_the_retained_bound_and_a_block_returned_twice_counts_once()
    {
        using var pool = new SocketBlockPool(4096, 3 * 4096);
        IMemoryOwner<byte>[] blocks = [.. Enumerable.Range(0, 5).Select(_ => pool.Rent())];

        blocks[0].Dispose();
        blocks[0].Dispose(); // a second return of the same block is ignored
        Assert.Equal(4096, pool.RetainedBytes);

        foreach (IMemoryOwner<byte> block in blocks[1..])
        {
            block.Dispose();
        }

        Assert.Equal(3 * 4096, pool.RetainedBytes); // two went back to the GC
        IMemoryOwner<byte> reused = pool.Rent();
        Assert.Equal(2 * 4096, pool.RetainedBytes);
        Assert.Contains(reused, blocks); // a kept block is lent again
    }

    [Fact]
    public async Task Kestrel_takes_its_pools_from_the_configured_factory()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.SocketBlockBytes = 16 * 1024);

        IMemoryPoolFactory<byte> factory = broker.Services.GetRequiredService<IMemoryPoolFactory<byte>>();

        Assert.IsType<SocketBlockPoolFactory>(factory);
        using MemoryPool<byte> pool = factory.Create();
        Assert.Equal(16 * 1024, pool.MaxBufferSize);
    }

    [Fact]
    public void Every_pool_Kestrel_asks_for_is_the_one_pool_so_the_retained_bound_is_the_brokers()
    {
        var factory = new SocketBlockPoolFactory(4096, 2 * 4096);
        var first = (SocketBlockPool)factory.Create();
        var second = (SocketBlockPool)factory.Create(); // another listener, another I/O queue
        IMemoryOwner<byte>[] blocks = [first.Rent(), first.Rent(), second.Rent(), second.Rent()];

        foreach (IMemoryOwner<byte> block in blocks)
        {
            block.Dispose();
        }

        Assert.Equal(2 * 4096, first.RetainedBytes + (ReferenceEquals(first, second) ? 0 : second.RetainedBytes));
        first.Dispose(); // a listener stopping lets the free blocks go; the others rent on
        Assert.Equal(4096, second.Rent().Memory.Length);
    }

    [Theory]
    [InlineData(4096)]
    [InlineData(32 * 1024)]
    public async Task Frames_that_span_socket_blocks_arrive_whole(int blockBytes)
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.SocketBlockBytes = blockBytes;
            o.Limits.MaxFrameBytes = 256 * 1024;
        });
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "blocks.>");
        await subscriber.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        byte[] large = new byte[200 * 1024];
        new Random(11).NextBytes(large);

        // Many small frames in one write (they straddle block edges), then one frame larger than any block.
        var burst = new ArrayBufferWriter<byte>();
        for (int i = 0; i < 2000; i++)
        {
            FrameWriter.WritePublish(burst, "blocks.small"u8, default, PayloadFlags.None, Encoding.UTF8.GetBytes($"m{i}"));
        }

        await publisher.SendRawAsync(burst.WrittenSpan.ToArray());
        await publisher.PublishAsync("blocks.large", large);

        for (int i = 0; i < 2000; i++)
        {
            Assert.Equal($"m{i}", (await subscriber.ReadMessageAsync()).Text);
        }

        Assert.Equal(large, (await subscriber.ReadMessageAsync()).Payload);
    }
}
