using System.Buffers;
using System.Collections.Concurrent;
using System.Runtime.InteropServices;
using Microsoft.AspNetCore.Connections;

namespace Herald.Broker.Transports;

/// <summary>
/// The memory Kestrel's socket transport reads into and writes from, in blocks of <see cref="BlockSize"/>
/// bytes instead of Kestrel's own 4 KiB.
/// </summary>
/// <remarks>
/// <para>
/// Kestrel receives into one pool block at a time, so its block size is the most one <c>recv</c> takes: with
/// 4 KiB blocks a publisher streaming 64 KiB writes costs the broker a receive, a wake-up and a read batch per
/// 4 KiB (about 40 small messages), and each batch then costs a send to its subscriber. nats-server reads up
/// to 64 KiB at a time. A larger block makes each read batch, and so each coalesced send, proportionally
/// larger (loadtest/docs/profile.md).
/// </para>
/// <para>
/// An idle connection holds no block (Kestrel waits for data before it takes one), so the idle cost per
/// connection is unchanged; a connection reading or writing holds one or a few blocks while it does. Blocks
/// are pinned (the pinned object heap: no pinning per operation) and returned blocks are kept for reuse up to
/// <see cref="MaxRetainedBytes"/>; beyond that they go back to the GC.
/// </para>
/// <para>
/// One pool serves the whole broker (<see cref="SocketBlockPoolFactory"/>): Kestrel asks for a pool per listener
/// and I/O queue, about 70 with the TCP range, HTTP and monitoring, and a bound per pool would be 70 bounds.
/// Thread-safe; disposing it (each listener does when it stops) only lets the free blocks go.
/// </para>
/// </remarks>
internal sealed class SocketBlockPool : MemoryPool<byte>
{
    private readonly ConcurrentQueue<Block> _free = new();
    private readonly int _maxRetained;
    private int _retained;

    public SocketBlockPool(int blockSize, long maxRetainedBytes)
    {
        BlockSize = blockSize;
        MaxRetainedBytes = maxRetainedBytes;
        _maxRetained = (int)Math.Min(int.MaxValue, maxRetainedBytes / blockSize);
    }

    public int BlockSize { get; }

    /// <summary>The most free blocks kept for reuse, in bytes (blocks in use are the connections').</summary>
    public long MaxRetainedBytes { get; }

    /// <summary>Bytes of free blocks kept for reuse now.</summary>
    public long RetainedBytes => (long)Volatile.Read(ref _retained) * BlockSize;

    public override int MaxBufferSize => BlockSize;

    public override IMemoryOwner<byte> Rent(int minBufferSize = -1)
    {
        ArgumentOutOfRangeException.ThrowIfGreaterThan(minBufferSize, BlockSize);
        if (_free.TryDequeue(out Block? block))
        {
            Interlocked.Decrement(ref _retained);
            block.Rented = true;
            return block;
        }

        return new Block(this, GC.AllocateUninitializedArray<byte>(BlockSize, pinned: true));
    }

    protected override void Dispose(bool disposing)
    {
        _free.Clear();
        Volatile.Write(ref _retained, 0);
    }

    private void Return(Block block)
    {
        if (Interlocked.Increment(ref _retained) <= _maxRetained)
        {
            _free.Enqueue(block);
        }
        else
        {
            Interlocked.Decrement(ref _retained); // over the bound: the GC takes it
        }
    }

    private sealed class Block : IMemoryOwner<byte>
    {
        private readonly SocketBlockPool _pool;

        public Block(SocketBlockPool pool, byte[] array)
        {
            _pool = pool;
            Memory = MemoryMarshal.CreateFromPinnedArray(array, 0, array.Length);
            Rented = true;
        }

        public Memory<byte> Memory { get; }

        public bool Rented { get; set; }

        public void Dispose()
        {
            if (Rented)
            {
                Rented = false;
                _pool.Return(this);
            }
        }
    }
}

/// <summary>
/// Gives Kestrel the broker's one <see cref="SocketBlockPool"/> whenever it asks for a pool (it takes its pools from
/// the one <see cref="IMemoryPoolFactory{T}"/> registered), so that the retained bound is the broker's.
/// </summary>
internal sealed class SocketBlockPoolFactory(int blockSize, long maxRetainedBytes) : IMemoryPoolFactory<byte>, IDisposable
{
    private readonly SocketBlockPool _pool = new(blockSize, maxRetainedBytes);

    public MemoryPool<byte> Create(MemoryPoolOptions? options = null) => _pool;

    public void Dispose() => _pool.Dispose();
}
