using System.Threading.Channels;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

internal sealed partial class ClusterOutbound
{
    /// <summary>
    /// One shard's writer (spec cluster.md §1, §13): one task that takes this node's publications on the shard's topics
    /// (and the commands queued with them, <see cref="Run"/>) in queue order, stamps each with the node's next sequence
    /// number and sends it on the shard's one connection. While the shard is unreachable its publications stay local and
    /// are counted for it, its history publications wait (parked, in order, still counted in the node's one queue bound):
    /// another shard's writer is not held up by it.
    /// </summary>
    private sealed class ShardWriter(ClusterOutbound owner, ClusterConnection shard) : IDisposable
    {
        private readonly Channel<Outbound> _queue = Channel.CreateUnbounded<Outbound>(new UnboundedChannelOptions { SingleReader = true });
        private readonly Queue<Outbound> _parked = new(); // history publications waiting for the shard; the writer's
        private readonly EnvelopeSigner? _signer = shard.Options.Secret is { } secret ? new EnvelopeSigner(secret) : null; // the writer's
        private long _sent;
        private long _dropped;

        public ClusterConnection Shard { get; } = shard;

        /// <summary>The writer task: done once it has sent (or dropped) what was queued before <see cref="Close"/>.</summary>
        public Task Done { get; private set; } = Task.CompletedTask;

        /// <summary>Publications this writer sent to its shard.</summary>
        public long Sent => Interlocked.Read(ref _sent);

        /// <summary>Publications that stayed local because the shard was unreachable (or the node's queue was full).</summary>
        public long Dropped => Interlocked.Read(ref _dropped);

        public void Start() => Done = Task.Run(WriteLoopAsync, CancellationToken.None);

        public void Close() => _queue.Writer.TryComplete();

        public bool TryWrite(Outbound item) => _queue.Writer.TryWrite(item);

        /// <summary>A publication for this shard dropped before it was queued (the node's queue was full).</summary>
        public void CountDropped() => Interlocked.Increment(ref _dropped);

        private async Task WriteLoopAsync()
        {
            ChannelReader<Outbound> queue = _queue.Reader;
            while (await queue.WaitToReadAsync().ConfigureAwait(false))
            {
                while (queue.TryRead(out Outbound item))
                {
                    SendParked();
                    if (item.Command is { } command)
                    {
                        command(Shard.PublishServer());
                        continue;
                    }

                    if (item.Envelope.Length == 0)
                    {
                        continue; // the nudge of a restored connection: the parked ones went above
                    }

                    if (item.Kept is not null && (_parked.Count > 0 || Shard.PublishServer() is null))
                    {
                        _parked.Enqueue(item); // a history topic's publication waits for its shard, in order, still counted in the queue's bytes
                        continue;
                    }

                    owner.Release(item.Size);
                    Send(item);
                }
            }

            while (_parked.TryDequeue(out Outbound left))
            {
                owner.Release(left.Size); // stopping: what never reached the shard is gone with the node
                DroppedDisconnected();
            }
        }

        /// <summary>
        /// Sends the history publications that waited for the shard (spec cluster.md §9: recoverable, unlike the others,
        /// which are delivered here only), oldest first, while it is reachable. Caller: the writer.
        /// </summary>
        private void SendParked()
        {
            while (_parked.Count > 0 && Shard.PublishServer() is not null)
            {
                Outbound item = _parked.Dequeue();
                owner.Release(item.Size);
                Send(item);
            }
        }

        // Caller: the writer, one at a time, in queue order: the sequence numbers go to the shard in order.
        private void Send(Outbound item)
        {
            if (Shard.PublishServer() is not { } server)
            {
                DroppedDisconnected();
                item.Request?.NoResponders(item.ReplyTo!);
                return;
            }

            ulong sequence = owner.NextSequence();
            ClusterEnvelope.Stamp(item.Envelope, sequence);
            _signer?.Sign(item.Envelope);
            try
            {
                if (item.Kept is { } kept)
                {
                    owner.KeptOrigins.Put(sequence, kept.Publisher);
                    server.Execute("EVAL", [ClusterHistory.PublishScript, 2, kept.Hash, kept.Stream, item.Channel, item.Envelope, ClusterSharedHistory.NewEpoch(), kept.MaxMessages, kept.TimeToLiveMs, kept.MaxBytes], CommandFlags.FireAndForget);
                    SentOne();
                    return;
                }

                server.Execute("PUBLISH", [item.Channel, item.Envelope], CommandFlags.FireAndForget);
                SentOne();
                if (item.Request is not null)
                {
                    _ = AnswerAsync(item); // a request nobody here took: does another node's interest cover it?
                }
            }
            catch (Exception e) when (e is RedisException or TimeoutException)
            {
                DroppedDisconnected();
                item.Request?.NoResponders(item.ReplyTo!);
            }
        }

        private void SentOne()
        {
            Interlocked.Increment(ref _sent);
            owner._metrics.SentOne();
        }

        private void DroppedDisconnected()
        {
            Interlocked.Increment(ref _dropped);
            owner._metrics.DroppedDisconnected();
        }

        /// <summary>
        /// Tells the requester "no responders" unless another node's Redis subscriptions on this shard cover the topic
        /// (the covers every node keeps on each shard before it confirms a subscription, spec cluster.md §4, §13): a
        /// topic's publications reach other nodes through its shard only. PUBLISH's receiver count cannot say it: on
        /// Redis Cluster it counts one master's subscribers only.
        /// </summary>
        private async Task AnswerAsync(Outbound item)
        {
            bool covered;
            try
            {
                covered = await owner._nodes.OthersCoverAsync(Shard, item.Channel.AsMemory(Shard.ChannelPrefix.Length)).ConfigureAwait(false);
            }
            catch (Exception e) when (e is RedisException or TimeoutException)
            {
                covered = false; // unreachable: the publication did not reach anyone either
            }

            if (!covered)
            {
                item.Request!.NoResponders(item.ReplyTo!);
            }
        }

        public void Dispose() => _signer?.Dispose();
    }
}
