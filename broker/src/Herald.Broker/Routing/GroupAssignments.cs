using System.Buffers.Binary;

namespace Herald.Broker.Routing;

/// <summary>
/// Cluster (spec cluster.md §11): which node delivers each queue group of one publication, so that a group with
/// members on several nodes gets it once in all. The router fills it for a publication of this node's clients
/// (<see cref="Decide"/>: each group is chosen among the members here and the weighted entries of the members
/// elsewhere, <see cref="Subscription.Elsewhere"/>; a choice elsewhere is recorded here, for the envelope) and
/// reads it for one from another node (<see cref="Apply"/>: what its origin chose, as its envelope carries it).
/// </summary>
/// <remarks>
/// A group the publishing node chose for itself is not recorded (no bytes on the wire for groups delivered where
/// they are published); a receiving node tells it from a group the publishing node did not know of by its own view:
/// it holds an entry for the group on the publishing node (<see cref="DeliversHere"/>).
/// Not thread-safe: one per publisher (a session, a Redis subscription's reader), reused for each publication.
/// </remarks>
internal sealed class GroupAssignments(ulong self)
{
    /// <summary>Groups chosen on other nodes that one envelope carries at most (spec cluster.md §3).</summary>
    public const int Max = 64;

    /// <summary>Bytes of one assignment on the wire: the group's id and the node's, each u64 big-endian.</summary>
    public const int Size = 16;

    private readonly (ulong Group, ulong Node)[] _chosen = new (ulong, ulong)[Max];
    private ReadOnlyMemory<byte> _carried;

    /// <summary>This node's id.</summary>
    public ulong Self { get; } = self;

    /// <summary>Whether the router chooses (this node's publication) rather than follows what an envelope says.</summary>
    public bool Deciding { get; private set; } = true;

    /// <summary>The node that published what is being routed (<see cref="Apply"/>).</summary>
    public ulong Origin { get; private set; }

    /// <summary>Groups chosen on other nodes so far (<see cref="Decide"/>).</summary>
    public int Count { get; private set; }

    /// <summary>Groups past <see cref="Max"/> that could not be sent elsewhere (counted by the engine).</summary>
    public int Overflowed { get; private set; }

    /// <summary>
    /// For a publication of this node's clients (<see cref="Decide"/>): the index of the shard its topic goes to, as the
    /// exchange found it when it chose to decide, so that handing the publication over does not hash the topic again; -1 unknown.
    /// </summary>
    public int Shard { get; private set; } = -1;

    /// <summary>For a publication of this node's clients, going to <paramref name="shard"/>: the router chooses, and records a choice elsewhere here.</summary>
    public GroupAssignments Decide(int shard = -1)
    {
        Deciding = true;
        Shard = shard;
        Count = 0;
        Overflowed = 0;
        _carried = default;
        return this;
    }

    /// <summary>
    /// For a publication of <paramref name="origin"/> (this node for its own history publications back from Redis):
    /// <paramref name="carried"/> are the assignments its envelope carries, <see cref="Size"/> bytes each.
    /// </summary>
    public GroupAssignments Apply(ulong origin, ReadOnlyMemory<byte> carried)
    {
        Deciding = false;
        Shard = -1;
        Origin = origin;
        _carried = carried;
        Count = 0;
        return this;
    }

    /// <summary>The <paramref name="index"/>th choice recorded (<see cref="Decide"/>).</summary>
    public (ulong Group, ulong Node) this[int index] => _chosen[index];

    /// <summary>Writes the choices recorded, <see cref="Size"/> bytes each, into <paramref name="destination"/>.</summary>
    public void WriteTo(Span<byte> destination)
    {
        for (int i = 0; i < Count; i++)
        {
            BinaryPrimitives.WriteUInt64BigEndian(destination[(i * Size)..], _chosen[i].Group);
            BinaryPrimitives.WriteUInt64BigEndian(destination[((i * Size) + 8)..], _chosen[i].Node);
        }
    }

    /// <summary>Records that <paramref name="node"/> delivers <paramref name="group"/>; false past <see cref="Max"/> (then the caller chooses here).</summary>
    internal bool TryAssign(ulong group, ulong node)
    {
        if (Count == Max)
        {
            Overflowed++;
            return false;
        }

        _chosen[Count++] = (group, node);
        return true;
    }

    /// <summary>
    /// Whether this node delivers the group of <paramref name="members"/> (a run of one group's entries in a match,
    /// <see cref="Apply"/>): when the envelope names the group, only the node it names; when it does not, the
    /// publishing node delivered it itself if it holds members of it (as this node sees it), so this node does only
    /// when it sees none there (a group the publishing node did not know of yet) or it is the publishing node.
    /// </summary>
    internal bool DeliversHere(ReadOnlySpan<Subscription> members)
    {
        ulong group = members[0].GroupId;
        ReadOnlySpan<byte> carried = _carried.Span;
        for (int at = 0; at + Size <= carried.Length; at += Size)
        {
            if (BinaryPrimitives.ReadUInt64BigEndian(carried[at..]) == group)
            {
                return BinaryPrimitives.ReadUInt64BigEndian(carried[(at + 8)..]) == Self;
            }
        }

        if (Origin == Self)
        {
            return true;
        }

        foreach (Subscription member in members)
        {
            if (member.Node == Origin)
            {
                return false;
            }
        }

        return true;
    }
}
