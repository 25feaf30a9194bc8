using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace Herald.Broker.Delivery;

/// <summary>
/// Per delta subscription of one subscriber (its sid), the sequence of the last payload taken for writing: what the
/// client holds as the base of the next delta (spec §11.2). A queued delta whose base is not that one (the base was
/// dropped by <c>DropOldest</c>, or went out in another form, or the subscription is new or resumed) is swapped for
/// its full frame as it is taken, so "holds the base" is judged on what reaches the wire, not on what was queued.
/// </summary>
/// <remarks>Guarded by the backlog's lock; bounded by the subscriber's live subscriptions (a sid is dropped when its subscription ends).</remarks>
internal sealed class DeltaCursors
{
    private readonly Dictionary<uint, long> _written = [];

    /// <summary>Deltas swapped for their full frame because the sid did not hold the base.</summary>
    public long Swapped { get; private set; }

    /// <summary>A copy, for a window take that picks from the acknowledged state without changing it.</summary>
    public DeltaCursors Copy()
    {
        var copy = new DeltaCursors();
        foreach (KeyValuePair<uint, long> cursor in _written)
        {
            copy._written[cursor.Key] = cursor.Value;
        }

        return copy;
    }

    /// <summary>Records what the sid holds once <paramref name="entry"/> reached it, whichever form went (both carry the same payload).</summary>
    public void Advance(QueuedFrame entry)
    {
        ref long written = ref CollectionsMarshal.GetValueRefOrNullRef(_written, entry.Sid);
        if (!Unsafe.IsNullRef(ref written))
        {
            written = entry.Frame.DeltaSequence;
        }
    }

    /// <summary>A delta subscription starts (or starts again under the same sid): it holds nothing yet.</summary>
    public void Track(uint sid) => _written[sid] = 0;

    public void Untrack(uint sid) => _written.Remove(sid);

    /// <summary>
    /// The frame to write for <paramref name="entry"/>: the delta when its sid holds the base, else the full frame (the
    /// delta's reference given up, the full one's taken); records what the sid holds from then on.
    /// </summary>
    public QueuedFrame Pick(QueuedFrame entry)
    {
        MessageBuffer frame = entry.Frame;
        ref long written = ref CollectionsMarshal.GetValueRefOrNullRef(_written, entry.Sid);
        bool tracked = !Unsafe.IsNullRef(ref written);
        if (frame.DeltaFull is { } full && (!tracked || written != frame.DeltaBase))
        {
            full.Retain(1);
            frame.Release();
            entry = new QueuedFrame(full, entry.Sid);
            Swapped++;
        }

        if (tracked)
        {
            written = frame.DeltaSequence; // 0 for a frame outside the topic's delta stream (a resume's, a status)
        }

        return entry;
    }
}
