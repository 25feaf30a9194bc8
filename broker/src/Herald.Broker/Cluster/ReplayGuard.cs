using System.Collections.Concurrent;

namespace Herald.Broker.Cluster;

/// <summary>
/// Refuses a signed envelope that is a replay (spec cluster.md §3): one this node has routed already, from whichever
/// Redis channel it comes back, or one stamped outside <c>Herald:Cluster:ReplayWindow</c> of this node's clock. An
/// envelope's sequence number carries its origin's clock (<see cref="ClusterEnvelope.NextSequence"/>), and its tag
/// covers it, so neither can be changed without the secret.
/// </summary>
/// <remarks>
/// <para>
/// Per origin, a ring of <see cref="Slots"/> sequence numbers indexed by the sequence's count bits (consecutive
/// envelopes of an origin take consecutive slots): a slot holds the highest sequence admitted there, raised with a
/// compare-and-swap, so an envelope is admitted once, whichever subscription's reader sees it first, without a lock.
/// An envelope whose slot already holds its sequence or a later one is refused: routed before, or more than
/// <see cref="Slots"/> of its origin's envelopes older than one already routed (readers of one node never fall that
/// far behind one another while their queues are bounded, <c>MaxInboundMessages</c>).
/// </para>
/// <para>
/// An origin silent for a whole window is forgotten when a new one comes (every envelope it sent is outside the
/// window by then): the table holds the nodes that sent within the last window, <see cref="Slots"/> x 8 bytes each.
/// A node that starts, or subscribes anew, admits an envelope it never saw that was stamped within the window: a
/// replay can bring it a publication a node really made, to subscribers its node admitted, once.
/// </para>
/// <para>Thread-safe: every subscription's reader calls <see cref="Admit"/>.</para>
/// </remarks>
internal sealed class ReplayGuard(TimeSpan window)
{
    /// <summary>Sequences remembered per origin.</summary>
    internal const int Slots = 16384;

    private readonly ConcurrentDictionary<ulong, Origin> _origins = new();
    private readonly long _windowMs = (long)window.TotalMilliseconds;

    /// <summary>Origins remembered (monitoring, tests).</summary>
    public int Origins => _origins.Count;

    /// <summary>Whether a signed envelope of <paramref name="origin"/> stamped <paramref name="sequence"/> is new and within the window at <paramref name="nowMs"/> (Unix ms); it is remembered if so. Any thread.</summary>
    public bool Admit(ulong origin, ulong sequence, long nowMs)
    {
        long stamped = ClusterEnvelope.StampedAt(sequence);
        if (stamped < nowMs - _windowMs || stamped > nowMs + _windowMs)
        {
            return false;
        }

        if (!_origins.TryGetValue(origin, out Origin? seen))
        {
            seen = Add(origin, nowMs);
        }

        Volatile.Write(ref seen.LastMs, nowMs);
        ref ulong slot = ref seen.Sequences[(int)(sequence & (Slots - 1))];
        ulong current = Volatile.Read(ref slot);
        while (current < sequence)
        {
            ulong was = Interlocked.CompareExchange(ref slot, sequence, current);
            if (was == current)
            {
                return true;
            }

            current = was;
        }

        return false;
    }

    /// <summary>A new origin's ring; the origins silent for a whole window go first.</summary>
    private Origin Add(ulong origin, long nowMs)
    {
        foreach ((ulong id, Origin old) in _origins)
        {
            if (Volatile.Read(ref old.LastMs) < nowMs - _windowMs)
            {
                _origins.TryRemove(id, out _);
            }
        }

        return _origins.GetOrAdd(origin, static _ => new Origin());
    }

    private sealed class Origin
    {
        public readonly ulong[] Sequences = new ulong[Slots];
        public long LastMs;
    }
}
