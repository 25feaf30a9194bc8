using Herald.Broker.Delivery;

namespace Herald.Broker.Cluster;

/// <summary>
/// Who published this node's last history publications, by sequence number (spec cluster.md §9): they come back from
/// Redis to be delivered here too, and a publisher's no-echo subscriptions must skip them. A fixed ring: an entry is
/// overwritten 4,096 publications later, so a publication that comes back that late (or not at all: no subscriber
/// here) costs nothing but a no-echo that no longer knows its publisher.
/// </summary>
internal sealed class KeptOrigins
{
    private const int Size = 4096;
    private readonly (ulong Sequence, IMessageSink? Sink)[] _ring = new (ulong, IMessageSink?)[Size];
    private readonly Lock _gate = new();

    public void Put(ulong sequence, IMessageSink sink)
    {
        lock (_gate)
        {
            _ring[(int)(sequence % Size)] = (sequence, sink);
        }
    }

    public IMessageSink? Take(ulong sequence)
    {
        lock (_gate)
        {
            ref (ulong Sequence, IMessageSink? Sink) slot = ref _ring[(int)(sequence % Size)];
            if (slot.Sequence != sequence)
            {
                return null;
            }

            IMessageSink? sink = slot.Sink;
            slot = default;
            return sink;
        }
    }
}
